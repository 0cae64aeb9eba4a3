# expect: wrong_state from check_preemption(RecomputingScheduler)
patch(
    "        self.waiting.appendleft(request)\n",
    "        self.waiting.appendleft(request)\n"
    "        self.manager.add_sequence(request.request_id, request.admission_sequence())\n"
    "        self.manager.free_sequence(request.request_id)\n",
)
