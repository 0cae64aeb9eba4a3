"""How an operation's work grows with the size of a structure, machine-independently, by
three meters each blind where the others see: Python lines run (`count_lines_executed`);
entries touched in the containers an object holds, in C too (`instrument` swaps them for
counting twins: `min()`, `x in list`, `list.pop(0)`...); seconds at two sizes, with a wide
margin, for the rest (`grows_in_time`: a scan over a `range`, a bytearray or a growing
bytes object)."""

from __future__ import annotations

import contextlib
import gc
import sys
import time
from collections import Counter, OrderedDict, deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from functools import partial
from types import FrameType, SimpleNamespace
from typing import Any

from paged_kv.course.checks import causes
from paged_kv.course.checks.failures import CheckFailed, stage

Sizes = tuple[int, int]
_HERE = __file__
_CHECKS = str(__file__).rsplit("/", 1)[0]  # paged_kv/course/checks


class TooManyLines(BaseException):
    """Past a line cap (not an Exception: the learner's `except Exception` lets it by)."""


def count_lines_executed(
    fn: Callable[[], Any], cap: int | None = None, by_function: Counter[str] | None = None
) -> int:
    """How many Python source lines `fn()` executes (C built-ins count as one line; the
    counting containers' own lines are not counted); `TooManyLines` stops it at `cap`. The
    lines each function outside the checks ran go to `by_function`, by qualified name: where
    the work was, for a message that names the learner's method."""
    total = 0

    def tracer(frame: FrameType, event: str, arg: object) -> Any:
        nonlocal total
        name = frame.f_code.co_filename
        if name == _HERE:
            return None
        if event == "line":
            total += 1
            if total == cap:
                raise TooManyLines
            if by_function is not None and not name.startswith(_CHECKS):
                code = frame.f_code  # co_qualname is Python 3.11+; 3.10 has co_name only
                by_function[
                    getattr(code, "co_qualname", code.co_name).replace(".<locals>", "")
                ] += 1
        return tracer

    previous = sys.gettrace()
    sys.settrace(tracer)
    try:
        fn()
    finally:
        sys.settrace(previous)
    return total


@dataclass
class Meter:
    """Entries touched, by (container name, operation)."""

    touched: Counter[tuple[str, str]] = field(default_factory=Counter)


class _Counted:
    """A container twin's bookkeeping: where its touches go."""

    _meter: Meter
    _name: str

    def _add(self, op: str, n: int) -> None:
        self._meter.touched[self._name, op] += n

    def _each(self, items: Iterable[Any]) -> Iterator[Any]:
        for item in items:
            self._add("iteration", 1)
            yield item


def _priced(base: type, method: str, price: Callable[..., tuple[str, int]]) -> Any:
    """`base.method`, counted: `price(self, *args)` names what it does to how many entries."""
    plain = getattr(base, method)

    def counted(self: Any, *args: Any, **kwargs: Any) -> Any:
        self._add(*price(self, *args))
        return plain(self, *args, **kwargs)

    return counted


def _whole(op: str) -> Callable[..., tuple[str, int]]:
    return lambda self, *args: (op, len(self))


def _twin(base: type, prices: dict[str, Callable[..., tuple[str, int]]], **methods: Any) -> type:
    """A counting twin of `base`: its methods in `prices` priced, iterating it counted, and
    `copy()` counted as touching every entry, returning a plain `base`."""

    def copy(self: Any) -> Any:
        self._add(".copy()", len(self))
        return base(base.items(self) if hasattr(base, "items") else base.__iter__(self))

    methods |= {name: _priced(base, name, price) for name, price in prices.items()}
    methods |= {"__iter__": lambda self: self._each(base.__iter__(self)), "copy": copy}
    if hasattr(base, "__reversed__"):
        methods["__reversed__"] = lambda self: self._each(base.__reversed__(self))
    name = base.__name__[0].upper() + base.__name__[1:]
    return type(f"Counting{name}", (_Counted, base), methods)


def _sequence(base: type) -> type:
    """A counting twin of `list` or `deque`."""

    def at(self: Any, index: int) -> int:  # where `index` falls, as `base` reads it
        n = len(self)
        return max(0, min(n, index if index >= 0 else n + index))

    def found(self: Any, item: Any, *args: Any) -> int:
        try:
            return base.index(self, item, *args) + 1
        except ValueError:
            return len(self)

    def getitem(self: Any, key: Any) -> tuple[str, int]:
        if isinstance(key, slice):
            return "slicing", len(range(*key.indices(len(self))))
        return "indexing", 1 if base is list else min(at(self, key), len(self) - at(self, key)) + 1

    def delitem(self: Any, key: Any) -> tuple[str, int]:
        start = key.indices(len(self))[0] if isinstance(key, slice) else at(self, key)
        return "del", len(self) - start

    def pop(self: Any, index: int = -1) -> tuple[str, int]:
        op = ".pop(i)" if at(self, index) < len(self) - 1 else ".pop()"
        return op, len(self) - at(self, index)

    def extend(self: Any, items: Iterable[Any]) -> None:
        items = list(items)  # counted before they are added, an iterator read once
        self._add(".extend()", len(items))
        base.extend(self, items)

    prices = {
        "__contains__": lambda self, item: ("`in`", found(self, item)),
        "index": lambda self, *args: (".index()", found(self, *args)),
        "insert": lambda self, i, _: (".insert()", len(self) - at(self, i) + 1),
        "__getitem__": getitem,
        "__delitem__": delitem,
        "pop": pop,
        "count": _whole(".count()"),
        "remove": _whole(".remove()"),
        "__add__": _whole("+"),
        **({"sort": _whole(".sort()")} if base is list else {}),
        **({"rotate": lambda self, n=1: (".rotate()", abs(n))} if base is deque else {}),
    }
    return _twin(base, prices, extend=extend)


