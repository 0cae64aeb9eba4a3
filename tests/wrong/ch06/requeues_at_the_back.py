# expect: wrong_order from check_preemption(RecomputingScheduler)
patch("self.waiting.appendleft(request)", "self.waiting.append(request)")
