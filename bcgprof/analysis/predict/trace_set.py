"""A report's allocator traces, read once into what a replay needs: :class:`ModeTrace`,
:class:`TraceSet`.

Mechanism. A mode's trace (:mod:`bcgprof.report.trace_read`) becomes a :class:`ModeTrace`: its
graph-pool events as columns (kind, requested bytes, stream, allocation number, the segment's
recorded address, the block's recorded address), grouped by the bucket they belong to, in capture
order, with what each bucket needs beside its events (blocks of earlier buckets its capture frees,
frees of blocks allocated before recording began, the bytes it allocates and never frees, its eager
warm-up's growth). Where each event goes (the rules are :mod:`bcgprof.analysis.predict.replay`'s): a
free recorded after the owner's capture ended (in a later bucket's warm-up) belongs to the owner and
follows its own events; a free inside a later capture stays there and is listed as that bucket's
``cross``. Allocation numbers are renumbered 1, 2, ... in the order of the numbers recorded, so any
trace's keys fit the replay's key space. A bucket's events become tuples (:class:`BucketOps`) only
when a replay asks for them, and its repeating region
(:func:`bcgprof.analysis.predict.fold.find_period_arrays`) only when a folded replay does.

A :class:`TraceSet` holds one report's traces (files, in-memory traces or mode traces), loads each
mode once when first asked (from the cache, :mod:`bcgprof.analysis.predict.trace_cache`, when the
file's content was seen before), and remembers the verdict of the check against the report's
measured pools (:meth:`bcgprof.analysis.predict.sources.BucketSources.has`), so every replayer made
from it shares one load and one check; a refused trace stays refused.

Invariant: a ModeTrace is frozen (its arrays are read-only) and equal, event for event, to what a
row-by-row grouping of the trace gives. Cost: O(rows log rows) numpy work to build; a bucket's
tuples O(its events), built once per :class:`BucketOps`. Torch-free.
"""

from __future__ import annotations

import hashlib
import io
import itertools
import json
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Union

import numpy as np

from bcgprof.analysis.predict import trace_cache
from bcgprof.analysis.predict.allocator import K_MIN_BLOCK_SIZE
from bcgprof.analysis.predict.bucket_ops import HINT, IDENT, OPS, RECORDED, BucketOps, fold_of
from bcgprof.analysis.predict.fold import ALLOC, FREE
from bcgprof.analysis.predict.needs_free import WarmupGrowth, prewarm_leftover, warmup_growth
from bcgprof.report.trace_read import (
    ACTION,
    ACTIONS,
    ADDRESS,
    BUCKET,
    GRAPH,
    ID,
    OFFSET,
    PHASE,
    PHASES,
    POOL,
    POOLS,
    SEGMENT,
    SIZE,
    STREAM,
    TRACE_MODES,
    TraceColumns,
    parse,
    read_bytes,
    rows_of,
    table_of,
)
from bcgprof.report.traces import Action, Trace, TraceError, TracePhase, TracePool

_A = {a: i for i, a in enumerate(ACTIONS)}
_WARMUP = PHASES.index(TracePhase.WARMUP)
_OTHER = POOLS.index(TracePool.OTHER)


class TraceSetError(TraceError):
    """A trace a replay cannot use (exit 2)."""


