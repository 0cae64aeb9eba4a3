# expect: wrong_state from check_preemption(RecomputingScheduler)
patch(
    "self.running.remove(request)", "self.running.remove(request)\n        request.take_pending()"
)
