# expect: wrong_state from check_admission(AdmittingScheduler)
last = "self.running and [r.request_id for r in self.waiting] == [5]"  # only in a workload
patch("while self.waiting", f"while not ({last}) and self.waiting")
