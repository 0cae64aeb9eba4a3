# expect: wrong_state from check_preemption(Wrong)
class Wrong(RecomputingScheduler):
    def preempt(self, request, plan, reason):
        self.manager.free_sequence = lambda seq_id: None  # its blocks stay taken
        super().preempt(request, plan, reason)
        del self.manager.free_sequence
