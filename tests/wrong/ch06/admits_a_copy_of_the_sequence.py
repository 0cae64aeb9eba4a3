# expect: wrong_state from check_admission(Wrong)
from paged_kv.cache.sequence import TokenSequence


class Wrong(AdmittingScheduler):
    def admit_waiting(self, plan):
        for request in self.waiting:  # the manager gets a copy: the request never sees its hits
            request.admission_sequence = lambda r=request: TokenSequence(list(r.sequence.token_ids))
        super().admit_waiting(plan)
