# expect: wrong_state from check_serves_like_dense(AdmittingScheduler)
patch(
    "ScheduledChunk(request, hits, len(tokens) - hits, True)",
    "ScheduledChunk(request, len(tokens) - 1, 1, True)",
)
