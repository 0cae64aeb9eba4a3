# expect: wrong_state from check_preemption(RecomputingScheduler)
patch("self.running.remove(request)", "self.running.pop()")  # not always the one given
