"""Eager forward time and transient memory of a preset's full stack at T tokens (GPU).

    PYTHONPATH=<tree> python benchmarks/gpu/forward_time.py [--model gpt-oss-20b] [--tokens 16384]

Run it with PYTHONPATH pointing at two checkouts to compare them: it uses only
``bcgprof.models.load``. Prints one JSON line: median milliseconds of 5 forwards after 2
warm-ups (CUDA events), and the peak allocation above the weights.
"""

import argparse
import json
import statistics

import torch


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="gpt-oss-20b")
    ap.add_argument("--tokens", type=int, default=16384)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    import bcgprof
    from bcgprof import models

    model = models.load(args.model, device="cuda")
    T = args.tokens
    ids = torch.randint(0, 1000, (T,), device="cuda")
    pos = torch.arange(T, device="cuda")
    with torch.no_grad():
        for _ in range(2):
            model(ids, pos)
        torch.cuda.synchronize()
        times = []
        for _ in range(args.repeats):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            model(ids, pos)
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end))
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        out = model(ids, pos)
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated() - base
    print(json.dumps({"tree": bcgprof.__file__, "model": args.model, "tokens": T, "median_ms": statistics.median(times),
                      "all_ms": [round(t, 2) for t in times], "peak_above_weights_bytes": peak,
                      "finite": bool(torch.isfinite(out).all())}))


if __name__ == "__main__":
    main()
