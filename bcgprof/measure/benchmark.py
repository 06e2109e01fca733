"""Wall time of `bcgprof capture` split into its parts, and the NVML sampler's overhead.

    python -m bcgprof.measure.benchmark [--model gpt-oss-20b] [--num-layers N] [--buckets SPEC]
    [--out DIR]
                                [--modes M,M] [--no-sampler-check]
    python -m bcgprof.measure.benchmark --build-profile [--model gpt-oss-20b]

Runs the capture command (every mode, each in its own process) and prints, per mode,
model build, pre-warm, warm-up, capture, measurement and replay-check times from the
report, the whole command's wall time, and its ratio to the warm-up plus capture time
(what the command cannot do without; the rest is fixed cost). Then, unless told not to,
captures the per-bucket mode twice more, with the sampler on and off, and reports the
capture-time overhead of sampling. ``--build-profile`` times the stages of one model
build instead. Figures are wall-clock seconds on whatever GPU it runs on; nothing here
is a test.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

from bcgprof.errors import CaptureError
from bcgprof.measure.runner import run_capture
from bcgprof.options import CaptureOptions
from bcgprof.report import read_report
from bcgprof.vocab import Mode

PARTS = ("build_s", "prewarm_s", "warmup_s", "capture_s", "measure_s", "verify_s", "wall_s")


def _capture(base: CaptureOptions, out: Path, **changes) -> tuple[float, dict]:
    opts = CaptureOptions(**{**base.__dict__, **changes, "out": out})
    start = time.perf_counter()
    outcome = run_capture(opts)
    wall = time.perf_counter() - start
    if outcome.exit_code != 0:
        raise CaptureError(
            f"capture into {out} failed with exit code {outcome.exit_code}; see its report"
        )
    return wall, read_report(out).run.extra.get("modes", {})


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="gpt-oss-20b")
    ap.add_argument("--num-layers", type=int, default=None)
    ap.add_argument(
        "--buckets", default=None, help="bucket spec (default: sglang-prefill up to 16384)"
    )
    ap.add_argument("--sample-interval-ms", type=float, default=2.0)
    ap.add_argument(
        "--overhead-mode",
        default=Mode.PER_BUCKET.value,
        help="mode captured with and without sampling",
    )
    ap.add_argument(
        "--out", type=Path, default=None, help="keep the reports here (default: a temporary dir)"
    )
    ap.add_argument("--json", type=Path, default=None, help="write the figures to this JSON file")
    ap.add_argument("--modes", default=None, help="comma list of modes (default: every mode)")
    ap.add_argument(
        "--no-sampler-check", action="store_true", help="skip the sampler on/off captures"
    )
    ap.add_argument(
        "--build-profile", action="store_true", help="time the stages of one model build and exit"
    )
    args = ap.parse_args(argv)
    if args.build_profile:
        return profile_build(args.model, args.num_layers)

    root = args.out or Path(tempfile.mkdtemp(prefix="bcgprof-bench-"))
    base = CaptureOptions(
        model=args.model,
        num_layers=args.num_layers,
        buckets=args.buckets,
        sample_interval_ms=args.sample_interval_ms,
        command="python -m bcgprof.measure.benchmark",
    )
    if args.modes:
        base.modes = args.modes.split(",")
    total_wall, modes = _capture(base, root / "default")
    work = sum(t.get("warmup_s", 0) + t.get("capture_s", 0) for t in modes.values())
    figures = {
        "model": args.model,
        "num_layers": args.num_layers,
        "buckets": args.buckets or "sglang-prefill",
        "default_command_wall_s": round(total_wall, 2),
        "warmup_plus_capture_s": round(work, 2),
        "wall_over_warmup_plus_capture": round(total_wall / work, 3) if work else None,
        "modes": modes,
    }
    if not args.no_sampler_check:
        _, sampled = _capture(base, root / "sampled", modes=[args.overhead_mode])
        _, unsampled = _capture(
            base, root / "unsampled", modes=[args.overhead_mode], sample_interval_ms=0.0
        )
        on = sampled[args.overhead_mode]["capture_s"] + sampled[args.overhead_mode]["warmup_s"]
        off = unsampled[args.overhead_mode]["capture_s"] + unsampled[args.overhead_mode]["warmup_s"]
        figures["sampler"] = {
            "mode": args.overhead_mode,
            "interval_ms": args.sample_interval_ms,
            "warmup_plus_capture_s_sampled": on,
            "warmup_plus_capture_s_unsampled": off,
            "overhead_pct": round(100.0 * (on - off) / off, 2) if off else None,
            "samples": sampled[args.overhead_mode].get("sampler_samples"),
        }
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    print(
        f"\nbenchmark: {args.model}, layers {args.num_layers or 'all'}; command {total_wall:.1f} "
        "s wall, "
        f"warm-up + capture {work:.1f} s: {figures['wall_over_warmup_plus_capture']}x"
    )
    print(f"{'mode':<15}" + "".join(f"{p[:-2]:>10}" for p in PARTS))
    for mode, t in modes.items():
        print(f"{mode:<15}" + "".join(f"{t.get(p, 0):>10.2f}" for p in PARTS))
    if "sampler" in figures:
        s = figures["sampler"]
        print(
            f"sampler overhead ({s['mode']}, {s['interval_ms']} ms interval, {s['samples']} "
            "samples): "
            f"warm-up+capture {s['warmup_plus_capture_s_sampled']:.2f} s sampled vs "
            f"{s['warmup_plus_capture_s_unsampled']:.2f} s unsampled = {s['overhead_pct']}%"
        )
    if args.out is None:
        shutil.rmtree(root, ignore_errors=True)
    return 0


def profile_build(model: str, num_layers=None) -> int:
    """Time each stage of building ``model`` with dummy weights on cuda:0, in this fresh process."""
    stages = []
    start = last = time.perf_counter()

    def mark(name: str) -> None:
        nonlocal last
        now = time.perf_counter()
        stages.append((name, now - last))
        last = now

    import torch

    mark("import torch")
    torch.cuda.set_device(0)
    torch.empty(1, device="cuda")
    torch.cuda.synchronize()
    mark("CUDA context")
    from bcgprof.models import build_meta, torch_dtype
    from bcgprof.models.weights import init_dummy
    from bcgprof.spec import resolve_model

    spec = resolve_model(model)
    mark("import bcgprof")
    module = build_meta(spec, num_layers)
    mark("build on meta")
    module = module.to(dtype=torch_dtype(spec.dtype))
    mark("cast on meta")
    module = module.to_empty(device="cuda")
    torch.cuda.synchronize()
    mark("allocate (to_empty)")
    init_dummy(module, 0)
    torch.cuda.synchronize()
    mark("fill dummy weights")
    module.reset_buffers()
    torch.cuda.synchronize()
    mark("reset buffers")
    total = time.perf_counter() - start
    size = sum(p.numel() * p.element_size() for p in module.parameters())
    print(
        f"build profile: {model}, {len(module.layers)} layers, {size / 2**30:.1f} GiB of weights, "
        f"{total:.2f} s"
    )
    for name, seconds in stages:
        print(f"  {name:<22}{seconds:>8.3f} s")
    return 0


def run(argv=None) -> int:
    """:func:`main` with bcgprof's error rule: a problem the user can fix is one line and exit 2."""
    from bcgprof.errors import EXIT_USAGE, BcgprofError, one_line

    try:
        return main(argv)
    except BcgprofError as e:
        print(f"error: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # no GPU, no driver: one line, never a traceback
        print(
            f"error: {one_line(e)}; the benchmark needs a CUDA GPU and a working bcgprof capture",
            file=sys.stderr,
        )
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(run())
