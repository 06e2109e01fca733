"""Two reports side by side: per-mode totals and bucket deltas, largest growth first.

Everything here is a pure function of two :class:`~bcgprof.report.Report` objects:
summary rows are paired by (mode, rank) and bucket rows by (mode, rank, bucket).
`bcgprof compare` prints the pairs (bcgprof.render) and `bcgprof gate` judges them
(:func:`bcgprof.analysis.gate.gate_comparison`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from functools import cached_property
from operator import attrgetter, itemgetter
from typing import Optional

from bcgprof.errors import BcgprofError
from bcgprof.options import mode_index
from bcgprof.report import BucketRecord, Report, RunInfo, SummaryRecord
from bcgprof.report.schema import CHOICE_LABELS
from bcgprof.report_format import pct_change

# Totals compared per mode, in the order they are shown.
TOTAL_METRICS = (
    "pool_bytes",
    "device_used_bytes",
    "non_torch_bytes",
    "torch_reserved_bytes",
    "retained_output_bytes",
    "peak_transient_bytes",
    "segments",
    "capture_s",
)
# Per-bucket figures compared side by side.
BUCKET_METRICS = (
    "pool_delta_bytes",
    "device_used_delta_bytes",
    "non_torch_delta_bytes",
    "retained_output_bytes",
    "peak_transient_bytes",
)

BOTH, OLD_ONLY, NEW_ONLY = "both", "old-only", "new-only"


@dataclass
class Change:
    """One figure in both reports; ``delta`` > 0 is growth."""

    metric: str
    old: Optional[float]
    new: Optional[float]

    @property
    def delta(self) -> Optional[float]:
        if self.old is None or self.new is None:
            return None
        return self.new - self.old

    @property
    def pct(self) -> Optional[float]:
        return pct_change(self.old, self.new)


@dataclass
class TotalComparison:
    mode: str
    rank: str
    presence: str  # both | old-only | new-only
    old: Optional[SummaryRecord]
    new: Optional[SummaryRecord]
    changes: dict[str, Change] = field(default_factory=dict)
    # explain's causes, when both reports have the ledger
    causes: dict[str, Change] = field(default_factory=dict)
    # segments and graph nodes of the mode's buckets
    graphs: dict[str, Change] = field(default_factory=dict)


@dataclass
class BucketComparison:
    mode: str
    rank: int
    bucket: int
    presence: str  # both | old-only | new-only
    old: Optional[BucketRecord]
    new: Optional[BucketRecord]

    @cached_property
    def changes(self) -> dict[str, Change]:
        """Each of :data:`BUCKET_METRICS` in both reports; empty when a side is missing. Built when
        first asked for: a comparison holds 100,000 pairs, and sorting, gating and drawing them read
        the two records' figures directly."""
        if self.old is None or self.new is None:
            return {}
        return _changes(self.old, self.new, BUCKET_METRICS)

    @property
    def growth(self) -> int:
        """Device-used growth of this bucket's capture (the sort key); 0 when one side is
        missing."""
        if self.old is None or self.new is None:
            return 0
        return _growth(self.old.device_used_delta_bytes, self.new.device_used_delta_bytes)


@dataclass
class Comparison:
    old: Report
    new: Report
    totals: list[TotalComparison]
    # rows in both, largest growth first; then rows in one report only
    buckets: list[BucketComparison]
    differences: list[str]  # run.json facts that differ (model, GPU, bucket list, ...)

    @property
    def multi_rank(self) -> bool:
        return any(t.rank not in ("0",) for t in self.totals)


def _rank_sort(rank: str):
    return (0, int(rank), "") if rank.isdigit() else (1, 0, rank)


def _fmt_list(values: list) -> str:
    if len(values) > 8:
        return f"{len(values)} buckets {values[0]}..{values[-1]}"
    return ",".join(str(v) for v in values) or "none"


def _warmup(run: RunInfo) -> Optional[str]:
    """A report's eager warm-up: its runs per bucket and whether each run's output was held during
    the next (reports written before ``--warmup-output`` held it); None when run.json does not
    say."""
    runs = run.extra.get("warmup")
    if runs is None:
        return None
    return f"{runs} run(s) a bucket, outputs {run.extra.get('warmup_output', 'held')}"


