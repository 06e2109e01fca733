"""What each engine's estimator would reserve for a capture, against what the capture measured.

Engines reserve memory for their CUDA graphs before capturing them (it is taken from the KV-cache
budget), from a formula. A profile holds what its list's capture really took (device used, NVML) and
the free memory it needed when its first bucket's warm-up began
(:mod:`bcgprof.analysis.predict.needs_free`). This module computes each engine's reserve for the
profile's list, and its error against both.

The estimators, each written from its engine's source (file, function and version in
:data:`ESTIMATORS`):

* ``vllm``: vLLM V1's ``GPUModelRunner.profile_cudagraph_memory`` captures the first two descriptors
  of a mode's capture list, which vLLM sorts largest first, into a temporary pool, reading the
  device's free memory (``mem_get_info``) before and after each warm-up and capture. The reserve is
  the first sample plus ``max(second sample, 1 MiB)`` for each of the other ``n - 1`` graphs (with
  PIECEWISE and FULL lists, the larger first sample plus every mode's extrapolated tail; a profile
  is one list).
* ``sglang``: SGLang's ``reserve_for_graph_mb``, a function of the list and the server's settings
  only: decode ``2 MiB x max batch size`` (DP attention adds ``3 MiB x max_bs x dp``, and ``1.5 MiB
  x max_bs x dp`` more above 300; DeepEP's all-to-all buffers 2 GiB), prefill ``8 MiB x number of
  buckets`` (1.5 GiB flat with an MLA backend; a breakable prefill graph with DeepEP 1 GiB more). MB
  there are MiB.
* ``tokenspeed``: tokenspeed's ``_estimate_family`` captures the four largest entries of a ladder;
  the reserve is the first sample, the three measured marginals, and their median for each entry not
  captured.
* ``tokenspeed-capped``: its later revision: samples floored at zero, the rate the ceiling of the
  marginals' mean, and the unsampled tail capped at what the probe measured.

The probes' samples are read off the profile's rows in capture order (largest first, as both probes
capture): the first is the first bucket's need (its sampled NVML peak above the level before it:
nothing empties the allocator's cache between a probe's captures, so the warm-up's cached blocks are
still held when the sample is read), each later one is what that bucket kept (its warm-up reuses the
first's cached blocks). A list captured smallest first does not measure what a probe would, so those
estimators are not reproduced there (a list is largest first when each row's bucket is smaller than
the one before). "Would OOM" means the reserve is below the free memory the capture needed, taking
the reserve as all that is free when capture begins.

Invariant: an estimate depends only on the mode's rows in capture order, the report's phase, graph
kind and list, and the SGLang settings given; nothing here reads or imports torch. Cost: O(buckets)
per mode.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from statistics import median
from typing import Optional

from bcgprof.analysis.predict.needs_free import bucket_need_bytes, measured_needs_free_bytes
from bcgprof.errors import BcgprofError
from bcgprof.report.schema import BucketRecord, Report
from bcgprof.vocab import BucketStatus, GraphKind, Phase, RunStatus

MIB = 1024**2

VLLM = "vllm"
SGLANG = "sglang"
TOKENSPEED = "tokenspeed"
TOKENSPEED_CAPPED = "tokenspeed-capped"

VLLM_PROBES = 2  # descriptors captured per mode (descs[:2])
VLLM_MIN_PER_GRAPH = MIB  # "at least 1 MiB per graph for driver overhead"
TOKENSPEED_PROBES = 4  # PROBE_CAPTURES_PER_FAMILY / PROBE_ENTRIES_PER_LADDER


@dataclass(frozen=True)
class Estimator:
    name: str
    engine: str
    source: str  # file, function and the version read


ESTIMATORS = (
    Estimator(
        VLLM,
        "vLLM",
        "vllm/v1/worker/gpu_model_runner.py GPUModelRunner.profile_cudagraph_memory, read at "
        "commit 000fc94b (vLLM V1; taken from the KV-cache budget by default since v0.21.0)",
    ),
    Estimator(
        SGLANG,
        "SGLang",
        "python/sglang/srt/arg_groups/memory_hook.py reserve_for_graph_mb and "
        "reserve_for_deepep_a2a_mb, read at commit 031ed82d (server_args.py before the arg_groups "
        "split)",
    ),
    Estimator(
        TOKENSPEED,
        "tokenspeed",
        "python/tokenspeed/runtime/execution/cudagraph_memory.py "
        "_estimate_family, read at commit 88ad05a8",
    ),
    Estimator(
        TOKENSPEED_CAPPED,
        "tokenspeed",
        "python/tokenspeed/runtime/execution/cudagraph_memory.py "
        "_estimate_series, read at commit 1c520ff3",
    ),
)


class AuditError(BcgprofError):
    """A report the audit cannot use (exit 2)."""


# ---------------------------------------------------------------- the formulas, from their samples


def vllm_estimate(samples: Sequence[int], count: int) -> int:
    """vLLM's reserve for one mode's list of ``count`` graphs from its probe's free-memory drops
    (the first one or two descriptors, largest first): the first drop, plus the second (at least
    1 MiB) per other graph."""
    if count < 1 or not 1 <= len(samples) <= min(VLLM_PROBES, count):
        raise ValueError(f"vLLM's probe takes min(2, {count}) samples, not {len(samples)}")
    per_graph = max(samples[1] if len(samples) > 1 else 0, VLLM_MIN_PER_GRAPH)
    return samples[0] + per_graph * (count - 1)


def tokenspeed_estimate(samples: Sequence[int], count: int) -> int:
    """tokenspeed's reserve (median revision) for a ladder of ``count`` entries from the drops of
    its first (largest) entries: the first, every measured marginal, and the marginals' median
    (floored at zero) for each entry the probe did not capture; the total floored at zero."""
    _check_ladder(samples, count)
    first, *marginals = samples
    rate = max(median(marginals), 0) if marginals else 0
    total = first + sum(marginals) + rate * (count - len(samples))
    return max(round(total), 0)


def tokenspeed_capped_estimate(samples: Sequence[int], count: int) -> int:
    """tokenspeed's reserve (capped revision): samples floored at zero, the rate the ceiling of the
    marginals' mean, and the unsampled tail at most what the probe measured."""
    _check_ladder(samples, count)
    first, *marginals = (max(s, 0) for s in samples)
    rate = -(-sum(marginals) // len(marginals)) if marginals else 0
    measured = first + sum(marginals)
    return measured + min(rate * (count - len(samples)), measured)


def _check_ladder(samples: Sequence[int], count: int) -> None:
    if count < 1 or not min(2, count) <= len(samples) <= count:
        raise ValueError(
            f"tokenspeed's probe takes between min(2, {count}) and {count} samples, "
            f"not {len(samples)}"
        )


@dataclass(frozen=True)
class SglangSettings:
    """The server settings ``reserve_for_graph_mb`` reads besides the list."""

    mla: bool = False  # an MLA attention backend (DeepSeek-style models)
    dp_attention: Optional[int] = None  # DP attention's dp size; None: off
    deepep: bool = False  # --moe-a2a-backend deepep


def sglang_terms(
    phase: str, buckets: Sequence[int], graph: str, settings: SglangSettings
) -> list[tuple[str, float]]:
    """SGLang's graph reserve for the graphs of one phase, as its terms: (how it is made, MiB).
    SGLang's "MB" are MiB of device memory; the terms of the other phase are not counted."""
    if not buckets:
        raise ValueError("SGLang's reserve needs a list of at least one bucket")
    if phase == Phase.DECODE:
        max_bs = max(buckets)
        terms = [(f"{max_bs} x 2", max_bs * 2.0)]
        if settings.dp_attention is not None:
            dp = settings.dp_attention
            terms.append((f"{max_bs} x {dp} x 3", max_bs * dp * 3.0))
            if max_bs > 300:
                terms.append((f"{max_bs} x {dp} x 1.5", max_bs * dp * 1.5))
        if settings.deepep:
            # reserve_for_deepep_a2a_mb, on top of the floor
            terms.append(("2048 (DeepEP)", 2048.0))
        return terms
    terms = (
        [("1536 (MLA)", 1536.0)] if settings.mla else [(f"{len(buckets)} x 8", len(buckets) * 8.0)]
    )
    if settings.deepep and graph == GraphKind.BREAKABLE:
        terms.append(("1024 (DeepEP)", 1024.0))
    return terms


def sglang_estimate(
    phase: str, buckets: Sequence[int], graph: str, settings: SglangSettings
) -> int:
    """SGLang's graph reserve in bytes."""
    return round(sum(mib for _, mib in sglang_terms(phase, buckets, graph, settings)) * MIB)


# ---------------------------------------------------------------- against a profile


def probe_samples(rows: Sequence[BucketRecord], probes: int) -> list[int]:
    """The free-memory drops a probe of the first ``probes`` buckets would read, from a mode's rows
    in capture order (largest first): the first bucket's need, then what each later one kept."""
    taken = list(rows[:probes])
    return [
        bucket_need_bytes(r) if i == 0 else r.device_used_delta_bytes for i, r in enumerate(taken)
    ]


@dataclass
class EstimateRow:
    estimator: str
    engine: str
    estimate_bytes: Optional[int]  # None: not reproducible from this report (``note`` says why)
    basis: str = ""  # how the figure is made, in MiB
    error_bytes: Optional[int] = None  # estimate - measured device used
    error_pct: Optional[float] = None
    free_margin_bytes: Optional[int] = None  # estimate - needs free
    oom: Optional[bool] = None  # the estimate is below the free memory the capture needed
    note: str = ""


@dataclass
class ModeAudit:
    mode: str
    rank: int
    buckets: int
    largest: int
    measured_bytes: int  # device used by the capture (NVML), the sum of every bucket's
    needs_free_bytes: Optional[int]  # free memory the capture needed when its first warm-up began
    pool_bytes: int
    non_torch_bytes: int  # what NVML saw and the allocator did not: graph executables and the like
    estimates: list[EstimateRow] = field(default_factory=list)


@dataclass
class Audit:
    report: Report
    settings: SglangSettings
    modes: list[ModeAudit] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _mib(n: float) -> str:
    return f"{n / MIB:,.0f}"


def _rows(report: Report, mode: str, rank: int) -> list[BucketRecord]:
    return sorted(
        (r for r in report.buckets if r.mode == mode and r.rank == rank), key=lambda r: r.order
    )


def _check_usable(report: Report) -> None:
    if report.run.status != RunStatus.COMPLETE:
        raise AuditError(f"{report.path} is {report.run.status}; audit a complete report")
    if any(r.status != BucketStatus.OK for r in report.buckets):
        raise AuditError(
            f"{report.path} has buckets that did not capture; audit a report whose buckets all "
            "captured"
        )


def _probe_row(name: str, engine: str, rows: list[BucketRecord]) -> EstimateRow:
    """vLLM's or tokenspeed's estimate from the rows' first buckets, or why it cannot be had."""
    if any(a.bucket <= b.bucket for a, b in pairwise(rows)):
        return EstimateRow(
            name,
            engine,
            None,
            note="not captured largest first: the probe captures the largest "
            "buckets first, into an empty pool, which this list's rows do not measure",
        )
    if rows[0].device_peak_delta_bytes is None:
        return EstimateRow(
            name,
            engine,
            None,
            note="the report does not record the first bucket's device peak, "
            "which the probe's first sample holds",
        )
    n = len(rows)
    if name == VLLM:
        samples = probe_samples(rows, VLLM_PROBES)
        per_graph = max(samples[1] if len(samples) > 1 else 0, VLLM_MIN_PER_GRAPH)
        extra = f" + {n - 1} x {_mib(per_graph)}" if n > 1 else ""
        return EstimateRow(
            name, engine, vllm_estimate(samples, n), basis=f"{_mib(samples[0])}{extra}"
        )
    samples = probe_samples(rows, TOKENSPEED_PROBES)
    rest = n - len(samples)
    if name == TOKENSPEED:
        rate = max(median(samples[1:]), 0) if len(samples) > 1 else 0
        extra = f", then {rest} x {_mib(rate)} (median)" if rest else ""
        return EstimateRow(
            name,
            engine,
            tokenspeed_estimate(samples, n),
            basis=" + ".join(map(_mib, samples)) + extra,
        )
    estimate = tokenspeed_capped_estimate(samples, n)
    measured = sum(max(s, 0) for s in samples)
    projected = estimate - measured
    if not rest:
        return EstimateRow(name, engine, estimate, basis=f"{_mib(measured)} measured")
    how = (
        f"{_mib(projected)} (capped)"
        if projected == measured
        else f"{rest} x {_mib(projected // rest)} (mean)"
    )
    return EstimateRow(name, engine, estimate, basis=f"{_mib(measured)} measured, then {how}")


def _judge(row: EstimateRow, measured: int, needs_free: Optional[int]) -> EstimateRow:
    if row.estimate_bytes is None:
        return row
    row.error_bytes = row.estimate_bytes - measured
    row.error_pct = 100.0 * row.error_bytes / measured if measured else None
    if needs_free is not None:
        row.free_margin_bytes = row.estimate_bytes - needs_free
        row.oom = row.estimate_bytes < needs_free
    return row


def audit_report(
    report: Report, mode: Optional[str] = None, settings: SglangSettings = SglangSettings()
) -> Audit:
    """Every estimator against each mode (or ``mode`` alone) of ``report``, rank by rank."""
    _check_usable(report)
    modes = report.modes()
    if mode is not None and mode not in modes:
        raise AuditError(f"{report.path} has no mode {mode!r}; it holds {', '.join(modes)}")
    run = report.run
    out = Audit(report, settings)
    ranks = sorted({r.rank for r in report.buckets})
    for m in [mode] if mode is not None else modes:
        for rank in ranks:
            rows = _rows(report, m, rank)
            if not rows:
                continue
            needs_free = measured_needs_free_bytes(rows)
            measured = sum(r.device_used_delta_bytes for r in rows)
            audit = ModeAudit(
                m,
                rank,
                len(rows),
                max(r.bucket for r in rows),
                measured,
                needs_free,
                rows[-1].pool_bytes,
                sum(r.non_torch_delta_bytes for r in rows),
            )
            buckets = [r.bucket for r in rows]
            terms = sglang_terms(run.phase, buckets, run.graph, settings)
            audit.estimates = [
                _probe_row(VLLM, "vLLM", rows),
                EstimateRow(
                    SGLANG,
                    "SGLang",
                    sglang_estimate(run.phase, buckets, run.graph, settings),
                    basis=" + ".join(label for label, _ in terms) + " MiB",
                ),
                _probe_row(TOKENSPEED, "tokenspeed", rows),
                _probe_row(TOKENSPEED_CAPPED, "tokenspeed", rows),
            ]
            for row in audit.estimates:
                _judge(row, measured, needs_free)
            out.modes.append(audit)
    if any(a.needs_free_bytes is None for a in out.modes):
        out.notes.append(
            "the report does not record each bucket's device peak: the free memory a capture "
            "needed is unknown (-), so is whether an estimate would have let it run out"
        )
    return out


def audit_json(a: Audit) -> dict:
    """The audit as a JSON document: bytes as integers."""
    run = a.report.run
    return {
        "report": str(a.report.path),
        "model": run.model,
        "gpu": run.gpu_name,
        "phase": run.phase,
        "graph": run.graph,
        "order": run.order,
        "buckets": list(run.buckets),
        "sglang_settings": {
            "mla": a.settings.mla,
            "dp_attention": a.settings.dp_attention,
            "deepep": a.settings.deepep,
        },
        "estimators": [
            {"name": e.name, "engine": e.engine, "source": e.source} for e in ESTIMATORS
        ],
        "modes": [
            {
                "mode": m.mode,
                "rank": m.rank,
                "buckets": m.buckets,
                "largest": m.largest,
                "measured_bytes": m.measured_bytes,
                "needs_free_bytes": m.needs_free_bytes,
                "pool_bytes": m.pool_bytes,
                "non_torch_bytes": m.non_torch_bytes,
                "estimates": [
                    {
                        "estimator": e.estimator,
                        "engine": e.engine,
                        "estimate_bytes": e.estimate_bytes,
                        "error_bytes": e.error_bytes,
                        "error_pct": e.error_pct,
                        "free_margin_bytes": e.free_margin_bytes,
                        "oom": e.oom,
                        "basis": e.basis,
                        "note": e.note,
                    }
                    for e in m.estimates
                ],
            }
            for m in a.modes
        ],
        "notes": list(a.notes),
    }
