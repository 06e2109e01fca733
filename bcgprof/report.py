"""The report format: one record type per file, written atomically as rows finish.

A report is a directory holding ``buckets.csv`` (one :class:`BucketRecord` per mode
and bucket), ``summary.csv`` (one :class:`SummaryRecord` per mode, derived from the
bucket rows) and ``run.json`` (one :class:`RunInfo`). The dataclass fields are the
columns; every reader and writer goes through this module.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import math
import os
import re
import tempfile
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Iterable, Optional, Sequence, get_type_hints

from bcgprof.errors import ReportError
from bcgprof.options import MODES, RUN_STATUSES, STATUSES

SCHEMA_VERSION = 1
SITES_FILE = "sites.csv"


@dataclass
class BucketRecord:
    """What capturing one bucket in one mode cost. Bytes are integers."""

    mode: str
    bucket: int
    order: int  # capture order within the mode, 0 first
    status: str  # ok | oom | error
    segments: int = 0
    graph_nodes: Optional[int] = None  # None when the CUDA bindings are missing
    pool_bytes: int = 0  # graph pool size after this bucket
    pool_delta_bytes: int = 0
    retained_output_bytes: int = 0
    torch_allocated_delta_bytes: int = 0
    torch_reserved_delta_bytes: int = 0
    device_used_delta_bytes: int = 0  # NVML (or mem_get_info, see run.json)
    non_torch_delta_bytes: int = 0  # device-used delta minus torch-reserved delta
    peak_transient_bytes: int = 0  # highest allocation during warm-up+capture above the level before
    warmup_ms: float = 0.0
    capture_ms: float = 0.0
    replay_max_abs_diff: Optional[float] = None  # None when not checked
    rank: int = 0
    process_used_delta_bytes: Optional[int] = None  # NVML per-process figure, when available
    device_peak_delta_bytes: Optional[int] = None  # sampler's device-used peak above the level before
    free_bytes: Optional[int] = None  # device free memory after the bucket (or at the failure)
    detail: str = ""  # why a bucket is oom/error
    # The ledger (empty in reports written before it): pool_live + pool_free + outside_pool
    # + non_torch == device_used_delta, exactly. Pool figures are read from the block states.
    pool_live_delta_bytes: Optional[int] = None  # growth of allocated bytes inside the pool's segments
    pool_free_delta_bytes: Optional[int] = None  # growth of unused bytes the pool's segments hold
    outside_pool_delta_bytes: Optional[int] = None  # torch-reserved growth outside the pool
    pool_output_bytes: Optional[int] = None  # the part of retained_output_bytes that lies in the pool


@dataclass
class SummaryRecord:
    """Per-mode totals, derived from the bucket rows by :func:`summarize`."""

    mode: str
    buckets: int
    segments: int
    pool_bytes: int
    torch_reserved_bytes: int
    device_used_bytes: int
    non_torch_bytes: int
    retained_output_bytes: int
    peak_transient_bytes: int
    capture_s: float
    saved_vs_per_bucket_bytes: Optional[int] = None
    saved_vs_per_bucket_pct: Optional[float] = None
    ratio_to_floor: Optional[float] = None
    rank: str = "0"  # a rank number, or "max"/"sum" across ranks of a tensor-parallel run
    failed: int = 0  # buckets whose status is not ok
    # sums of the bucket ledger columns; empty when any bucket row lacks them
    pool_live_delta_bytes: Optional[int] = None
    pool_free_delta_bytes: Optional[int] = None
    outside_pool_delta_bytes: Optional[int] = None
    pool_output_bytes: Optional[int] = None


LEDGER_FIELDS = ("pool_live_delta_bytes", "pool_free_delta_bytes", "outside_pool_delta_bytes", "pool_output_bytes")


@dataclass
class SiteRecord:
    """What the graph pool held at the peak of one bucket's capture (sites.csv): one row per
    model code site, plus one ``slack`` row; the rows of a (mode, rank) sum to its pool bytes."""

    mode: str
    rank: int
    bucket: int
    kind: str  # site | slack
    site: str
    bytes: int
    blocks: int = 0


@dataclass
class RunInfo:
    schema_version: int = SCHEMA_VERSION
    bcgprof_version: str = ""
    command: str = ""
    model: str = ""
    model_source: str = ""  # preset | path
    config_hash: str = ""
    family: str = ""
    layers: int = 0
    hidden_size: int = 0
    dtype: str = ""
    weights: str = "dummy"
    phase: str = "prefill"
    buckets: list = field(default_factory=list)
    modes: list = field(default_factory=list)
    gpu_name: str = ""
    driver: str = ""
    torch_version: str = ""
    cuda_version: str = ""
    memory_source: str = ""  # nvml | torch.cuda.mem_get_info
    in_process: bool = False
    tp: int = 1
    started_at: str = ""
    ended_at: str = ""
    status: str = "running"  # running | complete | partial | failed | interrupted
    message: str = ""
    extra: dict = field(default_factory=dict)
    graph: str = "breakable"  # breakable | full (reports written before this field: breakable)
    order: str = "largest-first"  # largest-first | smallest-first


# ---------------------------------------------------------------- what a valid value is

MAX_FILE_BYTES = 256 * 1024 ** 2  # larger than any report file; refused before it is read
MAX_BYTES = 2 ** 50  # 1 PiB: no byte figure of one GPU can be larger
MAX_MS = 1e9  # about 11 days, in milliseconds
MAX_TP = 4096  # tensor-parallel ranks
INT64 = 2 ** 63

# The columns every schema-1 report has had since the first release; the ones after them were
# appended later, and a report without them reads them as "not recorded" (rank 0, empty).
BUCKET_REQUIRED = (
    "mode", "bucket", "order", "status", "segments", "graph_nodes", "pool_bytes", "pool_delta_bytes",
    "retained_output_bytes", "torch_allocated_delta_bytes", "torch_reserved_delta_bytes",
    "device_used_delta_bytes", "non_torch_delta_bytes", "peak_transient_bytes", "warmup_ms", "capture_ms",
    "replay_max_abs_diff",
)
SUMMARY_REQUIRED = (
    "mode", "buckets", "segments", "pool_bytes", "torch_reserved_bytes", "device_used_bytes", "non_torch_bytes",
    "retained_output_bytes", "peak_transient_bytes", "capture_s", "saved_vs_per_bucket_bytes",
    "saved_vs_per_bucket_pct", "ratio_to_floor",
)


@dataclass(frozen=True)
class _Rule:
    """What one CSV column may hold."""

    kind: type  # int, float or str
    optional: bool = False  # may be empty (None)
    lo: Optional[float] = None
    hi: Optional[float] = None
    choices: tuple = ()
    inf: bool = False  # float column that may hold inf (never nan)


def _byte_rule(optional: bool = False, signed: bool = False) -> _Rule:
    return _Rule(int, optional, -MAX_BYTES if signed else 0, MAX_BYTES)


def _bucket_rules() -> dict[str, _Rule]:
    from bcgprof.buckets import MAX_BUCKETS, MAX_BUCKET_SIZE

    return {
        "mode": _Rule(str, choices=MODES),
        "bucket": _Rule(int, lo=1, hi=MAX_BUCKET_SIZE),
        "order": _Rule(int, lo=0, hi=MAX_BUCKETS - 1),
        "status": _Rule(str, choices=STATUSES),
        "segments": _Rule(int, lo=0, hi=INT64 - 1),
        "graph_nodes": _Rule(int, optional=True, lo=0, hi=INT64 - 1),
        "pool_bytes": _byte_rule(),
        "pool_delta_bytes": _byte_rule(signed=True),
        "retained_output_bytes": _byte_rule(),
        "torch_allocated_delta_bytes": _byte_rule(signed=True),
        "torch_reserved_delta_bytes": _byte_rule(signed=True),
        "device_used_delta_bytes": _byte_rule(signed=True),
        "non_torch_delta_bytes": _byte_rule(signed=True),
        "peak_transient_bytes": _byte_rule(),
        "warmup_ms": _Rule(float, lo=0, hi=MAX_MS),
        "capture_ms": _Rule(float, lo=0, hi=MAX_MS),
        "replay_max_abs_diff": _Rule(float, optional=True, lo=0, inf=True),  # inf: the replay gave NaN
        "rank": _Rule(int, lo=0, hi=MAX_TP - 1),
        "process_used_delta_bytes": _byte_rule(optional=True, signed=True),
        "device_peak_delta_bytes": _byte_rule(optional=True, signed=True),
        "free_bytes": _byte_rule(optional=True),
        "detail": _Rule(str),
        **{name: _byte_rule(optional=True, signed=True) for name in LEDGER_FIELDS},
    }


def _summary_rules() -> dict[str, _Rule]:
    from bcgprof.buckets import MAX_BUCKETS

    return {
        "mode": _Rule(str, choices=MODES),
        "buckets": _Rule(int, lo=0, hi=MAX_BUCKETS * MAX_TP),
        "segments": _Rule(int, lo=0, hi=INT64 - 1),
        "pool_bytes": _byte_rule(),
        "torch_reserved_bytes": _byte_rule(signed=True),
        "device_used_bytes": _byte_rule(signed=True),
        "non_torch_bytes": _byte_rule(signed=True),
        "retained_output_bytes": _byte_rule(),
        "peak_transient_bytes": _byte_rule(),
        "capture_s": _Rule(float, lo=0, hi=MAX_MS * MAX_TP),
        "saved_vs_per_bucket_bytes": _byte_rule(optional=True, signed=True),
        "saved_vs_per_bucket_pct": _Rule(float, optional=True),
        "ratio_to_floor": _Rule(float, optional=True),
        "rank": _Rule(str),  # a rank number, or max / sum (checked with the row)
        "failed": _Rule(int, lo=0, hi=MAX_BUCKETS * MAX_TP),
        **{name: _byte_rule(optional=True, signed=True) for name in LEDGER_FIELDS},
    }


def _site_rules() -> dict[str, _Rule]:
    from bcgprof.buckets import MAX_BUCKET_SIZE

    return {
        "mode": _Rule(str, choices=MODES),
        "rank": _Rule(int, lo=0, hi=MAX_TP - 1),
        "bucket": _Rule(int, lo=1, hi=MAX_BUCKET_SIZE),
        "kind": _Rule(str, choices=SITE_KINDS),
        "site": _Rule(str),
        "bytes": _byte_rule(),
        "blocks": _Rule(int, lo=0, hi=INT64 - 1),
    }


SITE_KINDS = ("site", "slack")
_RULES = {"BucketRecord": _bucket_rules, "SummaryRecord": _summary_rules, "SiteRecord": _site_rules}
_REQUIRED = {"BucketRecord": BUCKET_REQUIRED, "SummaryRecord": SUMMARY_REQUIRED,
             "SiteRecord": ("mode", "rank", "bucket", "kind", "site", "bytes")}
_FIX = "restore the file or re-run the capture that wrote it"


def _shorten(raw: str, limit: int = 40) -> str:
    """``raw`` quoted for a message, cut to ``limit`` characters."""
    text = repr(raw)
    return text if len(text) <= limit else f"{text[:limit - 4]}...' ({len(raw)} characters)"


def _json_shown(value: Any, limit: int = 40) -> str:
    """A JSON value for a message, cut to ``limit`` characters."""
    text = json.dumps(value)
    return text if len(text) <= limit else f"{text[:limit - 3]}... ({len(text)} characters)"


# ---------------------------------------------------------------- CSV encoding

def _hints(cls) -> dict:
    return get_type_hints(cls)


def _encode(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return repr(value)
    return str(value)


_INT_TEXT = re.compile(r"[+-]?[0-9]+")
_FLOAT_TEXT = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|[+-]?inf(?:inity)?|[+-]?nan",
                         re.IGNORECASE)


def _decode(raw: str, rule: _Rule, where: str) -> Any:
    """One CSV field -> its value, or a ReportError naming ``where`` (file, row and column)."""
    if rule.kind is str:
        if rule.choices and raw not in rule.choices:
            raise ReportError(f"{where}: unknown value {_shorten(raw)}; expected one of {', '.join(rule.choices)}; "
                              f"{_FIX}")
        return raw
    if raw == "":
        if rule.optional:
            return None
        raise ReportError(f"{where}: empty value where a number is required; {_FIX}")
    if rule.kind is int:
        if not _INT_TEXT.fullmatch(raw):
            what = "an integer" if len(raw) <= 64 and _FLOAT_TEXT.fullmatch(raw) else "a number"
            raise ReportError(f"{where}: {_shorten(raw)} is not {what}; {_FIX}")
        digits = raw.lstrip("+-").lstrip("0")
        if len(digits) > 19 or not -INT64 <= int(raw) < INT64:
            raise ReportError(f"{where}: {_shorten(raw)} does not fit in 64 bits; {_FIX}")
        value = int(raw)
    else:
        if len(raw) > 64 or not _FLOAT_TEXT.fullmatch(raw):
            raise ReportError(f"{where}: {_shorten(raw)} is not a number; {_FIX}")
        value = float(raw)
        if math.isnan(value) or (math.isinf(value) and not rule.inf):
            raise ReportError(f"{where}: {raw!r} is not a finite number; {_FIX}")
    if (rule.lo is not None and value < rule.lo) or (rule.hi is not None and value > rule.hi):
        if rule.lo is not None and rule.lo >= 0 and value < 0:
            raise ReportError(f"{where}: {raw} is negative, which this column cannot be; {_FIX}")
        span = f"{_num(rule.lo)} to {_num(rule.hi)}" if rule.hi is not None else f"at least {_num(rule.lo)}"
        raise ReportError(f"{where}: {_shorten(raw)} is out of range (expected {span}); {_FIX}")
    return value


def _num(x) -> str:
    return str(int(x)) if isinstance(x, (int, float)) and float(x).is_integer() else str(x)


def records_to_csv(records: Iterable[Any], cls, columns: Optional[Sequence[str]] = None) -> str:
    """CSV text of ``records``: every field of ``cls`` as a column, or only ``columns``."""
    names = [f.name for f in fields(cls) if columns is None or f.name in columns]
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(names)
    for r in records:
        writer.writerow([_encode(getattr(r, n)) for n in names])
    return buf.getvalue()


def read_report_text(path: Path) -> str:
    """A report file's text: UTF-8 (a leading byte-order mark is dropped), no binary bytes, a sane size."""
    path = Path(path)
    try:
        size = path.stat().st_size
        if not path.is_file():
            raise ReportError(f"{path} is not a regular file; {_FIX}")
        if size > MAX_FILE_BYTES:
            raise ReportError(f"{path} is {size} bytes, larger than any report file ({MAX_FILE_BYTES}); "
                              f"is it the right file? {_FIX}")
        data = path.read_bytes()
    except FileNotFoundError:
        raise ReportError(f"{path} is missing; a report directory holds run.json, buckets.csv and summary.csv: "
                          "is this a bcgprof report directory?") from None
    except OSError as e:
        raise ReportError(f"cannot read {path}: {e.strerror or e}") from None
    nul = data.find(b"\x00")
    if nul >= 0:
        raise ReportError(f"{path} holds binary data (a NUL byte at offset {nul}), not text; {_FIX}")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ReportError(f"{path} is not UTF-8 text (byte 0x{data[e.start]:02x} at offset {e.start}); {_FIX}") from None
    return text[1:] if text.startswith("\ufeff") else text


