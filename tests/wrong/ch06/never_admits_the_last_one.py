# expect: wrong_state from check_admission(Wrong)
class Wrong(AdmittingScheduler):
    def admit_waiting(self, plan):  # right in every fixed scenario: seen only in a workload
        if self.running and [r.request_id for r in self.waiting] == [5]:
            return
        super().admit_waiting(plan)
