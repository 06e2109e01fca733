"""Inside a recorded process (``bcgprof record --trace``): the allocator's history of one group's
graph pool, written as ``bcgprof capture`` writes it (``traces-<group>.csv.gz``,
:mod:`bcgprof.report.traces`).

Mechanism. The hook (:mod:`bcgprof.record.hook`) tells :class:`GroupTracer` where buckets begin and
end, where a bucket's first ``capture_begin`` is and which pool each capture used. At the first
bucket of a group the tracer takes ``torch.cuda.memory._snapshot()`` (the segments that exist: the
trace's ``segment_exists`` rows) and turns ``_record_memory_history`` on with no stacks. The
history is read and cleared at the bucket's first ``capture_begin`` (the ``warmup`` window: from the
previous bucket's end, or the group's first bucket's entry, to here) and at the bucket's end (the
``capture`` window), and each window becomes rows (:class:`bcgprof.measure.trace_events.
TraceBuilder`) once the bucket's end has told which pool its captures used. The history stays on
between a group's buckets, as in a capture, so a block of the pool freed between them is seen; it
is turned off when the engine's capture phase ends or another group begins.

Which process traces: a process whose rank is known (torch.distributed, else ``RANK``) traces only
as rank 0; among the others, the first to begin a bucket of a group claims it (a file created with
``O_EXCL`` in the recording's folder) and is the only one to trace it. One process traces one group
at a time.

Invariant: a trace file on disk is one a replay may trust, or none. A group gets no trace, and a
``trace`` line says why, when: it has no bucket function (one row per graph, numbered, not sized:
said at its first such graph, and superseded by the trace of a bucket function's sized buckets that
follow); a graph without a size comes amid its buckets; it is torch.compile's (cudagraph trees move
the pool's blocks by checkpoints, not allocator calls); the allocator runs with settings the replay
does not model (expandable segments); its captures use more than one pool; its pool held segments
before its first bucket (a replay starts from an empty pool); the process's other capture pools
hold bytes (the rows' pool figure counts every pool the process's captures used); a size comes back
after other sizes; or a step fails. A file already written for it is then removed.

Cost: two history reads a bucket, each a ``_snapshot()``: it takes the allocator's lock and copies
its segments, their blocks and the history since the last read into Python objects on the host; it
does not synchronise the device, allocate device memory or release cached blocks. While the history
is on, every allocator call also appends an entry on the host (no stack: ``context=None``), bounded
by :data:`bcgprof.measure.tracing.MAX_WINDOW_ENTRIES` between reads. Turning the history off and on
again clears it. The rows and the file cost O(a bucket's entries) at its end.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, Optional

from bcgprof.record.rows import TRACE
from bcgprof.report.traces import trace_name
from bcgprof.vocab import RecordGroup

MAX_WINDOW_ENTRIES = 2_000_000  # as bcgprof.measure.tracing's: far more than a bucket's events
WRITTEN, NONE = "written", "none"


class _Active:
    """The group being traced."""

    def __init__(self, group: str, seed: list[dict], settings: dict):
        self.group = group
        self.seed = seed  # the segments when the history was turned on
        self.settings = settings
        self.pool: Optional[tuple[int, int]] = None
        self.builder: Any = None  # TraceBuilder, made when the pool is known
        self.trace: Any = None  # Trace
        self.file: Any = None  # TraceFileWriter
        self.bucket: Optional[int] = None  # the bucket open
        self.bucket_pool: Optional[tuple[int, int]] = None
        self.warmup: Optional[tuple[list, list]] = None  # (entries, segments) at capture_begin
        self.wrapped = False
        self.stray = False  # a graph without a size came after the last bucket


class GroupTracer:
    """One process's allocator traces, one group at a time (module docstring). ``memory``: what
    ``_snapshot`` and ``_record_memory_history`` come from (``torch.cuda.memory``, or a stand-in in
    CPU tests); ``write_line``: the process's line writer (:class:`bcgprof.record.rows.
    LineWriter`'s ``write``)."""

    def __init__(
        self,
        report_dir: Path,
        spool: Path,
        write_line: Callable[..., None],
        memory: Any = None,
        device: Optional[int] = None,
        rank: Callable[[], Optional[int]] = lambda: None,
    ):
        self.report_dir = Path(report_dir)
        self.spool = Path(spool)
        self.write_line = write_line
        self._memory = memory
        self._device = device
        self.rank = rank
        self.active: Optional[_Active] = None
        self.done: set[str] = set()  # groups this process traced or gave up
        self.stopped: set[str] = set()  # groups whose trace ended with its file written
        self.others: set[str] = set()  # groups another process traces
        self.unsized: set[str] = set()  # groups with a graph without a size, said once

    # ------------------------------------------------------------ torch, or its stand-in

    @property
    def memory(self) -> Any:
        if self._memory is None:
            import torch

            self._memory = torch.cuda.memory
        return self._memory

    @property
    def device(self) -> int:
        if self._device is None:
            import torch

            self._device = int(torch.cuda.current_device())
        return self._device

    def _on(self) -> None:
        self.memory._record_memory_history(
            enabled="all", context=None, stacks="python", max_entries=MAX_WINDOW_ENTRIES
        )

    def _off(self) -> None:
        self.memory._record_memory_history(enabled=None)

    def _read(self) -> tuple[list, list]:
        """The history since the last read (then cleared), and the segments now."""
        snap = self.memory._snapshot()
        traces = snap.get("device_traces") or []
        entries = list(traces[self.device]) if self.device < len(traces) else []
        self._off()
        self._on()
        if self.active is not None and len(entries) >= MAX_WINDOW_ENTRIES:
            self.active.wrapped = True
        return entries, self._segments(snap)

    def _segments(self, snap: dict) -> list:
        device = self.device
        return [s for s in snap.get("segments") or [] if s.get("device", device) == device]

    # ------------------------------------------------------------ the hook's calls

    def bucket_begins(self, group: str, size: Optional[int], per_graph: bool) -> None:
        active = self.active
        if active is not None and active.group != group:
            self.stop()
        if group in self.stopped:
            self.stopped.discard(group)
            self.refuse(group, "its captures came back after another group's")
            return
        if group in self.done or group in self.others:
            return
        if self.active is not None:  # the group's next bucket
            if per_graph or size is None:
                # its captures fall in the next bucket's window: refused if a next bucket comes
                self.active.stray, self.active.bucket = True, None
                return
            if self.active.stray:
                self.refuse(
                    group,
                    "a graph without a size (captured outside its bucket function, or in a call "
                    "whose size argument could not be read) came amid its buckets",
                )
                return
            self.active.bucket, self.active.bucket_pool = size, None
            return
        if per_graph or size is None:
            # no trace yet, and none given up: a bucket function's sized buckets may still come
            # (the graph's row is then one of unbucketed), and their trace's line then counts;
            # a graph that left segments in their pool gets it refused when they start
            if group not in self.unsized:
                self.unsized.add(group)
                self._give_up(
                    group,
                    "its graphs were captured outside a bucket function (one row per graph, "
                    "numbered, not sized); name the function that captures one bucket with --bucket"
                    if per_graph
                    else "its bucket function's size argument could not be read",
                    final=False,
                )
            return
        if group == RecordGroup.COMPILED:
            self._give_up(
                group,
                "torch.compile's cudagraph trees move the pool's blocks by checkpoints, which "
                "the allocator's history does not show",
            )
            return
        rank = self.rank()
        if rank is not None and rank != 0:
            self.others.add(group)  # rank 0 traces it
            return
        if not self._claim(group):
            self.others.add(group)
            return
        snap = self.memory._snapshot()
        settings = dict(snap.get("allocator_settings") or {})
        from bcgprof.analysis.predict.allocator import AllocatorError, check_settings

        try:
            check_settings(settings)
        except AllocatorError as e:
            self._give_up(group, str(e))
            return
        self.active = _Active(group, self._segments(snap), settings)
        self.active.bucket = size
        self._on()

    def capture_begins(self) -> None:
        """A bucket's first ``capture_begin``: its warm-up window ends here."""
        a = self.active
        if a is not None and a.bucket is not None and a.warmup is None:
            a.warmup = self._read()

    def graph_ends(self, pool: tuple[int, int]) -> None:
        a = self.active
        if a is None or a.bucket is None:
            return
        known = a.pool or a.bucket_pool
        if known is not None and pool != known:
            self.refuse(
                a.group,
                f"its captures used more than one graph pool ({known[0]},{known[1]} and "
                f"{pool[0]},{pool[1]})",
            )
            return
        a.bucket_pool = pool

    def bucket_ends(self, group: str, other_pools: set[tuple[int, ...]]) -> None:
        """The bucket's capture window, its rows, and the file rewritten. ``other_pools``: the
        pools the process's captures used besides this group's."""
        a = self.active
        if a is None or a.group != group or a.bucket is None:
            return
        bucket = a.bucket
        a.bucket = None
        entries, segments = self._read()
        warmup, a.warmup = a.warmup, None
        if warmup is None or a.bucket_pool is None:
            self.refuse(group, f"its bucket {bucket} captured no graph")
            return
        if a.pool is None:
            self._start_trace(a, a.bucket_pool)
            if self.active is None:
                return
        held = sum(
            int(s["total_size"])
            for s in segments
            if tuple(s.get("segment_pool_id", ())) in other_pools
            and tuple(s.get("segment_pool_id", ())) != a.pool
        )
        if held:
            self.refuse(
                group,
                f"the process's other graph pools held {held} bytes at bucket {bucket}, which "
                "the rows' pool figure counts and the trace does not",
            )
            return
        trace = a.trace
        if bucket in trace.buckets and trace.buckets[-1] != bucket:
            self.refuse(group, f"bucket {bucket} was captured again after other buckets")
            return
        from bcgprof.report.traces import TracePhase

        trace.rows.extend(a.builder.window(warmup[0], warmup[1], bucket, TracePhase.WARMUP))
        trace.rows.extend(a.builder.window(entries, segments, bucket, TracePhase.CAPTURE))
        if bucket not in trace.buckets:
            trace.buckets.append(bucket)
        if a.wrapped and bucket not in trace.incomplete:
            trace.incomplete.append(bucket)
        a.wrapped = False
        first = not self._written(group)
        a.file.write(self.report_dir)
        if first:
            self.write_line(TRACE, group=group, state=WRITTEN, pool=list(a.pool or ()), note="")

    def _start_trace(self, a: _Active, pool: tuple[int, int]) -> None:
        import torch

        from bcgprof.measure.trace_events import TraceBuilder
        from bcgprof.report.traces import Trace, TraceFileWriter

        held = sum(
            int(s["total_size"]) for s in a.seed if tuple(s.get("segment_pool_id", ())) == pool
        )
        if held:
            self.refuse(
                a.group,
                f"its pool held {held} bytes of segments before its first bucket (another "
                "group's graphs share it); a replay starts from an empty pool",
            )
            return
        a.pool = pool
        a.builder = TraceBuilder(pool)
        a.builder.seed(a.seed)
        a.seed = []
        a.trace = Trace(
            mode=a.group,
            torch_version=str(torch.__version__),
            device=self.device,
            pool=(int(pool[0]), int(pool[1])),
            settings=a.settings,
        )
        a.file = TraceFileWriter(a.trace)

    def stop(self) -> None:
        """The group's trace ends (the capture phase ended, or another group began): the history
        off; the file stays as written at its last bucket."""
        a = self.active
        if a is None:
            return
        self.active = None
        self._off()
        if a.trace is None:  # no bucket ended with a capture
            self._give_up(a.group, "no bucket captured a graph")
        else:
            self.done.add(a.group)
            self.stopped.add(a.group)

    def refuse(self, group: str, why: str) -> None:
        """No trace for ``group``: the history off, a file already written removed, and why."""
        a = self.active
        if a is not None and a.group == group:
            self.active = None
            self._off()
        with contextlib.suppress(FileNotFoundError):
            (self.report_dir / trace_name(group)).unlink()
        self._give_up(group, why)

    def _give_up(self, group: str, why: str, final: bool = True) -> None:
        """Say why ``group`` has no trace; ``final=False``: so far (a later trace line counts)."""
        if final:
            self.done.add(group)
        self.write_line(TRACE, group=group, state=NONE, note=f"no trace of {group}: {why}")

    # ------------------------------------------------------------ bookkeeping

    def _written(self, group: str) -> bool:
        return (self.report_dir / trace_name(group)).exists()

    def _claim(self, group: str) -> bool:
        """Whether this process is the first to trace ``group`` (a claim file made with
        ``O_EXCL``)."""
        self.spool.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(self.spool / f"trace-{group}.claim", os.O_WRONLY | os.O_CREAT | os.O_EXCL)
        except FileExistsError:
            return False
        os.write(fd, str(os.getpid()).encode())
        os.close(fd)
        return True