def run_differences(old: RunInfo, new: RunInfo) -> list[str]:
    """What makes two reports measure different things: model, GPU, buckets, layers, dtype, phase,
    modes, TP, graph kind (breakable or full), capture order, expert weights, executables (per
    segment or per signature), the MoE's workspace (fused-bf16 or sglang-mxfp4) and the eager
    warm-up (its peaks are part of the figures).

    Each entry is one sentence naming both values. An empty list means the reports are comparable.
    """
    out = []
    if old.config_hash and new.config_hash:
        if old.config_hash != new.config_hash:
            out.append(
                f"model differs: {old.model} (config {old.config_hash}) vs {new.model} (config "
                f"{new.config_hash})"
            )
    elif old.model != new.model:
        out.append(f"model differs: {old.model} vs {new.model}")
    if old.gpu_name != new.gpu_name:
        out.append(f"GPU differs: {old.gpu_name or 'unknown'} vs {new.gpu_name or 'unknown'}")
    if list(old.buckets) != list(new.buckets):
        only_old = sorted(set(old.buckets) - set(new.buckets))
        only_new = sorted(set(new.buckets) - set(old.buckets))
        detail = []
        if only_old:
            detail.append(f"only in old: {_fmt_list(only_old)}")
        if only_new:
            detail.append(f"only in new: {_fmt_list(only_new)}")
        out.append(f"bucket list differs ({'; '.join(detail) or 'same sizes, different order'})")
    for name, label in (
        ("layers", "layers"),
        ("dtype", "dtype"),
        ("phase", "phase"),
        ("tp", "tensor-parallel ranks"),
        ("graph", "graph kinds"),
        ("order", "capture orders"),
        ("experts", CHOICE_LABELS["experts"]),
        ("executables", CHOICE_LABELS["executables"]),
        ("moe", CHOICE_LABELS["moe"]),
    ):
        a, b = getattr(old, name), getattr(new, name)
        if a != b:
            out.append(f"{label} differ: {a} vs {b}")
    if sorted(old.modes) != sorted(new.modes):
        out.append(
            f"modes differ: {','.join(old.modes) or 'none'} vs {','.join(new.modes) or 'none'}"
        )
    warm_old, warm_new = _warmup(old), _warmup(new)
    if warm_old is not None and warm_new is not None and warm_old != warm_new:
        out.append(f"warm-up differs: {warm_old} vs {warm_new}")
    return out


def _changes(old, new, metrics) -> dict[str, Change]:
    return {m: Change(m, getattr(old, m), getattr(new, m)) for m in metrics}


def _growth(old: Optional[float], new: Optional[float]) -> int:
    """``int(Change(...).delta or 0)``: the growth a pair is sorted by."""
    return 0 if old is None or new is None else int((new - old) or 0)


def _cause_changes(old: SummaryRecord, new: SummaryRecord) -> dict[str, Change]:
    from bcgprof.analysis.causes import summary_causes

    a, b = summary_causes(old), summary_causes(new)
    if a is None or b is None:
        return {}
    return {name: Change(name, a[name], b[name]) for name in a}


def _by_mode_rank(report: Report) -> dict[tuple[str, str], list[BucketRecord]]:
    groups: dict[tuple[str, int], list[BucketRecord]] = {}
    for key, r in zip(map(attrgetter("mode", "rank"), report.buckets), report.buckets):
        groups.setdefault(key, []).append(r)
    return {(mode, str(rank)): rows for (mode, rank), rows in groups.items()}


def _graph_total(
    groups: dict[tuple[str, str], list[BucketRecord]], key: tuple[str, str], name: str
) -> Optional[int]:
    rows = groups.get(key, [])
    values = [getattr(r, name) for r in rows]
    return None if not rows or None in values else sum(values)


