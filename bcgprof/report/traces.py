"""The allocator trace of one mode: ``traces-<mode>.csv.gz`` in a report directory.

A capture records, bucket after bucket, what the CUDA caching allocator did (from
``torch.cuda.memory._record_memory_history`` with no stacks, read through
``torch.cuda.memory._snapshot()["device_traces"]``), so that another bucket list can be
predicted by replaying it (:mod:`bcgprof.analysis.replay`) on any machine, no GPU needed.

The file is gzip-compressed UTF-8 text (two gzip members, read as one stream). Its first line is ``#`` followed by a JSON object,
the header: ``format`` ("bcgprof-allocator-trace"), ``version`` (1), ``mode``,
``torch_version``, ``device`` (the CUDA device index), ``pool`` (the graph pool's id, two
integers), ``settings`` (the allocator settings of the snapshot, ``allocator_settings``),
``buckets`` (the buckets recorded so far, in capture order) and ``incomplete`` (buckets whose
recording lost events: the history's ring buffer filled up; empty normally). Then one CSV
header line and one row per event, in the order the allocator saw them:

| column | meaning |
| --- | --- |
| ``bucket`` | the bucket being captured |
| ``phase`` | ``warmup``: from the previous bucket's capture end to this bucket's capture start (its eager warm-up, the readings between); ``capture``: the capture itself |
| ``pool`` | ``graph``: the graph pool all captures share; ``other``: the ordinary pools |
| ``action`` | ``alloc``, ``free_requested`` (only when the free was deferred: the block had been used on another stream), ``free_completed`` (the block is free again), ``segment_alloc`` (cudaMalloc), ``segment_free`` (cudaFree), ``segment_exists`` (a segment there before recording began), ``peak`` (one per bucket and phase for ``other``: see ``size``) |
| ``id`` | ``alloc``: this allocation's number (from 1, unique in the file); a free: the number of the allocation it frees (empty: allocated before recording began); a segment row: the segment's number (from 1) |
| ``size`` | ``alloc`` and frees: the bytes requested (the allocator rounds them, :func:`bcgprof.analysis.allocator.round_size`); segment rows: the segment's bytes; ``peak``: the highest growth of the ordinary pools' allocated bytes (rounded sizes) during the phase |
| ``stream`` | the CUDA stream, numbered from 0 in the order first seen |
| ``segment`` | block rows: the number of the segment holding the block (empty when unknown) |
| ``offset`` | block rows: the block's byte offset in its segment |
| ``address`` | segment rows: the segment's device address (its order decides best-fit ties) |

Only segment rows and one ``peak`` row per phase are kept for the ordinary pools: their
block events (the eager attention allocates over ten times as often as the pool) would
make the file far larger, and what device memory the ordinary pools reserve is the
sequence of their segment rows. ``--snapshot`` keeps everything for PyTorch's viewer.

The file is rewritten atomically after every bucket (:class:`TraceFileWriter` compresses each
row once). :func:`read_trace` checks every line
and refuses a malformed file with a :class:`TraceError` of one line. Torch-free.
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
from bcgprof.text import printable
from bcgprof.vocab import Mode, StrEnum

FORMAT = "bcgprof-allocator-trace"
VERSION = 1
MAX_TRACE_BYTES = 64 << 20  # compressed; a 74-bucket profile writes about 1 MiB per mode
MAX_TEXT_BYTES = 1 << 30  # decompressed
MAX_ROWS = 20_000_000
MAX_VALUE = 2 ** 62  # addresses and byte counts of one GPU fit well below this
COLUMNS = ("bucket", "phase", "pool", "action", "id", "size", "stream", "segment", "offset", "address")


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
        return {"format": FORMAT, "version": VERSION, "mode": self.mode, "torch_version": self.torch_version,
                "device": self.device, "pool": list(self.pool), "settings": self.settings,
                "buckets": self.buckets, "incomplete": self.incomplete}


# ---------------------------------------------------------------- writing


def _cell(v: Optional[int]) -> str:
    return "" if v is None else str(v)


def _row_text(rows: Iterable[TraceRow]) -> bytes:
    return "".join(f"{r.bucket},{r.phase},{r.pool},{r.action},{_cell(r.id)},{r.size},{r.stream},"
                   f"{_cell(r.segment)},{_cell(r.offset)},{_cell(r.address)}\n" for r in rows).encode()


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

    def _feed(self, data: bytes) -> None:
        self._crc = zlib.crc32(data, self._crc)
        self._size += len(data)
        self._body += self._deflate.compress(data)

    def file_bytes(self) -> bytes:
        """The whole file for the trace as it is now (rows added since the last call compressed once)."""
        rows = self.trace.rows
        if len(rows) < self._written:
            raise ValueError("a trace's rows were removed after they were written")
        self._feed(_row_text(rows[self._written:]))
        self._written = len(rows)
        head = ("#" + json.dumps(self.trace.header(), sort_keys=True) + "\n").encode()
        tail = self._deflate.copy().flush(zlib.Z_FINISH)
        trailer = self._crc.to_bytes(4, "little") + (self._size & 0xFFFFFFFF).to_bytes(4, "little")
        return gzip.compress(head, compresslevel=6, mtime=0) + _GZIP_HEADER + bytes(self._body) + tail + trailer

    def write(self, directory: Path) -> Path:
        """Write (replace, atomically) ``traces-<mode>.csv.gz`` in ``directory``."""
        from bcgprof.report import atomic_write_bytes

        path = Path(directory) / trace_name(self.trace.mode)
        atomic_write_bytes(path, self.file_bytes())
        return path


def trace_bytes(trace: Trace) -> bytes:
    """The file's bytes (no timestamp inside: the same trace gives the same bytes)."""
    return TraceFileWriter(trace).file_bytes()


