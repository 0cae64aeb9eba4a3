"""How an operation's work grows with the size of a structure, machine-independently.

Three meters, each blind where the others see:

- `count_lines_executed`: Python lines run (a loop over the pool shows at once);
- `instrument`: the containers an object holds are swapped for counting twins, which count
  every entry a call touches, including work done in C: `min()`, `sorted()`, `x in list`,
  `list.remove`, `list.pop(0)`, `list.index`, iterating a dict...;
- `grows_in_time`: the seconds one batch of operations takes at two sizes, the fastest of
  several interleaved rounds, confirmed twice: for what the other two cannot see (a scan over a
  `range` or a bytearray), with a wide margin, so that a noisy machine does not fail a correct
  solution.

`constant_work` puts the first two together: the work of one action at two sizes.
"""

from __future__ import annotations

import contextlib
import gc
import sys
import time
from collections import Counter, OrderedDict, deque
from collections.abc import Callable, Iterable, Iterator
from types import FrameType
from typing import Any

from paged_kv.course.checks import causes
from paged_kv.course.checks.failures import CheckFailed, stage

_HERE = __file__
_CHECKS = str(__file__).rsplit("/", 1)[0]  # paged_kv/course/checks


def count_lines_executed(fn: Callable[[], Any]) -> int:
    """How many Python source lines `fn()` executes (C built-ins count as one line).

    The counting containers' own lines are not counted."""
    return count_lines_by_function(fn)[0]


def count_lines_by_function(fn: Callable[[], Any]) -> tuple[int, Counter[str]]:
    """`count_lines_executed`, and the lines each function outside the checks ran, by its
    qualified name: where the work was, for a message that names the learner's method."""
    total = 0
    mine: Counter[str] = Counter()

    def tracer(frame: FrameType, event: str, arg: object) -> Any:
        nonlocal total
        name = frame.f_code.co_filename
        if name == _HERE:
            return None
        if event == "line":
            total += 1
            if not name.startswith(_CHECKS):
                code = frame.f_code  # co_qualname is Python 3.11+; 3.10 has co_name only
                mine[getattr(code, "co_qualname", code.co_name).replace(".<locals>", "")] += 1
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

    def add(self, name: str, op: str, n: int) -> None:
        self.touched[name, op] += n

    @property
    def total(self) -> int:
        return sum(self.touched.values())

    def reset(self) -> None:
        self.touched.clear()


def describe_touches(meter: Meter) -> str:
    """The container operation that did most of the work, in words."""
    (container, op), touched = meter.touched.most_common(1)[0]
    return f"{op} on `{container}` ({touched:,} entries)"


class _Counted:
    """A container twin's bookkeeping: where its touches go."""

    _meter: Meter
    _name: str

    def _add(self, op: str, n: int) -> None:
        self._meter.add(self._name, op, n)

    def _each(self, items: Iterable[Any], op: str = "iteration") -> Iterator[Any]:
        for item in items:
            self._add(op, 1)
            yield item


def _whole(base: type, method: str, op: str) -> Callable[..., Any]:
    """`base.method`, counted as touching every entry."""
    plain = getattr(base, method)

    def counted(self: Any, *args: Any, **kwargs: Any) -> Any:
        self._add(op, len(self))
        return plain(self, *args, **kwargs)

    return counted


def _copy(base: type, entries: Callable[[Any], Iterable[Any]]) -> Callable[[Any], Any]:
    """`copy()`, counted as touching every entry, returning a plain `base`."""

    def copy(self: Any) -> Any:
        self._add(".copy()", len(self))
        return base(entries(self))

    return copy


