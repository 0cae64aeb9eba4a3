# expect: wrong_state from check_preemption(RecomputingScheduler)
patch("request.status = RequestStatus.WAITING", "pass")
