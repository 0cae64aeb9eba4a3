# expect: wrong_state from check_serves_like_dense(Wrong)
class Wrong(AdmittingScheduler, RecomputingScheduler):
    def admit_waiting(self, plan):  # one prompt token short (at the start or at the end)
        super().admit_waiting(plan)
        plan.chunks = [ScheduledChunk(c.request, c.start + 1, c.num_tokens - 1, True)
                       if c.admitted and c.num_tokens > 1 else c for c in plan.chunks]  # fmt: skip
