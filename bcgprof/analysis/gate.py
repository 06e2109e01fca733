"""The CI memory-regression gate: baseline vs current, as pure decisions.

A figure regresses when it grew by more than BOTH its tolerances: more than ``rel``
of the baseline value AND more than ``abs_bytes``. Growth exactly at the larger of
the two passes. A shrink beyond both tolerances is reported as an improvement and
never fails.

Figures checked, per mode and per tensor-parallel rank:

* totals (summary rows): ``pool_bytes`` (graph pool after the last bucket) and
  ``device_used_bytes`` (NVML device-used growth summed over the buckets);
* with ``each_bucket``: every bucket's ``pool_delta_bytes`` and ``device_used_delta_bytes``;
* always: a bucket that was ``ok`` in the baseline and is ``oom``/``error`` (or has
  no row although the current run meant to capture it) in the current report.

Reports that measure different things (model config, GPU, bucket list, layers,
dtype, phase, modes, TP ranks) are unusable input (:class:`GateMismatchError`,
exit 2) unless ``allow_mismatch``; then only the common buckets are compared and
the result says so. So are a baseline that is not complete, the same report given
twice, and reports that leave nothing to compare (:class:`GateInputError`, exit 2):
a gate never passes on figures it did not see.

The gate judges the pairs that :func:`bcgprof.analysis.compare.compare_reports` makes: summary
rows paired by (mode, rank), bucket rows by (mode, rank, bucket).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, cast

from bcgprof.analysis.compare import (
    BOTH,
    OLD_ONLY,
    BucketComparison,
    Change,
    Comparison,
    compare_reports,
)
from bcgprof.analysis.tolerance import (
    BUCKET_METRICS,
    IMPROVEMENT,
    PASS,
    REGRESSION,
    TOTAL_METRICS,
    Tolerance,
    verdict_of_growth,
)
from bcgprof.errors import EXIT_FAILED, EXIT_OK, EXIT_USAGE, BcgprofError
from bcgprof.options import mode_index
from bcgprof.report import Report
from bcgprof.report.consistency import capture_sequence
from bcgprof.report_format import (
    fmt_bytes,
    fmt_pct,
    pct_change,
)
from bcgprof.vocab import Source

# What a bucket's delta sums up to in the mode's total (used when totals come from common buckets).
_TOTAL_FROM_BUCKETS = {
    "pool_bytes": "pool_delta_bytes",
    "device_used_bytes": "device_used_delta_bytes",
}

EXIT_PASS, EXIT_REGRESSION = EXIT_OK, EXIT_FAILED


class GateMismatchError(BcgprofError):
    """The two reports measure different things; comparing them would mean nothing."""

    exit_code = EXIT_USAGE


class GateInputError(BcgprofError):
    """The gate cannot judge these reports: the same report twice, a baseline that is not
    complete, or nothing in common to compare."""

    exit_code = EXIT_USAGE


@dataclass
class GateOptions:
    default: Tolerance = field(default_factory=Tolerance)
    per_metric: dict[str, Tolerance] = field(default_factory=dict)
    each_bucket: bool = False  # also check every bucket's deltas (gate --each-bucket)
    allow_mismatch: bool = False

    def tolerance(self, metric: str) -> Tolerance:
        return self.per_metric.get(metric, self.default)


@dataclass
class GateCheck:
    """One decision. ``bucket`` is None for a mode total; ``metric`` is ``status`` for a failed
    bucket (then ``baseline_status``/``current_status`` say what each report holds)."""

    mode: str
    rank: str
    bucket: Optional[int]
    metric: str
    baseline: Optional[int]
    current: Optional[int]
    verdict: str  # pass | regression | improvement
    limit: Optional[int] = None  # largest growth that passes, in bytes
    detail: str = ""
    tensor_parallel: bool = False  # from a multi-rank comparison: name rank 0 too
    baseline_status: Optional[str] = None  # status checks: ok | oom | error | None (no row)
    current_status: Optional[str] = None

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
        return f"{self.mode}{rank}" + (
            f" bucket {self.bucket}" if self.bucket is not None else " total"
        )


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

    def to_json(self) -> dict:
        """The ``gate -f json`` contract: verdict, tolerances, both reports, every check (bytes as
        integers)."""

        def tolerance(t: Tolerance) -> dict:
            return {"rel": t.rel, "abs_bytes": t.abs_bytes, "described": t.describe()}

        def report(r: Report) -> dict:
            return {
                "path": str(r.path),
                "model": r.run.model,
                "status": r.run.status,
                "config_hash": r.run.config_hash,
            }

        return {
            "verdict": "pass" if self.passed else "fail",
            "exit_code": self.exit_code,
            "baseline": report(self.baseline),
            "current": report(self.current),
            "tolerance": {
                "default": tolerance(self.options.default),
                "per_metric": {m: tolerance(t) for m, t in sorted(self.options.per_metric.items())},
                "each_bucket": self.options.each_bucket,
                # the old name of each_bucket, for one release
                "per_bucket": self.options.each_bucket,
                "allow_mismatch": self.options.allow_mismatch,
            },
            "checks": [
                {
                    "mode": c.mode,
                    "rank": c.rank,
                    "bucket": c.bucket,
                    "metric": c.metric,
                    "verdict": c.verdict,
                    "baseline": c.baseline,
                    "current": c.current,
                    "delta": c.delta,
                    "limit_bytes": None if c.limit is None else int(c.limit),
                    "detail": c.detail,
                    "baseline_status": c.baseline_status,
                    "current_status": c.current_status,
                }
                for c in self.checks
            ],
            "regressions": len(self.regressions),
            "improvements": len(self.improvements),
            "notes": list(self.notes),
        }

    def worst(self) -> Optional[GateCheck]:
        """The regression with the largest growth over its limit (the worst rank of a TP run)."""
        sized = [c for c in self.regressions if c.delta is not None and c.limit is not None]

        def over(c: GateCheck) -> float:
            assert c.delta is not None and c.limit is not None  # sized holds only checks with both
            return c.delta - c.limit

        if sized:
            return max(sized, key=over)
        return self.regressions[0] if self.regressions else None


# ---------------------------------------------------------------- inputs


def same_report(a: str | Path, b: str | Path) -> bool:
    """Whether two paths name the same directory (after resolving links)."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        try:
            return Path(a).resolve() == Path(b).resolve()
        except (
            OSError,
            RuntimeError,
        ):  # a link loop: it is no report, which reading it says in one line
            return False


