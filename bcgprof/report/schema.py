"""The report schema: one record type per file, and what each column may hold.

A report is a directory holding ``buckets.csv`` (one :class:`BucketRecord` per mode, rank and
bucket; per mode, phase, rank and bucket in a report of several phases), ``summary.csv`` (one
:class:`SummaryRecord` per mode and rank, derived from the bucket rows), ``run.json`` (one
:class:`RunInfo`) and, when the floor mode recorded them, ``sites.csv`` (:class:`SiteRecord`).
The dataclass fields are the columns; a :class:`Rule` per column says what a valid value is.
Imports nothing heavy.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Optional

from bcgprof.buckets import MAX_BUCKET_SIZE, MAX_BUCKETS
from bcgprof.options import PHASES, REPORT_MODES, STATUSES
from bcgprof.report.limits import INT64, MAX_BYTES, MAX_MS, MAX_TP
from bcgprof.vocab import (
    Executables,
    Experts,
    GraphKind,
    Moe,
    Order,
    Phase,
    RunStatus,
    Source,
    WarmupOutput,
    Weights,
)

SCHEMA_VERSION = 1  # a report of one phase
# A report of several phases captured into one pool (``capture --phase prefill,decode``): run.json
# gains ``phases`` and ``phase_buckets``, buckets.csv a ``phase`` column. A one-phase report keeps
# version 1 and its files byte for byte; a reader made before version 2 refuses version 2.
PHASED_SCHEMA_VERSION = 2
SCHEMA_VERSIONS = (SCHEMA_VERSION, PHASED_SCHEMA_VERSION)
RUN_FILE = "run.json"
BUCKETS_FILE = "buckets.csv"
SUMMARY_FILE = "summary.csv"
SITES_FILE = "sites.csv"
# `capture --num-layers 2,4` writes one report per count: <out>/layers-2, <out>/layers-4
LAYER_REPORT_PREFIX = "layers-"


def layer_report_name(layers: int) -> str:
    """The directory name of the report captured at ``layers`` layers, under a `--num-layers`
    capture's --out."""
    return f"{LAYER_REPORT_PREFIX}{layers}"


def layer_count_of(name: str) -> Optional[int]:
    """The layer count a directory name written by :func:`layer_report_name` stands for; None for
    any other name."""
    digits = name[len(LAYER_REPORT_PREFIX) :] if name.startswith(LAYER_REPORT_PREFIX) else ""
    return int(digits) if len(digits) <= 6 and digits.isascii() and digits.isdigit() else None


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
    # highest allocation during warm-up+capture above the level before
    peak_transient_bytes: int = 0
    warmup_ms: float = 0.0
    capture_ms: float = 0.0
    replay_max_abs_diff: Optional[float] = None  # None when not checked
    rank: int = 0
    process_used_delta_bytes: Optional[int] = None  # NVML per-process figure, when available
    # sampler's device-used peak above the level before
    device_peak_delta_bytes: Optional[int] = None
    free_bytes: Optional[int] = None  # device free memory after the bucket (or at the failure)
    detail: str = ""  # why a bucket is oom/error
    # The ledger (empty in reports written before it): pool_live + pool_free + outside_pool
    # + non_torch == device_used_delta, exactly. Pool figures are read from the block states.
    # growth of allocated bytes inside the pool's segments
    pool_live_delta_bytes: Optional[int] = None
    pool_free_delta_bytes: Optional[int] = None  # growth of unused bytes the pool's segments hold
    outside_pool_delta_bytes: Optional[int] = None  # torch-reserved growth outside the pool
    # the part of retained_output_bytes that lies in the pool
    pool_output_bytes: Optional[int] = None
    # the process that captured the bucket (bcgprof record); empty from capture
    pid: Optional[int] = None
    # Graph executables this bucket's capture instantiated (per-segment: one per segment;
    # per-signature: one per signature no earlier segment of the mode had), and the distinct
    # signatures of its segments (per-signature only). Empty in reports written before them, in
    # recordings and for failed buckets.
    executables: Optional[int] = None
    signatures: Optional[int] = None
    # the phase of the row in a report of several phases (schema 2), whose rows are keyed by
    # (mode, phase, rank, bucket); empty, and no column in buckets.csv, in a one-phase report
    phase: str = ""


@dataclass
class SummaryRecord:
    """Per-mode totals, derived from the bucket rows by
    :func:`~bcgprof.report.summaries.summarize`."""

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


LEDGER_FIELDS = (
    "pool_live_delta_bytes",
    "pool_free_delta_bytes",
    "outside_pool_delta_bytes",
    "pool_output_bytes",
)


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


# Each capture choice that changes what a capture allocates (RunInfo.capture_choices), and the value
# a report written before the choice existed reads as.
CAPTURE_CHOICES: dict[str, str] = {
    "experts": Experts.BF16.value,
    "moe": Moe.FUSED_BF16.value,
    "executables": Executables.PER_SEGMENT.value,
    "warmup_output": WarmupOutput.HELD.value,
}
CHOICE_LABELS = {  # each capture choice as messages name it
    "experts": "expert weights",
    "moe": "MoE workspaces",
    "executables": "graph executables",
    "warmup_output": "warm-up outputs",
}


