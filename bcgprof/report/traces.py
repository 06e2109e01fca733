"""The allocator trace of one mode: ``traces-<mode>.csv.gz`` in a report directory.

A capture records, bucket after bucket, what the CUDA caching allocator did (from
``torch.cuda.memory._record_memory_history`` with no stacks, read through
``torch.cuda.memory._snapshot()["device_traces"]``), so that another bucket list can be
predicted by replaying it (:mod:`bcgprof.analysis.predict.replay`) on any machine, no GPU needed.

The file is gzip-compressed UTF-8 text (two gzip members, read as one stream). Its first line is
``#`` followed by a JSON object, the header: ``format`` ("bcgprof-allocator-trace"), ``version``
(1), ``mode``, ``torch_version``, ``device`` (the CUDA device index), ``pool`` (the graph pool's id,
two integers), ``settings`` (the allocator settings of the snapshot, ``allocator_settings``),
``buckets`` (the buckets recorded so far, in capture order) and ``incomplete`` (buckets whose
recording lost events: the history's ring buffer filled up; empty normally). Then one CSV
header line and one row per event, in the order the allocator saw them:

| column | meaning |
| --- | --- |
| ``bucket`` | the bucket being captured |
| ``phase`` | ``warmup``: from the previous bucket's capture end to this bucket's capture start (its
eager warm-up, the readings between); ``capture``: the capture itself | | ``pool`` | ``graph``: the
graph pool all captures share; ``other``: the ordinary pools | | ``action`` | ``alloc``,
``free_requested`` (only when the free was deferred: the block had been used on another stream),
``free_completed`` (the block is free again), ``segment_alloc`` (cudaMalloc), ``segment_free``
(cudaFree), ``segment_exists`` (a segment there before recording began), ``peak`` (one per bucket
and phase for ``other``: see ``size``) | | ``id`` | ``alloc``: this allocation's number (from 1,
unique in the file); a free: the number of the allocation it frees (empty: allocated before
recording began); a segment row: the segment's number (from 1) | | ``size`` | ``alloc`` and frees:
the bytes requested (the allocator rounds them,
:func:`bcgprof.analysis.predict.allocator.round_size`); segment rows: the segment's bytes; ``peak``:
the highest growth of the ordinary pools' allocated bytes (rounded sizes) during the phase | |
``stream`` | the CUDA stream, numbered from 0 in the order first seen | | ``segment`` | block rows:
the number of the segment holding the block (empty when unknown) | | ``offset`` | block rows: the
block's byte offset in its segment | | ``address`` | segment rows: the segment's device address (its
order decides best-fit ties) |

Only segment rows and one ``peak`` row per phase are kept for the ordinary pools: their
block events (the eager attention allocates over ten times as often as the pool) would
make the file far larger, and what device memory the ordinary pools reserve is the
sequence of their segment rows. ``--snapshot`` keeps everything for PyTorch's viewer.

The file is rewritten atomically after every bucket (:class:`TraceFileWriter` compresses each
row once). :func:`read_trace` (:mod:`bcgprof.report.trace_read`) reads it within the caps
:data:`MAX_TRACE_BYTES` (compressed), :data:`MAX_TEXT_BYTES` (inflated) and :data:`MAX_ROWS`, checks
every line and refuses a malformed file with a :class:`TraceError` of one line. Torch-free.
"""

from __future__ import annotations

import gzip
import json
import zlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple, Optional

from bcgprof.errors import ReportError
from bcgprof.vocab import StrEnum

