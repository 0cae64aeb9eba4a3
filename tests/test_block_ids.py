"""block_ids.py: the id checks every pool layer makes. The common case (plain ints in range)
is answered before any per-id work: the caller's own list comes back, and one id costs one
comparison, which is what keeps `share`/`release` cheap on the hot path."""

from collections import Counter
from collections.abc import Callable

import numpy as np
import pytest

from paged_kv.cache import block_ids
from paged_kv.course.checks.cost import count_lines_executed
from paged_kv.errors import InvalidBlock


def lines_run(fn: Callable[[], object]) -> int:
    """Lines of block_ids.py's functions that `fn()` executes."""
    by_function: Counter[str] = Counter()
    count_lines_executed(fn, by_function=by_function)
    mine = [
        n for n, f in vars(block_ids).items() if getattr(f, "__module__", "") == block_ids.__name__
    ]
    return sum(by_function[name] for name in mine)


@pytest.mark.parametrize("ids", [[0], [9], [0, 9, 4, 4], list(range(10))])
def test_plain_ids_in_range_come_back_as_the_callers_list_without_a_loop(ids):
    assert block_ids.check_block_ids(ids, 10) is ids
    assert lines_run(lambda: block_ids.check_block_ids(ids, 10)) == 5  # no line per id


@pytest.mark.parametrize("block_id", [0, 9])
def test_one_plain_id_in_range_costs_one_comparison(block_id):
    assert block_ids.check_block_id(block_id, 10) == block_id
    assert lines_run(lambda: block_ids.check_block_id(block_id, 10)) == 2


def test_other_integers_are_taken_one_by_one_and_bad_ids_refused():
    got = block_ids.check_block_ids([np.int64(3), 0], 10)
    assert got == [3, 0] and all(type(b) is int for b in got)
    assert block_ids.check_block_ids((b for b in [1, 2]), 10) == [1, 2]
    for bad in ([-1], [10], ["3"], [1.0], [True]):
        with pytest.raises(InvalidBlock):
            block_ids.check_block_ids(bad, 10)