def _parse_csv(path: Path, text: str) -> tuple[list[str], list[tuple[int, list[str]]]]:
    """Header and (line number, fields) of every non-empty row; a malformed file is a ReportError."""
    reader = csv.reader(io.StringIO(text), strict=True)
    rows = []
    try:
        for row in reader:
            rows.append((reader.line_num, row))
    except csv.Error as e:
        line = reader.line_num
        if "unexpected end of data" in str(e):
            raise ReportError(f"{path}:{line} is corrupt: a quoted field is never closed; {_FIX}") from None
        raise ReportError(f"{path}:{line} is corrupt: {e}; {_FIX}") from None
    if not rows:
        raise ReportError(f"{path} is empty; {_FIX}")
    (_, header), body = rows[0], rows[1:]
    header = [h.strip() for h in header]
    return header, [(line, row) for line, row in body if row]


def read_csv_records(path: Path, cls) -> list:
    """Read a CSV written from ``cls``, checking every column it knows.

    Extra columns are ignored; a missing contract column, a value of the wrong type or
    out of range, or a malformed file is a :class:`ReportError` naming file, row and column.
    """
    path = Path(path)
    return [record for _, record in _read_rows(path, cls)]


def _read_rows(path: Path, cls) -> list[tuple[int, Any]]:
    header, body = _parse_csv(path, read_report_text(path))
    rules = _RULES[cls.__name__]()
    seen = set()
    for name in header:
        if name in rules and name in seen:
            raise ReportError(f"{path} is corrupt: column {name} appears twice in the header; {_FIX}")
        seen.add(name)
    missing = [n for n in _REQUIRED[cls.__name__] if n not in header]
    if missing:
        raise ReportError(f"{path} is corrupt: missing column(s) {', '.join(missing)}; {_FIX}")
    out = []
    for line, row in body:
        if len(row) != len(header):
            raise ReportError(f"{path}:{line} is corrupt: {len(row)} values for {len(header)} columns; {_FIX}")
        values = {}
        for name, raw in zip(header, row):
            if name in rules:
                values[name] = _decode(raw, rules[name], f"{path}: row {line}, column {name}")
        out.append((line, cls(**values)))
    return out


