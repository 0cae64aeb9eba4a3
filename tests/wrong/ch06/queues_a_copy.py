# expect: wrong_state from check_preemption(Wrong)
from paged_kv.serving.scheduler import Request


class Wrong(RecomputingScheduler):
    def preempt(self, request, plan, reason):
        super().preempt(request, plan, reason)
        copy = Request(request.request_id, request.prompt, request.params)
        copy.num_preemptions = request.num_preemptions
        self.waiting[0] = copy
