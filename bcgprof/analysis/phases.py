"""What capturing several phases into one pool costs, against each phase alone: the figure
``bcgprof show`` gives for a report of several phases (schema 2).

An engine that keeps one graph pool per process (SGLang's prefill, decode and draft graphs) relies
on the phases never replaying at once: the second phase's captures can reuse the blocks the first
left free in the pool, so the pair should cost about the larger phase, not the sum. For each mode,
:func:`phase_pools` sets the pool the pair reached (the last row of its last phase) against the
pool each phase reached at its end when captured alone, in a process of its own, by the same run
(``<report>/phase-<phase>``): ``beyond_larger`` = pair - the larger of the phases alone, what
sharing one pool costs beyond the larger phase; ``saved_vs_pools_per_phase`` = the sum of the
phases alone - pair, what one pool saves against a pool per phase. Every figure is measured; none
is made where a capture it needs did not finish. Pure functions over reports; the phases alone are
read by :func:`alone_reports`, each once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from bcgprof.errors import ReportError
from bcgprof.report import Report, phase_end_pools, phase_report_name, phased_sequence, read_report
from bcgprof.report.files import is_present
from bcgprof.vocab import BucketStatus

# what a figure of this module is: read from captures, never modelled
MEASURED = "measured"


@dataclass
class PhasePool:
    """One mode's pool of the phases in one pool, against each phase alone (bytes)."""

    mode: str
    phases: list[str]
    # the pair's pool after each phase, in the mode's process (the last one is the pair's total)
    after: dict[str, int]
    complete: bool  # every bucket of every phase of the pair captured ok
    # each phase captured alone, in a process of its own: the pool at its end; None where that
    # capture is missing or did not finish
    alone: dict[str, Optional[int]] = field(default_factory=dict)
    kind: str = MEASURED

    @property
    def pair_bytes(self) -> Optional[int]:
        """The pool after the pair's last phase; None when the pair did not finish."""
        return self.after.get(self.phases[-1]) if self.complete else None

    @property
    def larger_alone_bytes(self) -> Optional[int]:
        values = list(self.alone.values())
        return max(values) if values and None not in values else None  # type: ignore[type-var]

    @property
    def beyond_larger_bytes(self) -> Optional[int]:
        """The pair's pool beyond the larger phase alone."""
        pair, larger = self.pair_bytes, self.larger_alone_bytes
        return None if pair is None or larger is None else pair - larger

    @property
    def saved_vs_pools_per_phase_bytes(self) -> Optional[int]:
        """What one pool saves against one pool per phase (the phases alone, summed)."""
        values = list(self.alone.values())
        pair = self.pair_bytes
        if pair is None or not values or None in values:
            return None
        return sum(v for v in values if v is not None) - pair

    def to_json(self) -> dict:
        return {
            "mode": self.mode,
            "kind": self.kind,
            "phases": list(self.phases),
            "pool_after_phase_bytes": dict(self.after),
            "complete": self.complete,
            "pair_bytes": self.pair_bytes,
            "alone_bytes": dict(self.alone),
            "larger_alone_bytes": self.larger_alone_bytes,
            "beyond_larger_bytes": self.beyond_larger_bytes,
            "saved_vs_pools_per_phase_bytes": self.saved_vs_pools_per_phase_bytes,
        }


def alone_reports(report: Report) -> dict[str, Report]:
    """The phases of ``report`` captured alone, read from ``<report>/phase-<phase>`` (those
    present); a :class:`ReportError` when one is not that phase's capture of the same model."""
    out: dict[str, Report] = {}
    for phase in report.run.phases:
        path = report.path / phase_report_name(phase)
        if not is_present(path / "run.json"):
            continue
        alone = read_report(path)
        run = alone.run
        if run.phase != phase or run.config_hash != report.run.config_hash:
            raise ReportError(
                f"{path} is not {phase} captured alone from the model of {report.path} (it holds "
                f"{run.phase} of {run.model}); move it away or capture the pair again"
            )
        out[phase] = alone
    return out


def _alone_pool(alone: Optional[Report], mode: str) -> Optional[int]:
    """The pool at the end of ``mode`` in a phase's capture alone, when it finished."""
    if alone is None:
        return None
    row = next((s for s in alone.summary if s.mode == mode and s.rank == "0"), None)
    return row.pool_bytes if row is not None and not row.failed and row.buckets else None


def phase_pools(report: Report, alone: dict[str, Report]) -> list[PhasePool]:
    """Per mode of a report of several phases (rank 0: such a capture runs on one GPU), its pool
    after each phase and against each phase alone; [] for a one-phase report."""
    run = report.run
    if not run.phased:
        return []
    out = []
    for mode in run.modes:
        rows = [r for r in report.buckets if r.mode == mode and r.rank == 0]
        if not rows:
            continue
        complete = len(rows) == len(phased_sequence(run, mode)) and all(
            r.status == BucketStatus.OK for r in rows
        )
        out.append(
            PhasePool(
                mode=mode,
                phases=list(run.phases),
                after=phase_end_pools(rows, run.phases),
                complete=complete,
                alone={p: _alone_pool(alone.get(p), mode) for p in run.phases},
            )
        )
    return out


def pools_of(report: Report) -> Optional[list[PhasePool]]:
    """:func:`phase_pools` of a report of several phases, with its phases alone read from under
    it; None for a one-phase report."""
    return phase_pools(report, alone_reports(report)) if report.run.phased else None
