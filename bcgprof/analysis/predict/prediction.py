"""What a prediction is: each bucket's predicted row, each mode's totals and band, the notes, and
the JSON contract of ``bcgprof predict -f json``.

Both kinds of prediction build these (:mod:`.layers`: another layer count; :mod:`.lists`: another
bucket list), from reports read through the helpers here (complete, single-GPU, every bucket
captured). Invariant: no mode total below zero, no band without its point
(:mod:`bcgprof.analysis.predict.possible`, checked when a :class:`Prediction` is made). Cost: linear
in the rows.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Optional

from bcgprof.analysis.predict.bands import TOO_WIDE, too_wide
from bcgprof.analysis.predict.needs_free import (
    NeedsFree,
    needs_free_json,
)
from bcgprof.analysis.predict.possible import check_possible
from bcgprof.errors import PredictionError
from bcgprof.report import BucketRecord, Report

LABEL = "predicted, not measured"
MIB = 1 << 20
# the allocator's large segments come in 2 MiB steps, and so does NVML's count
SEGMENT_ROUND = 2 << 20


@dataclass
class BucketPrediction:
    mode: str
    bucket: int
    order: int
    segments: int
    graph_nodes: Optional[int]
    pool_bytes: int
    pool_delta_bytes: int
    outside_pool_delta_bytes: int
    non_torch_delta_bytes: int
    device_used_delta_bytes: int
    retained_output_bytes: int
    # not profiled: the profiled buckets it was drawn from
    interpolated_from: Optional[tuple[int, int]] = None


@dataclass
class ModePrediction:
    mode: str
    device_used_bytes: int
    pool_bytes: int
    non_torch_bytes: int
    low_bytes: int
    high_bytes: int
    buckets: list[BucketPrediction] = field(default_factory=list)
    # every event of the list's buckets replayed (bucket lists); False for layer predictions
    exact: bool = False
    band_source: str = ""  # what the band was derived from
    band_lists: int = 0  # held-out lists behind the band (bucket lists; 0: no evidence)
    band_max_abs_error_bytes: Optional[int] = None  # the largest residual among them
    # the free memory the list needs (bucket lists; None for layer predictions)
    needs_free: Optional[NeedsFree] = None
    # the pool with new segments placed the other way, if it differs
    other_placement_pool_bytes: Optional[int] = None

    @property
    def band_too_wide(self) -> bool:
        """A band wider than :data:`bcgprof.analysis.predict.bands.MAX_WIDTH` of its value: not a
        result."""
        return too_wide(self.low_bytes, self.high_bytes, self.device_used_bytes)


@dataclass
class Prediction:
    kind: str  # layers | buckets
    model: str
    gpu: str
    layers: int
    bucket_list: list[int]
    modes: list[ModePrediction]
    basis: list[str]  # the reports it was made from
    notes: list[str] = field(default_factory=list)
    label: str = LABEL

    def __post_init__(self) -> None:
        check_possible(self.modes)  # never a figure below zero, nor a band without its point

    def mode(self, name: str) -> Optional[ModePrediction]:
        return next((m for m in self.modes if m.mode == name), None)


def report_rows(report: Report, mode: str, rank: int = 0) -> list[BucketRecord]:
    """One mode's rows of one rank, in capture order."""
    return sorted(
        (r for r in report.buckets if r.mode == mode and r.rank == rank), key=lambda r: r.order
    )


def check_usable(report: Report) -> None:
    """Refuses a report a prediction cannot start from: incomplete, with failed buckets, or
    tensor-parallel."""
    if report.run.status != "complete":
        raise PredictionError(
            f"{report.path} is {report.run.status}; predict from complete reports only"
        )
    if any(r.status != "ok" for r in report.buckets):
        raise PredictionError(
            f"{report.path} has failed buckets; predict from a report whose buckets all captured"
        )
    if report.run.tp != 1:
        raise PredictionError(
            f"{report.path} is a tensor-parallel report; predict works on single-GPU reports"
        )


def mode_totals(mode: str, rows: list[BucketPrediction], band: float) -> ModePrediction:
    """Totals of a mode's predicted rows, ``band`` (rounded up) either way."""
    used, width = sum(r.device_used_delta_bytes for r in rows), math.ceil(band)
    return ModePrediction(
        mode=mode,
        device_used_bytes=used,
        pool_bytes=rows[-1].pool_bytes if rows else 0,
        non_torch_bytes=sum(r.non_torch_delta_bytes for r in rows),
        low_bytes=used - width,
        high_bytes=used + width,
        buckets=rows,
    )


NO_PEAKS = (
    "{path} does not record each bucket's device peak (device_peak_delta_bytes); re-capture it "
    "with this "
    "bcgprof to check --free"
)


def round_up(n: int, step: int = SEGMENT_ROUND) -> int:
    return -(-n // step) * step


def too_wide_notes(modes: Sequence[ModePrediction], why: str = "") -> list[str]:
    """A note for each mode whose band is too wide to be a result."""
    return [
        f"{m.mode}: the band ({(m.high_bytes - m.low_bytes) / (1 << 20):.0f} MiB) is "
        f"{TOO_WIDE}{why}"
        for m in modes
        if m.band_too_wide
    ]


def prediction_json(pred: Prediction) -> dict:
    """The JSON contract of `bcgprof predict -f json`."""
    return {
        "kind": pred.kind,
        "label": pred.label,
        "model": pred.model,
        "gpu": pred.gpu,
        "layers": pred.layers,
        "buckets": pred.bucket_list,
        "basis": pred.basis,
        "notes": pred.notes,
        "modes": [
            {
                "mode": m.mode,
                "device_used_bytes": m.device_used_bytes,
                "pool_bytes": m.pool_bytes,
                "non_torch_bytes": m.non_torch_bytes,
                "low_bytes": m.low_bytes,
                "high_bytes": m.high_bytes,
                "exact": m.exact,
                "band_source": m.band_source,
                "band_low_bytes": m.low_bytes,
                "band_high_bytes": m.high_bytes,
                "band_lists": m.band_lists,
                "band_max_abs_error_bytes": m.band_max_abs_error_bytes,
                "band_too_wide": m.band_too_wide,
                "other_placement_pool_bytes": m.other_placement_pool_bytes,
                **needs_free_json(m.needs_free),
                "rows": [
                    {
                        "bucket": r.bucket,
                        "order": r.order,
                        "segments": r.segments,
                        "graph_nodes": r.graph_nodes,
                        "pool_bytes": r.pool_bytes,
                        "pool_delta_bytes": r.pool_delta_bytes,
                        "outside_pool_delta_bytes": r.outside_pool_delta_bytes,
                        "non_torch_delta_bytes": r.non_torch_delta_bytes,
                        "device_used_delta_bytes": r.device_used_delta_bytes,
                        "retained_output_bytes": r.retained_output_bytes,
                        "interpolated_from": list(r.interpolated_from)
                        if r.interpolated_from
                        else None,
                    }
                    for r in m.buckets
                ],
            }
            for m in pred.modes
        ],
    }