def _missing_rows(report: Report) -> list[str]:
    """Rows a report's run.json promises (every mode, rank and bucket; floor: the largest) but
    buckets.csv lacks."""
    run = report.run
    have = {(r.mode, r.rank, r.bucket) for r in report.buckets}
    missing = []
    for mode in run.modes:
        expected = capture_sequence(run, mode)
        # a recording's process captures the groups it captures: only ranks with rows of a group
        # promise it
        ranks = (
            sorted({r for m, r, _ in have if m == mode})
            if run.source == Source.RECORD
            else range(run.tp)
        )
        for rank in ranks:
            for bucket in expected:
                if (mode, rank, bucket) not in have:
                    missing.append(
                        f"{mode}" + (f" rank {rank}" if run.tp > 1 else "") + f" bucket {bucket}"
                    )
    return missing


def check_gate_inputs(baseline: Report, current: Report) -> None:
    """Refuse (exit 2) what the gate cannot judge: one report given twice, a baseline that is not
    complete."""
    if same_report(baseline.path, current.path):
        raise GateInputError(
            f"--baseline and --current are the same report ({baseline.path}); a gate compares a "
            "new capture against a baseline: pass the new report as --current"
        )
    run = baseline.run
    if run.status != "complete":
        message = f" ({run.message})" if run.message else ""
        raise GateInputError(
            f"baseline {baseline.path} is {run.status}{message}, not complete: a gate needs a "
            "complete baseline; re-capture the baseline with the same options, or look at the two "
            "with `bcgprof compare`"
        )
    missing = _missing_rows(baseline)
    if missing:
        more = f" and {len(missing) - 1} more" if len(missing) > 1 else ""
        raise GateInputError(
            f"baseline {baseline.path} says it is complete but has no row for {missing[0]}{more}: "
            "a gate needs every figure of the baseline; restore the report or re-capture it"
        )


# ---------------------------------------------------------------- the gate


