# expect: wrong_state from check_preemption(Wrong)
class Wrong(RecomputingScheduler):
    def preempt(self, request, plan, reason):
        super().preempt(request, plan, reason)
        self.manager.add_sequence(request.request_id, request.admission_sequence())
        self.manager.free_sequence(request.request_id)