def _sequence(base: type) -> type:
    """A counting twin of `list` or `deque`."""

    def position(self: Any, index: int) -> int:
        n = len(self)
        return max(0, min(n, index if index >= 0 else n + index))

    def iter_(self: Any) -> Iterator[Any]:
        return self._each(base.__iter__(self))

    def reversed_(self: Any) -> Iterator[Any]:
        return self._each(base.__reversed__(self))

    def contains(self: Any, item: object) -> bool:
        for i, x in enumerate(base.__iter__(self)):
            if x is item or x == item:
                self._add("`in`", i + 1)
                return True
        self._add("`in`", len(self))
        return False

    def index(self: Any, item: Any, *args: Any) -> int:
        i = base.index(self, item, *args)
        self._add(".index()", i + 1)
        return i

    def pop(self: Any, index: int = -1) -> Any:
        at = position(self, index)
        self._add(".pop(i)" if at < len(self) - 1 else ".pop()", len(self) - at)
        return base.pop(self, index) if base is list else base.pop(self)

    def insert(self: Any, index: int, item: Any) -> None:
        self._add(".insert()", len(self) - position(self, index) + 1)
        base.insert(self, index, item)

    def getitem(self: Any, key: Any) -> Any:
        if isinstance(key, slice):
            self._add("slicing", len(range(*key.indices(len(self)))))
        else:
            at = position(self, key)
            self._add("indexing", 1 if base is list else min(at, len(self) - at) + 1)
        return base.__getitem__(self, key)

    def delitem(self: Any, key: Any) -> None:
        start = key.indices(len(self))[0] if isinstance(key, slice) else position(self, key)
        self._add("del", len(self) - start)
        base.__delitem__(self, key)

    def extend(self: Any, items: Iterable[Any]) -> None:
        items = list(items)
        self._add(".extend()", len(items))
        base.extend(self, items)

    methods: dict[str, Any] = {
        "__iter__": iter_,
        "__reversed__": reversed_,
        "__contains__": contains,
        "index": index,
        "pop": pop,
        "insert": insert,
        "__getitem__": getitem,
        "__delitem__": delitem,
        "extend": extend,
        "count": _whole(base, "count", ".count()"),
        "remove": _whole(base, "remove", ".remove()"),
        "copy": _copy(base, base.__iter__),
        "__add__": _whole(base, "__add__", "+"),
    }
    if base is list:
        methods["sort"] = _whole(base, "sort", ".sort()")
    else:

        def rotate(self: Any, n: int = 1) -> None:
            self._add(".rotate()", abs(n))
            base.rotate(self, n)

        methods["rotate"] = rotate
    return type(f"Counting{base.__name__.title()}", (_Counted, base), methods)


def _mapping(base: type) -> type:
    """A counting twin of `dict`, `OrderedDict` or `set`."""

    class View:
        def __init__(self, view: Any, owner: Any) -> None:
            self._view, self._owner = view, owner

        def __iter__(self) -> Iterator[Any]:
            return self._owner._each(self._view)

        def __reversed__(self) -> Iterator[Any]:
            return self._owner._each(reversed(self._view))

        def __len__(self) -> int:
            return len(self._view)

        def __contains__(self, item: object) -> bool:
            self._owner._add("`in`", 1)
            return item in self._view

    methods: dict[str, Any] = {
        "__iter__": lambda self: self._each(base.__iter__(self)),
        "copy": _copy(base, base.__iter__ if base is set else base.items),
    }
    if base is set:
        for name in ("__sub__", "__or__", "__and__", "difference", "union"):
            methods[name] = _whole(base, name, "a set operation")
    else:
        plain: Any = base  # dict or OrderedDict here
        methods["__reversed__"] = lambda self: self._each(plain.__reversed__(self))
        for view in ("keys", "values", "items"):
            methods[view] = lambda self, v=view: View(getattr(base, v)(self), self)
    return type(f"Counting{base.__name__}", (_Counted, base), methods)


_TWINS: dict[type, type] = {kind: _sequence(kind) for kind in (list, deque)}
_TWINS.update({kind: _mapping(kind) for kind in (dict, OrderedDict, set)})


