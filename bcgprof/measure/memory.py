"""GPU memory readings of a capture: the torch allocator, the graph pool, and the device.

Every reading is taken after a device synchronise and ``empty_cache()``, so cached,
unused blocks of the ordinary allocator do not count. The device-level figure comes
from NVML when it answers, else from ``torch.cuda.mem_get_info`` (the source is
recorded in the report), through :mod:`bcgprof.measure.device`, whose background sampler
polls it during a bucket to catch its peak; NVML calls take no GPU memory.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import torch

from bcgprof.measure.device import DeviceMemory
from bcgprof.report.ledger import Reading

__all__ = [
    "PoolState",
    "pool_bytes",
    "pool_state",
    "read",
    "settle",
    "storage_in_pool",
]

# ----------------------------------------------------------------- torch side


@dataclass
class PoolState:
    """One graph pool as the allocator's snapshot shows it: its segments' bytes split by block
    state.

    ``live`` counts blocks allocated (or freed by the program but still in use by the
    GPU), ``free`` the blocks the allocator holds unused inside the pool's segments;
    ``live + free == total`` by construction of the snapshot.
    """

    total: int = 0
    live: int = 0
    free: int = 0
    ranges: tuple = ()  # (address, size) of each segment of the pool


def pool_state(pool_id: Any, snapshot: Optional[list] = None) -> PoolState:
    """The pool's bytes, live and free, read from ``torch.cuda.memory_snapshot()`` block states."""
    pool_id = tuple(pool_id)
    state = PoolState()
    ranges = []
    for seg in torch.cuda.memory_snapshot() if snapshot is None else snapshot:
        if tuple(seg.get("segment_pool_id", ())) != pool_id:
            continue
        state.total += int(seg["total_size"])
        ranges.append((int(seg["address"]), int(seg["total_size"])))
        for block in seg.get("blocks", ()):
            if block["state"] == "inactive":
                state.free += int(block["size"])
            else:  # active_allocated, active_pending_free
                state.live += int(block["size"])
    state.ranges = tuple(ranges)
    return state


def pool_bytes(pool_id: Any) -> int:
    """Bytes of device memory the allocator holds for one graph pool."""
    return pool_state(pool_id).total


def storage_in_pool(t: torch.Tensor, pool_id: Any) -> bool:
    """Whether ``t``'s memory lies in a segment of the graph pool."""
    ptr = t.untyped_storage().data_ptr()
    return any(address <= ptr < address + size for address, size in pool_state(pool_id).ranges)


def settle(device: torch.device) -> None:
    """Finish queued work and drop cached, unused blocks so readings are comparable."""
    torch.cuda.synchronize(device)
    torch.cuda.empty_cache()


def read(memory: DeviceMemory, pool_id: Any) -> Reading:
    settle(memory.device)
    stats = torch.cuda.memory_stats(memory.device)
    pool = pool_state(pool_id)
    return Reading(
        pool=pool.total,
        pool_live=pool.live,
        pool_free=pool.free,
        allocated=int(stats.get("allocated_bytes.all.current", 0)),
        reserved=int(stats.get("reserved_bytes.all.current", 0)),
        device_used=memory.used(),
        process_used=memory.process_used(),
        free=memory.free(),
    )