def write_trace(directory: Path, trace: Trace) -> Path:
    """Write (replace, atomically) ``traces-<mode>.csv.gz`` in ``directory``."""
    return TraceFileWriter(trace).write(directory)


# ---------------------------------------------------------------- reading

_FIX = "re-capture the report to predict from it (show, gate and explain do not read it)"


def _bad(path: Path, what: str) -> TraceError:
    return TraceError(f"{path}: {what}; {_FIX}")


def _int(path: Path, line: int, name: str, raw: str, optional: bool = False, lo: int = 0) -> Optional[int]:
    if raw == "" and optional:
        return None
    try:
        value = int(raw)
    except ValueError:
        raise _bad(path, f"line {line}, column {name}: {raw[:30]!r} is not an integer") from None
    if not lo <= value <= MAX_VALUE:
        raise _bad(path, f"line {line}, column {name}: {value} is out of range")
    return value


def _checked_row(path: Path, line: int, cells: list[str], known: set) -> tuple:
    """The numbers of a row, each checked (the slow path: names the first bad cell in one line)."""
    bucket = _int(path, line, "bucket", cells[0], lo=1)
    if bucket not in known:
        raise _bad(path, f"line {line}: bucket {bucket} is not in the header's buckets")
    values = [_int(path, line, name, raw, optional=name not in ("size", "stream"))
              for name, raw in zip(COLUMNS[4:], cells[4:], strict=True)]
    return (bucket, *values)


def _header(path: Path, first: str) -> dict:
    if not first.startswith("#"):
        raise _bad(path, "the first line is not the trace header")
    try:
        head = json.loads(first[1:])
    except json.JSONDecodeError:
        raise _bad(path, "the header is not JSON") from None
    except (ValueError, RecursionError):  # an integer of thousands of digits, brackets nested beyond the stack
        raise _bad(path, "the header is not usable JSON (too deep or too long a number)") from None
    if not isinstance(head, dict) or head.get("format") != FORMAT:
        raise _bad(path, f"not a {FORMAT} file")
    if head.get("version") != VERSION:
        raise _bad(path, f"trace format version {head.get('version')!r}; this bcgprof reads version {VERSION}")
    if head.get("mode") not in tuple(Mode):
        raise _bad(path, f"unknown mode {head.get('mode')!r} in the header")
    for name in ("buckets", "incomplete"):
        value = head.get(name)
        if not isinstance(value, list) or not all(isinstance(b, int) and not isinstance(b, bool) and b > 0
                                                  for b in value):
            raise _bad(path, f"header field {name} is not a list of positive bucket sizes")
    pool = head.get("pool")
    if not (isinstance(pool, list) and len(pool) == 2 and all(isinstance(p, int) for p in pool)):
        raise _bad(path, "header field pool is not two integers")
    if not isinstance(head.get("settings"), dict):
        raise _bad(path, "header field settings is not an object")
    return head


