"""Exercise checks, one module per chapter: the library's own scenarios, run against the
learner's code on the one harness (`harness`). A difference raises `CheckFailed` naming one
cause (`causes`) with the shrunk lines that replay it; a stub still in place raises
`ExerciseNotDone`. The test suite runs the same checks on the library: one standard for both.
"""

import importlib

from paged_kv.course.checks.cost import count_lines_executed
from paged_kv.course.checks.failures import CheckFailed, ExerciseNotDone, stubs_as_not_done

_CHAPTERS = ("ch01_block_pool", "ch02_block_tables", "ch03_eviction", "ch04_prefix_caching")
_CHAPTERS += ("ch05_paged_attention", "ch06_serving_engine", "ch07_beyond_one_process")

__all__ = ["CheckFailed", "ExerciseNotDone", "count_lines_executed"]
for _chapter in _CHAPTERS:  # each chapter's checks (its __all__, or its check_* functions)
    _module = importlib.import_module(f"{__name__}.{_chapter}")
    _checks = getattr(_module, "__all__", [n for n in vars(_module) if n.startswith("check_")])
    # Every check reports a stub as "not done yet", in one line (the labelled ones do already).
    globals().update({name: stubs_as_not_done(getattr(_module, name)) for name in _checks})
    __all__ += _checks  # pyright: ignore[reportUnsupportedDunderAll]
