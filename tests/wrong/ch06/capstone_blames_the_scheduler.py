# expect: scheduler_at_fault from check_capstone(Wrong, parts={"attention": reference_decode})
from paged_kv.attention import reference_decode  # noqa: F401 (the check line passes it)


class Wrong(Scheduler):
    def admit_waiting(self, plan):
        super().admit_waiting(plan)
        plan.chunks = [
            ScheduledChunk(c.request, c.request.num_tokens - 1, 1, c.admitted) for c in plan.chunks
        ]