def _metric_check(
    mode,
    rank,
    bucket,
    metric,
    base: int,
    cur: int,
    options: GateOptions,
    tol: Optional[Tolerance] = None,
) -> GateCheck:
    """One figure's decision; ``tol`` when the caller looked it up already (a gate of each bucket
    makes 200,000 of these, most of them passes, whose detail is never built)."""
    tol = tol or options.tolerance(metric)
    limit = tol.limit(base)
    verdict = verdict_of_growth(cur - base, limit)
    if verdict == PASS:
        return GateCheck(mode, rank, bucket, metric, base, cur, PASS, limit)
    word = "grew" if cur > base else "shrank"
    pct = pct_change(base, cur)
    detail = (
        f"{word} {fmt_bytes(abs(cur - base))}"
        + (f" ({fmt_pct(pct, signed=True)})" if pct is not None else "")
        + f", beyond {tol.describe()}"
    )
    return GateCheck(mode, rank, bucket, metric, base, cur, verdict, limit, detail)


def causes_grown(total) -> str:
    """The causes (explain's ledger) that grew between the two reports' totals of one mode,
    largest first, with the graph and node counts beside graph executables: '' when the reports
    lack the ledger."""
    from bcgprof.analysis.causes import CAUSES

    parts = []
    for name, change in sorted(total.causes.items(), key=lambda kv: -(kv[1].delta or 0)):
        if not change.delta or change.delta <= 0:
            continue
        text = f"{CAUSES[name][0]} {fmt_bytes(int(change.delta), signed=True)}"
        if name == "graph_executables":
            counts = [
                f"{label} {int(c.delta):+,}"
                for key, label in (("segments", "graphs"), ("graph_nodes", "nodes"))
                if (c := total.graphs.get(key)) is not None and c.delta
            ]
            if counts:
                text += f" ({', '.join(counts)})"
        parts.append(text)
    return ", ".join(parts)


def _byte_pair(change: Change) -> tuple[int, int]:
    """Both sides of a checked figure of rows in both reports: byte counts, so whole and never
    missing (``Change`` types every figure as an optional float)."""
    assert change.old is not None and change.new is not None, change.metric
    return cast(int, change.old), cast(int, change.new)


def _bucket_pair(pair: BucketComparison, metric: str) -> tuple[int, int]:
    """:func:`_byte_pair` of ``pair.changes[metric]``, read from the two rows (100,000 pairs)."""
    old, new = getattr(pair.old, metric), getattr(pair.new, metric)
    assert old is not None and new is not None, metric
    return old, new


def _status_check(mode, rank, bucket, verdict, detail, base_status, cur_status) -> GateCheck:
    return GateCheck(
        mode,
        rank,
        bucket,
        "status",
        None,
        None,
        verdict,
        detail=detail,
        baseline_status=base_status,
        current_status=cur_status,
    )


def gate_reports(
    baseline: Report, current: Report, options: GateOptions | None = None
) -> GateResult:
    """Decide pass/regression for every checked figure.

    Raises :class:`GateInputError` for the same report twice or a baseline that is not complete,
    and :class:`GateMismatchError` for incomparable reports (unless ``allow_mismatch``).
    """
    check_gate_inputs(baseline, current)
    return gate_comparison(compare_reports(baseline, current), options)


