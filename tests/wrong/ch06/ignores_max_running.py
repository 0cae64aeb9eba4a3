# expect: wrong_state from check_admission(Wrong)
class Wrong(AdmittingScheduler):
    def admit_waiting(self, plan):
        cap, self.max_running = self.max_running, 10**9
        super().admit_waiting(plan)
        self.max_running = cap
