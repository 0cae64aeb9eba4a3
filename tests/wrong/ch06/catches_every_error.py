# expect: missing_refusal from check_admission(Wrong)
class Wrong(AdmittingScheduler):
    def admit_waiting(self, plan):
        try:
            super().admit_waiting(plan)
        except Exception:  # any error taken for a full pool
            return
