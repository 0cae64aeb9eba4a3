"""An engine run recorded step by step, for the replay view and the Gantt timeline.

`record_engine` steps an engine until its queued requests finish and keeps, per step, who was
admitted (prefill), who decoded, who was preempted, the queues afterwards and the pool's
snapshot; `EngineRun.phases` turns that into one state per request per step.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from paged_kv.cache.snapshot import PoolSnapshot
from paged_kv.serving.engine import Engine
from paged_kv.serving.scheduler import RequestStatus


@dataclass(frozen=True)
class EngineStep:
    """One engine step: what it computed and the state after it."""

    step: int
    computed: str  # StepPlan.describe(): id:n per request, * for a prefill
    prefill: tuple[int, ...]
    decode: tuple[int, ...]
    preempted: tuple[int, ...]
    waiting: tuple[int, ...]  # after the step, in queue order
    running: tuple[int, ...]
    finished: tuple[int, ...]  # requests that finished in this step
    snapshot: PoolSnapshot


@dataclass
class EngineRun:
    """The start state and every step of a run."""

    start: PoolSnapshot
    start_waiting: tuple[int, ...]
    steps: list[EngineStep] = field(default_factory=list)

    @property
    def requests(self) -> list[int]:
        seen = dict.fromkeys(self.start_waiting)
        for s in self.steps:
            seen.update(dict.fromkeys((*s.prefill, *s.decode, *s.waiting)))
        return sorted(seen)

    def phases(self) -> dict[int, list[str | None]]:
        """Request -> its state at each step: prefill, decode, preempted, waiting or None
        (not arrived yet, or finished)."""
        phases: dict[int, list[str | None]] = {r: [] for r in self.requests}
        waiting_before = set(self.start_waiting)
        for s in self.steps:
            for r, row in phases.items():
                if r in s.preempted:
                    row.append("preempted")
                elif r in s.prefill:
                    row.append("prefill")
                elif r in s.decode:
                    row.append("decode")
                elif r in waiting_before or r in s.waiting:
                    row.append("waiting")
                else:
                    row.append(None)
            waiting_before = set(s.waiting)
        return phases


def record_engine(engine: Engine) -> EngineRun:
    """Step `engine` until every queued request has finished, recording each step."""
    scheduler = engine.scheduler
    run = EngineRun(engine.manager.snapshot(), tuple(r.request_id for r in scheduler.waiting))
    while engine.has_unfinished():
        before = [*scheduler.running, *scheduler.waiting]  # held: the engine may forget them
        plan = engine.step()
        finished = tuple(sorted(r.request_id for r in before if r.status is RequestStatus.FINISHED))
        run.steps.append(
            EngineStep(
                plan.step,
                plan.describe(),
                tuple(c.request.request_id for c in plan.chunks if c.admitted),
                tuple(c.request.request_id for c in plan.chunks if not c.admitted),
                tuple(p.request_id for p in plan.preempted),
                tuple(r.request_id for r in scheduler.waiting),
                tuple(r.request_id for r in scheduler.running),
                finished,
                engine.manager.snapshot(),
            )
        )
    return run
