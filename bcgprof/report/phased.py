"""The rows of a report of several phases captured into one pool (schema 2), checked against its
run.json: :func:`check_phased_rows`.

Such a report comes from ``bcgprof capture --phase prefill,decode``: each mode's one process
captures the first phase's buckets, then the next phase's, into one graph pool, as SGLang
captures its prefill graphs and then its decode graphs into its one pool per process. A bucket
size may stand in two phases (8 tokens and 8 sequences), so a row is keyed by (mode, phase, rank,
bucket), never by (mode, rank, bucket) alone. The ``order`` column counts a mode's captures across
its phases (0 first), so ``pool_bytes`` in capture order is the one pool's running total and the
last row of a phase holds the pool's total after that phase.

What a capture writes, and so what the rows must say: every row names one of run.json's phases;
a mode's rows run through :func:`phased_sequence` (each phase's buckets in run.json's order, the
floor mode each phase's largest alone, phases in run.json's order) in order, the ``order`` column
the row's place in it, none repeated or skipped, stopping at the first failure; a complete run
has every place. Cost: one pass over the rows (reports of several phases are small).
"""

from __future__ import annotations

from pathlib import Path

from bcgprof.errors import ReportError
from bcgprof.report.codec import FIX
from bcgprof.report.consistency import REPLAY_ATOL
from bcgprof.report.schema import BucketRecord, RunInfo
from bcgprof.vocab import BucketStatus, Mode, Order, RunStatus

# `capture --phase prefill,decode --out OUT` writes the pair into OUT and each phase captured
# alone, in a process of its own, into OUT/phase-<phase> (an ordinary one-phase report)
PHASE_REPORT_PREFIX = "phase-"


def phase_report_name(phase: str) -> str:
    """The directory, under a report of several phases, of one phase captured alone."""
    return f"{PHASE_REPORT_PREFIX}{phase}"


def capture_order(buckets: list[int], mode: str, order: str) -> list[int]:
    """The buckets of one phase's list as ``mode`` captures them (the Capturer's rule): largest
    first, or smallest first as ``order`` says; the floor the largest alone."""
    largest_first = sorted(set(buckets), reverse=True)
    if mode == Mode.FLOOR:
        return largest_first[:1]
    return largest_first if order != Order.SMALLEST_FIRST else largest_first[::-1]


def phase_sequence(run: RunInfo, mode: str, phase: str) -> list[int]:
    """The buckets ``mode`` captures in ``phase``, in order."""
    return capture_order(run.phase_buckets[phase], mode, run.order)


def phased_sequence(run: RunInfo, mode: str) -> list[tuple[str, int]]:
    """(phase, bucket) in the order ``mode``'s process captures them into its one pool."""
    return [(p, b) for p in run.phases for b in phase_sequence(run, mode, p)]


def _where(run: RunInfo, r: BucketRecord) -> str:
    rank = f" rank {r.rank}" if run.tp > 1 else ""
    return f"{r.mode} {r.phase or '(no phase)'} bucket {r.bucket}{rank}"


def check_phased_rows(path: Path, run: RunInfo, rows: list[BucketRecord], lines: list[int]) -> None:
    """buckets.csv (at ``path``) of a report of several phases agrees with ``run``: see the
    module docstring."""
    place = {m: i for i, m in enumerate(run.modes)}
    sequences = {m: phased_sequence(run, m) for m in run.modes}
    latest: dict[int, int] = {}  # rank -> place in run.modes of its last mode seen
    count: dict[tuple[str, int], int] = {}  # (mode, rank) -> rows seen
    failed: set[tuple[str, int]] = set()
    for r, line in zip(rows, lines, strict=True):
        at = f"{path}: row {line}"
        if r.mode not in place:
            raise ReportError(
                f"{at}, column mode: mode {r.mode}, which run.json's modes "
                f"({', '.join(run.modes) or 'none'}) do not list; {FIX}"
            )
        if r.rank >= run.tp:
            raise ReportError(f"{at}, column rank: rank {r.rank}, but run.json says tp {run.tp}")
        if r.phase not in run.phases:
            raise ReportError(
                f"{at}, column phase: {r.phase or 'empty'}, but run.json captures the phases "
                f"{', '.join(run.phases)} into one pool and every row names its phase; {FIX}"
            )
        if place[r.mode] < latest.get(r.rank, -1):
            raise ReportError(
                f"{at}, column mode: a {r.mode} row after rows of a later mode, but run.json runs "
                f"the modes in the order {', '.join(run.modes)}; {FIX}"
            )
        latest[r.rank] = place[r.mode]
        key = (r.mode, r.rank)
        if key in failed:
            raise ReportError(
                f"{at}: {_where(run, r)} after a failed bucket of its mode, but a mode stops at "
                f"its first failure; {FIX}"
            )
        n = count.get(key, 0)
        sequence = sequences[r.mode]
        expected = sequence[n] if n < len(sequence) else None
        if expected != (r.phase, r.bucket) or r.order != n:
            wanted = f"{expected[0]} bucket {expected[1]}" if expected else "no more rows"
            raise ReportError(
                f"{at}: {_where(run, r)} at order {r.order}, but capture order {n} of {r.mode} is "
                f"{wanted} (each phase's buckets {run.order}, phases in the order "
                f"{', '.join(run.phases)}); {FIX}"
            )
        count[key] = n + 1
        if r.status != BucketStatus.OK:
            failed.add(key)
        elif r.replay_max_abs_diff is not None and r.replay_max_abs_diff > REPLAY_ATOL:
            raise ReportError(
                f"{at}, column replay_max_abs_diff: above the replay tolerance of "
                f"{REPLAY_ATOL:g} on a bucket whose status is ok; {FIX}"
            )
    if run.status == RunStatus.COMPLETE:
        for mode in run.modes:
            for rank in range(run.tp):
                n = count.get((mode, rank), 0)
                if n < len(sequences[mode]):
                    phase, bucket = sequences[mode][n]
                    raise ReportError(
                        f"{path}: run.json says it is complete but has no row for {mode} {phase} "
                        f"bucket {bucket}; a complete report holds every bucket of every phase of "
                        f"every mode: {FIX}"
                    )


def check_no_phases(path: Path, rows: list[BucketRecord], lines: list[int]) -> None:
    """A one-phase report's rows (schema 1) name no phase."""
    for r, line in zip(rows, lines, strict=True):
        if r.phase:
            raise ReportError(
                f"{path}: row {line}, column phase: {r.phase}, but run.json is schema 1, one "
                f"phase, whose rows name none; {FIX}"
            )


def phase_end_pools(rows: list[BucketRecord], phases: list[str]) -> dict[str, int]:
    """The pool's total after each phase of one mode and rank's rows (its last row's
    ``pool_bytes``), for the phases that have rows."""
    out: dict[str, int] = {}
    for r in sorted(rows, key=lambda r: r.order):
        if r.phase in phases:
            out[r.phase] = r.pool_bytes
    return out
