# expect: wrong_state from check_admission(AdmittingScheduler)
patch(
    "ScheduledChunk(request, hits, len(tokens) - hits, True)",
    "ScheduledChunk(request, 0, len(tokens), True)",
)  # the hits computed again