@dataclass(frozen=True, eq=False)
class ModeTrace:
    """One mode's trace, as a replay needs it (module docstring). ``blocks``: bucket -> its events,
    an array of :data:`OPS` columns (or those bytes compressed, made into the array when first
    asked); ``cross``: bucket -> allocation numbers of earlier buckets' blocks its capture frees;
    ``unknown``: bucket -> graph-pool frees of blocks allocated before recording began; ``kept``:
    bucket -> rounded bytes it allocates that no event frees; ``warmup``: bucket -> its eager
    warm-up's growth; ``leftover``: what the first bucket's pre-warm left for later warm-ups."""

    mode: str
    path: Optional[Path]
    digest: str  # SHA-256 of the file ("" for a trace held in memory)
    settings: dict
    buckets: tuple[int, ...]  # the header's, in capture order
    incomplete: frozenset
    order: tuple[int, ...]  # every bucket once, in capture order
    sizes: dict = field(default_factory=dict)  # bucket -> how many events
    blocks: dict = field(default_factory=dict, repr=False)
    cross: dict = field(default_factory=dict)
    unknown: dict = field(default_factory=dict)
    kept: dict = field(default_factory=dict)
    warmup: dict = field(default_factory=dict)
    leftover: int = 0
    folds: dict = field(
        default_factory=dict
    )  # bucket -> its repeating region, or None (found when first asked)

    @property
    def events(self) -> int:
        return sum(self.sizes.values())

    def columns(self, bucket: int) -> np.ndarray:
        """``bucket``'s events: a read-only array, one row an event, one column each of
        :data:`OPS`."""
        block = self.blocks.get(bucket)
        if block is None:
            return _NONE
        if not isinstance(block, np.ndarray):
            block = self.blocks[bucket] = _unpacked(block, self.sizes.get(bucket, 0), bucket)
        return block

    def bucket_ops(self, bucket: int, base: int) -> BucketOps:
        """``bucket``'s events, their keys ``base | allocation number`` (tuples made when first
        asked)."""
        return BucketOps(
            bucket,
            self.mode,
            cross=[base | k for k in self.cross.get(bucket, ())],
            unknown=self.unknown.get(bucket, 0),
            complete=bucket not in self.incomplete,
            count=self.sizes.get(bucket, 0),
            columns=(self, bucket, base),
        )


_NONE = np.zeros((0, len(OPS)), dtype=np.int64)


# ---------------------------------------------------------------- building


def mode_trace(columns: TraceColumns) -> ModeTrace:
    """The replay's view of one trace file (module docstring)."""
    head = columns.head
    return _build(head["mode"], columns.path, columns.digest, head, columns.table)


def mode_trace_of(trace: Trace) -> ModeTrace:
    """The replay's view of a trace held in memory (as :func:`bcgprof.report.traces.read_trace`
    gives it)."""
    head = {
        "settings": trace.settings,
        "buckets": list(trace.buckets),
        "incomplete": list(trace.incomplete),
    }
    return _build(trace.mode, trace.path, "", head, table_of(trace.rows))


