"""Measuring how an operation's work grows with the size of a structure, machine-independently.

Three meters, each blind where the others see:

- `count_lines_executed`: Python lines run (a loop over the pool shows at once);
- `instrument`: the containers an object holds are swapped for counting twins, which count
  every entry a call touches, including work done in C: `min()`, `sorted()`, `x in list`,
  `list.remove`, `list.pop(0)`, `list.index`, iterating a dict...;
- `time_ratio`: the seconds one batch of operations takes at two sizes, the fastest of
  several interleaved rounds, confirmed twice before it is believed. It catches what the
  other two cannot see (a scan over a `range` or a bytearray), with a wide margin, so that a
  noisy machine does not fail a correct solution.
"""

from __future__ import annotations

import contextlib
import gc
import sys
import time
from collections import Counter, OrderedDict, deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

_CHECKS = str(Path(__file__).resolve().parent)  # paged_kv/course/checks


def count_lines_executed(fn: Callable[[], Any]) -> int:
    """How many Python source lines `fn()` executes (C built-ins count as one line).

    The counting containers' own lines are not counted."""
    return count_lines_by_function(fn)[0]


def count_lines_by_function(fn: Callable[[], Any]) -> tuple[int, Counter[str]]:
    """`count_lines_executed`, and the lines each function outside the checks ran, by its
    qualified name: where the work was, for a message that names the learner's method."""
    total = 0
    mine: Counter[str] = Counter()

    def tracer(frame, event, arg):
        nonlocal total
        name = frame.f_code.co_filename
        if name == __file__:
            return None
        if event == "line":
            total += 1
            if not name.startswith(_CHECKS):
                mine[frame.f_code.co_qualname.replace(".<locals>", "")] += 1
        return tracer

    previous = sys.gettrace()
    sys.settrace(tracer)
    try:
        fn()
    finally:
        sys.settrace(previous)
    return total, mine


class Meter:
    """Entries touched, by (container name, operation)."""

    def __init__(self) -> None:
        self.touched: Counter[tuple[str, str]] = Counter()
        self.on = True

    def add(self, name: str, op: str, n: int) -> None:
        if self.on:
            self.touched[name, op] += n

    @property
    def total(self) -> int:
        return sum(self.touched.values())

    def reset(self) -> None:
        self.touched.clear()

    def worst(self) -> tuple[str, str]:
        return self.touched.most_common(1)[0][0] if self.touched else ("?", "?")


def _counted_iter(container: Any, meter: Meter, name: str, base_iter: Callable[[], Any]):
    for item in base_iter():
        meter.add(name, "iteration", 1)
        yield item


class _View:
    """keys() / values() / items() whose iteration is counted."""

    def __init__(self, view: Any, meter: Meter, name: str) -> None:
        self._view, self._meter, self._name = view, meter, name

    def __iter__(self):
        for item in self._view:
            self._meter.add(self._name, "iteration", 1)
            yield item

    def __len__(self) -> int:
        return len(self._view)

    def __contains__(self, item: object) -> bool:
        self._meter.add(self._name, "`in`", 1)
        return item in self._view

    def __reversed__(self):
        for item in reversed(self._view):
            self._meter.add(self._name, "iteration", 1)
            yield item


