# expect: wrong_state from check_preemption(RecomputingScheduler)
patch("request.num_tokens, reason)", "len(request.sequence), reason)")  # the pending one left out
