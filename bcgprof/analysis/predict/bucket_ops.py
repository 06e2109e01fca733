"""One bucket's allocator events as a replay reads them: :class:`BucketOps`.

Mechanism. A profiled bucket's events live in its trace's columns (:data:`OPS`, one row an event,
:class:`~bcgprof.analysis.predict.trace_set.ModeTrace`); they become the replay's tuples, ``(ALLOC,
requested, stream, key, segment address hint, recorded address)`` or ``(FREE, key)``, only when a
replay asks: the whole bucket (:attr:`BucketOps.ops`), or range by range (:meth:`BucketOps.lazy`: a
folded replay makes only the events it runs). The index of frees and the repeating region are found
from the columns too. An interpolated bucket's events are columns too, made from the pattern of its
profiled neighbours when asked (:class:`Drawn`, :mod:`bcgprof.analysis.predict.interpolate`).

Invariant: the tuples are those of the columns, whenever they are made; at most :data:`MADE_EVENTS`
events of all buckets are held as tuples at once (the least recently used are dropped and made again
when asked), which bounds their memory whatever the traces. Cost: O(events) to make a bucket's
tuples, O(events made) for a range. Torch-free.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import Optional, Protocol

import numpy as np

from bcgprof.analysis.predict.fold import ALLOC, FREE, find_period, find_period_arrays, free_index
from bcgprof.analysis.predict.interpolate import Pattern, Shape, line_sizes, shape_of

OPS = ("kind", "size", "stream", "ident", "hint", "recorded")  # a trace's event columns, in order
KIND, SIZE_, STREAM_, IDENT, HINT, RECORDED = range(len(OPS))


class EventColumns(Protocol):
    """What a bucket's events are read from: each bucket's rows of :data:`OPS`, and its repeating
    region once found."""

    @property
    def folds(self) -> dict: ...

    def columns(self, bucket: int) -> np.ndarray: ...


class BucketOps:
    """One bucket's graph-pool events in one trace: ``(ALLOC, requested, stream, key, segment
    address hint, recorded address)`` or ``(FREE, key)``, in order. ``ops``: given, or made when
    first asked (from ``columns``: a trace's, or a :class:`Drawn`'s) and dropped again when more
    than :data:`MADE_EVENTS` events of all buckets are held as tuples; :meth:`lazy` makes them range
    by range instead (a folded replay skips most). ``cross``: keys of earlier buckets' blocks its
    capture frees; ``unknown``: graph-pool frees of blocks allocated before recording began;
    ``frees``: key -> index of the op that frees it; ``fold``: a repeating region
    (:func:`bcgprof.analysis.predict.fold.find_period`); ``between``: for an interpolated bucket,
    the profiled buckets below and above it; ``size``: how many events."""

    __slots__ = (
        "_columns",
        "_fold",
        "_frees",
        "_lazy",
        "_ops",
        "between",
        "bucket",
        "complete",
        "count",
        "cross",
        "source",
        "unknown",
    )

    def __init__(
        self,
        bucket: int,
        source: str,
        ops: Optional[list] = None,
        cross: Optional[list] = None,
        unknown: int = 0,
        complete: bool = True,
        between: Optional[tuple[int, int]] = None,
        count: Optional[int] = None,
        columns: Optional[tuple[EventColumns, int, int]] = None,
    ):
        """``columns``: (trace, bucket, key base) the events are read from."""
        self.bucket, self.source, self.between = bucket, source, between
        self.cross = list(cross or [])
        self.unknown, self.complete = unknown, complete
        self._ops, self._columns = ops, columns
        self.count = count if ops is None else len(ops)
        self._frees: Optional[dict] = None
        self._fold: object = _UNSET
        self._lazy = 0  # times read range by range

    @property
    def size(self) -> int:
        """How many events (without making them)."""
        return self.count if self.count is not None else len(self.ops)

    @property
    def ops(self) -> list:
        if self._ops is None:
            made = self._columns is not None
            self._ops = _tuples(*self._columns) if self._columns else []
            self.count = len(self._ops)
            if made:
                _held(self)
        elif self in _MADE:
            _MADE.move_to_end(self)
        return self._ops

    @ops.setter
    def ops(self, value: list) -> None:
        self._ops, self._columns, self._frees, self._fold = value, None, None, _UNSET
        self.count = len(value)

    def lazy(self) -> Sequence:
        """The events as a sequence whose slices and items are made into tuples when read (the list
        itself when it is held). A bucket read so a second time is made whole instead (and held, as
        :attr:`ops`): a bucket replayed in many lists then makes its tuples once."""
        if self._ops is None and self._columns is not None and not self._lazy:
            self._lazy += 1
            return _Slices(*self._columns, self.size)
        return self.ops

    @property
    def frees(self) -> dict:
        if self._frees is None:
            self._frees = (
                _free_index(*self._columns)
                if self._ops is None and self._columns
                else free_index(self.ops)
            )
        return self._frees

    @property
    def fold(self) -> Optional[tuple[int, int, int]]:
        if self._fold is _UNSET:
            self._fold = (
                fold_of(*self._columns) if self._columns else find_period(self.ops, self.frees)
            )
        return self._fold  # type: ignore[return-value]

    @fold.setter
    def fold(self, value: Optional[tuple[int, int, int]]) -> None:
        self._fold = value

    @property
    def from_trace(self) -> bool:
        """Whether the events are read from a trace's columns (with their recorded addresses)."""
        return self._columns is not None and not isinstance(self._columns[0], Drawn)

    def shape(self) -> Shape:
        """The events as interpolation compares them (:func:`~bcgprof.analysis.predict.interpolate.
        shape_of`), read from the columns (whole columns at once, no tuples made) where the events
        are read from them."""
        if self._ops is not None or self._columns is None:
            return shape_of(self.ops)
        trace, bucket, _ = self._columns
        c = trace.columns(bucket)
        kind = c[:, KIND]
        allocs = np.flatnonzero(kind == ALLOC)
        frees = np.flatnonzero(kind != ALLOC)
        value = np.empty(len(c), dtype=np.int64)
        value[allocs] = c[allocs, STREAM_]
        # a free: the number in the bucket of the allocation it frees, made before it (-1: none)
        keys = c[allocs, IDENT]
        order = np.argsort(keys, kind="stable")
        at = np.searchsorted(keys[order], c[frees, IDENT])
        target = np.full(len(frees), -1, dtype=np.int64)
        if len(keys):
            at = np.minimum(at, len(keys) - 1)
            number = order[at]
            hit = (keys[number] == c[frees, IDENT]) & (allocs[number] < frees)
            target[hit] = number[hit]
        value[frees] = target
        return kind.copy(), value, c[allocs, SIZE_], c[allocs, HINT]

    def streams(self) -> list[int]:
        """The streams its allocations name, in the order first named (from the columns where the
        events are read from them, without making the tuples)."""
        if self._ops is None and self._columns is not None:
            trace, bucket, _ = self._columns
            c = trace.columns(bucket)
            named = c[c[:, KIND] == ALLOC, STREAM_]
            values, first = np.unique(named, return_index=True)
            return values[np.argsort(first)].tolist()
        return list(dict.fromkeys(op[2] for op in self.ops if op[0] == ALLOC))

    def mismatches(self, period: list, begin: int, end: int) -> int:
        """How many allocations among events ``[begin, end)`` were recorded elsewhere than where
        ``period`` (the addresses the events just before ``begin`` got, -1 for a free) repeating
        over them puts them."""
        assert self._columns is not None
        trace, bucket, _ = self._columns
        c = trace.columns(bucket)[begin:end]
        expected = np.resize(np.asarray(period, dtype=np.int64), end - begin)
        return int(np.count_nonzero((c[:, KIND] == ALLOC) & (c[:, RECORDED] != expected)))

    def release(self) -> None:
        """Drop the tuples (made again when asked)."""
        if self._columns is not None:
            self._ops = self._frees = None
            _MADE.pop(self, None)


