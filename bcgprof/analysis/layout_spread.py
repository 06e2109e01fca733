"""How much a mode's graph pool depends on where the driver places its segments.

The caching allocator breaks best-fit ties between equal free blocks by address, so a pool can
end larger or smaller when its segments lie in another order; which order comes is the driver's
choice in the process's address layout, and that layout changes with everything mapped before
the pool: another layer count maps other weights. A capture at 4 layers therefore fixes one
layout's pool, not the full depth's. Replaying the capture's own list with every segment at a
random address (seeded, so a prediction repeats) gives the pools other layouts can give; where
they differ, a prediction at another depth carries their spread in its band. On an H100,
Qwen3-8B's per-bucket pool was 3294 MiB at 4 layers and 3018 MiB at 36, both among those replayed
from the 4-layer trace; gpt-oss-20b's pools do not move.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Optional

from bcgprof.analysis.allocator import AllocatorError
from bcgprof.analysis.replay import Replayer, ReplayError
from bcgprof.report import BucketRecord, Report
from bcgprof.report.traces import TraceError

LAYOUTS = 24  # random layouts replayed per mode (seeds 1..LAYOUTS)
LAID_OUT = "replayed with its segments at random addresses"
MIB = 1 << 20


@dataclass
class LayoutSpread:
    """The pools a mode's own list replays to under random segment layouts, against its measured pool."""

    mode: str
    measured: int
    lowest: int
    highest: int
    layouts: int

    @property
    def below(self) -> int:
        return max(0, self.measured - self.lowest)

    @property
    def above(self) -> int:
        return max(0, self.highest - self.measured)

    def note(self, layers: int) -> str:
        return (f"the {layers}-layer capture's own list, {LAID_OUT} ({self.layouts}; another depth lays the "
                f"process out differently), ends its pool {-self.below / MIB:+.0f} to {self.above / MIB:+.0f} MiB "
                "from the measured one: the band spans that")


def layout_spread(report: Report, mode: str, rows: Sequence[BucketRecord]) -> Optional[LayoutSpread]:
    """``mode``'s spread over :data:`LAYOUTS` random layouts (``rows``: its measured rows in capture order);
    None when the report has no usable trace of it (captured before traces, or a damaged one)."""
    measured = [(r.bucket, r.pool_bytes) for r in rows]
    try:
        replayer = Replayer.load(report.path, [mode], expected={mode: measured})
        if replayer is None or not replayer.has(mode):
            return None
        buckets = [b for b, _ in measured]
        pools = [replayer.laid_out(seed).replay(mode, buckets).pool_bytes[-1] for seed in range(1, LAYOUTS + 1)]
    except (ReplayError, TraceError, AllocatorError, OSError):
        return None  # no spread to add: the band stays what the layer fit gives
    return LayoutSpread(mode, measured[-1][1], min(pools), max(pools), LAYOUTS)
