# expect: wrong_state from check_preemption(Wrong)
class Wrong(RecomputingScheduler):
    def preempt(self, request, plan, reason):
        request.take_pending()  # the sampled token is lost: the output shrinks
        super().preempt(request, plan, reason)