class _Slices(Sequence):
    """A bucket's events read from its trace's columns, made into tuples slice by slice."""

    def __init__(self, trace: EventColumns, bucket: int, base: int, size: int):
        self.trace, self.bucket, self.base, self.size = trace, bucket, base, size

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, at):
        if isinstance(at, slice):
            start, stop, step = at.indices(self.size)
            assert step == 1
            return _tuples(self.trace, self.bucket, self.base, start, stop)
        at = at + self.size if at < 0 else at
        if not 0 <= at < self.size:
            raise IndexError(at)
        return _tuples(self.trace, self.bucket, self.base, at, at + 1)[0]


_UNSET = object()
# events held as tuples at once, over every bucket of every trace (about 150 bytes each)
MADE_EVENTS = 1_000_000
_MADE: OrderedDict = (
    OrderedDict()
)  # BucketOps holding made tuples -> their events, least recently used first


def _held(ops: BucketOps) -> None:
    """Count ``ops``'s new tuples; drop the least recently used others' beyond
    :data:`MADE_EVENTS`."""
    _MADE[ops] = ops.count or 0
    total = sum(_MADE.values())
    while total > MADE_EVENTS and len(_MADE) > 1:
        old, n = _MADE.popitem(last=False)
        if old is ops:
            _MADE[old] = n
            continue
        old._ops = old._frees = None
        total -= n