@dataclass
class RunInfo:
    """run.json: what was captured, on what, and how the run stands."""

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
    weights: str = Weights.DUMMY
    phase: str = Phase.PREFILL
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
    status: str = RunStatus.RUNNING  # running | complete | partial | failed | interrupted
    message: str = ""
    extra: dict = field(default_factory=dict)
    # breakable | full (reports written before this field: breakable)
    graph: str = GraphKind.BREAKABLE
    order: str = Order.LARGEST_FIRST  # largest-first | smallest-first
    experts: str = Experts.BF16  # bf16 | packed (reports written before this field: bf16)
    source: str = Source.CAPTURE  # capture | record (reports written before this field: capture)
    executables: str = Executables.PER_SEGMENT  # per-segment | per-signature (older: per-segment)
    moe: str = Moe.FUSED_BF16  # fused-bf16 | sglang-mxfp4 (reports before this field: fused-bf16)
    # Schema 2 only (several phases in one pool; absent from a one-phase run.json): the phases in
    # capture order, and each one's bucket list (``buckets`` is then their distinct union).
    phases: list = field(default_factory=list)
    phase_buckets: dict = field(default_factory=dict)

    @property
    def phased(self) -> bool:
        """Whether the report holds several phases captured into one pool (schema 2)."""
        return len(self.phases) > 1

    def capture_choices(self) -> dict[str, str]:
        """The choices beyond model, GPU, depth and list that change what a capture allocates, as
        text: expert weights, MoE workspace, graph executables and warm-up outputs (a report
        written before a field existed reads as that field's default). Two captures that differ in
        any of them are not evidence for each other."""
        return {
            "experts": str(self.experts),
            "moe": str(self.moe),
            "executables": str(self.executables),
            # any value but freed reads as held, as everywhere else
            "warmup_output": (
                WarmupOutput.FREED.value if self.warmup_outputs_freed else WarmupOutput.HELD.value
            ),
        }

    @property
    def warmup_outputs_freed(self) -> bool:
        """Whether each eager warm-up run's output was freed before the next (reports that do not
        say held it)."""
        return self.extra.get("warmup_output", WarmupOutput.HELD) == WarmupOutput.FREED


def run_info_dict(run: RunInfo) -> dict:
    """run.json's fields as a dict: a one-phase report's without the fields of schema 2, so its
    run.json (and what views print of it) is the same as before schema 2 existed."""
    data = asdict(run)
    if not run.phased:
        for name in PHASED_RUN_FIELDS:
            data.pop(name)
    return data


def bucket_columns_written(run: RunInfo) -> Optional[tuple[str, ...]]:
    """The columns buckets.csv holds for ``run``: all of them (None) in a report of several
    phases, all but ``phase`` in a one-phase report."""
    return None if run.phased else ONE_PHASE_BUCKET_COLUMNS


SUMMARY_FROM_FILE = "summary.csv"
SUMMARY_RECOMPUTED = "recomputed from buckets.csv"


@dataclass
class Report:
    """A report directory, read and checked by :func:`~bcgprof.report.read.read_report`."""

    path: Path
    run: RunInfo
    buckets: list[BucketRecord]
    summary: list[SummaryRecord]
    # Where ``summary`` comes from: summary.csv (a complete report, checked against buckets.csv),
    # or recomputed from buckets.csv (a report that did not complete).
    summary_source: str = SUMMARY_FROM_FILE
    # sites.csv; empty when the report has none
    sites: list[SiteRecord] = field(default_factory=list)
    # the known columns each file holds (a report written before a column was appended lacks it)
    columns: dict = field(default_factory=dict)

    def modes(self) -> list[str]:
        seen: list[str] = []
        for r in self.buckets:
            if r.mode not in seen:
                seen.append(r.mode)
        return seen


# ---------------------------------------------------------------- what a valid value is

# The columns every schema-1 report has had since the first release; the ones after them were
# appended later, and a report without them reads them as "not recorded" (rank 0, empty).
BUCKET_REQUIRED = (
    "mode",
    "bucket",
    "order",
    "status",
    "segments",
    "graph_nodes",
    "pool_bytes",
    "pool_delta_bytes",
    "retained_output_bytes",
    "torch_allocated_delta_bytes",
    "torch_reserved_delta_bytes",
    "device_used_delta_bytes",
    "non_torch_delta_bytes",
    "peak_transient_bytes",
    "warmup_ms",
    "capture_ms",
    "replay_max_abs_diff",
)
SUMMARY_REQUIRED = (
    "mode",
    "buckets",
    "segments",
    "pool_bytes",
    "torch_reserved_bytes",
    "device_used_bytes",
    "non_torch_bytes",
    "retained_output_bytes",
    "peak_transient_bytes",
    "capture_s",
    "saved_vs_per_bucket_bytes",
    "saved_vs_per_bucket_pct",
    "ratio_to_floor",
)
SITE_REQUIRED = ("mode", "rank", "bucket", "kind", "site", "bytes")
SITE_KINDS = ("site", "slack")


