"""What a capture gives back, and fresh inputs to replay it on.

Mechanism: :class:`CaptureResult` holds a mode's records in capture order and, per captured
bucket, a :class:`BucketCapture`: its graph, the tensor its replay writes and its record, with the
graph pool handle, the shared output buffer and, when asked for, the allocator's trace and the
floor's pool peak. :meth:`CaptureResult.replay` replays a bucket's graph on whatever the static
input buffers hold; :func:`default_refill` fills them with fresh random contents first.

Invariant: a bucket's output is the tensor its graph writes (per-bucket: its own, in the pool;
shared: a view of the shared buffer's leading rows), so a replay returns it without a copy.

Cost: references only; a result keeps its graphs, outputs and pool alive for as long as it lives.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Optional

import torch

from bcgprof.bcg.executables import SharedExecutables
from bcgprof.bcg.graph import BreakableGraph
from bcgprof.measure import sites
from bcgprof.report import BucketRecord
from bcgprof.report.traces import Trace
from bcgprof.vocab import BucketStatus


@dataclass
class BucketCapture:
    bucket: int
    graph: BreakableGraph
    output: torch.Tensor  # per-bucket: the tensor in the pool; shared: a view of the shared buffer
    record: BucketRecord


@dataclass
class CaptureResult:
    mode: str
    records: list[BucketRecord] = field(default_factory=list)
    captures: dict[int, BucketCapture] = field(default_factory=dict)
    pool: Any = None
    shared_output: Optional[torch.Tensor] = None
    pool_peak: Optional[sites.PoolPeak] = None  # the first bucket's, when sites were recorded
    trace: Optional[Trace] = None  # the allocator's trace, when capture_buckets was asked for it
    executables: Optional[SharedExecutables] = None  # with executables per-signature

    @property
    def ok(self) -> bool:
        return all(r.status == BucketStatus.OK for r in self.records)

    def replay(self, bucket: int) -> torch.Tensor:
        """Replay one bucket's graph on the current contents of the input buffers."""
        cap = self.captures[bucket]
        cap.graph.replay()
        return cap.output


def default_refill(inputs: Sequence[torch.Tensor], generator: torch.Generator) -> None:
    """Fresh random contents for input buffers: floats ~ N(0, 1), integers within their current
    range."""
    for x in inputs:
        if x.is_floating_point():
            x.normal_(generator=generator)
        else:
            lo, hi = int(x.min()), int(x.max()) + 1
            x.copy_(
                torch.randint(lo, max(hi, lo + 1), x.shape, device=x.device, generator=generator)
            )
