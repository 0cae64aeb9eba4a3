# expect: wrong_state from check_admission(Wrong)
class Wrong(AdmittingScheduler):
    def admit_waiting(self, plan):
        super().admit_waiting(plan)
        plan.chunks = [ScheduledChunk(c.request, 0, c.start + c.num_tokens, True) if c.admitted
                       else c for c in plan.chunks]  # fmt: skip
