# expect: wrong_state from check_serves_like_dense(AdmittingScheduler)
patch("ScheduledChunk(request, hits,", "ScheduledChunk(request, 0,")