@dataclass(frozen=True)
class Rule:
    """What one CSV column may hold."""

    kind: type  # int, float or str
    optional: bool = False  # may be empty (None)
    lo: Optional[float] = None
    hi: Optional[float] = None
    choices: tuple = ()
    inf: bool = False  # float column that may hold inf (never nan)


def byte_rule(optional: bool = False, signed: bool = False) -> Rule:
    return Rule(int, optional, -MAX_BYTES if signed else 0, MAX_BYTES)


BUCKET_RULES: dict[str, Rule] = {
    "mode": Rule(str, choices=REPORT_MODES),
    "bucket": Rule(int, lo=1, hi=MAX_BUCKET_SIZE),
    "order": Rule(int, lo=0, hi=MAX_BUCKETS - 1),
    "status": Rule(str, choices=STATUSES),
    "segments": Rule(int, lo=0, hi=INT64 - 1),
    "graph_nodes": Rule(int, optional=True, lo=0, hi=INT64 - 1),
    "pool_bytes": byte_rule(),
    "pool_delta_bytes": byte_rule(signed=True),
    "retained_output_bytes": byte_rule(),
    "torch_allocated_delta_bytes": byte_rule(signed=True),
    "torch_reserved_delta_bytes": byte_rule(signed=True),
    "device_used_delta_bytes": byte_rule(signed=True),
    "non_torch_delta_bytes": byte_rule(signed=True),
    "peak_transient_bytes": byte_rule(),
    "warmup_ms": Rule(float, lo=0, hi=MAX_MS),
    "capture_ms": Rule(float, lo=0, hi=MAX_MS),
    "replay_max_abs_diff": Rule(float, optional=True, lo=0, inf=True),  # inf: the replay gave NaN
    "rank": Rule(int, lo=0, hi=MAX_TP - 1),
    "process_used_delta_bytes": byte_rule(optional=True, signed=True),
    "device_peak_delta_bytes": byte_rule(optional=True, signed=True),
    "free_bytes": byte_rule(optional=True),
    "detail": Rule(str),
    **{name: byte_rule(optional=True, signed=True) for name in LEDGER_FIELDS},
    "pid": Rule(int, optional=True, lo=0, hi=2**31 - 1),
    "executables": Rule(int, optional=True, lo=0, hi=INT64 - 1),
    "signatures": Rule(int, optional=True, lo=0, hi=INT64 - 1),
    "phase": Rule(str, choices=("", *PHASES)),
}
# run.json fields and buckets.csv columns a one-phase report never writes
PHASED_RUN_FIELDS = ("phases", "phase_buckets")
ONE_PHASE_BUCKET_COLUMNS = tuple(f.name for f in fields(BucketRecord) if f.name != "phase")


def total_rule(optional: bool = False, signed: bool = False) -> Rule:
    """A sum of bucket figures over a mode (and, in a ``sum`` row, over its ranks): any 64-bit
    integer."""
    return Rule(int, optional, -(INT64 - 1) if signed else 0, INT64 - 1)


SUMMARY_RULES: dict[str, Rule] = {
    "mode": Rule(str, choices=REPORT_MODES),
    "buckets": Rule(int, lo=0, hi=MAX_BUCKETS * MAX_TP),
    "segments": Rule(int, lo=0, hi=INT64 - 1),
    "pool_bytes": total_rule(),  # a sum in a ``sum`` row
    "torch_reserved_bytes": total_rule(signed=True),
    "device_used_bytes": total_rule(signed=True),
    "non_torch_bytes": total_rule(signed=True),
    "retained_output_bytes": total_rule(),
    "peak_transient_bytes": total_rule(),
    "capture_s": Rule(float, lo=0, hi=MAX_MS * MAX_BUCKETS * MAX_TP),
    "saved_vs_per_bucket_bytes": total_rule(optional=True, signed=True),
    "saved_vs_per_bucket_pct": Rule(float, optional=True),
    "ratio_to_floor": Rule(float, optional=True),
    "rank": Rule(str),  # a rank number, or max / sum (checked with the row)
    "failed": Rule(int, lo=0, hi=MAX_BUCKETS * MAX_TP),
    **{name: total_rule(optional=True, signed=True) for name in LEDGER_FIELDS},
}

SITE_RULES: dict[str, Rule] = {
    "mode": Rule(str, choices=REPORT_MODES),
    "rank": Rule(int, lo=0, hi=MAX_TP - 1),
    "bucket": Rule(int, lo=1, hi=MAX_BUCKET_SIZE),
    "kind": Rule(str, choices=SITE_KINDS),
    "site": Rule(str),
    "bytes": byte_rule(),
    "blocks": Rule(int, lo=0, hi=INT64 - 1),
}

# record type -> (its column rules, the columns a file of it must have)
RULES: dict[type, dict[str, Rule]] = {
    BucketRecord: BUCKET_RULES,
    SummaryRecord: SUMMARY_RULES,
    SiteRecord: SITE_RULES,
}
REQUIRED: dict[type, tuple[str, ...]] = {
    BucketRecord: BUCKET_REQUIRED,
    SummaryRecord: SUMMARY_REQUIRED,
    SiteRecord: SITE_REQUIRED,
}
