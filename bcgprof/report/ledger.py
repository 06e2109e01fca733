"""A bucket's row figures from the two readings around its warm-up and capture: :func:`ledger`.

Mechanism: a :class:`Reading` is taken before a bucket's warm-up and again after its capture
(or its failure), each after a device synchronise and ``empty_cache``
(:func:`bcgprof.measure.memory.read`). Every figure of the row is one reading after, or the
difference of the two; device-used growth is split into four causes:

    pool_live + pool_free + outside_pool + non_torch == device_used_delta

where ``pool_live + pool_free`` is the pool's growth (the allocator snapshot's block states sum
to its segments), ``outside_pool`` is torch-reserved growth less the pool's, and ``non_torch``
is device-used growth less torch-reserved growth (graph executables, driver memory).

Invariant: the sums hold exactly by construction, so every row built here passes
:func:`bcgprof.report.consistency.check_bucket_sums`, and ``bcgprof capture`` and ``bcgprof
record``'s merge derive the figures one way. Cost: a few integer operations; no torch, no GPU.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional


@dataclass
class Reading:
    """Device memory at one moment, in bytes (:func:`bcgprof.measure.memory.read`)."""

    pool: int  # the graph pool's segments
    pool_live: int  # of which allocated blocks
    pool_free: int  # of which unused blocks
    allocated: int  # torch allocated, every pool
    reserved: int  # torch reserved, every pool
    device_used: int  # NVML (or mem_get_info)
    process_used: Optional[int]  # NVML's figure for this process, where it answers
    free: Optional[int]  # free on the device (None where a recording lacks it)


def ledger(
    before: Reading,
    after: Reading,
    peak_allocated: int,
    device_peak: Optional[int],
    pool_output: int = 0,
) -> dict[str, Optional[int]]:
    """The figures of one bucket's row, by :class:`~bcgprof.report.BucketRecord` field name.

    ``peak_allocated``: torch's allocated peak since the peaks were reset at ``before``;
    ``device_peak``: the NVML sampler's device-used peak over the same window (None without
    samples); ``pool_output``: bytes of the output the bucket keeps that lie in the pool.
    ``process_used_delta_bytes`` and ``device_peak_delta_bytes`` are None where a reading lacks
    them.
    """
    pool_delta = after.pool - before.pool
    reserved_delta = after.reserved - before.reserved
    device_used_delta = after.device_used - before.device_used
    process_used_delta = None
    if before.process_used is not None and after.process_used is not None:
        process_used_delta = after.process_used - before.process_used
    return {
        "pool_bytes": after.pool,
        "pool_delta_bytes": pool_delta,
        "pool_live_delta_bytes": after.pool_live - before.pool_live,
        "pool_free_delta_bytes": after.pool_free - before.pool_free,
        "pool_output_bytes": pool_output,
        "torch_allocated_delta_bytes": after.allocated - before.allocated,
        "torch_reserved_delta_bytes": reserved_delta,
        "device_used_delta_bytes": device_used_delta,
        "non_torch_delta_bytes": device_used_delta - reserved_delta,
        "outside_pool_delta_bytes": reserved_delta - pool_delta,
        "peak_transient_bytes": max(0, peak_allocated - before.allocated),
        "process_used_delta_bytes": process_used_delta,
        "device_peak_delta_bytes": device_peak - before.device_used
        if device_peak is not None
        else None,
        "free_bytes": after.free,
    }
