# expect: wrong_state
# check: check_admission(Wrong)
class Wrong(Scheduler):
    def admit_waiting(self, plan):
        for request in list(self.waiting):
            if len(self.running) >= self.max_running:
                return
            tokens = request.admission_sequence()
            if (
                len(tokens) - self.manager.num_prefix_hit_tokens(tokens) > plan.budget_left
                and plan.chunks
            ):
                return
            try:
                self.manager.add_sequence(request.request_id, tokens)
            except OutOfBlocks:
                continue  # let the next one have a go
            self.waiting.remove(request)
            request.status = RequestStatus.RUNNING
            self.running.append(request)
            hits = request.num_cached_tokens
            plan.chunks.append(ScheduledChunk(request, hits, len(tokens) - hits, True))
