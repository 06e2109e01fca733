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
import os
import tempfile
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Iterable, Optional, get_type_hints

from bcgprof.errors import ReportError
from bcgprof.options import MODES, STATUSES

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


# ---------------------------------------------------------------- CSV encoding

def _hints(cls) -> dict:
    return get_type_hints(cls)


def _encode(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return repr(value)
    return str(value)


def _decode(raw: str, hint: Any, where: str) -> Any:
    optional = getattr(hint, "__args__", None) and type(None) in hint.__args__
    base = next((a for a in getattr(hint, "__args__", ()) if a is not type(None)), hint)
    if raw == "":
        if optional:
            return None
        if base is str:
            return ""
        raise ReportError(f"{where}: empty value where a number is required")
    try:
        if base is int:
            return int(raw)
        if base is float:
            return float(raw)
    except ValueError:
        raise ReportError(f"{where}: {raw!r} is not a number") from None
    return raw


def records_to_csv(records: Iterable[Any], cls) -> str:
    names = [f.name for f in fields(cls)]
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(names)
    for r in records:
        writer.writerow([_encode(getattr(r, n)) for n in names])
    return buf.getvalue()


def read_csv_records(path: Path, cls) -> list:
    """Read a CSV written from ``cls``; extra columns are ignored, missing required ones fail."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise ReportError(f"{path} is missing; is this a bcgprof report directory?") from None
    except OSError as e:
        raise ReportError(f"cannot read {path}: {e.strerror}") from None
    rows = list(csv.reader(io.StringIO(text)))
    if not rows:
        raise ReportError(f"{path} is empty; re-run the capture that wrote it")
    header, body = rows[0], rows[1:]
    hints = _hints(cls)
    required = [f.name for f in fields(cls)
                if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
    missing = [n for n in required if n not in header]
    if missing:
        raise ReportError(f"{path} is corrupt: missing column(s) {', '.join(missing)}")
    known = {f.name for f in fields(cls)}
    out = []
    for lineno, row in enumerate(body, start=2):
        if not row:
            continue
        if len(row) != len(header):
            raise ReportError(f"{path}:{lineno} is corrupt: {len(row)} values for {len(header)} columns")
        values = {}
        for name, raw in zip(header, row):
            if name in known:
                values[name] = _decode(raw, hints[name], f"{path}:{lineno} column {name}")
        out.append(cls(**values))
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

@dataclass
class Report:
    path: Path
    run: RunInfo
    buckets: list[BucketRecord]
    summary: list[SummaryRecord]
    sites: list[SiteRecord] = field(default_factory=list)  # sites.csv; empty when the report has none

    def modes(self) -> list[str]:
        seen = []
        for r in self.buckets:
            if r.mode not in seen:
                seen.append(r.mode)
        return seen


def run_info_to_json(run: RunInfo) -> str:
    return json.dumps(dataclasses.asdict(run), indent=2) + "\n"


def read_run_info(path: Path) -> RunInfo:
    try:
        data = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise ReportError(f"{path} is missing; is this a bcgprof report directory?") from None
    except (OSError, json.JSONDecodeError) as e:
        raise ReportError(f"{path} is corrupt ({e}); re-run the capture that wrote it") from None
    if not isinstance(data, dict):
        raise ReportError(f"{path} is corrupt: not a JSON object")
    version = data.get("schema_version")
    if version != SCHEMA_VERSION:
        raise ReportError(
            f"{path} has report schema version {version!r}; this bcgprof reads version {SCHEMA_VERSION}"
        )
    known = {f.name for f in fields(RunInfo)}
    return RunInfo(**{k: v for k, v in data.items() if k in known})


def read_report(path: str | Path) -> Report:
    path = Path(path)
    if not path.is_dir():
        raise ReportError(f"report {path} does not exist or is not a directory")
    run = read_run_info(path / "run.json")
    buckets = read_csv_records(path / "buckets.csv", BucketRecord)
    for r in buckets:
        if r.mode not in MODES or r.status not in STATUSES:
            raise ReportError(f"{path / 'buckets.csv'} is corrupt: unknown mode {r.mode!r} or status {r.status!r}")
    # summary.csv is derived; recompute so that a report cut off between writes still reads.
    sites = read_csv_records(path / SITES_FILE, SiteRecord) if (path / SITES_FILE).exists() else []
    return Report(path, run, buckets, summarize(buckets), sites)


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