class _View:
    """A counting twin of a dict's keys, values or items."""

    def __init__(self, view: Any, owner: _Counted) -> None:
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


_SET_OPERATIONS = ("__sub__", "__or__", "__and__", "difference", "union")
_TWINS: dict[type, type] = {kind: _sequence(kind) for kind in (list, deque)}
_VIEWS = {  # a dict's keys, values and items, counted where they are iterated
    v: lambda self, v=v: _View(getattr(super(_Counted, self), v)(), self)
    for v in ("keys", "values", "items")
}
_TWINS |= {kind: _twin(kind, {}, **_VIEWS) for kind in (dict, OrderedDict)}
_TWINS[set] = _twin(set, dict.fromkeys(_SET_OPERATIONS, _whole("a set operation")))


def counting(value: Any, meter: Meter, name: str) -> Any:
    """A counting copy of `value` reporting to `meter`, or None if it is no container we count."""
    twin_type = _TWINS.get(type(value))
    if twin_type is None:
        return None
    twin = twin_type(value, value.maxlen) if type(value) is deque else twin_type(value)
    twin._meter, twin._name = meter, name
    return twin


def _small_list(value: Any) -> Iterable[Any]:
    """The entries of a list short enough to hold containers worth counting (buckets)."""
    return list.__iter__(value) if isinstance(value, list) and len(value) <= 4096 else ()


def instrument(obj: Any, meter: Meter, name: str = "self", depth: int = 2) -> None:
    """Swap the containers `obj` holds in its attributes (and one level inside them, and in
    the attributes of helper objects) for counting twins that report to `meter`. A
    `SimpleNamespace` holds a call's arguments: its attributes go by their own names."""
    attributes = getattr(obj, "__dict__", None)
    if attributes is None or depth == 0:
        return
    for key, value in list(attributes.items()):
        label = key if isinstance(obj, SimpleNamespace) else f"{name}.{key}"
        if isinstance(value, _Counted):  # instrumented before: report to `meter` now
            for twin in (value, *_small_list(value)):
                if isinstance(twin, _Counted):
                    twin._meter = meter
            continue
        twin = counting(value, meter, label)
        if twin is None:
            if hasattr(value, "__dict__") and not (isinstance(value, type) or callable(value)):
                instrument(value, meter, label, depth - 1)
            continue
        for i, item in enumerate(_small_list(twin)):
            inner = counting(item, meter, f"{label}[...]")
            if inner is not None:
                list.__setitem__(twin, i, inner)
        with contextlib.suppress(AttributeError, TypeError):
            setattr(obj, key, twin)


def constant_work(
    build: Callable[[int], tuple[Any, Any]],
    action: Callable[[Any, Any], Any],
    sizes: Sizes,
    *,
    what: str,
    unit: str,
    hint: str,
    slack: int = 50,
) -> None:
    """`action(obj, context)` on `build(size) -> (obj, context)` must cost about as much at the
    large size as at the small one (twice plus `slack`), counting the work in `obj`'s
    containers; otherwise `work_grows`, naming the container or function at fault."""
    costs: list[int] = []
    meter, lines = Meter(), [Counter(), Counter()]  # lines: each size's lines by function
    for size, by_function in zip(sizes, lines, strict=True):
        with stage(f"{what} with {size:,} {unit}"):
            obj, context = build(size)
            meter = Meter()  # the large size's is the one that names the container
            instrument(obj, meter)
            run = count_lines_executed(partial(action, obj, context), by_function=by_function)
            costs.append(run + meter.touched.total())
    if costs[1] <= 2 * costs[0] + slack:
        return
    if meter.touched.total() > lines[1].total():
        (container, op), touched = meter.touched.most_common(1)[0]
        where = f", mostly by {op} on `{container}` ({touched:,} entries)"
    else:
        growth = lines[1] - lines[0]
        top = max(growth, key=growth.__getitem__, default="")
        where = f", mostly in `{top.split('.<genexpr>')[0]}`" if top else ""
    small_size, large_size = (f"{size:,} {unit}" for size in sizes)
    fields = {"what": what, "small": costs[0], "large": costs[1], "where": where}
    message = causes.say(
        causes.WORK_GROWS, hint, small_size=small_size, large_size=large_size, **fields
    )
    raise CheckFailed(message, causes.WORK_GROWS)


def grows_in_time(
    make: Callable[[int], Any],
    work: Callable[[Any], object],
    sizes: Sizes,
    *,
    what: str,
    unit: str,
    hint: str = "",
    factor: float = 25.0,
) -> None:
    """`work(obj)` on a fresh object of the large size must not take over `factor` times as
    long as on the small one, in two separate measurements; otherwise `work_grows`."""

    def ratio(rounds: int = 3) -> float:
        """The fastest time over the rounds, the sizes taking turns, the collector paused."""
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

    with stage(f"timing {what} with {sizes[0]:,} and {sizes[1]:,} {unit}"):
        first = ratio()
        second = ratio() if first > factor else 0.0
    if second > factor:
        small, large = (f"{size:,} {unit}" for size in sizes)
        slower = f"{what} took {min(first, second):,.0f}× as long with {large} as with {small}"
        why = "(the fastest of 3 rounds, measured twice): work that grows where the counts "
        why += "cannot see it, in C (a `range`, a new set or a growing buffer on each call?)"
        raise CheckFailed(f"{slower} {why}. {hint}".rstrip(), causes.WORK_GROWS)
