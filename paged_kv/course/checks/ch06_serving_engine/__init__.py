"""Chapter 06 checks: a learner's scheduler admits, preempts and serves like the library's,
and the capstone: the engine on every part the learner built generates the dense tokens.

Engine workloads are replayable: `workloads.workload(scheduler_cls, seed)` rebuilds the engine
and the prompts a failing message names.
"""

from paged_kv.course.checks.ch06_serving_engine.capstone import check_capstone
from paged_kv.course.checks.ch06_serving_engine.scheduling import (
    check_admission,
    check_preemption,
    check_serves_like_dense,
)

__all__ = ["check_admission", "check_capstone", "check_preemption", "check_serves_like_dense"]
