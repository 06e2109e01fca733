"""From the allocator's history to trace rows (:mod:`bcgprof.report.traces`): one window at a time.

The capture takes the allocator's history twice per bucket (after the warm-up, after the
capture) and clears it each time; :class:`TraceBuilder` turns each window's entries into
rows, keeping across windows what pairs them: the live segments (address -> number, size,
graph pool or not), the live allocations (address -> number) and the stream numbers.

Which events belong to the graph pool is decided by address, in time: a segment is the
pool's when the snapshot taken at the window's end lists a pool segment (``segment_pool_id``
equal to the pool) at its address with its size and it was not freed later in the window
(a graph pool keeps its segments while its graphs live, and cudaMalloc may reuse the
address of an ordinary segment freed earlier); a block is the pool's when it lies in a
pool segment. The entries' fields used are those of torch 2.11's ``device_traces``:
``action``, ``addr``, ``size`` (the requested bytes for blocks, the segment's for
segments; Python ints, as torch gives them), ``stream``. Torch-free: the input is plain
dicts and lists.
"""

from __future__ import annotations

from bisect import bisect_right, insort
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Optional

from bcgprof.analysis.predict.allocator import round_size
from bcgprof.report.traces import Action, TracePool, TraceRow

_EVENTS = frozenset(("alloc", "free_requested", "free_completed", "segment_alloc", "segment_free"))


@dataclass
class _Segment:
    number: int
    size: int
    graph: bool


