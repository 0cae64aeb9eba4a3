# expect: scheduler_at_fault from check_capstone(AdmittingScheduler, parts)
from paged_kv.attention import reference_decode

parts = {"attention": reference_decode}  # right: swapping it does not fix the tokens
patch(
    "ScheduledChunk(request, hits, len(tokens) - hits, True)",
    "ScheduledChunk(request, len(tokens) - 1, 1, True)",
)  # the prefill skipped
