"""What each part of one ``bcgprof record`` reading costs, in a process that has captured graphs
(needs a GPU).

Captures ``examples/record/loops.py``'s model for 16 sizes into one pool (as graph_loop.py does),
then times, over ``--repeat`` calls each, every step the hook's reading and bucket take
(:meth:`bcgprof.record.hook.Recorder._device_reading`, its ``PeakSampler``): torch's memory
statistics, the allocator snapshot walk, NVML's device figure, NVML's process list, free memory
through CUDA, the whole reading, and a sampler started and closed. Prints the median and the 90th
percentile of each, in microseconds. The first-use imports the hook makes once per process are timed
too, each in a fresh interpreter.

    python benchmarks/gpu/reading_cost.py [--repeat 200]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "examples" / "record"))
sys.path.insert(0, str(ROOT))
import loops

IMPORTS = ("bcgprof.measure.device", "bcgprof.measure.memory", "pynvml", "cuda.bindings.runtime")


def timed(fn, repeat: int) -> tuple[float, float]:
    """(median, 90th percentile) of ``fn``'s time, microseconds."""
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1e6)
    samples.sort()
    return statistics.median(samples), samples[int(0.9 * (len(samples) - 1))]


def import_ms(module: str) -> str:
    """A module's first import after torch's, in a fresh interpreter, in milliseconds."""
    code = (
        "import time, torch; t = time.perf_counter(); "
        f"import {module}; print((time.perf_counter() - t) * 1e3)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
    )
    return f"{float(done.stdout):.1f} ms" if done.returncode == 0 else "not importable"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeat", type=int, default=200)
    a = p.parse_args()
    for module in IMPORTS:
        print(f"import {module:<28} {import_ms(module)}")

    from bcgprof.measure.device import DeviceMemory, PeakSampler
    from bcgprof.record.hook import Recorder

    model = loops.build()
    sizes = [256 * (i + 1) for i in range(16)]
    static = torch.randn(max(sizes), loops.HIDDEN, device="cuda", dtype=torch.bfloat16)
    pool = torch.cuda.graph_pool_handle()
    graphs = []
    with torch.inference_mode():
        for size in sorted(sizes, reverse=True):
            graph = torch.cuda.CUDAGraph()
            model(static[:size])
            with torch.cuda.graph(graph, pool=pool):
                model(static[:size])
            graphs.append(graph)
    device = torch.device("cuda", torch.cuda.current_device())
    started = time.perf_counter()
    memory = DeviceMemory(device)
    print(f"DeviceMemory (nvmlInit, handle)   {(time.perf_counter() - started) * 1e3:.1f} ms")
    rec = Recorder("/tmp/bcgprof-reading-cost", [], 5.0)
    rec._memory = memory

    def sampler() -> None:
        s = PeakSampler(memory, 5.0)
        s.start_window(0)
        s.window_peak(0)
        s.close()

    steps = {
        "torch.cuda.memory_stats": lambda: torch.cuda.memory_stats(device),
        "torch.cuda.memory_snapshot": torch.cuda.memory_snapshot,
        "NVML device used": memory.used,
        "NVML process list": memory.process_used,
        "cudaMemGetInfo": memory.free,
        "the hook's whole reading": rec._device_reading,
        "a sampler started and closed": sampler,
    }
    segments = len(torch.cuda.memory_snapshot())
    print(f"{len(graphs)} graphs captured; the allocator holds {segments} segments")
    print(f"{'step':<34} {'median':>10} {'p90':>10}   (us)")
    for name, fn in steps.items():
        median, p90 = timed(fn, a.repeat)
        print(f"{name:<34} {median:>10.1f} {p90:>10.1f}")


if __name__ == "__main__":
    main()
