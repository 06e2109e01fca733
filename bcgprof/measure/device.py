"""The device's memory through NVML (or ``torch.cuda.mem_get_info`` where NVML does not answer), and
a background sampler of its peak.

Mechanism: NVML's memory info of the CUDA device (matched by UUID, since CUDA_VISIBLE_DEVICES
reorders), its per-process list for this process's own use, and ``cudaMemGetInfo`` for free memory.
Invariant: no call here allocates device memory or synchronises the device. Cost: ``nvmlInit``
once (tens of milliseconds, with ``pynvml``'s import); a reading is one to three NVML or CUDA
queries, each well under a millisecond. Kept apart from :mod:`bcgprof.measure.memory` (which reads
the allocator and the graph pool, and imports the report's ledger) so that ``bcgprof record``'s
hook loads only this inside the recorded program.
"""

from __future__ import annotations

import os
import threading
from typing import Optional

import torch

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
