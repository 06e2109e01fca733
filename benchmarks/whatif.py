"""How long the what-if commands take, beside ``show`` on the same report: cold (no cache) and warm.

``predict --buckets`` and ``advise`` read a profile's allocator traces, check each against the
report's measured pools and replay them; the first command on a trace's content does that work and
keeps what it learnt under the user's cache directory
(``bcgprof.analysis.predict.trace_cache``), and the next one reads it from there. Each command runs
in a fresh interpreter, N rounds, the commands taking turns (one untimed round first, which also
fills the warm cache), so that a busy machine slows all alike:

* cold: every run with an empty cache directory of its own (``XDG_CACHE_HOME`` set to a new one);
* warm: every run with the one cache directory the untimed round filled.

It prints each command's median wall time, cold and warm, and the warm time over ``show``'s on the
same report, with the machine's load average (1 minute) before and after: other work on the machine
slows every command alike. ``--max-ratio R`` makes that ratio (for predict and advise, warm) an exit
code.

    python benchmarks/whatif.py                  # 3 rounds
    python benchmarks/whatif.py --runs 5 --max-ratio 3
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROFILES = {  # report -> (predict's --buckets, advise's options)
    "reports/gpt-oss-20b-h200-traced": ("1024,2048,4096,8192", ["--budget", "2.2GiB"]),
    "reports/llama-3.1-8b-h200-traced": (
        "1024,2048,4096,8192",
        ["--budget", "3.3GiB", "--mode", "per-bucket", "--free", "4.75GiB"],
    ),
}


def bcgprof() -> list[str]:
    """The console script beside this interpreter, else ``python -m bcgprof``."""
    script = Path(sys.executable).with_name("bcgprof")
    found = str(script) if script.is_file() else shutil.which("bcgprof")
    return [found] if found else [sys.executable, "-m", "bcgprof"]


def commands() -> list[tuple[str, str, list[str]]]:
    """(report, label, argv) of every command timed."""
    cli = bcgprof()
    out = []
    for report, (buckets, advice) in PROFILES.items():
        out += [
            (report, "show", [*cli, "show", report]),
            (
                report,
                f"predict --buckets {buckets}",
                [*cli, "predict", "--from", report, "--buckets", buckets],
            ),
            (report, f"advise {' '.join(advice)}", [*cli, "advise", "--from", report, *advice]),
        ]
    return out


def run_once(argv: list[str], cache: Path) -> float:
    env = {k: v for k, v in os.environ.items() if k not in ("TTY_COMPATIBLE", "FORCE_COLOR")}
    env["XDG_CACHE_HOME"] = str(cache)
    start = time.perf_counter()
    done = subprocess.run(
        argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=ROOT, env=env
    )
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(
            f"error: {' '.join(argv)} exited {done.returncode}: {done.stderr.decode()[-300:]}"
        )
    return elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3, help="timed rounds (default 3)")
    parser.add_argument(
        "--max-ratio",
        type=float,
        default=None,
        help="exit 1 if a warm predict or advise takes more than this many times show",
    )
    args = parser.parse_args()
    runs = commands()
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="bcgprof-whatif-") as tmp:
        warm = Path(tmp) / "warm"
        for _, _, argv in runs:  # untimed: the file cache, and the warm cache directory
            run_once(argv, warm)
        cold_times: list[list[float]] = [[] for _ in runs]
        warm_times: list[list[float]] = [[] for _ in runs]
        for n in range(args.runs):
            for i, (_, _, argv) in enumerate(runs):
                cold = Path(tmp) / f"cold-{n}-{i}"
                cold_times[i].append(run_once(argv, cold))
                shutil.rmtree(cold, ignore_errors=True)
                warm_times[i].append(run_once(argv, warm))
    cold_med = [statistics.median(t) for t in cold_times]
    warm_med = [statistics.median(t) for t in warm_times]
    show = {report: warm_med[i] for i, (report, label, _) in enumerate(runs) if label == "show"}
    print(
        f"median of {args.runs} runs each, seconds "
        "(cold: no cache; warm: the cache filled by an earlier run); "
        f"load average {load_before:.2f} before, {os.getloadavg()[0]:.2f} after"
    )
    print(f"{'report':<34} {'command':<58} {'cold':>7} {'warm':>7} {'warm/show':>10}")
    worst = 0.0
    for i, (report, label, _) in enumerate(runs):
        ratio = warm_med[i] / show[report]
        if label != "show":
            worst = max(worst, ratio)
        print(f"{report:<34} {label:<58} {cold_med[i]:>7.2f} {warm_med[i]:>7.2f} {ratio:>9.1f}x")
    if args.max_ratio is not None and worst > args.max_ratio:
        print(
            f"a warm predict or advise took {worst:.1f}x show, more than {args.max_ratio}x",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
