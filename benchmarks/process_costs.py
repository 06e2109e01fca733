"""What one mode process pays before its first bucket, step by step (needs a CUDA GPU).

Runs, in this fresh process, the steps a mode process takes up to its first bucket: importing
torch, the preload (everything else the mode imports, done before the process is released),
the CUDA context, NVML, the model build and the pre-warm, each under a timer; the build and the
pre-warm also under cProfile, whose top entries by cumulative time are printed. Then one eager
forward at the largest bucket, with the share of its wall spent in the attention the breakable
graph runs eagerly. Last, ``--passes`` eager passes over every bucket, largest first, as the
warm-up's first runs go: each pass's wall and its GPU time (CUDA events), so that what the first
sight of a shape costs shows as the first pass's excess over the next. Prints one table per part;
``--json FILE`` writes the figures.

    python benchmarks/process_costs.py --model gpt-oss-20b --num-layers 2 [--buckets sglang-prefill]
"""

from __future__ import annotations

import time

START = time.perf_counter()

import argparse  # noqa: E402
import cProfile  # noqa: E402
import functools  # noqa: E402
import io  # noqa: E402
import json  # noqa: E402
import pstats  # noqa: E402
from pathlib import Path  # noqa: E402


def profiled(label: str, fn, top: int, notes: dict):
    """``fn()`` under cProfile; its top entries by cumulative time go to ``notes[label]``."""
    prof = cProfile.Profile()
    result = prof.runcall(fn)
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("cumulative").print_stats(top)
    notes[label] = out.getvalue()
    return result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="gpt-oss-20b")
    ap.add_argument("--num-layers", type=int, default=None)
    ap.add_argument("--buckets", default="sglang-prefill")
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--passes", type=int, default=2, help="eager passes over every bucket (default 2)")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()

    steps: dict[str, float] = {}
    notes: dict[str, str] = {}

    def step(label: str, fn, profile: bool = False):
        start = time.perf_counter()
        result = profiled(label, fn, args.top, notes) if profile else fn()
        steps[label] = time.perf_counter() - start
        return result

    torch = step("import torch", lambda: __import__("torch"))
    from bcgprof.options import CaptureOptions

    opts = CaptureOptions(model=args.model, buckets=args.buckets, num_layers=args.num_layers)
    from bcgprof.measure import mode

    step("preload (other imports)", lambda: mode._preload(opts))
    device = torch.device("cuda:0")
    step("CUDA context", lambda: (torch.cuda.set_device(device), torch.cuda.init(),
                                  torch.empty(1, device=device), torch.cuda.synchronize()))
    from bcgprof.buckets import parse_buckets
    from bcgprof.measure.capture import Capturer
    from bcgprof.measure.device import DeviceMemory
    from bcgprof.measure.workload import build_workload
    from bcgprof.spec import resolve_model

    memory = step("NVML", lambda: DeviceMemory(device))
    spec = resolve_model(args.model)
    buckets = parse_buckets(args.buckets, max_tokens=opts.max_tokens, max_bs=opts.max_bs)
    workload = step("build", lambda: build_workload(
        spec, weights=opts.weights, experts=opts.experts, num_layers=args.num_layers, device=device,
        max_tokens=max(buckets), seed=opts.seed), profile=True)
    capturer = Capturer(workload.fn, workload.inputs, buckets, opts, mode="per-bucket", device=device,
                        memory=memory)
    step("pre-warm", capturer._prewarm, profile=True)
    steps["process so far"] = time.perf_counter() - START

    # one eager forward at the largest bucket, and the eager attention's share of it
    from bcgprof.models.layers import attention as attention_module

    inner = attention_module.attention_core
    spent = [0.0]

    @functools.wraps(inner)
    def timed_core(*a, **k):
        torch.cuda.synchronize()
        start = time.perf_counter()
        inner(*a, **k)
        torch.cuda.synchronize()
        spent[0] += time.perf_counter() - start

    forward = {}
    for label, core in (("plain", inner), ("attention timed", timed_core)):
        attention_module.attention_core = core
        torch.cuda.synchronize()
        start = time.perf_counter()
        out = capturer._eager(capturer.buckets[0])  # the largest
        torch.cuda.synchronize()
        forward[label] = time.perf_counter() - start
        del out
    attention_module.attention_core = inner
    forward["attention"] = spent[0]

    passes = []
    for _ in range(args.passes):
        events = []
        torch.cuda.synchronize()
        start = time.perf_counter()
        for bucket in capturer.buckets:
            begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            begin.record()
            out = capturer._eager(bucket)
            end.record()
            del out
            events.append((begin, end))
        torch.cuda.synchronize()
        passes.append({"wall_s": time.perf_counter() - start,
                       "gpu_s": sum(b.elapsed_time(e) for b, e in events) / 1000.0})

    print(f"{'step':<28}{'seconds':>10}")
    for label, seconds in steps.items():
        print(f"{label:<28}{seconds:>10.3f}")
    print(f"\neager forward at {max(buckets)} tokens: {forward['plain']:.3f} s; with the attention timed "
          f"{forward['attention timed']:.3f} s, of which attention {forward['attention']:.3f} s")
    for n, one in enumerate(passes, 1):
        print(f"eager pass {n} over {len(capturer.buckets)} buckets: wall {one['wall_s']:.3f} s, "
              f"GPU {one['gpu_s']:.3f} s")
    for label, text in notes.items():
        print(f"\n--- cProfile: {label} (top {args.top} by cumulative time)\n{text}")
    if args.json is not None:
        args.json.write_text(json.dumps({"steps": steps, "forward": forward, "passes": passes, "profiles": notes}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
