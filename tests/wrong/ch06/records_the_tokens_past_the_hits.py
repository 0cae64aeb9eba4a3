# expect: wrong_state from check_preemption(Wrong)
class Wrong(RecomputingScheduler):
    def preempt(self, request, plan, reason):
        super().preempt(request, plan, reason)
        p = plan.preempted.pop()
        n = request.num_tokens - request.num_cached_tokens
        plan.preempted.append(Preemption(p.step, p.request_id, n, reason))