def _build(
    mode: str, path: Optional[Path], digest: str, head: dict, table: np.ndarray
) -> ModeTrace:
    bucket, pool, action, ident = table[:, BUCKET], table[:, POOL], table[:, ACTION], table[:, ID]
    graph = pool == GRAPH
    opened = np.flatnonzero(
        graph & np.isin(action, [_A[Action.SEGMENT_ALLOC], _A[Action.SEGMENT_EXISTS]])
    )
    blocks = np.flatnonzero(graph & np.isin(action, [_A[Action.ALLOC], _A[Action.FREE_COMPLETED]]))
    allocs = blocks[action[blocks] == _A[Action.ALLOC]]
    frees = blocks[action[blocks] != _A[Action.ALLOC]]
    # an allocation's segment: a graph-pool segment opened before it (read_trace checks)
    hint = _lookup(ident[opened], table[opened, ADDRESS], table[allocs, SEGMENT], 0)
    # a free's owner: the bucket of the graph-pool allocation it names (-1: allocated before
    # recording, or elsewhere)
    owner = _lookup(ident[allocs], bucket[allocs], ident[frees], -1)
    known = owner >= 0
    mine = known & (owner == bucket[frees])
    late = (
        known & ~mine & (table[frees, PHASE] == _WARMUP)
    )  # after the owner's capture: the owner's end
    crossing = known & ~mine & ~late
    rows = np.r_[allocs, frees[known]]
    target = np.r_[bucket[allocs], np.where(late, owner, bucket[frees])[known]]
    first_row = _first_rows(bucket)
    order = np.lexsort((rows, _lookup(first_row[0], first_row[1], target, 0)))
    rows, target = rows[order], target[order]
    is_alloc = action[rows] == _A[Action.ALLOC]
    numbers = _distinct(ident[allocs])  # renumbered 1, 2, ... in their order
    renumber = np.searchsorted(numbers, ident[rows]) + 1
    offset = np.where(is_alloc, table[rows, OFFSET], 0)
    hints = np.zeros(len(rows), dtype=np.int64)
    hints[is_alloc] = hint[np.searchsorted(allocs, rows[is_alloc])]
    columns = {
        "kind": np.where(is_alloc, ALLOC, FREE).astype(np.int64),
        "size": np.where(is_alloc, table[rows, SIZE], 0),
        "stream": np.where(is_alloc, table[rows, STREAM], 0),
        "ident": renumber.astype(np.int64),
        "hint": hints,
        "recorded": hints + offset,
    }
    buckets = [int(b) for b in head["buckets"]]
    capture_order = tuple(dict.fromkeys(buckets))
    spans = {}
    if len(target):
        edges = np.flatnonzero(np.r_[True, target[1:] != target[:-1], True])
        spans = {int(target[a]): (int(a), int(b)) for a, b in itertools.pairwise(edges.tolist())}
    cross: dict[int, tuple[int, ...]] = {}
    for b, k in zip(
        bucket[frees[crossing]].tolist(),
        (np.searchsorted(numbers, ident[frees[crossing]]) + 1).tolist(),
    ):
        cross[b] = (*cross.get(b, ()), k)
    unknown = {
        int(b): int(n) for b, n in zip(*np.unique(bucket[frees[~known]], return_counts=True))
    }
    freed = _distinct(columns["ident"][~is_alloc])
    never = is_alloc & ~np.isin(columns["ident"], freed)
    rounded = (
        -(-np.maximum(columns["size"], 1) // K_MIN_BLOCK_SIZE) * K_MIN_BLOCK_SIZE
    )  # round_size
    kept = dict.fromkeys(capture_order, 0)
    if never.any():
        keeping, at = np.unique(target[never], return_inverse=True)
        sums = np.zeros(len(keeping), dtype=np.int64)
        np.add.at(sums, at.reshape(-1), rounded[never])
        kept.update(zip(keeping.tolist(), sums.tolist()))
    other = np.flatnonzero((pool == _OTHER) & (table[:, PHASE] == _WARMUP))
    warm = Trace(mode, buckets=list(capture_order), rows=rows_of(table[other]))
    events = np.empty((len(rows), len(OPS)), dtype=np.int64, order="F")  # columns side by side
    for i, c in enumerate(OPS):
        events[:, i] = columns[c]
    events.flags.writeable = False
    return ModeTrace(
        mode=mode,
        path=path,
        digest=digest,
        settings=dict(head["settings"]),
        buckets=tuple(buckets),
        incomplete=frozenset(int(b) for b in head["incomplete"]),
        order=capture_order,
        sizes={b: e - s for b, (s, e) in spans.items()},
        blocks={b: events[s:e] for b, (s, e) in spans.items()},
        cross=cross,
        unknown=unknown,
        kept=kept,
        warmup=warmup_growth(warm),
        leftover=prewarm_leftover(warm),
    )


def _lookup(keys: np.ndarray, values: np.ndarray, wanted: np.ndarray, missing: int) -> np.ndarray:
    """``values`` at the position of each ``wanted`` in ``keys`` (unique), ``missing`` where
    absent."""
    out = np.full(len(wanted), missing, dtype=np.int64)
    if not len(keys):
        return out
    order = np.argsort(keys)
    keys, values = keys[order], values[order]
    at = np.minimum(np.searchsorted(keys, wanted), len(keys) - 1)
    hit = keys[at] == wanted
    out[hit] = values[at[hit]]
    return out


def _distinct(values: np.ndarray) -> np.ndarray:
    """``values``' distinct values, ascending (``np.unique``'s answer, by a sort: O(n log n))."""
    ordered = np.sort(values)
    return ordered[np.r_[True, ordered[1:] != ordered[:-1]]] if len(ordered) else ordered


def _first_rows(bucket: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each bucket and the row its run starts at (a bucket's rows are one run)."""
    values, first = np.unique(bucket, return_index=True)
    return values, first.astype(np.int64)


# ---------------------------------------------------------------- a report's traces

Source = Union[Trace, Path, ModeTrace]


class TraceSet:
    """One report's traces by mode, each loaded once (module docstring). ``expected``: mode -> the
    report's measured (bucket, pool bytes) in capture order, which its trace must replay to before
    it is used."""

    def __init__(
        self, sources: Mapping[str, Source], expected: Optional[Mapping[str, Sequence]] = None
    ):
        self.sources: dict[str, Source] = dict(sources)
        self.expected = {
            m: [(int(b), int(p)) for b, p in rows] for m, rows in (expected or {}).items()
        }
        self.verified: set[str] = set()  # modes whose trace replayed to the measured pools
        self.refused: dict[
            str, str
        ] = {}  # mode -> why its trace was refused (asked again: refused again)
        self.unread: dict[str, TraceError] = {}  # mode -> why its file could not be read

    def __contains__(self, mode: str) -> bool:
        return mode in self.sources

    def __iter__(self):
        return iter(self.sources)

    def __len__(self) -> int:
        return len(self.sources)

    def get(self, mode: str) -> Optional[ModeTrace]:
        """``mode``'s trace, loaded (read, or found in the cache) on the first call; None when there
        is none."""
        source = self.sources.get(mode)
        if source is None or isinstance(source, ModeTrace):
            return source
        if isinstance(source, Trace):
            loaded = mode_trace_of(source)
        elif mode in self.unread:  # asked again: the same refusal, without reading it again
            raise self.unread[mode]
        else:
            try:
                loaded = load(Path(source))
            except TraceError as e:
                self.unread[mode] = e
                raise
            if loaded.mode != mode:
                raise TraceSetError(
                    f"{source} holds the trace of mode {loaded.mode}; restore the report's own file"
                )
        self.sources[mode] = loaded
        return loaded


def load(path: Path) -> ModeTrace:
    """One trace file as a :class:`ModeTrace`: from the cache
    (:mod:`bcgprof.analysis.predict.trace_cache`) when a file of the same content was read before,
    else read, checked and built (and kept there).
    """
    raw = read_bytes(path)  # within the compressed cap
    digest = hashlib.sha256(raw).hexdigest()
    name = f"trace-{digest}"
    kept = trace_cache.load_entry(name, path)
    if kept is not None:
        try:
            return decode(kept, digest, path)
        except (
            ValueError,
            TypeError,
            KeyError,
            IndexError,
            AttributeError,
            RecursionError,
            zlib.error,
        ):
            pass  # damaged: built again
    built = mode_trace(
        parse(path, io.BytesIO(raw), digest)
    )  # the text's caps and every row's checks
    for b in built.order:  # kept with it: a later command replays without looking for them
        fold_of(built, b)
    trace_cache.store_entry(name, encode(built), path)
    return built


# ---------------------------------------------------------------- as bytes (for the cache)


def encode(trace: ModeTrace) -> bytes:
    """``trace`` as bytes: a header of JSON (its length first), then each bucket's events,
    compressed on their own (so a later command inflates only the buckets it replays)."""
    blocks, at = [], 0
    index = []
    for b in trace.order:
        if trace.sizes.get(b):
            block = _packed(trace.columns(b))
            index.append([b, trace.sizes[b], at, len(block)])
            blocks.append(block)
            at += len(block)
    head = {
        "mode": trace.mode,
        "digest": trace.digest,
        "settings": trace.settings,
        "buckets": list(trace.buckets),
        "incomplete": sorted(trace.incomplete),
        "order": list(trace.order),
        "blocks": index,
        "cross": [[b, list(k)] for b, k in trace.cross.items()],
        "unknown": list(trace.unknown.items()),
        "kept": list(trace.kept.items()),
        "leftover": trace.leftover,
        "warmup": [[b, g.reserved_bytes, g.allocated_peak_bytes] for b, g in trace.warmup.items()],
        "folds": [[b, *(f or ())] for b, f in trace.folds.items()],
    }
    text = json.dumps(head, separators=(",", ":")).encode()
    return len(text).to_bytes(8, "big") + text + b"".join(blocks)


def _packed(events: np.ndarray) -> bytes:
    """A bucket's events as the cache keeps them: its columns one after another, the allocation
    numbers and segment addresses as differences from the event before and each recorded address
    as its offset in its segment (small numbers, which compress well; 64-bit arithmetic wraps, and
    :func:`_unpacked` unwraps it exactly), compressed."""
    t = np.empty((len(OPS), len(events)), dtype="<i8")
    t[:] = events.T
    t[RECORDED] -= t[HINT]
    t[IDENT, 1:] -= events[:-1, IDENT]
    t[HINT, 1:] -= events[:-1, HINT]
    return zlib.compress(t.tobytes(), 1)


def _unpacked(data: bytes, count: int, bucket: int) -> np.ndarray:
    """:func:`_packed`'s bytes back as the bucket's ``count`` events (read-only; ValueError when
    they inflate to another length, inflating no more than that length allows)."""
    size = 8 * len(OPS) * count
    inflater = zlib.decompressobj()
    raw = inflater.decompress(data, size + 1)
    if len(raw) != size or not inflater.eof:
        raise ValueError(f"bucket {bucket}'s events are cut short")
    t = np.frombuffer(raw, dtype="<i8").reshape(len(OPS), count).copy()
    np.cumsum(t[IDENT], out=t[IDENT])
    np.cumsum(t[HINT], out=t[HINT])
    t[RECORDED] += t[HINT]
    events = t.T  # one row an event
    events.flags.writeable = False
    return events


def decode(data: bytes, digest: str, path: Path) -> ModeTrace:
    """:func:`encode`'s bytes back, checked to be whole and consistent (ValueError and friends
    otherwise; a bucket's events are checked when first inflated)."""
    size = int.from_bytes(data[:8], "big")
    head = json.loads(data[8 : 8 + size])
    if (
        head["digest"] != digest
        or head["mode"] not in TRACE_MODES
        or not isinstance(head["settings"], dict)
    ):
        raise ValueError("another trace's entry")
    body = data[8 + size :]
    sizes, blocks = {}, {}
    for b, n, at, length in head["blocks"]:
        if _count(at) + _count(length) > len(body):
            raise ValueError("cut short")
        sizes[_count(b)], blocks[b] = _count(n), body[at : at + length]
    return ModeTrace(
        mode=head["mode"],
        path=Path(path),
        digest=digest,
        settings=head["settings"],
        buckets=tuple(_count(b) for b in head["buckets"]),
        incomplete=frozenset(_count(b) for b in head["incomplete"]),
        order=tuple(_count(b) for b in head["order"]),
        sizes=sizes,
        blocks=blocks,
        cross={_count(b): tuple(_count(k) for k in ks) for b, ks in head["cross"]},
        unknown={_count(b): _count(n) for b, n in head["unknown"]},
        kept={_count(b): _count(n) for b, n in head["kept"]},
        leftover=_count(head["leftover"]),
        warmup={
            _count(b): WarmupGrowth(_count(r), None if p is None else _count(p))
            for b, r, p in head["warmup"]
        },
        folds={_count(b): _fold(rest) for b, *rest in head.get("folds", [])},
    )


def _fold(values: list) -> Optional[tuple[int, int, int]]:
    if not values:
        return None
    start, run, period = (_count(v) for v in values)
    if period < 1:
        raise ValueError("a period of no events")
    return start, run, period


def _count(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{value!r} is not a count")
    return value