def counting(value: Any, meter: Meter, name: str) -> Any:
    """A counting copy of `value` reporting to `meter`, or None if it is not a container we
    count."""
    twin_type = _TWINS.get(type(value))
    if twin_type is None:
        return None
    twin = twin_type(value, value.maxlen) if type(value) is deque else twin_type(value)
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
        if isinstance(value, _Counted):  # instrumented before: report to `meter` now
            value._meter = meter
            for item in (
                list.__iter__(value) if isinstance(value, list) and len(value) <= 4096 else ()
            ):
                if isinstance(item, _Counted):
                    item._meter = meter
            continue
        twin = counting(value, meter, label)
        if twin is None:
            if hasattr(value, "__dict__") and not (isinstance(value, type) or callable(value)):
                instrument(value, meter, label, depth - 1)
            continue
        if isinstance(twin, list) and len(twin) <= 4096:  # e.g. a list of buckets
            for i, item in enumerate(list.__iter__(twin)):
                inner = counting(item, meter, f"{label}[...]")
                if inner is not None:
                    list.__setitem__(twin, i, inner)
        with contextlib.suppress(AttributeError, TypeError):
            setattr(obj, key, twin)


def work_of(obj: Any, action: Callable[[], Any]) -> tuple[int, Meter, Counter[str]]:
    """The work of `action()` on an instrumented `obj`: lines plus entries, the meter, and the
    lines by function."""
    meter = Meter()
    instrument(obj, meter)
    lines, by_function = count_lines_by_function(action)
    return lines + meter.total, meter, by_function


def constant_work(
    build: Callable[[int], tuple[Any, Any]],
    action: Callable[[Any, Any], Any],
    sizes: tuple[int, int],
    *,
    what: str,
    unit: str,
    hint: str,
    slack: int = 50,
) -> None:
    """`action(obj, context)` on `build(size) -> (obj, context)` must cost about as much at the
    large size as at the small one (twice plus `slack`), counting the work in `obj`'s
    containers; otherwise `work_grows`, naming the container or function at fault."""
    costs: list[tuple[int, Meter, Counter[str]]] = []
    for size in sizes:
        with stage(f"{what} with {size:,} {unit}"):
            obj, context = build(size)
            costs.append(work_of(obj, lambda o=obj, c=context: action(o, c)))
    (small, _, small_lines), (large, meter, large_lines) = costs
    if large > 2 * small + slack:
        message = grew(what, small, large, sizes, unit, meter, small_lines, large_lines, hint)
        raise CheckFailed(message, causes.WORK_GROWS)


def grew(
    what: str,
    small: int,
    large: int,
    sizes: tuple[int, int],
    unit: str,
    meter: Meter,
    small_lines: Counter[str],
    large_lines: Counter[str],
    hint: str,
) -> str:
    """The `work_grows` message: where the extra work went (a container or a function)."""
    lines = sum(large_lines.values())
    if meter.total > lines:
        where = f", mostly by {describe_touches(meter)}"
    else:
        growth = {f: large_lines[f] - small_lines.get(f, 0) for f in large_lines}
        top = max(growth, key=lambda f: growth[f], default="")
        where = f", mostly in `{top.split('.<genexpr>')[0]}`" if top and growth[top] > 0 else ""
    return causes.say(
        causes.WORK_GROWS,
        hint,
        what=what,
        small=small,
        large=large,
        small_size=f"{sizes[0]:,} {unit}",
        large_size=f"{sizes[1]:,} {unit}",
        where=where,
    )


def time_ratio(
    make: Callable[[int], Any], work: Callable[[Any], None], sizes: tuple[int, int], rounds: int = 3
) -> float:
    """Fastest time of `work(obj)` on fresh objects of the large size over the small one, the
    sizes taking turns, the garbage collector paused while timing."""
    best = [float("inf"), float("inf")]
    enabled = gc.isenabled()
    gc.disable()
    try:
        for _ in range(rounds):
            for i, obj in enumerate([make(size) for size in sizes]):
                start = time.perf_counter()
                work(obj)
                best[i] = min(best[i], time.perf_counter() - start)
    finally:
        if enabled:
            gc.enable()
    return best[1] / max(best[0], 1e-9)


def grows_in_time(
    make: Callable[[int], Any],
    work: Callable[[Any], None],
    sizes: tuple[int, int],
    factor: float = 25.0,
) -> float | None:
    """The time ratio if it exceeds `factor` in two separate measurements, else None."""
    first = time_ratio(make, work, sizes)
    if first <= factor:
        return None
    second = time_ratio(make, work, sizes)
    return min(first, second) if second > factor else None
