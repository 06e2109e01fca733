"""The CI memory-regression gate: baseline vs current, as pure decisions.

A figure regresses when it grew by more than BOTH its tolerances: more than ``rel``
of the baseline value AND more than ``abs_bytes``. Growth exactly at the larger of
the two passes. A shrink beyond both tolerances is reported as an improvement and
never fails.

Figures checked, per mode and per tensor-parallel rank:

* totals (summary rows): ``pool_bytes`` (graph pool after the last bucket) and
  ``device_used_bytes`` (NVML device-used growth summed over the buckets);
* with ``per_bucket``: every bucket's ``pool_delta_bytes`` and ``device_used_delta_bytes``;
* always: a bucket that was ``ok`` in the baseline and is ``oom``/``error`` (or has
  no row although the current run meant to capture it) in the current report.

Reports that measure different things (model config, GPU, bucket list, layers,
dtype, phase, modes, TP ranks) are unusable input (:class:`GateMismatchError`,
exit 2) unless ``allow_mismatch``; then only the common buckets are compared and
the result says so.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Optional

from bcgprof.compare import run_differences
from bcgprof.errors import BcgprofError
from bcgprof.report import MODES, BucketRecord, Report
from bcgprof.report_format import MIB, fmt_bytes, fmt_pct, parse_bytes, pct_change

TOTAL_METRICS = ("pool_bytes", "device_used_bytes")
BUCKET_METRICS = ("pool_delta_bytes", "device_used_delta_bytes")
METRICS = TOTAL_METRICS + BUCKET_METRICS
# What a per-bucket delta sums up to in the mode's total (used when totals come from common buckets).
_TOTAL_FROM_BUCKETS = {"pool_bytes": "pool_delta_bytes", "device_used_bytes": "device_used_delta_bytes"}

DEFAULT_REL_TOL = 0.01
DEFAULT_ABS_TOL_BYTES = 16 * MIB

PASS, REGRESSION, IMPROVEMENT = "pass", "regression", "improvement"
EXIT_PASS, EXIT_REGRESSION = 0, 1


class GateMismatchError(BcgprofError):
    """The two reports measure different things; comparing them would mean nothing."""

    exit_code = 2


@dataclass(frozen=True)
class Tolerance:
    rel: float = DEFAULT_REL_TOL  # fraction of the baseline value
    abs_bytes: int = DEFAULT_ABS_TOL_BYTES

    def limit(self, baseline: int) -> float:
        """The largest growth that still passes: both tolerances must be exceeded to fail."""
        return max(float(self.abs_bytes), self.rel * abs(baseline))

    def describe(self) -> str:
        return f"{self.rel * 100:g}% and {fmt_bytes(self.abs_bytes)}"


@dataclass
class GateOptions:
    default: Tolerance = field(default_factory=Tolerance)
    per_metric: dict[str, Tolerance] = field(default_factory=dict)
    per_bucket: bool = False
    allow_mismatch: bool = False

    def tolerance(self, metric: str) -> Tolerance:
        return self.per_metric.get(metric, self.default)


@dataclass
class GateCheck:
    """One decision. ``bucket`` is None for a mode total; ``metric`` is ``status`` for a failed bucket."""

    mode: str
    rank: str
    bucket: Optional[int]
    metric: str
    baseline: Optional[int]
    current: Optional[int]
    verdict: str  # pass | regression | improvement
    limit: Optional[float] = None  # largest growth that passes
    detail: str = ""
    tensor_parallel: bool = False  # from a multi-rank comparison: name rank 0 too


    @property
    def delta(self) -> Optional[int]:
        if self.baseline is None or self.current is None:
            return None
        return self.current - self.baseline

    @property
    def pct(self) -> Optional[float]:
        return pct_change(self.baseline, self.current)

    @property
    def where(self) -> str:
        rank = f" rank {self.rank}" if self.rank != "0" or self.tensor_parallel else ""
        return f"{self.mode}{rank}" + (f" bucket {self.bucket}" if self.bucket is not None else " total")


@dataclass
class GateResult:
    baseline: Report
    current: Report
    options: GateOptions
    checks: list[GateCheck]
    notes: list[str]  # mismatches allowed, buckets left out, how totals were taken

    @property
    def regressions(self) -> list[GateCheck]:
        return [c for c in self.checks if c.verdict == REGRESSION]

    @property
    def improvements(self) -> list[GateCheck]:
        return [c for c in self.checks if c.verdict == IMPROVEMENT]

    @property
    def passed(self) -> bool:
        return not self.regressions

    @property
    def exit_code(self) -> int:
        return EXIT_PASS if self.passed else EXIT_REGRESSION

    @property
    def multi_rank(self) -> bool:
        return any(c.rank != "0" for c in self.checks)

    def worst(self) -> Optional[GateCheck]:
        """The regression with the largest growth over its limit (the worst rank of a TP run)."""
        sized = [c for c in self.regressions if c.delta is not None and c.limit is not None]
        if sized:
            return max(sized, key=lambda c: c.delta - c.limit)
        return self.regressions[0] if self.regressions else None


# ---------------------------------------------------------------- tolerances

def parse_rel(text: str, *, what: str = "relative tolerance") -> float:
    """``1%`` or ``0.01`` -> 0.01."""
    raw = str(text).strip()
    try:
        value = float(raw[:-1]) / 100.0 if raw.endswith("%") else float(raw)
    except ValueError:
        raise BcgprofError(f"{what} {text!r} is not a number; write e.g. 0.01 or 1%") from None
    if value < 0:
        raise BcgprofError(f"{what} {text!r} is negative; tolerances are >= 0")
    return value


def parse_tolerance(text: str, default: Tolerance) -> tuple[str, Tolerance]:
    """``METRIC=REL:ABS`` (``pool_bytes=0.5%:8MiB``; either side may be left empty) -> (metric, tolerance)."""
    m = re.fullmatch(r"\s*([a-z_]+)\s*=\s*([^:]*?)\s*(?::\s*(.*?)\s*)?", text or "")
    if not m:
        raise BcgprofError(f"--tol {text!r}: write METRIC=REL:ABS, e.g. pool_bytes=0.5%:8MiB")
    metric, rel, abs_text = m.group(1), m.group(2), m.group(3)
    if metric not in METRICS:
        raise BcgprofError(f"--tol {text!r}: unknown metric {metric!r}; use one of {', '.join(METRICS)}")
    if not rel and not abs_text:
        raise BcgprofError(f"--tol {text!r} sets nothing; write METRIC=REL:ABS, e.g. {metric}=0.5%:8MiB")
    return metric, Tolerance(
        rel=parse_rel(rel, what=f"--tol {text!r}: relative tolerance") if rel else default.rel,
        abs_bytes=parse_bytes(abs_text, what=f"--tol {text!r}: absolute tolerance") if abs_text else default.abs_bytes,
    )


def judge(baseline: int, current: int, tol: Tolerance) -> str:
    """pass | regression | improvement for one figure."""
    delta = current - baseline
    limit = tol.limit(baseline)
    if delta > limit:
        return REGRESSION
    if -delta > limit:
        return IMPROVEMENT
    return PASS


# ---------------------------------------------------------------- the gate

def _metric_check(mode, rank, bucket, metric, base: int, cur: int, options: GateOptions) -> GateCheck:
    tol = options.tolerance(metric)
    verdict = judge(base, cur, tol)
    detail = ""
    if verdict != PASS:
        word = "grew" if cur > base else "shrank"
        pct = pct_change(base, cur)
        detail = (f"{word} {fmt_bytes(abs(cur - base))}" + (f" ({fmt_pct(pct, signed=True)})" if pct is not None else "")
                  + f", beyond {tol.describe()}")
    return GateCheck(mode, rank, bucket, metric, base, cur, verdict, tol.limit(base), detail)


def _rows(report: Report) -> dict[tuple[str, int], dict[int, BucketRecord]]:
    out: dict[tuple[str, int], dict[int, BucketRecord]] = {}
    for r in report.buckets:
        out.setdefault((r.mode, r.rank), {})[r.bucket] = r
    return out


def gate_reports(baseline: Report, current: Report, options: GateOptions | None = None) -> GateResult:
    """Decide pass/regression for every checked figure; raise :class:`GateMismatchError` for incomparable reports."""
    options = options or GateOptions()
    notes: list[str] = []
    differences = run_differences(baseline.run, current.run)
    if differences and not options.allow_mismatch:
        raise GateMismatchError(
            f"baseline {baseline.path} and current {current.path} are not comparable: {'; '.join(differences)}; "
            "capture both with the same settings, or pass --allow-mismatch to compare the common buckets"
        )
    notes.extend(f"allowed mismatch: {d}" for d in differences)
    if current.run.status != "complete":
        notes.append(f"current report status is {current.run.status!r}"
                     + (f" ({current.run.message})" if current.run.message else ""))

    base_rows, cur_rows = _rows(baseline), _rows(current)
    base_summary = {(s.mode, s.rank): s for s in baseline.summary}
    cur_summary = {(s.mode, s.rank): s for s in current.summary}
    intended = set(current.run.buckets)
    checks: list[GateCheck] = []

    def order(key):
        return (MODES.index(key[0]) if key[0] in MODES else len(MODES), key[1])

    for key in sorted(set(base_rows) | set(cur_rows), key=order):
        mode, rank = key
        rank_label = str(rank)
        where = f"{mode}" + (f" rank {rank}" if rank else "")
        if key not in cur_rows or key not in base_rows:
            side = "baseline" if key in base_rows else "current"
            if side == "baseline" and mode in current.run.modes and not differences:
                # The current run meant to capture this mode but produced nothing for it.
                checks.append(GateCheck(mode, rank_label, None, "status", None, None, REGRESSION,
                                        detail=f"no rows in the current report (baseline had {len(base_rows[key])})"))
            else:
                notes.append(f"{where} is only in the {side} report; not compared")
            continue
        b_rows, c_rows = base_rows[key], cur_rows[key]
        common = sorted(set(b_rows) & set(c_rows))
        for bucket in sorted(set(b_rows) - set(c_rows)):
            if bucket in intended and b_rows[bucket].status == "ok":
                checks.append(GateCheck(mode, rank_label, bucket, "status", None, None, REGRESSION,
                                        detail="no row in the current report although its run lists this bucket"))
            else:
                notes.append(f"{where} bucket {bucket} is only in the baseline; not compared")
        for bucket in sorted(set(c_rows) - set(b_rows)):
            notes.append(f"{where} bucket {bucket} is only in the current report; not compared")

        # Mode totals: the summary rows when both reports hold the same buckets, else sums over the common ones.
        complete = set(b_rows) == set(c_rows)
        if not complete:
            notes.append(f"{where} totals are sums of per-bucket deltas over the {len(common)} common buckets")
        for metric in TOTAL_METRICS:
            if complete:
                base = getattr(base_summary[(mode, rank_label)], metric)
                cur = getattr(cur_summary[(mode, rank_label)], metric)
            else:
                part = _TOTAL_FROM_BUCKETS[metric]
                base = sum(getattr(b_rows[b], part) for b in common)
                cur = sum(getattr(c_rows[b], part) for b in common)
            checks.append(_metric_check(mode, rank_label, None, metric, base, cur, options))

        for bucket in common:
            b, c = b_rows[bucket], c_rows[bucket]
            if b.status == "ok" and c.status != "ok":
                checks.append(GateCheck(mode, rank_label, bucket, "status", None, None, REGRESSION,
                                        detail=f"{c.status} in the current report (baseline ok)"
                                        + (f": {c.detail}" if c.detail else "")))
                continue
            if b.status != "ok" and c.status == "ok":
                checks.append(GateCheck(mode, rank_label, bucket, "status", None, None, IMPROVEMENT,
                                        detail=f"ok in the current report (baseline {b.status})"))
            elif b.status != "ok":
                notes.append(f"{where} bucket {bucket} failed in both reports ({b.status}, {c.status})")
            if options.per_bucket and b.status == "ok" and c.status == "ok":
                for metric in BUCKET_METRICS:
                    checks.append(_metric_check(mode, rank_label, bucket, metric,
                                                getattr(b, metric), getattr(c, metric), options))
    if any(rank != 0 for _, rank in set(base_rows) | set(cur_rows)):
        for c in checks:  # tensor-parallel: every check names its rank, rank 0 included
            c.tensor_parallel = True
    return GateResult(baseline, current, options, checks, notes)
