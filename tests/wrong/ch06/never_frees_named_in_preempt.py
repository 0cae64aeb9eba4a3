# expect: wrong_state from check_serves_like_dense(RecomputingScheduler)
patch("self.manager.free_sequence(request.request_id)", "pass")  # its blocks stay taken
