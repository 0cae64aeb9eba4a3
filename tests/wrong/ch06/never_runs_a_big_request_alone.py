# expect: wrong_state
# check: check_admission(Wrong)
class Wrong(Scheduler):
    def admit_waiting(self, plan):
        while self.waiting and len(self.running) < self.max_running:
            request = self.waiting[0]
            tokens = request.admission_sequence()
            cost = len(tokens) - self.manager.num_prefix_hit_tokens(tokens)
            if cost > plan.budget_left:  # even in an empty step
                return
            try:
                self.manager.add_sequence(request.request_id, tokens)
            except OutOfBlocks:
                return
            self.waiting.popleft()
            request.status = RequestStatus.RUNNING
            self.running.append(request)
            hits = request.num_cached_tokens
            plan.chunks.append(ScheduledChunk(request, hits, len(tokens) - hits, True))
