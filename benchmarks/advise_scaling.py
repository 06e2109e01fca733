"""How long ``bcgprof advise`` takes on long bucket lists, and the work behind it.

Synthesises, in a temporary directory, traced profiles of the stack in ``tests/traced_profile.py``
(every bucket's allocator trace produced by the allocator model, in the format a GPU capture
writes) at 256, 512, 1,024, 2,048 and 4,096 buckets (16, 32, ... tokens; per-bucket, shared and
shared-largest modes), then runs ``bcgprof advise --from P --budget B --mode M -f json`` in a fresh
interpreter per mode, as users run it, and prints its wall time with the work it did: exact list
predictions and buckets replayed through the allocator model (the interpreter runs the CLI's own
entry point with ``advise`` wrapped to print ``Advice.work`` to stderr). The budget is the same at
every size (default 2 GiB): the largest bucket alone grows with the list, so the margin above it shrinks.

    python benchmarks/advise_scaling.py [--buckets 256,512,1024,2048,4096] [--budget 2GiB] [--modes ...]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODES = ("per-bucket", "shared", "shared-largest")
# the CLI's entry point, with the advisor's work printed to stderr as its last line
WRAPPED = """
import json, sys
import bcgprof.analysis.predict.advise as advise_module
from bcgprof.cli import main
inner = advise_module.advise
def advise(*args, **kwargs):
    advice = inner(*args, **kwargs)
    print("WORK " + json.dumps(advice.work), file=sys.stderr)
    return advice
advise_module.advise = advise
sys.argv = ["bcgprof", *sys.argv[1:]]
main()
"""


def profile(directory: Path, buckets: int) -> float:
    """Write the synthetic traced profile of ``buckets`` buckets; returns the seconds it took."""
    from traced_profile import write_profile  # tests/ is on the path (main)

    start = time.perf_counter()
    write_profile(directory, [16 * (i + 1) for i in range(buckets)], MODES)
    return time.perf_counter() - start


def advise(report: Path, budget: str, mode: str) -> tuple[float, dict, dict]:
    """(wall seconds, the advice's JSON, its work) of one ``bcgprof advise`` in a fresh interpreter."""
    command = [sys.executable, "-c", WRAPPED, "advise", "--from", str(report), "--budget", budget, "--mode", mode,
               "-f", "json"]
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"advise --mode {mode} on {report} exited {done.returncode}: {done.stderr.strip()[-500:]}")
    work = next(json.loads(line[5:]) for line in reversed(done.stderr.splitlines()) if line.startswith("WORK "))
    return seconds, json.loads(done.stdout), work


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--buckets", default="256,512,1024,2048,4096", help="comma-separated list sizes")
    parser.add_argument("--budget", default="2GiB")
    parser.add_argument("--modes", default=",".join(MODES))
    args = parser.parse_args()
    sizes = [int(n) for n in args.buckets.split(",")]
    sys.path.insert(0, str(ROOT / "tests"))
    modes = args.modes.split(",")
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}, "
          f"budget {args.budget}")
    print(f"{'buckets':>8} {'mode':<15}{'seconds':>9}{'predictions':>13}{'bucket replays':>16}"
          f"{'advised':>9}{'padding':>9}")
    with tempfile.TemporaryDirectory() as tmp:
        for n in sizes:
            report = Path(tmp, f"p{n}")
            wrote = profile(report, n)
            for mode in modes:
                seconds, advice, work = advise(report, args.budget, mode)
                print(f"{n:>8} {mode:<15}{seconds:>8.1f}s{work['predictions']:>13}{work['bucket_replays']:>16}"
                      f"{len(advice['buckets']):>9}{advice['expected_padding_pct']:>8.2f}%", flush=True)
            print(f"{'':>8} (profile written in {wrote:.1f} s)", flush=True)


if __name__ == "__main__":
    main()
