# expect: wrong_state from check_preemption(Wrong)
class Wrong(RecomputingScheduler):
    def preempt(self, request, plan, reason):
        super().preempt(request, plan, reason)
        request.num_preemptions -= 1
