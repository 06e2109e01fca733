"""Wall time of `bcgprof capture` split into its parts, and the NVML sampler's overhead.

    python -m bcgprof.benchmark [--model gpt-oss-20b] [--num-layers N] [--buckets SPEC] [--out DIR]

Runs the capture command (all three modes, each in its own process) and prints,
per mode, model build, pre-warm, warm-up, capture, measurement and replay-check
times from the report. Then captures the per-bucket mode twice more, with the
sampler on and off, and reports the capture-time overhead of sampling. Figures are
wall-clock seconds on whatever GPU it runs on; nothing here is a test.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

from bcgprof.options import CaptureOptions
from bcgprof.report import read_report
from bcgprof.runner import run_capture

PARTS = ("build_s", "prewarm_s", "warmup_s", "capture_s", "measure_s", "verify_s", "wall_s")


def _capture(base: CaptureOptions, out: Path, **changes) -> tuple[float, dict]:
    opts = CaptureOptions(**{**base.__dict__, **changes, "out": out})
    start = time.perf_counter()
    outcome = run_capture(opts)
    wall = time.perf_counter() - start
    if outcome.exit_code != 0:
        sys.exit(f"capture into {out} failed with exit code {outcome.exit_code}")
    return wall, read_report(out).run.extra.get("modes", {})


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="gpt-oss-20b")
    ap.add_argument("--num-layers", type=int, default=None)
    ap.add_argument("--buckets", default=None, help="bucket spec (default: sglang-prefill up to 16384)")
    ap.add_argument("--sample-interval-ms", type=float, default=2.0)
    ap.add_argument("--overhead-mode", default="per-bucket", help="mode captured with and without sampling")
    ap.add_argument("--out", type=Path, default=None, help="keep the reports here (default: a temporary dir)")
    ap.add_argument("--json", type=Path, default=None, help="write the figures to this JSON file")
    args = ap.parse_args(argv)

    root = args.out or Path(tempfile.mkdtemp(prefix="bcgprof-bench-"))
    base = CaptureOptions(model=args.model, num_layers=args.num_layers, buckets=args.buckets,
                          sample_interval_ms=args.sample_interval_ms, command="python -m bcgprof.benchmark")
    total_wall, modes = _capture(base, root / "default")
    _, sampled = _capture(base, root / "sampled", modes=[args.overhead_mode])
    _, unsampled = _capture(base, root / "unsampled", modes=[args.overhead_mode], sample_interval_ms=0.0)
    on = sampled[args.overhead_mode]["capture_s"] + sampled[args.overhead_mode]["warmup_s"]
    off = unsampled[args.overhead_mode]["capture_s"] + unsampled[args.overhead_mode]["warmup_s"]
    figures = {
        "model": args.model, "num_layers": args.num_layers, "buckets": args.buckets or "sglang-prefill",
        "default_command_wall_s": round(total_wall, 2), "modes": modes,
        "sampler": {"mode": args.overhead_mode, "interval_ms": args.sample_interval_ms,
                    "warmup_plus_capture_s_sampled": on, "warmup_plus_capture_s_unsampled": off,
                    "overhead_pct": round(100.0 * (on - off) / off, 2) if off else None,
                    "samples": sampled[args.overhead_mode].get("sampler_samples")},
    }
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    print(f"\nbenchmark: {args.model}, layers {args.num_layers or 'all'}; default command {total_wall:.1f} s wall")
    print(f"{'mode':<11}" + "".join(f"{p[:-2]:>10}" for p in PARTS))
    for mode, t in modes.items():
        print(f"{mode:<11}" + "".join(f"{t.get(p, 0):>10.2f}" for p in PARTS))
    s = figures["sampler"]
    print(f"sampler overhead ({s['mode']}, {s['interval_ms']} ms interval, {s['samples']} samples): "
          f"warm-up+capture {on:.2f} s sampled vs {off:.2f} s unsampled = {s['overhead_pct']}%")
    if args.out is None:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