def read_trace(path: Path) -> Trace:
    """Read and check one trace file; every malformed line is refused with one line."""
    from bcgprof.inputs import Refused, open_capped_bytes

    path = Path(path)
    try:
        raw = open_capped_bytes(path, MAX_TRACE_BYTES)  # a regular file only: a FIFO would block a read
    except Refused as r:
        what = {"missing": "is missing", "unreadable": f"cannot be read ({r.detail})",
                "not regular": f"is {r.detail}, not a regular file",
                "too large": f"{r.size} bytes, more than the {MAX_TRACE_BYTES} a trace may have"}[r.reason]
        raise _bad(path, what) from None
    try:
        with raw, gzip.GzipFile(fileobj=raw, mode="rb") as f:
            data = f.read(MAX_TEXT_BYTES + 1)
    except (OSError, EOFError, zlib.error) as e:
        raise _bad(path, f"cannot be read as gzip ({type(e).__name__})") from None
    if len(data) > MAX_TEXT_BYTES:
        raise _bad(path, f"more than {MAX_TEXT_BYTES} bytes uncompressed")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise _bad(path, "not UTF-8 text") from None
    first, _, rest = text.partition("\n")
    head = _header(path, first)
    lines = rest.split("\n")
    if not lines or lines[0].split(",") != list(COLUMNS):
        raise _bad(path, f"line 2 is not the column header {','.join(COLUMNS)}")
    if lines and lines[-1] == "":
        lines.pop()
    if len(lines) - 1 > MAX_ROWS:
        raise _bad(path, f"more than {MAX_ROWS} rows")
    words = (set(TracePhase), set(TracePool), set(Action))
    plain = "-" not in rest  # no number is negative: checked once for the file
    known = set(head["buckets"])
    rows = []
    for number, line in enumerate(lines[1:], start=3):
        cells = line.split(",")
        if len(cells) != len(COLUMNS):
            raise _bad(path, f"line {number}: {len(cells)} values for {len(COLUMNS)} columns")
        if cells[1] not in words[0] or cells[2] not in words[1] or cells[3] not in words[2]:
            raise _bad(path, f"line {number}: unknown phase, pool or action ({cells[1][:20]!r}, {cells[2][:20]!r}, "
                             f"{cells[3][:20]!r})")
        c_id, c_size, c_stream, c_seg, c_off, c_addr = cells[4:]
        try:  # the fast path; a bad cell is named by the slow one below
            bucket = int(cells[0])
            ident, size, stream = (int(c_id) if c_id else None), int(c_size), int(c_stream)
            segment = int(c_seg) if c_seg else None
            offset = int(c_off) if c_off else None
            address = int(c_addr) if c_addr else None
            ok = (plain and bucket in known and size <= MAX_VALUE and stream <= MAX_VALUE
                  and (ident is None or ident <= MAX_VALUE) and (segment is None or segment <= MAX_VALUE)
                  and (offset is None or offset <= MAX_VALUE) and (address is None or address <= MAX_VALUE))
        except ValueError:
            ok = False
        if not ok:
            bucket, ident, size, stream, segment, offset, address = _checked_row(path, number, cells, known)
        rows.append(TraceRow(bucket, cells[1], cells[2], cells[3], ident, size, stream, segment, offset, address))
    _check_rows(path, rows)
    device = head.get("device", 0)
    if isinstance(device, bool) or not isinstance(device, int) or not 0 <= device <= MAX_VALUE:
        raise _bad(path, f"its header's device must be a device index, got {printable(repr(device), 40)}")
    return Trace(mode=head["mode"], torch_version=str(head.get("torch_version", "")),
                 device=device, pool=(head["pool"][0], head["pool"][1]),
                 settings=head["settings"], buckets=list(head["buckets"]), incomplete=list(head["incomplete"]),
                 rows=rows, path=path)


def _check_rows(path: Path, rows: Iterable[TraceRow]) -> None:
    """What the replay relies on: allocation and segment numbers are unique, frees name known allocations,
    block rows of the graph pool name a segment of the graph pool, buckets appear in one run each."""
    allocs: set[int] = set()
    pool_segments: set[int] = set()
    segments: set[int] = set()
    order: list[int] = []
    for line, r in enumerate(rows, start=3):
        if not order or order[-1] != r.bucket:
            if r.bucket in order:
                raise _bad(path, f"line {line}: bucket {r.bucket}'s rows are not contiguous")
            order.append(r.bucket)
        if r.action == Action.ALLOC:
            if r.id is None or r.id in allocs:
                raise _bad(path, f"line {line}: an alloc without a new allocation number")
            allocs.add(r.id)
        elif r.action in (Action.FREE_REQUESTED, Action.FREE_COMPLETED):
            if r.id is not None and r.id not in allocs:
                raise _bad(path, f"line {line}: frees allocation {r.id}, which no earlier row allocated")
        elif r.action in SEGMENT_ACTIONS:
            if r.id is None or r.address is None or r.size <= 0:
                raise _bad(path, f"line {line}: a segment row needs its number, address and size")
            if r.action != Action.SEGMENT_FREE:
                if r.id in segments:
                    raise _bad(path, f"line {line}: segment {r.id} appears twice")
                segments.add(r.id)
                if r.pool == TracePool.GRAPH:
                    pool_segments.add(r.id)
        if r.pool == TracePool.GRAPH and r.action in BLOCK_ACTIONS and r.segment not in pool_segments:
            raise _bad(path, f"line {line}: a graph-pool block in segment {r.segment}, not a graph-pool segment")
