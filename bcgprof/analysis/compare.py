"""Two reports side by side: per-mode totals and per-bucket deltas, largest growth first.

Everything here is a pure function of two :class:`~bcgprof.report.Report` objects:
summary rows are paired by (mode, rank) and bucket rows by (mode, rank, bucket).
`bcgprof compare` prints the pairs (bcgprof.render) and `bcgprof gate` judges them
(:func:`bcgprof.analysis.gate.gate_comparison`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from bcgprof.options import mode_index
from bcgprof.report import BucketRecord, Report, RunInfo, SummaryRecord
from bcgprof.report_format import pct_change

# Totals compared per mode, in the order they are shown.
TOTAL_METRICS = ("pool_bytes", "device_used_bytes", "non_torch_bytes", "torch_reserved_bytes",
                 "retained_output_bytes", "peak_transient_bytes", "segments", "capture_s")
# Per-bucket figures compared side by side.
BUCKET_METRICS = ("pool_delta_bytes", "device_used_delta_bytes", "non_torch_delta_bytes",
                  "retained_output_bytes", "peak_transient_bytes")

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
    causes: dict[str, Change] = field(default_factory=dict)  # explain's causes, when both reports have the ledger
    graphs: dict[str, Change] = field(default_factory=dict)  # segments and graph nodes of the mode's buckets


@dataclass
class BucketComparison:
    mode: str
    rank: int
    bucket: int
    presence: str  # both | old-only | new-only
    old: Optional[BucketRecord]
    new: Optional[BucketRecord]
    changes: dict[str, Change] = field(default_factory=dict)

    @property
    def growth(self) -> int:
        """Device-used growth of this bucket's capture (the sort key); 0 when one side is missing."""
        delta = self.changes["device_used_delta_bytes"].delta if self.changes else None
        return int(delta or 0)


@dataclass
class Comparison:
    old: Report
    new: Report
    totals: list[TotalComparison]
    buckets: list[BucketComparison]  # rows in both, largest growth first; then rows in one report only
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


def run_differences(old: RunInfo, new: RunInfo) -> list[str]:
    """What makes two reports measure different things: model, GPU, buckets, layers, dtype, phase, modes, TP,
    graph kind (breakable or full) and capture order.

    Each entry is one sentence naming both values. An empty list means the reports are comparable.
    """
    out = []
    if old.config_hash and new.config_hash:
        if old.config_hash != new.config_hash:
            out.append(f"model differs: {old.model} (config {old.config_hash}) vs {new.model} (config {new.config_hash})")
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
    for name, label in (("layers", "layers"), ("dtype", "dtype"), ("phase", "phase"), ("tp", "tensor-parallel ranks"),
                        ("graph", "graph kinds"), ("order", "capture orders")):
        a, b = getattr(old, name), getattr(new, name)
        if a != b:
            out.append(f"{label} differ: {a} vs {b}")
    if sorted(old.modes) != sorted(new.modes):
        out.append(f"modes differ: {','.join(old.modes) or 'none'} vs {','.join(new.modes) or 'none'}")
    return out


def _changes(old, new, metrics) -> dict[str, Change]:
    return {m: Change(m, getattr(old, m), getattr(new, m)) for m in metrics}


def _cause_changes(old: SummaryRecord, new: SummaryRecord) -> dict[str, Change]:
    from bcgprof.analysis.causes import summary_causes

    a, b = summary_causes(old), summary_causes(new)
    if a is None or b is None:
        return {}
    return {name: Change(name, a[name], b[name]) for name in a}


def _by_mode_rank(report: Report) -> dict[tuple[str, str], list[BucketRecord]]:
    groups: dict[tuple[str, str], list[BucketRecord]] = {}
    for r in report.buckets:
        groups.setdefault((r.mode, str(r.rank)), []).append(r)
    return groups


def _graph_total(groups: dict[tuple[str, str], list[BucketRecord]], key: tuple[str, str], name: str) -> Optional[int]:
    rows = groups.get(key, [])
    values = [getattr(r, name) for r in rows]
    return None if not rows or None in values else sum(values)


def compare_reports(old: Report, new: Report) -> Comparison:
    """Pair the summary rows by (mode, rank) and the bucket rows by (mode, rank, bucket)."""
    old_totals = {(s.mode, s.rank): s for s in old.summary}
    new_totals = {(s.mode, s.rank): s for s in new.summary}
    totals = []
    old_groups, new_groups = _by_mode_rank(old), _by_mode_rank(new)  # grouped once, not once per total
    for key in sorted(set(old_totals) | set(new_totals), key=lambda k: (mode_index(k[0]), _rank_sort(k[1]))):
        a, b = old_totals.get(key), new_totals.get(key)
        if a is not None and b is not None:
            total = TotalComparison(key[0], key[1], BOTH, a, b, _changes(a, b, TOTAL_METRICS))
            total.causes = _cause_changes(a, b)
            total.graphs = {name: Change(name, _graph_total(old_groups, key, name), _graph_total(new_groups, key, name))
                            for name in ("segments", "graph_nodes")}
        else:
            total = TotalComparison(key[0], key[1], OLD_ONLY if a is not None else NEW_ONLY, a, b)
        totals.append(total)

    old_rows = {(r.mode, r.rank, r.bucket): r for r in old.buckets}
    new_rows = {(r.mode, r.rank, r.bucket): r for r in new.buckets}
    paired: list[BucketComparison] = []
    one_sided: list[BucketComparison] = []
    for mode, rank, bucket in set(old_rows) | set(new_rows):
        ra, rb = old_rows.get((mode, rank, bucket)), new_rows.get((mode, rank, bucket))
        if ra is not None and rb is not None:
            paired.append(BucketComparison(mode, rank, bucket, BOTH, ra, rb, _changes(ra, rb, BUCKET_METRICS)))
        else:
            one_sided.append(BucketComparison(mode, rank, bucket, OLD_ONLY if ra is not None else NEW_ONLY, ra, rb))

    def pool_growth(c: BucketComparison) -> int:
        return int(c.changes["pool_delta_bytes"].delta or 0)

    paired.sort(key=lambda c: (-c.growth, -pool_growth(c), mode_index(c.mode), c.rank, c.bucket))
    one_sided.sort(key=lambda c: (mode_index(c.mode), c.rank, c.presence, c.bucket))
    return Comparison(old, new, totals, paired + one_sided, run_differences(old.run, new.run))