class CountingList(list):
    _meter: Meter
    _name: str

    def __iter__(self):
        return _counted_iter(self, self._meter, self._name, super().__iter__)

    def __reversed__(self):
        return _counted_iter(self, self._meter, self._name, super().__reversed__)

    def __contains__(self, item: object) -> bool:
        for i, x in enumerate(list.__iter__(self)):
            if x is item or x == item:
                self._meter.add(self._name, "`in`", i + 1)
                return True
        self._meter.add(self._name, "`in`", len(self))
        return False

    def index(self, item: Any, *args: Any) -> int:
        i = super().index(item, *args)
        self._meter.add(self._name, ".index()", i + 1)
        return i

    def count(self, item: Any) -> int:
        self._meter.add(self._name, ".count()", len(self))
        return super().count(item)

    def remove(self, item: Any) -> None:
        self._meter.add(self._name, ".remove()", len(self))
        super().remove(item)

    def pop(self, index: int = -1) -> Any:
        n = len(self)
        position = index if index >= 0 else n + index
        self._meter.add(self._name, ".pop(i)" if position < n - 1 else ".pop()", n - position)
        return super().pop(index)

    def insert(self, index: int, item: Any) -> None:
        n = len(self)
        position = max(0, min(n, index if index >= 0 else n + index))
        self._meter.add(self._name, ".insert()", n - position + 1)
        super().insert(index, item)

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, slice):
            self._meter.add(self._name, "slicing", len(range(*key.indices(len(self)))))
        else:
            self._meter.add(self._name, "indexing", 1)
        return super().__getitem__(key)

    def __setitem__(self, key: Any, value: Any) -> None:
        self._meter.add(self._name, "slicing" if isinstance(key, slice) else "indexing", 1)
        super().__setitem__(key, value)

    def __delitem__(self, key: Any) -> None:
        n = len(self)
        start = key.indices(n)[0] if isinstance(key, slice) else key if key >= 0 else n + key
        self._meter.add(self._name, "del", n - start)
        super().__delitem__(key)

    def sort(self, *args: Any, **kwargs: Any) -> None:
        self._meter.add(self._name, ".sort()", len(self))
        super().sort(*args, **kwargs)

    def copy(self) -> list:
        self._meter.add(self._name, ".copy()", len(self))
        return list(list.__iter__(self))

    def __add__(self, other: Any) -> list:
        self._meter.add(self._name, "+", len(self))
        return list(list.__iter__(self)) + list(other)

    def extend(self, items: Any) -> None:
        items = list(items)
        self._meter.add(self._name, ".extend()", len(items))
        super().extend(items)


class CountingDeque(deque):
    _meter: Meter
    _name: str

    def __iter__(self):
        return _counted_iter(self, self._meter, self._name, super().__iter__)

    def __reversed__(self):
        return _counted_iter(self, self._meter, self._name, super().__reversed__)

    def __contains__(self, item: object) -> bool:
        for i, x in enumerate(deque.__iter__(self)):
            if x is item or x == item:
                self._meter.add(self._name, "`in`", i + 1)
                return True
        self._meter.add(self._name, "`in`", len(self))
        return False

    def _middle(self, index: int) -> int:
        n = len(self)
        position = index if index >= 0 else n + index
        return min(position, n - 1 - position) + 1

    def __getitem__(self, index: int) -> Any:
        self._meter.add(self._name, "indexing", self._middle(index))
        return super().__getitem__(index)

    def __setitem__(self, index: int, value: Any) -> None:
        self._meter.add(self._name, "indexing", self._middle(index))
        super().__setitem__(index, value)

    def __delitem__(self, index: int) -> None:
        self._meter.add(self._name, "del", self._middle(index))
        super().__delitem__(index)

    def index(self, item: Any, *args: Any) -> int:
        i = super().index(item, *args)
        self._meter.add(self._name, ".index()", i + 1)
        return i

    def count(self, item: Any) -> int:
        self._meter.add(self._name, ".count()", len(self))
        return super().count(item)

    def remove(self, item: Any) -> None:
        self._meter.add(self._name, ".remove()", len(self))
        super().remove(item)

    def insert(self, index: int, item: Any) -> None:
        self._meter.add(self._name, ".insert()", self._middle(min(index, len(self) - 1)))
        super().insert(index, item)

    def rotate(self, n: int = 1) -> None:
        self._meter.add(self._name, ".rotate()", abs(n))
        super().rotate(n)

    def copy(self) -> deque:
        self._meter.add(self._name, ".copy()", len(self))
        return deque(deque.__iter__(self))


class _CountingMapping:
    _meter: Meter
    _name: str

    def __iter__(self):
        return _counted_iter(self, self._meter, self._name, super().__iter__)  # type: ignore[misc]

    def __reversed__(self):
        return _counted_iter(self, self._meter, self._name, super().__reversed__)  # type: ignore[misc]

    def keys(self):
        return _View(super().keys(), self._meter, self._name)  # type: ignore[misc]

    def values(self):
        return _View(super().values(), self._meter, self._name)  # type: ignore[misc]

    def items(self):
        return _View(super().items(), self._meter, self._name)  # type: ignore[misc]

    def copy(self):
        self._meter.add(self._name, ".copy()", len(self))  # type: ignore[arg-type]
        return type(self).__mro__[2](super().items())  # type: ignore[misc]


class CountingDict(_CountingMapping, dict):
    pass


