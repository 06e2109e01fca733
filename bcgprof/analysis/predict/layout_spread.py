"""How much a mode's graph pool depends on where the driver places its segments.

The caching allocator breaks best-fit ties between equal free blocks by address, so a pool can
end larger or smaller when its segments lie in another order; which order comes is the driver's
choice in the process's address layout, and that layout changes with everything mapped before
the pool: another layer count maps other weights. A capture at 4 layers therefore fixes one
layout's pool, not the full depth's. Replaying the capture's own list with every segment at a
random address (seeded, so a prediction repeats) gives the pools other layouts can give; where
they differ, a prediction at another depth carries their spread in its band; a trace that cannot be
used is refused, never dropped from the band without a word. The pools a trace's list replays to are
kept in the cache (:mod:`bcgprof.analysis.predict.trace_cache`, keyed by the trace's content), so
the replays run once per trace, not once per prediction. Invariant: the spread always holds the
measured pool (``below`` and ``above`` are never negative). Cost: :data:`LAYOUTS`
replays of the capture's own list per mode, once per trace. Which models' pools move with the
layout, and by how much, is in docs/evidence-predict.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Optional

from bcgprof.analysis.predict import trace_cache
from bcgprof.analysis.predict.allocator import AllocatorError
from bcgprof.report import BucketRecord, Report
from bcgprof.report.traces import trace_files, trace_name

LAYOUTS = 24  # random layouts replayed per mode (seeds 1..LAYOUTS)
LAID_OUT = "replayed with its segments at random addresses"
NO_TRACE = (
    "{path} has no allocator trace of this mode (captured before traces were recorded), so the "
    "band does "
    "not span the pools other segment layouts give: it may be narrow where the pool depends on them"
)
MIB = 1 << 20


@dataclass
class LayoutSpread:
    """The pools a mode's own list replays to under random segment layouts, against its measured
    pool."""

    mode: str
    measured: int
    lowest: int
    highest: int
    layouts: int
    # layouts the allocator model could not replay (left out of the spread, and said)
    skipped: int = 0

    @property
    def below(self) -> int:
        return max(0, self.measured - self.lowest)

    @property
    def above(self) -> int:
        return max(0, self.highest - self.measured)

    def note(self, layers: int) -> str:
        left_out = (
            f"; {self.skipped} more could not be replayed and are left out" if self.skipped else ""
        )
        return (
            f"the {layers}-layer capture's own list, {LAID_OUT} ({self.layouts}; another depth "
            "lays the "
            f"process out differently), ends its pool {-self.below / MIB:+.0f} to "
            f"{self.above / MIB:+.0f} MiB "
            f"from the measured one: the band spans that{left_out}"
        )


def layout_spread(
    report: Report, mode: str, rows: Sequence[BucketRecord]
) -> Optional[LayoutSpread]:
    """``mode``'s spread over :data:`LAYOUTS` random layouts (``rows``: its measured rows in capture
    order).

    None when the report has no trace of the mode (captured before traces): the caller says that the
    band lacks the spread (:data:`NO_TRACE`). A trace that is there but cannot be used (damaged, cut
    short, another capture's: refused by the replay of its own list against the measured pools)
    raises its :class:`~bcgprof.report.traces.TraceError`, naming the file: dropping it would narrow
    the band without a word. A layout the allocator model cannot replay is left out and counted in
    the note; if none can be, the error of the first is raised.
    """
    if not trace_files(report.path, [mode]):
        return None
    # the replay (and numpy) only for a report with a trace of the mode
    from bcgprof.analysis.predict.replay import Replayer, ReplayError

    measured = [(r.bucket, r.pool_bytes) for r in rows]
    replayer = Replayer.load(report.path, [mode], expected={mode: measured})
    # has(): reads the trace and checks it, or raises
    if replayer is None or not replayer.bucket_sources.has(mode):
        return None
    trace = replayer.bucket_sources.traces.get(mode)
    assert trace is not None  # has() loaded it
    parts = [trace.digest, mode, measured, LAYOUTS]
    known = trace_cache.recall("layout spread", parts, trace.path) if trace.digest else None
    if isinstance(known, list) and len(known) == 4 and all(type(v) is int for v in known):
        lowest, highest, replayed, skipped = known  # the same trace and list: the same pools
        return LayoutSpread(mode, measured[-1][1], lowest, highest, replayed, skipped)
    buckets = [b for b, _ in measured]
    pools, failures = [], []
    for seed in range(1, LAYOUTS + 1):
        try:
            pools.append(replayer.laid_out(seed).replay(mode, buckets).pool_bytes[-1])
        except (ReplayError, AllocatorError) as e:
            failures.append(e)
    if not pools:
        raise ReplayError(
            f"{trace_name(mode)} of {report.path}: no random layout of its segments replays "
            f"({failures[0]}); re-capture the report"
        ) from None
    if trace.digest:
        trace_cache.remember(
            "layout spread", parts, [min(pools), max(pools), len(pools), len(failures)], trace.path
        )
    return LayoutSpread(mode, measured[-1][1], min(pools), max(pools), len(pools), len(failures))