class TraceBuilder:
    """Rows of consecutive history windows of one mode, numbered consistently across them."""

    def __init__(self, pool: Sequence[int]):
        self.pool = tuple(int(p) for p in pool)
        self._segments: dict[int, _Segment] = {}  # base address -> segment
        self._bases: list[int] = []  # sorted base addresses of live segments
        self._live: dict[
            int, tuple[int, int]
        ] = {}  # block address -> (allocation number, requested bytes)
        self._streams: dict[int, int] = {}
        self._next_alloc = 1
        self._next_segment = 1
        self._pending: list[TraceRow] = []  # segment_exists rows, emitted with the first window

    def _stream(self, raw: Any) -> int:
        return self._streams.setdefault(int(raw or 0), len(self._streams))

    def _pool_segments(self, segments: Iterable[dict]) -> dict[int, int]:
        return {
            int(s["address"]): int(s["total_size"])
            for s in segments
            if tuple(s.get("segment_pool_id", ())) == self.pool
        }

    def _add_segment(self, base: int, size: int, graph: bool) -> _Segment:
        seg = _Segment(self._next_segment, size, graph)
        self._next_segment += 1
        self._segments[base] = seg
        insort(self._bases, base)
        return seg

    def _drop_segment(self, base: int) -> Optional[_Segment]:
        seg = self._segments.pop(base, None)
        if seg is not None:
            self._bases.remove(base)
        return seg

    def _find(self, addr: int) -> Optional[tuple[int, _Segment]]:
        i = bisect_right(self._bases, addr) - 1
        if i < 0:
            return None
        base = self._bases[i]
        seg = self._segments[base]
        return (base, seg) if addr < base + seg.size else None

    def seed(self, segments: Iterable[dict], stream_of: Optional[dict] = None) -> None:
        """The segments that exist before recording begins (a snapshot's ``segments``)."""
        segments = list(segments)
        pool = self._pool_segments(segments)
        for s in sorted(segments, key=lambda s: int(s["address"])):
            base, size = int(s["address"]), int(s["total_size"])
            graph = pool.get(base) == size
            seg = self._add_segment(base, size, graph)
            self._pending.append(
                TraceRow(
                    0,
                    "",
                    TracePool.GRAPH if graph else TracePool.OTHER,
                    Action.SEGMENT_EXISTS,
                    seg.number,
                    size,
                    self._stream(s.get("stream")),
                    address=base,
                )
            )

    def window(
        self, entries: Sequence[dict], segments: Iterable[dict], bucket: int, phase: str
    ) -> list[TraceRow]:
        """Rows of one window: ``entries`` in order, ``segments`` the snapshot's at the window's
        end."""
        pool = self._pool_segments(segments)
        freed_later: dict[
            int, int
        ] = {}  # segment address -> index of its last segment_free in the window
        for i, e in enumerate(entries):
            if e.get("action") == "segment_free":
                freed_later[int(e["addr"])] = i
        rows = [
            TraceRow(
                bucket,
                phase,
                r.pool,
                r.action,
                r.id,
                r.size,
                r.stream,
                r.segment,
                r.offset,
                r.address,
            )
            for r in self._pending
        ]
        self._pending = []
        # A window holds tens of thousands of events, nearly all of them the eager warm-up's in the
        # ordinary pools, which give no row of their own: the loop below is written for them (names
        # bound locally, each address's segment and the last stream remembered), since it runs on
        # the capture's time.
        live, rnd, graph_row = self._live, round_size, TracePool.GRAPH
        next_alloc = self._next_alloc
        last_raw: Any = object()
        stream = 0
        # Address -> (segment, graph or not), while no segment opens or closes: blocks come back to
        # the same addresses over and over.
        located: dict[int, tuple[Optional[tuple[int, _Segment]], bool]] = {}
        growth = peak = 0  # the ordinary pools' allocated bytes, relative to the window's start
        try:
            for i, e in enumerate(entries):
                action = e.get("action")
                if action not in _EVENTS:
                    # snapshot, oom; segment_map/unmap (expandable segments) are refused upstream
                    continue
                raw = e.get("stream")
                if raw != last_raw:  # a run of events on one stream looks its number up once
                    last_raw, stream = raw, self._stream(raw)
                addr, size = e.get("addr", 0), e.get("size", 0)
                if action == "segment_alloc":
                    graph = pool.get(addr) == size and freed_later.get(addr, -1) < i
                    # a segment freed before recording began leaves no free row
                    self._drop_segment(addr)
                    seg = self._add_segment(addr, size, graph)
                    rows.append(
                        TraceRow(
                            bucket,
                            phase,
                            graph_row if graph else TracePool.OTHER,
                            Action.SEGMENT_ALLOC,
                            seg.number,
                            size,
                            stream,
                            address=addr,
                        )
                    )
                    located.clear()
                    continue
                if action == "segment_free":
                    gone = self._drop_segment(addr)
                    if gone is not None:
                        rows.append(
                            TraceRow(
                                bucket,
                                phase,
                                graph_row if gone.graph else TracePool.OTHER,
                                Action.SEGMENT_FREE,
                                gone.number,
                                size,
                                stream,
                                address=addr,
                            )
                        )
                    located.clear()
                    continue
                found = located.get(addr)
                if found is None:
                    where = self._find(addr)
                    found = located[addr] = (where, where is not None and where[1].graph)
                here, graph = found
                number: Optional[int]
                if action == "alloc":
                    number = next_alloc
                    next_alloc += 1
                    live[addr] = (number, size)
                    if not graph:
                        growth += rnd(size)
                        if growth > peak:
                            peak = growth
                        continue
                elif not graph:  # an ordinary block's free: only the bytes count
                    if action == "free_completed":
                        live.pop(addr, None)
                        growth -= rnd(size)
                    continue
                else:
                    if action == "free_requested":
                        follows = entries[i + 1] if i + 1 < len(entries) else None
                        if (
                            follows is not None
                            and follows.get("action") == "free_completed"
                            and follows.get("addr", -1) == addr
                        ):
                            continue  # completed at once: the completion row says it all
                    known = live.get(addr)
                    number = known[0] if known else None
                    if action == "free_completed":
                        live.pop(addr, None)
                assert here is not None
                base, seg = here
                rows.append(
                    TraceRow(
                        bucket,
                        phase,
                        graph_row,
                        Action(action),
                        number,
                        size,
                        stream,
                        seg.number,
                        addr - base,
                    )
                )
        finally:
            self._next_alloc = next_alloc
        rows.append(TraceRow(bucket, phase, TracePool.OTHER, Action.PEAK, None, peak, 0))
        return rows
