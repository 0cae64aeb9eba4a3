# expect: wrong_state from check_admission(Wrong)
class Wrong(AdmittingScheduler):
    def admit_waiting(self, plan):
        super().admit_waiting(plan)
        plan.chunks = [ScheduledChunk(c.request, c.start, c.num_tokens, False) for c in plan.chunks]
