"""Where examples/record/compiled.py's memory goes, phase by phase, natively (needs a GPU).

The program's own figure (free memory before its loop minus after) counts everything the loop
makes the device hold: Dynamo and Inductor compiling each shape, the cudagraph trees' warm-up
(``run_eager``) and recording (``record_function``), the replay, and the eager reference call.
``bcgprof record`` rows cover only the trees' windows. This script reads, after a
``torch.cuda.synchronize()``, the free memory, torch's reserved and allocated bytes and, through
NVML, this process's own bytes on the device at the edges of every phase of every shape, with
Inductor's compile (``compile_fx``) and the trees' two methods wrapped to mark their windows, and
prints one line per phase: device used, torch reserved, allocated, the rest (device used minus
reserved: CUDA modules, library handles, the context, other processes) and this process's own use,
each as a change since the phase began. Last, every process NVML lists on the device with its bytes
(compile workers, if they hold a context, show there). The readings synchronise; this is a
measurement of the program, not a recording of it.

    python benchmarks/gpu/compiled_gap.py
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples" / "record"))
import loops

MIB = 1 << 20
ROWS: list[tuple[str, int, int, int, int]] = []
COLUMNS = ("used", "reserved", "allocated", "rest", "own")

try:
    import pynvml

    pynvml.nvmlInit()
    HANDLE = pynvml.nvmlDeviceGetHandleByIndex(torch.cuda.current_device())
except Exception:  # no NVML: the own column reads 0
    pynvml, HANDLE = None, None


def processes() -> dict[int, int]:
    """pid -> bytes of every compute process NVML lists on the device."""
    if HANDLE is None:
        return {}
    out = {}
    for p in pynvml.nvmlDeviceGetComputeRunningProcesses(HANDLE):
        out[p.pid] = int(p.usedGpuMemory or 0)
    return out


def reading() -> tuple[int, int, int, int]:
    torch.cuda.synchronize()
    free, total = torch.cuda.mem_get_info()
    own = processes().get(os.getpid(), 0)
    return total - free, torch.cuda.memory_reserved(), torch.cuda.memory_allocated(), own


class Phase:
    """A context manager adding one row: the change in device used, reserved, allocated, own."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __enter__(self) -> Phase:
        self.start = reading()
        return self

    def __exit__(self, *exc: object) -> None:
        end = reading()
        ROWS.append((self.name, *(e - s for e, s in zip(end, self.start))))  # type: ignore[arg-type]


def wrap(owner: object, method: str, label: str) -> None:
    original = getattr(owner, method)

    def wrapped(*args, **kwargs):
        with Phase(f"  inside {label}"):
            return original(*args, **kwargs)

    setattr(owner, method, wrapped)


def wrap_phases() -> None:
    """Mark Inductor's compile and the cudagraph trees' warm-up and recording windows (where bcgprof
    record's adapter opens its rows) as phases of their own."""
    from torch._inductor import compile_fx
    from torch._inductor import cudagraph_trees as trees

    wrap(compile_fx, "compile_fx", "compile_fx")  # looked up by the inductor backend at each call
    for method in ("run_eager", "record_function"):
        original = getattr(trees.CUDAGraphTreeManager, method)

        def wrapped(self, *args, _original=original, _method=method, **kwargs):
            with Phase(f"  inside {_method}"):
                return _original(self, *args, **kwargs)

        setattr(trees.CUDAGraphTreeManager, method, wrapped)


def main() -> None:
    wrap_phases()
    model = loops.build(layers=4)
    compiled = torch.compile(model, mode="reduce-overhead", dynamic=False)
    sizes = [64, 128, 256, 512]
    inputs = {s: torch.randn(s, loops.HIDDEN, device="cuda", dtype=torch.bfloat16) for s in sizes}
    first = reading()
    before = processes()
    with torch.inference_mode():
        for size in sorted(sizes, reverse=True):
            for call, what in enumerate(("compile + warm-up", "recording", "replay")):
                with Phase(f"{size}: call {call + 1} ({what})"):
                    out = compiled(inputs[size])
            with Phase(f"{size}: eager reference"):
                torch.testing.assert_close(out, model(inputs[size]), rtol=2e-2, atol=2e-2)
    last = reading()
    print(f"{'phase':<36}" + "".join(f"{c:>10}" for c in COLUMNS) + "   (MiB)")
    inside = {"compile_fx": [0, 0], "trees": [0, 0]}
    for name, used, reserved, allocated, own in ROWS:
        values = (used, reserved, allocated, used - reserved, own)
        print(f"{name:<36}" + "".join(f"{v / MIB:>+10.1f}" for v in values))
        if name.startswith("  inside"):
            where = "compile_fx" if "compile_fx" in name else "trees"
            inside[where][0] += used
            inside[where][1] += used - reserved
    used, reserved = last[0] - first[0], last[1] - first[1]
    print(
        f"the loop: device used {used / MIB:+.1f} MiB, reserved {reserved / MIB:+.1f} MiB, rest "
        f"{(used - reserved) / MIB:+.1f} MiB, this process {(last[3] - first[3]) / MIB:+.1f} MiB; "
        f"inside compile_fx {inside['compile_fx'][0] / MIB:+.1f} MiB (rest "
        f"{inside['compile_fx'][1] / MIB:+.1f}); inside the trees' windows "
        f"{inside['trees'][0] / MIB:+.1f} MiB (rest {inside['trees'][1] / MIB:+.1f})"
    )
    after = processes()
    for pid in sorted(set(before) | set(after)):
        mine = " (this process)" if pid == os.getpid() else ""
        print(
            f"process {pid}{mine}: {before.get(pid, 0) / MIB:.1f} MiB before the loop, "
            f"{after.get(pid, 0) / MIB:.1f} MiB after"
        )


if __name__ == "__main__":
    main()
