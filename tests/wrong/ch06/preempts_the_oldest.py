# expect: wrong_state from check_preemption(RecomputingScheduler)
patch(
    "        self.manager.free_sequence(",
    "        request = self.running[0]\n        self.manager.free_sequence(",
)
