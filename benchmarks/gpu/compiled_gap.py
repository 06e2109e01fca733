"""Where examples/record/compiled.py's memory goes, phase by phase, natively (needs a GPU).

The program's own figure (free memory before its loop minus after) counts everything the loop
makes the device hold: Dynamo and Inductor compiling each shape, the cudagraph trees' warm-up
(``run_eager``) and recording (``record_function``), the replay, and the eager reference call.
``bcgprof record`` rows cover only the trees' windows. This script reads, after a
``torch.cuda.synchronize()``, the free memory, torch's reserved and allocated bytes at the edges of
every phase of every shape, with the trees' two methods wrapped to mark their windows, and prints
one line per phase: device used, torch reserved and the rest (device used minus reserved: CUDA
modules, cuBLAS and the context), each as a change since the phase began. The readings synchronise;
this is a measurement of the program, not a recording of it.

    python benchmarks/gpu/compiled_gap.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples" / "record"))
import loops

MIB = 1 << 20
ROWS: list[tuple[str, int, int, int]] = []


def reading() -> tuple[int, int, int]:
    torch.cuda.synchronize()
    free, total = torch.cuda.mem_get_info()
    return total - free, torch.cuda.memory_reserved(), torch.cuda.memory_allocated()


class Phase:
    """A context manager adding one row: the change in device used, reserved, allocated."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __enter__(self) -> Phase:
        self.start = reading()
        return self

    def __exit__(self, *exc: object) -> None:
        end = reading()
        ROWS.append((self.name, *(e - s for e, s in zip(end, self.start))))


def wrap_trees() -> None:
    """Mark the cudagraph trees' warm-up and recording windows (where bcgprof record's adapter opens
    its rows) as phases of their own."""
    from torch._inductor import cudagraph_trees as trees

    for method in ("run_eager", "record_function"):
        original = getattr(trees.CUDAGraphTreeManager, method)

        def wrapped(self, *args, _original=original, _method=method, **kwargs):
            with Phase(f"  inside {_method}"):
                return _original(self, *args, **kwargs)

        setattr(trees.CUDAGraphTreeManager, method, wrapped)


def main() -> None:
    wrap_trees()
    model = loops.build(layers=4)
    compiled = torch.compile(model, mode="reduce-overhead", dynamic=False)
    sizes = [64, 128, 256, 512]
    inputs = {s: torch.randn(s, loops.HIDDEN, device="cuda", dtype=torch.bfloat16) for s in sizes}
    first = reading()
    with torch.inference_mode():
        for size in sorted(sizes, reverse=True):
            for call, what in enumerate(("compile + warm-up", "recording", "replay")):
                with Phase(f"{size}: call {call + 1} ({what})"):
                    out = compiled(inputs[size])
            with Phase(f"{size}: eager reference"):
                torch.testing.assert_close(out, model(inputs[size]), rtol=2e-2, atol=2e-2)
    last = reading()
    print(f"{'phase':<36} {'used':>9} {'reserved':>9} {'allocated':>9} {'rest':>9}   (MiB)")
    inside = [0, 0]
    for name, used, reserved, allocated in ROWS:
        print(
            f"{name:<36} {used / MIB:>+9.1f} {reserved / MIB:>+9.1f} {allocated / MIB:>+9.1f} "
            f"{(used - reserved) / MIB:>+9.1f}"
        )
        if name.startswith("  inside"):
            inside[0] += used
            inside[1] += used - reserved
    used, reserved = last[0] - first[0], last[1] - first[1]
    print(
        f"the loop: device used {used / MIB:+.1f} MiB, reserved {reserved / MIB:+.1f} MiB,"
        f" rest {(used - reserved) / MIB:+.1f} MiB; inside the trees' windows "
        f"{inside[0] / MIB:+.1f} MiB (rest {inside[1] / MIB:+.1f}); outside them "
        f"{(used - inside[0]) / MIB:+.1f} MiB"
    )


if __name__ == "__main__":
    main()
