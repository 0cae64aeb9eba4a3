# expect: wrong_state from check_preemption(Wrong)
class Wrong(RecomputingScheduler):
    def preempt(self, request, plan, reason):
        super().preempt(request, plan, reason)
        p = plan.preempted.pop()  # len(request.sequence): the pending token left out
        plan.preempted.append(Preemption(p.step, p.request_id, len(request.sequence), reason))
