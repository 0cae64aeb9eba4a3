# expect: wrong_state from check_admission(AdmittingScheduler)
patch(" and len(self.running) < self.max_running", "")
