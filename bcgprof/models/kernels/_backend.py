"""Which implementation a kernel call runs: Triton, the PyTorch reference, or shapes only.

* ``meta`` tensors: the allocations of the Triton path, on the meta device, and no launch.
* ``backend=None`` (the default): Triton for CUDA tensors when Triton imports, the reference
  everywhere else.
* ``backend="triton"`` forces the Triton kernels; on a CPU tensor that only works under the
  Triton interpreter, i.e. with ``TRITON_INTERPRET=1`` in the environment *before* the
  kernel modules are first imported (Triton decides between compiling and interpreting
  when a kernel is decorated). Tests use this.
* ``backend="reference"`` forces the plain PyTorch path.
"""

from __future__ import annotations

import functools
import importlib.util
import os

import torch

TRITON = "triton"
REFERENCE = "reference"
META = "meta"
BACKENDS = (TRITON, REFERENCE)


@functools.cache
def triton_available() -> bool:
    """True when ``import triton`` would succeed (it ships with CUDA builds of torch)."""
    return importlib.util.find_spec("triton") is not None


def interpreting() -> bool:
    """True when Triton kernels run under the interpreter (``TRITON_INTERPRET=1``)."""
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


def choose(device: torch.device, backend: str | None) -> str:
    """The path a call on ``device`` takes: TRITON, REFERENCE or META."""
    if device.type == "meta":
        return META
    if backend is None:
        return TRITON if device.type == "cuda" and triton_available() else REFERENCE
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS} or None, got {backend!r}")
    if backend == TRITON:
        if not triton_available():
            raise RuntimeError("backend='triton' needs the triton package")
        if device.type != "cuda" and not interpreting():
            raise RuntimeError(
                f"backend='triton' on a {device.type} tensor needs TRITON_INTERPRET=1 "
                "set before bcgprof's kernel modules are imported"
            )
    return backend