def gate_comparison(cmp: Comparison, options: GateOptions | None = None) -> GateResult:
    """The gate's decisions on compare's pairs (baseline = the comparison's old report)."""
    options = options or GateOptions()
    baseline, current = cmp.old, cmp.new
    notes: list[str] = []
    differences = cmp.differences
    if differences and not options.allow_mismatch:
        raise GateMismatchError(
            f"baseline {baseline.path} and current {current.path} are not comparable: "
            f"{'; '.join(differences)}; capture both with the same settings, or pass "
            "--allow-mismatch to compare the common buckets"
        )
    notes.extend(f"allowed mismatch: {d}" for d in differences)
    if current.run.status != "complete":
        notes.append(
            f"current report status is {current.run.status!r}"
            + (f" ({current.run.message})" if current.run.message else "")
        )

    groups: dict[tuple[str, int], list[BucketComparison]] = {}
    for pair in cmp.buckets:
        groups.setdefault((pair.mode, pair.rank), []).append(pair)
    totals = {(t.mode, t.rank): t for t in cmp.totals}
    intended = set(current.run.buckets)
    checks: list[GateCheck] = []
    bucket_tolerances = [(m, options.tolerance(m)) for m in BUCKET_METRICS]

    for mode, rank in sorted(groups, key=lambda k: (mode_index(k[0]), k[1])):
        pairs = sorted(groups[(mode, rank)], key=lambda p: p.bucket)
        rank_label = str(rank)
        where = f"{mode}" + (f" rank {rank}" if rank else "")
        base_rows = [p for p in pairs if p.old is not None]
        cur_rows = [p for p in pairs if p.new is not None]
        if not base_rows or not cur_rows:
            side = "baseline" if base_rows else "current"
            if side == "baseline" and mode in current.run.modes and not differences:
                # The current run meant to capture this mode but produced nothing for it.
                checks.append(
                    _status_check(
                        mode,
                        rank_label,
                        None,
                        REGRESSION,
                        f"no rows in the current report (baseline had {len(base_rows)})",
                        None,
                        None,
                    )
                )
            else:
                notes.append(f"{where} is only in the {side} report; not compared")
            continue
        common = [p for p in pairs if p.presence == BOTH]
        for p in pairs:
            if p.presence == OLD_ONLY:
                assert p.old is not None  # old-only: the baseline's row
                if p.bucket in intended and p.old.status == "ok":
                    checks.append(
                        _status_check(
                            mode,
                            rank_label,
                            p.bucket,
                            REGRESSION,
                            "no row in the current report although its run lists this bucket",
                            p.old.status,
                            None,
                        )
                    )
                else:
                    notes.append(f"{where} bucket {p.bucket} is only in the baseline; not compared")
        for p in pairs:
            if p.presence != BOTH and p.presence != OLD_ONLY:
                notes.append(
                    f"{where} bucket {p.bucket} is only in the current report; not compared"
                )
        if not common:
            notes.append(f"{where} has no bucket in both reports; its totals are not compared")
            continue

        # Mode totals: the paired summary rows when both reports hold the same buckets, else sums
        # over the common ones.
        complete = len(common) == len(pairs)
        total = totals.get((mode, rank_label))
        if not complete or total is None or total.presence != BOTH:
            notes.append(
                f"{where} totals are sums of bucket deltas over the {len(common)} common buckets"
            )
        for metric in TOTAL_METRICS:
            if complete and total is not None and total.presence == BOTH:
                base, cur = _byte_pair(total.changes[metric])
            else:
                part = _TOTAL_FROM_BUCKETS[metric]
                pairs_of_part = [_bucket_pair(p, part) for p in common]
                base = sum(old for old, _ in pairs_of_part)
                cur = sum(new for _, new in pairs_of_part)
            check = _metric_check(mode, rank_label, None, metric, base, cur, options)
            if check.verdict == REGRESSION and complete and total is not None:
                grown = causes_grown(total)
                if grown:
                    check.detail += f"; what grew: {grown}"
            checks.append(check)

        for p in common:
            b, c = p.old, p.new
            assert b is not None and c is not None  # common: rows in both reports
            if b.status == "ok" and c.status != "ok":
                checks.append(
                    _status_check(
                        mode,
                        rank_label,
                        p.bucket,
                        REGRESSION,
                        f"{c.status} in the current report (baseline ok)"
                        + (f": {c.detail}" if c.detail else ""),
                        b.status,
                        c.status,
                    )
                )
                continue
            if b.status != "ok" and c.status == "ok":
                checks.append(
                    _status_check(
                        mode,
                        rank_label,
                        p.bucket,
                        IMPROVEMENT,
                        f"ok in the current report (baseline {b.status})",
                        b.status,
                        c.status,
                    )
                )
            elif b.status != "ok":
                notes.append(
                    f"{where} bucket {p.bucket} failed in both reports ({b.status}, {c.status})"
                )
            if options.each_bucket and b.status == "ok" and c.status == "ok":
                for metric, tol in bucket_tolerances:
                    base, cur = _bucket_pair(p, metric)
                    checks.append(
                        _metric_check(mode, rank_label, p.bucket, metric, base, cur, options, tol)
                    )
    if not any(c.metric != "status" for c in checks) and not any(
        c.verdict == REGRESSION for c in checks
    ):
        raise GateInputError(
            f"baseline {baseline.path} and current {current.path} have no figures in common to "
            f"compare ({'no bucket rows' if not cmp.buckets else 'no bucket in both reports'}): "
            "the gate cannot pass "
            "what it did not see; capture both with the same options"
        )
    if any(rank != 0 for _, rank in groups):
        for check in checks:  # tensor-parallel: every check names its rank, rank 0 included
            check.tensor_parallel = True
    return GateResult(baseline, current, options, checks, notes)
