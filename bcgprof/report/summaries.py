"""summary.csv's rows, derived from the bucket rows: per-mode (and per-rank) totals, the savings
against per-bucket mode and the ratio to the floor, both on device-used bytes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from operator import add, attrgetter
from typing import Optional

from bcgprof.options import REPORT_MODES
from bcgprof.report.schema import LEDGER_FIELDS, BucketRecord, SummaryRecord
from bcgprof.vocab import BucketStatus, Mode


def summarize(records: list[BucketRecord]) -> list[SummaryRecord]:
    """Per-mode (and per-rank) totals, and the savings and floor ratios between modes.

    A mode's cost is its device-used total (what the capture took from the GPU,
    graph executables included); pool bytes are the pool after the last bucket.
    """
    groups: dict[tuple[str, int], list[BucketRecord]] = {}
    for key, r in zip(map(attrgetter("mode", "rank"), records), records):
        groups.setdefault(key, []).append(r)
    out = [_totals(mode, rank, rows) for (mode, rank), rows in groups.items()]
    ranks = sorted({r.rank for r in records})
    if len(ranks) > 1:
        out.extend(across_ranks(out))
    fill_comparisons(out)
    order = {m: i for i, m in enumerate(REPORT_MODES)}
    out.sort(key=lambda s: (order.get(s.mode, len(order)), rank_key(s.rank)))
    return out


def _totals(mode: str, rank: int, rows: list[BucketRecord]) -> SummaryRecord:
    """One (mode, rank)'s row (sums through attrgetter: a report may hold 100,000 rows)."""
    # capture order: the pool after the last, times summed in order
    rows = sorted(rows, key=attrgetter("order"))

    def total(name: str) -> int:
        return sum(map(attrgetter(name), rows))

    ok = list(map(attrgetter("status"), rows)).count(BucketStatus.OK)
    # in capture order
    ms = sum(map(add, map(attrgetter("warmup_ms"), rows), map(attrgetter("capture_ms"), rows)))
    return SummaryRecord(
        mode=mode,
        rank=str(rank),
        buckets=ok,
        failed=len(rows) - ok,
        segments=total("segments"),
        pool_bytes=rows[-1].pool_bytes,
        torch_reserved_bytes=total("torch_reserved_delta_bytes"),
        device_used_bytes=total("device_used_delta_bytes"),
        non_torch_bytes=total("non_torch_delta_bytes"),
        retained_output_bytes=total("retained_output_bytes"),
        peak_transient_bytes=max(map(attrgetter("peak_transient_bytes"), rows)),
        capture_s=round(ms / 1000.0, 3),
        **{name: sum_or_none(map(attrgetter(name), rows)) for name in LEDGER_FIELDS},
    )


def sum_or_none(values: Iterable[Optional[int]]) -> Optional[int]:
    """The sum, or None when there is nothing to sum or any value is unknown."""
    items = list(values)
    if not items or None in items:
        return None
    return sum(items)  # type: ignore[arg-type]  # None is not among them


def rank_key(rank: str) -> tuple:
    """Sort key of a summary rank: numbers in order, then max and sum."""
    return (1, rank) if not rank.isdigit() else (0, f"{int(rank):06d}")


def across_ranks(per_rank: list[SummaryRecord]) -> list[SummaryRecord]:
    """For tensor-parallel runs: the largest rank (by device-used) and the sum, per mode."""
    out = []
    by_mode: dict[str, list[SummaryRecord]] = {}
    for s in per_rank:
        by_mode.setdefault(s.mode, []).append(s)
    summed = (
        "buckets",
        "failed",
        "segments",
        "pool_bytes",
        "torch_reserved_bytes",
        "device_used_bytes",
        "non_torch_bytes",
        "retained_output_bytes",
        "peak_transient_bytes",
    )
    for rows in by_mode.values():
        worst = max(rows, key=lambda s: s.device_used_bytes)
        out.append(dataclasses.replace(worst, rank="max"))
        total = dataclasses.replace(worst, rank="sum")
        for name in summed:
            setattr(total, name, sum(getattr(s, name) for s in rows))
        for name in LEDGER_FIELDS:
            setattr(total, name, sum_or_none(getattr(s, name) for s in rows))
        total.capture_s = max(s.capture_s for s in rows)
        out.append(total)
    return out


def fill_comparisons(summary: list[SummaryRecord]) -> None:
    """Set each row's saving against per-bucket mode and its ratio to the floor (same rank)."""
    index = {(s.mode, s.rank): s for s in summary}
    for s in summary:
        base = index.get((Mode.PER_BUCKET, s.rank))
        floor = index.get((Mode.FLOOR, s.rank))
        if base is not None and s.mode != Mode.PER_BUCKET:
            s.saved_vs_per_bucket_bytes = base.device_used_bytes - s.device_used_bytes
            if base.device_used_bytes:
                s.saved_vs_per_bucket_pct = round(
                    100.0 * s.saved_vs_per_bucket_bytes / base.device_used_bytes, 3
                )
        if floor is not None and floor.device_used_bytes > 0:
            s.ratio_to_floor = round(s.device_used_bytes / floor.device_used_bytes, 4)
