# expect: missing_refusal from check_preemption(Wrong)
class Wrong(Scheduler):
    def preempt(self, request, plan, reason):
        try:  # noqa: SIM105 (the mistake: an error swallowed)
            self.manager.free_sequence(request.request_id)
        except Exception:
            pass
        self.running.remove(request)
        request.status = RequestStatus.WAITING
        request.num_preemptions += 1
        self.waiting.appendleft(request)
        plan.preempted.append(Preemption(plan.step, request.request_id, request.num_tokens, reason))
