# expect: wrong_state from check_serves_like_dense(Wrong)
class Wrong(AdmittingScheduler, RecomputingScheduler):
    def admit_waiting(self, plan):
        super().admit_waiting(plan)
        plan.chunks = [
            ScheduledChunk(c.request, c.request.num_tokens - 1, 1, c.admitted) for c in plan.chunks
        ]
