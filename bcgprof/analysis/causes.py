"""explain's ledger: the causes device memory is split into, and one bucket's or one mode's bytes
per cause, read from the ledger columns of a report's rows.

A module of its own, without dataclasses or the model presets, so that compare and gate,
which only name and sum the causes, load it and not :mod:`~bcgprof.analysis.explain`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:
    from bcgprof.report import BucketRecord, SummaryRecord

# cause -> (label, what it is)
CAUSES = {
    "pool_output": ("pool: outputs kept", "bucket outputs that stay alive in the graph pool"),
    "pool_other_live": ("pool: other live", "other bytes the buckets left alive in the pool"),
    "pool_free": (
        "pool: free space",
        "growth of unused space inside the pool's segments (negative where an "
        "output reused space a larger bucket had freed)",
    ),
    "outside_pool": (
        "torch outside pool",
        "torch memory outside the pool: a shared output buffer, workspaces",
    ),
    "graph_executables": (
        "graph executables",
        "driver memory NVML sees and the allocator does not: graph "
        "executables and other driver memory",
    ),
}


def causes_of(r: BucketRecord) -> Optional[dict[str, int]]:
    """One bucket's causes (summing exactly to its device-used delta), or None without the ledger
    columns."""
    if (
        r.pool_live_delta_bytes is None
        or r.pool_free_delta_bytes is None
        or r.outside_pool_delta_bytes is None
    ):
        return None
    output = r.pool_output_bytes or 0
    return {
        "pool_output": output,
        "pool_other_live": r.pool_live_delta_bytes - output,
        "pool_free": r.pool_free_delta_bytes,
        "outside_pool": r.outside_pool_delta_bytes,
        "graph_executables": r.non_torch_delta_bytes,
    }


def summary_causes(s: SummaryRecord) -> Optional[dict[str, int]]:
    """A mode's causes from its summary row (the ledger columns summed), or None without them."""
    if (
        s.pool_live_delta_bytes is None
        or s.pool_free_delta_bytes is None
        or s.outside_pool_delta_bytes is None
    ):
        return None
    output = s.pool_output_bytes or 0
    return {
        "pool_output": output,
        "pool_other_live": s.pool_live_delta_bytes - output,
        "pool_free": s.pool_free_delta_bytes,
        "outside_pool": s.outside_pool_delta_bytes,
        "graph_executables": s.non_torch_bytes,
    }
