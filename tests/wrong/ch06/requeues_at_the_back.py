# expect: wrong_order from check_preemption(Wrong)
class Wrong(RecomputingScheduler):
    def preempt(self, request, plan, reason):
        super().preempt(request, plan, reason)
        self.waiting.remove(request)
        self.waiting.append(request)
