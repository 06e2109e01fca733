"""Regenerate ``bcgprof/analysis/predict/bands.json``, the evidence behind prediction bands, from the committed reports.

Every held-out list of a traced profile's configuration is predicted from the profile and its measured
device-used total kept; every layer set is predicted at full depth (device used and the free memory it
needs) and checked against each deeper capture (:mod:`bcgprof.analysis.predict.calibrate`). Prints each
residual, the leave-one-out check (does the band the other held-out lists give contain each list?), the
layer checks and the layer predictions' needs-free band.

    python benchmarks/calibrate_bands.py            # writes bcgprof/analysis/predict/bands.json
    python benchmarks/calibrate_bands.py --check    # exit 1 if the shipped file is stale
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MIB = 1 << 20


def main(argv: list[str]) -> int:
    from bcgprof.analysis.predict.bands import calibration_json, layer_needs_free_band, leave_one_out, write_calibration
    from bcgprof.analysis.predict.calibrate import build
    from bcgprof.report import read_report, read_run_info

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reports", type=Path, default=ROOT / "reports")
    parser.add_argument("--out", type=Path, default=ROOT / "bcgprof" / "analysis" / "predict" / "bands.json")
    parser.add_argument("--check", action="store_true", help="compare with --out instead of writing it")
    args = parser.parse_args(argv)
    cal, skipped = build(args.reports)
    for path, why in skipped:
        print(f"passed over {path}: {why}", file=sys.stderr)
    runs = {e.profile: read_report(args.reports.parent / e.profile).run for e in cal.lists}
    for c in leave_one_out(cal, runs):
        r = c.residual
        print(f"{r.report:50} {r.mode:15} {r.buckets:3d} buckets  error {r.error_bytes / MIB:+6.1f} MiB "
              f"({100 * r.error_bytes / r.measured_bytes:+.2f}%)  band of the others {-c.band.below / MIB:+.1f} to "
              f"{c.band.above / MIB:+.1f} MiB  {'inside' if c.inside else 'OUTSIDE'}")
    print(f"leave-one-out: {cal.leave_one_out.get('inside')} of {cal.leave_one_out.get('of')} inside")
    # each input's depth, read once from its run.json (the checks share their inputs, mode after mode)
    depth = {i: read_run_info(args.reports.parent / i / "run.json").layers for lc in cal.layers for i in lc.inputs}
    for lc in cal.layers:
        err = lc.predicted_bytes - lc.measured_bytes
        depths = "+".join(str(depth[i]) for i in lc.inputs)
        print(f"layers {lc.model:15} {lc.mode:15} {depths:>5} -> {lc.layers:2d} layers  error {err / MIB:+6.1f} MiB "
              f"({100 * err / lc.measured_bytes:+.2f}%)  band {(lc.low_bytes - lc.predicted_bytes) / MIB:+.1f} to "
              f"{(lc.high_bytes - lc.predicted_bytes) / MIB:+.1f} MiB  {'inside' if lc.inside else 'OUTSIDE'}"
              + (f"  needs free {lc.measured_needs_free_bytes / MIB:.0f} MiB, error "
                 f"{lc.needs_free_error_bytes / MIB:+.1f} MiB" if lc.needs_free_error_bytes is not None
                 and lc.measured_needs_free_bytes is not None else ""))
    band, source = layer_needs_free_band(cal)
    print(f"layer predictions' needs-free band: ±{band / MIB:.1f} MiB ({source})")
    if args.check:
        shipped = json.loads(args.out.read_text()) if args.out.exists() else None
        if shipped != calibration_json(cal):
            print(f"{args.out} is stale; run python benchmarks/calibrate_bands.py", file=sys.stderr)
            return 1
        print(f"{args.out} is up to date")
        return 0
    print(f"wrote {write_calibration(cal, args.out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
