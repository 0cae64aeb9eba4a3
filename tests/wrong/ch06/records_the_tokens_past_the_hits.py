# expect: wrong_state from check_preemption(RecomputingScheduler)
patch("request.num_tokens, reason)", "request.num_tokens - request.num_cached_tokens, reason)")
