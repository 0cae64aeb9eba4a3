# expect: wrong_state from check_serves_like_dense(AdmittingScheduler)
patch(
    "hits = request.num_cached_tokens", "hits = min(request.num_cached_tokens + 1, len(tokens) - 1)"
)
