"""GPU memory readings: the torch allocator, the graph pool, and the device through NVML.

Every reading is taken after a device synchronise and ``empty_cache()``, so cached,
unused blocks of the ordinary allocator do not count. The device-level figure comes
from NVML when it answers, else from ``torch.cuda.mem_get_info`` (the source is
recorded in the report). A background sampler polls the device-level figure during
a bucket to catch its peak; NVML calls take no GPU memory.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from typing import Any, Optional

import torch

from bcgprof.report.ledger import Reading

# ----------------------------------------------------------------------- NVML


class DeviceMemory:
    """Device-level used memory of one CUDA device, through NVML or torch as fallback."""

    def __init__(self, device: torch.device):
        self.device = device
        self.source = "torch.cuda.mem_get_info"
        self.reason = ""
        self._nvml = None
        self._handle = None
        self._v2 = False
        self._lock = threading.Lock()  # NVML handles are shared with the sampler thread
        try:
            import pynvml

            pynvml.nvmlInit()
            self._handle = self._find_handle(pynvml)
            self._nvml = pynvml
            self._v2 = self._probe_v2()
            self.source = "nvml"
        except Exception as e:  # missing library, no permission, driver mismatch
            self.reason = f"{type(e).__name__}: {e}".strip()

    def _find_handle(self, pynvml):
        """The NVML handle of this CUDA device, matched by UUID (CUDA_VISIBLE_DEVICES reorders)."""
        props = torch.cuda.get_device_properties(self.device)
        uuid = getattr(props, "uuid", None)
        if uuid is not None:
            text = str(uuid)
            for candidate in (text, f"GPU-{text}"):
                try:
                    return pynvml.nvmlDeviceGetHandleByUUID(candidate)
                except pynvml.NVMLError:
                    continue
        bus = getattr(props, "pci_bus_id", None)
        if bus is not None:
            domain = getattr(props, "pci_domain_id", 0)
            dev = getattr(props, "pci_device_id", 0)
            return pynvml.nvmlDeviceGetHandleByPciBusId(f"{domain:08x}:{bus:02x}:{dev:02x}.0")
        return pynvml.nvmlDeviceGetHandleByIndex(self.device.index or 0)

    def _probe_v2(self) -> bool:
        nvml = self._nvml
        if nvml is None:  # not started: no v2 either (the call below would fail the same way)
            return False
        try:
            nvml.nvmlDeviceGetMemoryInfo(self._handle, version=nvml.nvmlMemory_v2)
            return True
        except Exception:
            return False

    def used(self) -> int:
        """Bytes in use on the device (all processes), as the driver counts them."""
        if self._nvml is None:
            free, total = torch.cuda.mem_get_info(self.device)
            return int(total - free)
        with self._lock:
            if self._v2:
                info = self._nvml.nvmlDeviceGetMemoryInfo(
                    self._handle, version=self._nvml.nvmlMemory_v2
                )
            else:
                info = self._nvml.nvmlDeviceGetMemoryInfo(self._handle)
        return int(info.used)

    def free(self) -> int:
        free, _ = torch.cuda.mem_get_info(self.device)
        return int(free)

    def process_used(self) -> Optional[int]:
        """This process's bytes on the device, where NVML reports per-process use."""
        if self._nvml is None:
            return None
        pid = os.getpid()
        try:
            with self._lock:
                procs = self._nvml.nvmlDeviceGetComputeRunningProcesses(self._handle)
        except Exception:
            return None
        for p in procs:
            if p.pid == pid and p.usedGpuMemory is not None:
                return int(p.usedGpuMemory)
        return None

    def gpu_name(self) -> str:
        return torch.cuda.get_device_name(self.device)

    def driver(self) -> str:
        if self._nvml is None:
            return ""
        try:
            v = self._nvml.nvmlSystemGetDriverVersion()
            return v.decode() if isinstance(v, bytes) else str(v)
        except Exception:
            return ""


class PeakSampler:
    """Polls device-used memory on a background thread; reports the peak of each window.

    The thread only calls NVML (or ``mem_get_info`` in fallback), so it allocates
    nothing on the GPU. ``interval_ms <= 0`` turns it off.
    """

    def __init__(self, memory: DeviceMemory, interval_ms: float):
        self.memory = memory
        self.interval = interval_ms / 1000.0
        self.samples = 0
        self._peak = 0
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        if self.interval > 0 and memory.source == "nvml":
            self._thread = threading.Thread(
                target=self._run, name="bcgprof-nvml-sampler", daemon=True
            )
            self._thread.start()

    @property
    def active(self) -> bool:
        return self._thread is not None

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                used = self.memory.used()
            except Exception:
                continue
            self.samples += 1
            if used > self._peak:
                self._peak = used

    def start_window(self, level: int) -> None:
        self._peak = level

    def window_peak(self, level: int) -> Optional[int]:
        """Highest device-used reading since start_window, or None when not sampling."""
        if not self.active:
            return None
        return max(self._peak, level)

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=1.0)


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
