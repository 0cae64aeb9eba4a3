# expect: wrong_state from check_preemption(Wrong)
class Wrong(Scheduler):
    def preempt(self, request, plan, reason):
        self.manager.free_sequence(request.request_id)
        self.running.pop()  # the newest, which is not always the one given
        request.status = RequestStatus.WAITING
        request.num_preemptions += 1
        self.waiting.appendleft(request)
        plan.preempted.append(Preemption(plan.step, request.request_id, request.num_tokens, reason))