def fold_of(trace: EventColumns, bucket: int, base: int = 0) -> Optional[tuple[int, int, int]]:
    """The bucket's repeating region (keys only name events, so it does not depend on ``base``)."""
    if bucket not in trace.folds:
        c = trace.columns(bucket)
        # a base past 64 bits (an interpolated bucket's) has none of the allocation numbers' bits:
        # the numbers alone name the events alike
        keys = c[:, IDENT] | base if base < _WIDE else c[:, IDENT]
        trace.folds[bucket] = find_period_arrays(c[:, KIND], c[:, SIZE_], c[:, STREAM_], keys)
    return trace.folds[bucket]


_WIDE = 1 << 63  # a key base from here on is OR'ed onto allocation numbers in Python's integers


def _keys(idents: np.ndarray, base: int) -> list[int]:
    """``base | number`` for each allocation number, as Python integers."""
    if base < _WIDE:
        return (idents | base).tolist()
    return [base | k for k in idents.tolist()]


def _tuples(
    trace: EventColumns, bucket: int, base: int, start: int = 0, stop: Optional[int] = None
) -> list:
    c = trace.columns(bucket)[start:stop]
    keys = _keys(c[:, IDENT], base)
    return [
        (ALLOC, s, st, k, h, r) if t == ALLOC else (FREE, k)
        for t, s, st, k, h, r in zip(
            c[:, KIND].tolist(),
            c[:, SIZE_].tolist(),
            c[:, STREAM_].tolist(),
            keys,
            c[:, HINT].tolist(),
            c[:, RECORDED].tolist(),
        )
    ]


def _free_index(trace: EventColumns, bucket: int, base: int) -> dict:
    """:func:`bcgprof.analysis.predict.fold.free_index` from the columns (without the tuples)."""
    c = trace.columns(bucket)
    at = np.flatnonzero(c[:, KIND] == FREE)
    return dict(zip(_keys(c[at, IDENT], base), at.tolist()))


class Drawn:
    """The events of one trace's buckets that were not profiled, each drawn from the
    :class:`~bcgprof.analysis.predict.interpolate.Pattern` of its profiled neighbours, as the
    columns a trace gives (:class:`EventColumns`): each size on the line between the neighbours'
    (:func:`~bcgprof.analysis.predict.interpolate.line_sizes`), allocation numbers in order from 1
    (a free: the number of the allocation it frees), segment hints from the nearer neighbour, no
    recorded address (-1). Made with whole arrays, so a folded replay makes tuples only of the
    events it runs. The columns of the buckets asked last
    are held, at most :data:`DRAWN_EVENTS` events of them (the others made again when asked)."""

    def __init__(self) -> None:
        self.patterns: dict[int, Pattern] = {}  # bucket -> the pattern it is drawn from
        self.folds: dict = {}  # bucket -> its repeating region, or None (found when first asked)
        self._held: OrderedDict = OrderedDict()  # bucket -> its columns, least recently used first

    def add(self, bucket: int, pattern: Pattern) -> None:
        self.patterns[bucket] = pattern

    def columns(self, bucket: int) -> np.ndarray:
        held = self._held.get(bucket)
        if held is not None:
            self._held.move_to_end(bucket)
            return held
        p = self.patterns[bucket]
        kind = p.kinds
        allocs = np.flatnonzero(kind == ALLOC)
        frees = np.flatnonzero(kind != ALLOC)
        t = np.zeros((len(OPS), len(kind)), dtype=np.int64)
        t[KIND] = kind
        t[SIZE_, allocs] = line_sizes(bucket, p)
        t[STREAM_, allocs] = p.values[allocs]
        t[IDENT, allocs] = np.arange(1, len(allocs) + 1)
        t[IDENT, frees] = p.values[frees] + 1
        nearer = p.low_hints if bucket - p.lower <= p.upper - bucket else p.high_hints
        t[HINT, allocs] = nearer
        t[RECORDED] = -1
        events = t.T  # one row an event
        events.flags.writeable = False
        self._held[bucket] = events
        total = sum(len(e) for e in self._held.values())
        while total > DRAWN_EVENTS and len(self._held) > 1:
            total -= len(self._held.popitem(last=False)[1])
        return events


DRAWN_EVENTS = 250_000  # interpolated events held as columns at once, per trace (48 bytes each)
