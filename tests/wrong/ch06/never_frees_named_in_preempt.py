# expect: wrong_state from check_serves_like_dense(Wrong)
class Wrong(AdmittingScheduler, RecomputingScheduler):
    def preempt(self, request, plan, reason):
        self.manager.free_sequence = lambda seq_id: None  # its blocks stay taken
        super().preempt(request, plan, reason)
        del self.manager.free_sequence
