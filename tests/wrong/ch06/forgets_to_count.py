# expect: wrong_state from check_preemption(RecomputingScheduler)
patch("request.num_preemptions += 1", "pass")