FORMAT = "bcgprof-allocator-trace"
VERSION = 1
# Caps, from the largest trace a real capture wrote (of every committed traces-*.csv.gz,
# Qwen3-30B-A3B's 74-bucket profile: 675,217 rows, 38.4 MB of text, 2.39 MB compressed), with room
# to spare: about 1.5 times its rows and 1.75 times its bytes. Reading stops as soon as one is
# passed (bcgprof.report.trace_read).
MAX_TRACE_BYTES = 4 << 20  # compressed
MAX_TEXT_BYTES = 64 << 20  # inflated
MAX_ROWS = 1_000_000
MAX_VALUE = 2**62  # addresses and byte counts of one GPU fit well below this
COLUMNS = (
    "bucket",
    "phase",
    "pool",
    "action",
    "id",
    "size",
    "stream",
    "segment",
    "offset",
    "address",
)


class TracePhase(StrEnum):
    WARMUP = "warmup"
    CAPTURE = "capture"


class TracePool(StrEnum):
    GRAPH = "graph"
    OTHER = "other"


class Action(StrEnum):
    ALLOC = "alloc"
    FREE_REQUESTED = "free_requested"
    FREE_COMPLETED = "free_completed"
    SEGMENT_ALLOC = "segment_alloc"
    SEGMENT_FREE = "segment_free"
    SEGMENT_EXISTS = "segment_exists"
    PEAK = "peak"


BLOCK_ACTIONS = (Action.ALLOC, Action.FREE_REQUESTED, Action.FREE_COMPLETED)
SEGMENT_ACTIONS = (Action.SEGMENT_ALLOC, Action.SEGMENT_FREE, Action.SEGMENT_EXISTS)


class TraceError(ReportError):
    """A trace file that cannot be used (exit 2)."""


def trace_name(mode: str) -> str:
    return f"traces-{mode}.csv.gz"


def trace_files(report_dir: Path, modes: Iterable[str]) -> dict[str, Path]:
    """Mode -> its trace file in ``report_dir``, for the modes that have one (a broken link counts:
    reading it says that it is damaged)."""
    found = {}
    for mode in modes:
        path = Path(report_dir) / trace_name(mode)
        if path.exists() or path.is_symlink():
            found[mode] = path
    return found


class TraceRow(NamedTuple):
    """One row of the file (a named tuple: a profile holds hundreds of thousands)."""

    bucket: int
    phase: str
    pool: str
    action: str
    id: Optional[int] = None
    size: int = 0
    stream: int = 0
    segment: Optional[int] = None
    offset: Optional[int] = None
    address: Optional[int] = None


@dataclass
class Trace:
    """One mode's trace: the header's fields and the rows, in order."""

    mode: str
    torch_version: str = ""
    device: int = 0
    pool: tuple[int, int] = (0, 0)
    settings: dict = field(default_factory=dict)
    buckets: list[int] = field(default_factory=list)
    incomplete: list[int] = field(default_factory=list)
    rows: list[TraceRow] = field(default_factory=list)
    path: Optional[Path] = None

    def header(self) -> dict:
        return {
            "format": FORMAT,
            "version": VERSION,
            "mode": self.mode,
            "torch_version": self.torch_version,
            "device": self.device,
            "pool": list(self.pool),
            "settings": self.settings,
            "buckets": self.buckets,
            "incomplete": self.incomplete,
        }


# ---------------------------------------------------------------- writing


def _cell(v: Optional[int]) -> str:
    return "" if v is None else str(v)


def _row_text(rows: Iterable[TraceRow]) -> bytes:
    return "".join(
        f"{r.bucket},{r.phase},{r.pool},{r.action},{_cell(r.id)},{r.size},{r.stream},"
        f"{_cell(r.segment)},{_cell(r.offset)},{_cell(r.address)}\n"
        for r in rows
    ).encode()


# A gzip member's fixed header: magic, deflate, no flags, mtime 0, no extra flags, OS "unknown".
_GZIP_HEADER = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"


