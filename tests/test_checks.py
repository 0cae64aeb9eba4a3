"""The harness every exercise check stands on: shrunk replays, watched arguments, the time
cap, counted work. The exercises' checks are tested by their wrong answers, which are data in
tests/wrong/ (see test_wrong_answers.py)."""

import time

import pytest

from paged_kv.course import checks
from paged_kv.course.checks import causes, failures
from paged_kv.course.checks.cost import Meter, count_lines_executed, counting
from paged_kv.course.checks.harness import Trial, differential, intents, search


def test_a_failing_trial_is_shrunk_to_the_lines_that_still_fail():
    def play(ops, trial):
        for x in ops:
            trial.run(f"f({x})", lambda x=x: x)
            trial.expect(f"f({x})", x, 0 if x == 7 else x)

    with pytest.raises(checks.CheckFailed) as failure:
        search(
            play,
            lambda rng: [rng.randrange(10) for _ in range(40)],
            trials=5,
            seed=0,
            what="t",
            keep=0,
        )
    assert failure.value.cause == causes.WRONG_STATE
    replay = [line for line in str(failure.value).splitlines() if line.startswith("    ")]
    assert replay == ["    f(7)  # returned 7"]


def test_a_differential_trial_reads_both_objects_back_after_each_step():
    def step(trial, log, op):
        trial.call("log", log, None, "append", op, theirs=lambda: None)
        return [("len(log)", lambda: len(log), len(log) - (op == 3), "")]  # 3 is one too many

    with pytest.raises(checks.CheckFailed) as failure:
        draw = intents(lambda rng: None, lambda rng, _: rng.randrange(5), 20)
        search(differential(lambda _, trial: [], step), draw, trials=5, seed=0, what="t")
    assert failure.value.cause == causes.WRONG_STATE
    replay = [line for line in str(failure.value).splitlines() if line.startswith("    ")]
    assert replay == ["    log.append(3)"]


def test_a_list_kept_and_changed_later_is_seen():
    kept = []
    trial = Trial()
    handed = trial.hand([1, 2])
    trial.run("keep(ids)", kept.append, handed)
    with pytest.raises(Exception) as failure:
        trial.run("later()", lambda: kept[0].append(3))
    assert failure.value.cause == causes.MUTATES_ARGUMENT
    assert "after the later `later()`" in failure.value.message


def test_a_check_past_its_cap_is_too_slow_and_names_its_stage(monkeypatch):
    monkeypatch.setattr(failures, "CAP_SECONDS", 0.2)

    @failures.exercise(9, "slow")
    def check() -> None:
        with failures.stage("a 1,000-block pool"):
            time.sleep(5)

    with pytest.raises(checks.CheckFailed, match="a 1,000-block pool") as failure:
        check()
    assert failure.value.cause == causes.TOO_SLOW


def test_work_done_in_c_is_counted():
    meter = Meter()
    ids = counting(list(range(1000)), meter, "ids")
    min(ids)
    ids.remove(500)
    assert meter.touched["ids", "iteration"] == 1000 and meter.touched["ids", ".remove()"] == 1000


def test_line_counter_counts_loop_iterations():
    def loop(n):
        total = 0
        for i in range(n):
            total += i
        return total

    assert count_lines_executed(lambda: loop(100)) > 10 * count_lines_executed(lambda: loop(5))


def test_every_cause_a_wrong_answer_expects_has_a_template():
    from pathlib import Path

    headers = Path(__file__).parent.glob("wrong/ch*/*.py")
    expected = {path.read_text().split()[2] for path in headers} - {"not_done"}
    assert expected <= set(causes.TEMPLATES)
    keys = [v for k, v in vars(causes).items() if k[0].isupper() and isinstance(v, str)]
    assert set(keys) == set(causes.TEMPLATES)


def test_the_memory_probe_skips_fake_tensors_left_alive_in_the_process():
    """torch.compile (the flex tests) leaves fake tensors behind, whose data pointer raises or
    warns; the "no tile kept" probe must count real storages only, silently."""
    import warnings

    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    from paged_kv.course.checks import tensor_probes

    with FakeTensorMode():
        fake = torch.empty(1024)
    real = torch.empty(1024)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        counted = tensor_probes.live_tensor_bytes()
    assert counted >= real.untyped_storage().nbytes()
    del fake
