"""The capture stream: one per device, made on first use and kept for the process's life.

Mechanism: every eager warm-up run, capture and replay of a process runs on the stream
:func:`capture_stream` gives for its device, made once and cached in a module-level table.

Invariant: one stream per device, whatever the number of modes, phases or captures in the process,
since cuBLAS keeps a workspace per stream for the life of the process.

Cost: one CUDA stream (and the libraries' workspaces for it) per device used.
"""

from __future__ import annotations

import torch

_capture_streams: dict[torch.device, torch.cuda.Stream] = {}


def capture_stream(device: torch.device) -> torch.cuda.Stream:
    """One capture stream per device, reused by every capture in the process.

    cuBLAS keeps a workspace per stream for the life of the process; a new stream
    per mode would leave one more workspace behind each time.
    """
    device = torch.device(device)
    if device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    if device not in _capture_streams:
        _capture_streams[device] = torch.cuda.Stream(device)
    return _capture_streams[device]