class TraceFileWriter:
    """Writes one trace file bucket after bucket, compressing each row once.

    The file is two gzip members, which every gzip reader reads as one stream: the header line
    (recompressed at each write, since its ``buckets`` grow) and the column line with the rows. The
    rows' deflate stream is kept open between writes and only a copy of it is finished for each
    file, so the work per bucket is that bucket's rows, not the whole file again (a 74-bucket
    profile used to recompress about 270,000 rows per mode 74 times). Deflate's output does not
    depend on how its input was split, so the bytes equal a one-shot :func:`trace_bytes`.
    """

    def __init__(self, trace: Trace):
        self.trace = trace
        self._written = 0
        self._deflate = zlib.compressobj(6, zlib.DEFLATED, -zlib.MAX_WBITS)
        self._body = bytearray()
        self._crc = 0
        self._size = 0
        self._feed((",".join(COLUMNS) + "\n").encode())
        self.over_caps: Optional[str] = None  # set by write() once the file passes a reading cap

    def _feed(self, data: bytes) -> None:
        self._crc = zlib.crc32(data, self._crc)
        self._size += len(data)
        self._body += self._deflate.compress(data)

    def file_bytes(self) -> bytes:
        """The whole file for the trace as it is now (rows added since the last call compressed
        once)."""
        rows = self.trace.rows
        if len(rows) < self._written:
            raise ValueError("a trace's rows were removed after they were written")
        self._feed(_row_text(rows[self._written :]))
        self._written = len(rows)
        head = ("#" + json.dumps(self.trace.header(), sort_keys=True) + "\n").encode()
        tail = self._deflate.copy().flush(zlib.Z_FINISH)
        trailer = self._crc.to_bytes(4, "little") + (self._size & 0xFFFFFFFF).to_bytes(4, "little")
        return (
            gzip.compress(head, compresslevel=6, mtime=0)
            + _GZIP_HEADER
            + bytes(self._body)
            + tail
            + trailer
        )

    def write(self, directory: Path) -> Path:
        """Write (replace, atomically) ``traces-<mode>.csv.gz`` in ``directory``."""
        from bcgprof.report import atomic_write_bytes

        path = Path(directory) / trace_name(self.trace.mode)
        data = self.file_bytes()
        atomic_write_bytes(path, data)
        if self.over_caps is None:
            self.over_caps = self._passed_cap(path, len(data))
        return path

    def _passed_cap(self, path: Path, compressed: int) -> Optional[str]:
        """One line saying which reading cap the file passes, or None: the file is still written
        whole, but predict and advise will refuse it."""
        rows = len(self.trace.rows)
        over = [
            f"{what} over the {cap:,} a trace may have"
            for what, n, cap in (
                (f"{rows:,} rows", rows, MAX_ROWS),
                (f"{self._size:,} bytes of text", self._size, MAX_TEXT_BYTES),
                (f"{compressed:,} bytes compressed", compressed, MAX_TRACE_BYTES),
            )
            if n > cap
        ]
        if not over:
            return None
        return (
            f"{path.name}: {'; '.join(over)}: predict and advise will refuse it (show, gate and "
            "explain do not read it); capture fewer buckets or layers to predict from this model"
        )


def trace_bytes(trace: Trace) -> bytes:
    """The file's bytes (no timestamp inside: the same trace gives the same bytes)."""
    return TraceFileWriter(trace).file_bytes()


def write_trace(directory: Path, trace: Trace) -> Path:
    """Write (replace, atomically) ``traces-<mode>.csv.gz`` in ``directory``."""
    return TraceFileWriter(trace).write(directory)


# ---------------------------------------------------------------- reading


def read_trace(path: Path) -> Trace:
    """Read and check one trace file within its caps (:mod:`bcgprof.report.trace_read`); every
    malformed line is refused with one line."""
    from bcgprof.report.trace_read import read_columns, rows_of

    columns = read_columns(path)
    head = columns.head
    return Trace(
        mode=head["mode"],
        torch_version=str(head.get("torch_version", "")),
        device=head.get("device", 0),
        pool=(head["pool"][0], head["pool"][1]),
        settings=head["settings"],
        buckets=list(head["buckets"]),
        incomplete=list(head["incomplete"]),
        rows=rows_of(columns.table),
        path=columns.path,
    )