# ---------------------------------------------------------------- atomic files

def atomic_write_text(path: Path, text: str) -> None:
    """Write to a temporary file in the same directory, fsync, then rename over ``path``."""
    atomic_write_bytes(path, text.encode())


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """:func:`atomic_write_text` for bytes."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        os.fchmod(fd, 0o644)  # mkstemp makes 0600; a report is for everyone to read
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


# ---------------------------------------------------------------- summary

def summarize(records: list[BucketRecord]) -> list[SummaryRecord]:
    """Per-mode (and per-rank) totals, and the savings and floor ratios between modes.

    A mode's cost is its device-used total (what the capture took from the GPU,
    graph executables included); pool bytes are the pool after the last bucket.
    """
    groups: dict[tuple[str, int], list[BucketRecord]] = {}
    for r in records:
        groups.setdefault((r.mode, r.rank), []).append(r)
    out: list[SummaryRecord] = []
    for (mode, rank), rows in groups.items():
        rows = sorted(rows, key=lambda r: r.order)
        ok = [r for r in rows if r.status == "ok"]
        retained = sum(r.retained_output_bytes for r in rows)
        out.append(SummaryRecord(
            mode=mode, rank=str(rank), buckets=len(ok), failed=len(rows) - len(ok),
            segments=sum(r.segments for r in rows),
            pool_bytes=rows[-1].pool_bytes if rows else 0,
            torch_reserved_bytes=sum(r.torch_reserved_delta_bytes for r in rows),
            device_used_bytes=sum(r.device_used_delta_bytes for r in rows),
            non_torch_bytes=sum(r.non_torch_delta_bytes for r in rows),
            retained_output_bytes=retained,
            peak_transient_bytes=max((r.peak_transient_bytes for r in rows), default=0),
            capture_s=round(sum(r.warmup_ms + r.capture_ms for r in rows) / 1000.0, 3),
            **{name: _sum_or_none(getattr(r, name) for r in rows) for name in LEDGER_FIELDS},
        ))
    ranks = sorted({r.rank for r in records})
    if len(ranks) > 1:
        out.extend(_across_ranks(out))
    _fill_comparisons(out)
    order = {m: i for i, m in enumerate(MODES)}
    out.sort(key=lambda s: (order.get(s.mode, len(order)), _rank_key(s.rank)))
    return out


def _sum_or_none(values) -> Optional[int]:
    values = list(values)
    if not values or any(v is None for v in values):
        return None
    return sum(values)


def _rank_key(rank: str):
    return (1, rank) if not rank.isdigit() else (0, f"{int(rank):06d}")


def _across_ranks(per_rank: list[SummaryRecord]) -> list[SummaryRecord]:
    """For tensor-parallel runs: the largest rank (by device-used) and the sum, per mode."""
    out = []
    by_mode: dict[str, list[SummaryRecord]] = {}
    for s in per_rank:
        by_mode.setdefault(s.mode, []).append(s)
    summed = ("buckets", "failed", "segments", "pool_bytes", "torch_reserved_bytes", "device_used_bytes",
              "non_torch_bytes", "retained_output_bytes", "peak_transient_bytes")
    ledger = LEDGER_FIELDS
    for mode, rows in by_mode.items():
        worst = max(rows, key=lambda s: s.device_used_bytes)
        out.append(dataclasses.replace(worst, rank="max"))
        total = dataclasses.replace(worst, rank="sum")
        for name in summed:
            setattr(total, name, sum(getattr(s, name) for s in rows))
        for name in ledger:
            setattr(total, name, _sum_or_none(getattr(s, name) for s in rows))
        total.capture_s = max(s.capture_s for s in rows)
        out.append(total)
    return out


def _fill_comparisons(summary: list[SummaryRecord]) -> None:
    index = {(s.mode, s.rank): s for s in summary}
    for s in summary:
        base = index.get(("per-bucket", s.rank))
        floor = index.get(("floor", s.rank))
        if base is not None and s.mode != "per-bucket":
            s.saved_vs_per_bucket_bytes = base.device_used_bytes - s.device_used_bytes
            if base.device_used_bytes:
                s.saved_vs_per_bucket_pct = round(100.0 * s.saved_vs_per_bucket_bytes / base.device_used_bytes, 3)
        if floor is not None and floor.device_used_bytes > 0:
            s.ratio_to_floor = round(s.device_used_bytes / floor.device_used_bytes, 4)


# ---------------------------------------------------------------- directories

SUMMARY_FROM_FILE = "summary.csv"
SUMMARY_RECOMPUTED = "recomputed from buckets.csv"


@dataclass
class Report:
    path: Path
    run: RunInfo
    buckets: list[BucketRecord]
    summary: list[SummaryRecord]
    # Where ``summary`` comes from: summary.csv (a complete report, checked against buckets.csv),
    # or recomputed from buckets.csv (a report that did not complete).
    summary_source: str = SUMMARY_FROM_FILE
    sites: list[SiteRecord] = field(default_factory=list)  # sites.csv; empty when the report has none
    # the known columns each file holds (a report written before a column was appended lacks it)
    columns: dict = field(default_factory=dict)

    def modes(self) -> list[str]:
        seen = []
        for r in self.buckets:
            if r.mode not in seen:
                seen.append(r.mode)
        return seen


def run_info_to_json(run: RunInfo) -> str:
    return json.dumps(dataclasses.asdict(run), indent=2) + "\n"


def _reject_constant(name: str):
    raise ValueError(f"{name} is not allowed in a report")


# run.json fields: type, and whether a report must have it (the others take RunInfo's defaults)
_RUN_REQUIRED = ("schema_version", "model", "phase", "buckets", "modes", "tp", "status")


def _check_run(path: Path, data: dict) -> RunInfo:
    from bcgprof.buckets import MAX_BUCKETS, MAX_BUCKET_SIZE
    from bcgprof.options import GRAPH_KINDS, ORDERS, PHASES

    missing = [k for k in _RUN_REQUIRED if k not in data]
    if missing:
        raise ReportError(f"{path} is corrupt: missing field(s) {', '.join(missing)}; {_FIX}")

    def bad(name: str, what: str) -> ReportError:
        value = data[name]
        shown = _json_shown(value)
        return ReportError(f"{path}: field {name} must be {what}, got {shown}; {_FIX}")

    def is_int(v) -> bool:
        return isinstance(v, int) and not isinstance(v, bool)

    choices = {"phase": PHASES, "status": RUN_STATUSES, "graph": GRAPH_KINDS, "order": ORDERS}

    values = {}
    for f in fields(RunInfo):
        name = f.name
        if name not in data:
            continue
        value = data[name]
        if name == "schema_version":
            pass  # checked by read_run_info
        elif name == "buckets":
            if not isinstance(value, list) or not all(is_int(b) and 1 <= b <= MAX_BUCKET_SIZE for b in value):
                raise bad(name, f"a list of bucket sizes (integers from 1 to {MAX_BUCKET_SIZE})")
            if len(value) > MAX_BUCKETS:
                raise bad(name, f"a list of at most {MAX_BUCKETS} buckets")
            if len(set(value)) != len(value):
                raise bad(name, "a list of distinct bucket sizes")
        elif name == "modes":
            if not isinstance(value, list) or not all(isinstance(m, str) and m in MODES for m in value):
                raise bad(name, f"a list of modes ({', '.join(MODES)})")
            if len(set(value)) != len(value):
                raise bad(name, "a list of distinct modes")
        elif name == "tp":
            if not is_int(value) or not 1 <= value <= MAX_TP:
                raise bad(name, f"a positive integer (tensor-parallel ranks, at most {MAX_TP})")
        elif name in ("layers", "hidden_size"):
            if not is_int(value) or not 0 <= value < 2 ** 31:
                raise bad(name, "a non-negative integer")
        elif name in choices:
            if value not in choices[name]:
                raise bad(name, f"one of {', '.join(choices[name])}")
        elif name == "in_process":
            if not isinstance(value, bool):
                raise bad(name, "true or false")
        elif name == "extra":
            if not isinstance(value, dict):
                raise bad(name, "a JSON object")
        elif not isinstance(value, str):
            raise bad(name, "a string")
        values[name] = value
    values["schema_version"] = data["schema_version"]
    return RunInfo(**values)


def read_run_info(path: Path) -> RunInfo:
    path = Path(path)
    text = read_report_text(path)
    try:
        data = json.loads(text, parse_constant=_reject_constant)
    except json.JSONDecodeError as e:
        raise ReportError(f"{path} is corrupt (line {e.lineno}: {e.msg}); {_FIX}") from None
    except (ValueError, RecursionError) as e:
        raise ReportError(f"{path} is corrupt ({str(e).splitlines()[0][:120]}); {_FIX}") from None
    if not isinstance(data, dict):
        raise ReportError(f"{path} is corrupt: not a JSON object; {_FIX}")
    version = data.get("schema_version")
    if version != SCHEMA_VERSION or isinstance(version, bool):
        shown = _json_shown(version) if version is not None else "none"
        raise ReportError(
            f"{path} has report schema version {shown}; this bcgprof reads version {SCHEMA_VERSION}: "
            "read it with the bcgprof that wrote it"
        )
    return _check_run(path, data)


def _check_buckets(path: Path, run: RunInfo, rows: list[tuple[int, BucketRecord]]) -> None:
    where = path / "buckets.csv"
    seen: dict[tuple, int] = {}
    orders: dict[tuple, int] = {}
    for line, r in rows:
        if r.rank >= run.tp:
            raise ReportError(f"{where}: row {line}, column rank: rank {r.rank}, but run.json says tp {run.tp}; {_FIX}")
        key = (r.mode, r.rank, r.bucket)
        if key in seen:
            raise ReportError(f"{where}: row {line} repeats mode {r.mode} rank {r.rank} bucket {r.bucket} "
                              f"(first at row {seen[key]}); each bucket is captured once per mode: {_FIX}")
        seen[key] = line
        okey = (r.mode, r.rank, r.order)
        if okey in orders:
            raise ReportError(f"{where}: row {line}, column order: mode {r.mode} rank {r.rank} has order {r.order} "
                              f"twice (first at row {orders[okey]}); {_FIX}")
        orders[okey] = line


def _check_summary(path: Path, run: RunInfo, rows: list[tuple[int, SummaryRecord]], header: list[str],
                   computed: list[SummaryRecord]) -> None:
    """summary.csv is well formed; in a complete report it must say what buckets.csv gives."""
    where = path / "summary.csv"
    seen: dict[tuple, int] = {}
    for line, s in rows:
        if not (s.rank.isdigit() and len(s.rank) <= 6 and int(s.rank) < run.tp) and s.rank not in ("max", "sum"):
            raise ReportError(f"{where}: row {line}, column rank: {_shorten(s.rank)} is not a rank of this run "
                              f"(0 to {run.tp - 1}, max or sum); {_FIX}")
        if s.rank.isdigit():
            s.rank = str(int(s.rank))
        key = (s.mode, s.rank)
        if key in seen:
            raise ReportError(f"{where}: row {line} repeats mode {s.mode} rank {s.rank} (first at row {seen[key]}); "
                              f"{_FIX}")
        seen[key] = line
    if run.status != "complete":
        return
    fix = ("summary.csv and buckets.csv of a complete report must agree: restore both from the capture, "
           "or re-run it")
    mine = {(s.mode, s.rank): (line, s) for line, s in rows}
    for s in computed:
        if (s.mode, s.rank) not in mine:
            raise ReportError(f"{where} has no row for mode {s.mode} rank {s.rank}, which buckets.csv has; {fix}")
    wanted = {(s.mode, s.rank): s for s in computed}
    names = [f.name for f in fields(SummaryRecord) if f.name in header]
    for line, s in rows:
        other = wanted.get((s.mode, s.rank))
        if other is None:
            raise ReportError(f"{where}: row {line} (mode {s.mode} rank {s.rank}) has no rows in buckets.csv; {fix}")
        for name in names:
            a, b = getattr(s, name), getattr(other, name)
            same = a == b or (isinstance(a, float) and isinstance(b, float)
                              and math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9))
            if not same:
                raise ReportError(f"{where}: row {line}, column {name}: {_encode(a) or 'empty'}, but buckets.csv "
                                  f"gives {_encode(b) or 'empty'}; {fix}")


def read_report(path: str | Path) -> Report:
    """Read and check a report directory (all three files are required).

    Every column and field the views, compare and the gate use is checked. summary.csv must be
    well formed; in a complete report its rows must agree with buckets.csv (else a
    ReportError naming the first disagreement). In a report that did not complete, whose
    writer may have stopped between files, the summary is recomputed from buckets.csv and
    :attr:`Report.summary_source` says so.
    """
    path = Path(path)
    if not path.is_dir():
        raise ReportError(f"report {path} does not exist or is not a directory")
    run = read_run_info(path / "run.json")
    bucket_header, _ = _parse_csv(path / "buckets.csv", read_report_text(path / "buckets.csv"))
    bucket_rows = _read_rows(path / "buckets.csv", BucketRecord)
    _check_buckets(path, run, bucket_rows)
    summary_header, _ = _parse_csv(path / "summary.csv", read_report_text(path / "summary.csv"))
    summary_rows = _read_rows(path / "summary.csv", SummaryRecord)
    buckets = [r for _, r in bucket_rows]
    computed = summarize(buckets)
    _check_summary(path, run, summary_rows, summary_header, computed)
    source = SUMMARY_FROM_FILE if run.status == "complete" else SUMMARY_RECOMPUTED
    sites = read_csv_records(path / SITES_FILE, SiteRecord) if (path / SITES_FILE).exists() else []
    columns = {"buckets": [c for c in bucket_header if c in _bucket_rules()],
               "summary": [c for c in summary_header if c in _summary_rules()]}
    return Report(path, run, buckets, computed, summary_source=source, sites=sites, columns=columns)


def report_frames(report: Report) -> dict:
    """``{"buckets": DataFrame, "summary": DataFrame}`` of a report, columns as in the CSV files.

    Integer columns that may be empty (``graph_nodes``, ...) use pandas' nullable ``Int64``,
    so bytes stay integers.
    """
    import pandas as pd

    def frame(records: list, cls) -> "pd.DataFrame":
        hints = _hints(cls)
        df = pd.DataFrame([dataclasses.asdict(r) for r in records], columns=[f.name for f in fields(cls)])
        for name, hint in hints.items():
            base = next((a for a in getattr(hint, "__args__", ()) if a is not type(None)), hint)
            if base is int:
                df[name] = df[name].astype("Int64")
            elif base is float:
                df[name] = df[name].astype("Float64")
        return df

    return {"buckets": frame(report.buckets, BucketRecord), "summary": frame(report.summary, SummaryRecord)}


class ReportWriter:
    """Keeps a report directory valid after every row: each write replaces whole files atomically."""

    def __init__(self, path: str | Path, run: RunInfo, records: list[BucketRecord] | None = None):
        self.path = Path(path)
        self.run = run
        self.records: list[BucketRecord] = list(records or [])
        self.path.mkdir(parents=True, exist_ok=True)
        self._flush()

    @classmethod
    def reopen(cls, path: str | Path) -> "ReportWriter":
        """Continue a report another process started (each mode runs in its own process)."""
        report = read_report(path)
        return cls(path, report.run, report.buckets)

    def append(self, record: BucketRecord) -> None:
        self.records.append(record)
        self._flush()

    def extend(self, records: Iterable[BucketRecord]) -> None:
        """Append several rows (one bucket step of every rank) and rewrite the files once."""
        self.records.extend(records)
        self._flush()

    def update_run(self, **changes: Any) -> None:
        for k, v in changes.items():
            setattr(self.run, k, v)
        self._flush()

    def flush(self) -> None:
        """Rewrite the files from ``records`` and ``run`` (after changing a record in place, e.g. a replay check)."""
        self._flush()

    def add_sites(self, records: Iterable[SiteRecord]) -> None:
        """Add rows to sites.csv (kept beside what other modes' processes wrote there)."""
        records = list(records)
        if not records:
            return
        path = self.path / SITES_FILE
        existing = read_csv_records(path, SiteRecord) if path.exists() else []
        atomic_write_text(path, records_to_csv(existing + records, SiteRecord))

    def _flush(self) -> None:
        atomic_write_text(self.path / "buckets.csv", records_to_csv(self.records, BucketRecord))
        atomic_write_text(self.path / "summary.csv", records_to_csv(summarize(self.records), SummaryRecord))
        atomic_write_text(self.path / "run.json", run_info_to_json(self.run))