def paired_modes(old: Report, new: Report, pairs: list[str]) -> Report:
    """``old`` with each ``OLD=NEW`` pair's mode renamed to the new report's, so that a recording's
    group (``graphs``, ``prefill``) is compared with a capture's mode (``per-bucket``) or another
    group."""
    mapping: dict[str, str] = {}
    for text in pairs:
        a, sep, b = text.partition("=")
        a, b = a.strip(), b.strip()
        if not sep or not a or not b:
            raise BcgprofError(
                f"--pair {text!r}: give OLD=NEW, a mode of the old report and one of the new"
            )
        if a not in old.modes() or b not in new.modes():
            raise BcgprofError(
                f"--pair {text!r}: the old report's modes are {', '.join(old.modes())} and the new "
                f"one's {', '.join(new.modes())}"
            )
        if a in mapping:
            raise BcgprofError(
                f"--pair: {a} is paired twice; give each mode of the old report once"
            )
        mapping[a] = b
    if not mapping:
        return old
    if len(set(mapping.values())) != len(mapping) or set(mapping.values()) & (
        set(old.modes()) - set(mapping)
    ):
        raise BcgprofError(
            "--pair: two modes of the old report would then share one name; pair each with "
            "a mode no other old mode keeps"
        )
    return dataclasses.replace(
        old,
        buckets=[dataclasses.replace(r, mode=mapping.get(r.mode, r.mode)) for r in old.buckets],
        summary=[dataclasses.replace(r, mode=mapping.get(r.mode, r.mode)) for r in old.summary],
    )


def compare_reports(old: Report, new: Report) -> Comparison:
    """Pair the summary rows by (mode, rank) and the bucket rows by (mode, rank, bucket)."""
    old_totals = {(s.mode, s.rank): s for s in old.summary}
    new_totals = {(s.mode, s.rank): s for s in new.summary}
    totals = []
    # grouped once, not once per total
    old_groups, new_groups = _by_mode_rank(old), _by_mode_rank(new)
    for key in sorted(
        set(old_totals) | set(new_totals), key=lambda k: (mode_index(k[0]), _rank_sort(k[1]))
    ):
        a, b = old_totals.get(key), new_totals.get(key)
        if a is not None and b is not None:
            total = TotalComparison(key[0], key[1], BOTH, a, b, _changes(a, b, TOTAL_METRICS))
            total.causes = _cause_changes(a, b)
            total.graphs = {
                name: Change(
                    name, _graph_total(old_groups, key, name), _graph_total(new_groups, key, name)
                )
                for name in ("segments", "graph_nodes")
            }
        else:
            total = TotalComparison(key[0], key[1], OLD_ONLY if a is not None else NEW_ONLY, a, b)
        totals.append(total)

    row_key = attrgetter("mode", "rank", "bucket")
    old_rows = dict(zip(map(row_key, old.buckets), old.buckets))
    new_rows = dict(zip(map(row_key, new.buckets), new.buckets))
    modes = {m: mode_index(m) for m in {k[0] for k in old_rows} | {k[0] for k in new_rows}}
    paired: list[tuple[tuple, BucketComparison]] = []  # (sort key, pair): largest growth first
    one_sided: list[BucketComparison] = []
    for (mode, rank, bucket), ra in old_rows.items():
        rb = new_rows.get((mode, rank, bucket))
        if rb is None:
            one_sided.append(BucketComparison(mode, rank, bucket, OLD_ONLY, ra, None))
            continue
        pair = BucketComparison(mode, rank, bucket, BOTH, ra, rb)
        # BucketComparison.growth, then the pool's
        growth = _growth(ra.device_used_delta_bytes, rb.device_used_delta_bytes)
        paired.append(
            (
                (
                    -growth,
                    -_growth(ra.pool_delta_bytes, rb.pool_delta_bytes),
                    modes[mode],
                    rank,
                    bucket,
                ),
                pair,
            )
        )
    for (mode, rank, bucket), rb in new_rows.items():
        if (mode, rank, bucket) not in old_rows:
            one_sided.append(BucketComparison(mode, rank, bucket, NEW_ONLY, None, rb))
    paired.sort(key=itemgetter(0))  # the keys differ: (mode, rank, bucket) is one pair's
    one_sided.sort(key=lambda c: (modes[c.mode], c.rank, c.presence, c.bucket))
    return Comparison(
        old, new, totals, [c for _, c in paired] + one_sided, run_differences(old.run, new.run)
    )
