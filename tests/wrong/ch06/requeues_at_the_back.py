# expect: wrong_order
# check: check_preemption(Wrong)
class Wrong(RecomputingScheduler):
    def preempt(self, request, plan, reason):
        super().preempt(request, plan, reason)
        self.waiting.remove(request)
        self.waiting.append(request)
