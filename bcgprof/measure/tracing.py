"""Recording the allocator's trace during a capture (the GPU side of :mod:`bcgprof.report.traces`).

:class:`AllocatorRecorder` keeps ``torch.cuda.memory._record_memory_history`` on for the
whole mode with no stacks (``context=None``), and the capture calls :meth:`take` at the
two edges of every bucket's capture: each call reads ``torch.cuda.memory._snapshot()``,
turns the window's entries into rows (:class:`bcgprof.measure.trace_events.TraceBuilder`) and
clears the history, so host memory stays bounded by one window's events. Everything here
runs on the host between the capture's own steps; it allocates no GPU memory and moves no
sampling point, so no measured figure changes.

Stacks: :meth:`stacks` switches Python stacks on for one window (the floor's first capture,
whose sites need them) without clearing anything. With ``keep`` (``--snapshot``) the raw
entries, stacks included, are also kept (the most recent ``keep``), and
:meth:`viewer_snapshot` gives PyTorch's memory viewer the whole mode's history.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Optional

from bcgprof.measure.trace_events import TraceBuilder
from bcgprof.report.traces import Trace, TraceFileWriter, TracePhase

# far more than one bucket's events (about 60,000 for gpt-oss-20b at 16k)
MAX_WINDOW_ENTRIES = 2_000_000


class AllocatorRecorder:
    """One mode's allocator trace, written to ``<report>/traces-<mode>.csv.gz`` after every
    bucket."""

    def __init__(
        self,
        report_dir: Optional[Path],
        mode: str,
        pool: Sequence[int],
        device: int = 0,
        keep: int = 0,
        stacks: bool = False,
    ):
        import torch

        self.report_dir = Path(report_dir) if report_dir is not None else None
        self.device = device
        self.keep = keep
        self._always_stacks = stacks or keep > 0
        self._stacks = self._always_stacks
        self._kept: deque = deque(maxlen=keep or 1)
        self.builder = TraceBuilder(pool)
        self.trace = Trace(
            mode=mode,
            torch_version=str(torch.__version__),
            device=device,
            pool=(int(pool[0]), int(pool[1])),
        )
        self.file = TraceFileWriter(self.trace)
        self.started = False
        self._held: list = []  # entries read by peek(), leading the next take's window
        self._wrapped = False  # a read since the last take filled the ring buffer
        self._warned = False  # take_warning() has returned the file's cap warning

    def _enable(self) -> None:
        import torch

        torch.cuda.memory._record_memory_history(
            enabled="all",
            context="all" if self._stacks else None,
            stacks="python",
            max_entries=MAX_WINDOW_ENTRIES,
        )

    def _disable(self) -> None:
        import torch

        torch.cuda.memory._record_memory_history(enabled=None)

    def start(self) -> None:
        """Begin recording; the segments that exist already are the trace's first rows."""
        import torch

        snap = torch.cuda.memory._snapshot()
        self.trace.settings = dict(snap.get("allocator_settings") or {})
        self.builder.seed(
            s for s in snap.get("segments", []) if s.get("device", self.device) == self.device
        )
        self._enable()
        self.started = True

    def stacks(self, on: bool) -> None:
        """Record Python stacks from now on (or stop, unless every window keeps them)."""
        want = on or self._always_stacks
        if want != self._stacks:
            self._stacks = want
            self._enable()  # recording stays on: nothing is cleared

    def _read(self) -> tuple[dict, list]:
        """A snapshot and its entries since the last read; clears the history."""
        import torch

        snap = torch.cuda.memory._snapshot()
        traces = snap.get("device_traces", [])
        entries = traces[self.device] if self.device < len(traces) else []
        self._disable()  # clears the history: the next read starts empty
        self._enable()
        if len(entries) >= MAX_WINDOW_ENTRIES:
            self._wrapped = True  # the ring buffer wrapped: events were lost
        return snap, entries

    def peek(self) -> list:
        """The window's entries so far, without ending it: they lead the next :meth:`take`'s
        entries, so the window's rows are those one take at its end would give."""
        _, entries = self._read()
        self._held.extend(entries)
        return self._held

    def take(self, bucket: int, phase: str) -> dict:
        """The window since the last take, as rows of ``bucket``/``phase``; returns the snapshot
        read."""
        snap, entries = self._read()
        if self._held:
            entries, self._held = self._held + entries, []
        segments = [
            s for s in snap.get("segments", []) if s.get("device", self.device) == self.device
        ]
        if self._wrapped and bucket not in self.trace.incomplete:
            self.trace.incomplete.append(bucket)
        self._wrapped = False
        if self.keep:
            self._kept.extend(entries)
        try:
            self.trace.rows.extend(self.builder.window(entries, segments, bucket, phase))
        except Exception:
            # a history this code does not understand must not fail the capture it describes
            if bucket not in self.trace.incomplete:
                self.trace.incomplete.append(bucket)
        if bucket not in self.trace.buckets:
            self.trace.buckets.append(bucket)
        return snap

    def capture_done(self, bucket: int) -> dict:
        """The capture window of ``bucket``; writes the trace file. Returns the snapshot read."""
        snap = self.take(bucket, TracePhase.CAPTURE)
        self.write()
        return snap

    def write(self) -> None:
        if self.report_dir is not None:
            self.file.write(self.report_dir)

    def take_warning(self) -> Optional[str]:
        """The file's passing of a reading cap (:attr:`TraceFileWriter.over_caps`), once."""
        if self.file.over_caps is None or self._warned:
            return None
        self._warned = True
        return self.file.over_caps

    def viewer_snapshot(self) -> dict:
        """A snapshot for PyTorch's memory viewer: the current segments and every kept entry."""
        import torch

        snap = torch.cuda.memory._snapshot()
        traces = snap.get("device_traces", [])
        tail = traces[self.device] if self.device < len(traces) else []
        self._kept.extend(tail)
        out: list[Any] = [[] for _ in range(max(len(traces), self.device + 1))]
        out[self.device] = list(self._kept)
        snap["device_traces"] = out
        return snap

    def stop(self) -> None:
        if self.started:
            self._disable()
            self.started = False