class CountingOrderedDict(_CountingMapping, OrderedDict):
    pass


class CountingSet(set):
    _meter: Meter
    _name: str

    def __iter__(self):
        return _counted_iter(self, self._meter, self._name, super().__iter__)

    def copy(self) -> set:
        self._meter.add(self._name, ".copy()", len(self))
        return set(set.__iter__(self))

    def _whole(self, op: str, other: Any = ()) -> None:
        self._meter.add(self._name, op, len(self) + len(other))

    def __sub__(self, other: Any) -> set:
        self._whole("set difference", other)
        return set(set.__iter__(self)) - set(other)

    def __or__(self, other: Any) -> set:
        self._whole("set union", other)
        return set(set.__iter__(self)) | set(other)

    def __and__(self, other: Any) -> set:
        self._whole("set intersection", other)
        return set(set.__iter__(self)) & set(other)

    def difference(self, *others: Any) -> set:
        self._whole("set difference")
        return set(set.__iter__(self)).difference(*others)

    def union(self, *others: Any) -> set:
        self._whole("set union")
        return set(set.__iter__(self)).union(*others)


def _twin(value: Any, meter: Meter, name: str) -> Any:
    """A counting copy of `value`, or None if it is not a container we count."""
    kind = type(value)
    if kind is list:
        twin = CountingList(value)
    elif kind is deque:
        twin = CountingDeque(value, value.maxlen)
    elif kind is OrderedDict:
        twin = CountingOrderedDict(value)
    elif kind is dict:
        twin = CountingDict(value)
    elif kind is set:
        twin = CountingSet(value)
    else:
        return None
    twin._meter, twin._name = meter, name
    return twin


def instrument(obj: Any, meter: Meter, name: str = "self", depth: int = 2) -> None:
    """Swap the containers `obj` holds in its attributes (and one level inside them, and in
    the attributes of helper objects) for counting twins that report to `meter`."""
    attributes = getattr(obj, "__dict__", None)
    if attributes is None or depth == 0:
        return
    for key, value in list(attributes.items()):
        label = f"{name}.{key}"
        twin = _twin(value, meter, label)
        if twin is None:
            if hasattr(value, "__dict__") and not (isinstance(value, type) or callable(value)):
                instrument(value, meter, label, depth - 1)
            continue
        if isinstance(twin, list) and len(twin) <= 4096:  # e.g. a list of buckets
            for i, item in enumerate(list.__iter__(twin)):
                inner = _twin(item, meter, f"{label}[...]")
                if inner is not None:
                    list.__setitem__(twin, i, inner)
        with contextlib.suppress(AttributeError, TypeError):
            setattr(obj, key, twin)


def describe_touches(meter: Meter, calls: int) -> str:
    """The container operation that did most of the work, in words."""
    (container, op), touched = meter.touched.most_common(1)[0]
    return f"{op} on `{container}` ({touched // max(calls, 1):,} entries per call)"


def time_ratio(
    make: Callable[[int], Any],
    work: Callable[[Any], None],
    sizes: tuple[int, int],
    *,
    rounds: int = 5,
    fresh: bool = True,
) -> float:
    """Fastest time of `work(obj)` on an object of the large size over the small one.

    `make(size)` builds an object; the sizes take turns, each round on fresh objects unless
    `fresh` is False (for work that leaves the object as it found it), and the garbage
    collector is paused while timing."""
    small, large = (make(size) for size in sizes)
    best = [float("inf"), float("inf")]
    enabled = gc.isenabled()
    gc.disable()
    try:
        for _ in range(rounds):
            for i, obj in enumerate((small, large)):
                start = time.perf_counter()
                work(obj)
                best[i] = min(best[i], time.perf_counter() - start)
            if fresh:
                small, large = (make(size) for size in sizes)
    finally:
        if enabled:
            gc.enable()
    return best[1] / max(best[0], 1e-9)


def grows_in_time(
    make: Callable[[int], Any],
    work: Callable[[Any], None],
    sizes: tuple[int, int],
    *,
    factor: float = 25.0,
    fresh: bool = True,
) -> float | None:
    """The time ratio if it exceeds `factor` in two separate measurements, else None."""
    first = time_ratio(make, work, sizes, fresh=fresh)
    if first <= factor:
        return None
    second = time_ratio(make, work, sizes, fresh=fresh)
    return min(first, second) if second > factor else None
