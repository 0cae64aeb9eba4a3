# expect: wrong_state from check_preemption(RecomputingScheduler)
patch(
    "self.waiting.appendleft(request)",
    "self.waiting.appendleft(type(request)(request.request_id, request.prompt, request.params))",
)
