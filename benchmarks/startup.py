"""How long a read command takes to start and finish, against a bare ``import typer, rich``.

Each command runs N times, each in a fresh interpreter, the commands taking turns (one untimed
round first, to warm the file cache); the median wall time of each is printed with its ratio to
the baseline's.
Reading a report imports neither torch nor the model code, nor the modules of the commands that
do not run; what is left is the report reader, the views and typer's parsing of one command.
Output goes to a pipe (/dev/null), as in CI or ``| less``: the tables are drawn as plain text,
without rich's console. The last row draws them as on a terminal (``TTY_COMPATIBLE=1``: rich's
boxed tables, rich's console loaded). ``--max-ratio R`` makes the ratio of ``show`` (into a pipe)
an exit code.
The package is byte-compiled first, as ``pip install`` leaves it: an editable checkout under
``PYTHONDONTWRITEBYTECODE=1`` would otherwise compile bcgprof's sources on every run (about
40 ms of each, on a 2-core machine), which no installed copy pays.

    python benchmarks/startup.py            # 15 runs each
    python benchmarks/startup.py --runs 31 --max-ratio 4
"""

from __future__ import annotations

import argparse
import compileall
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REPORTS = ROOT / "reports"

# Marks a command to run as on a terminal: rich's tables (TTY_COMPATIBLE=1), without colour codes.
TERMINAL = "<terminal>"
_PIPE = {k: v for k, v in os.environ.items() if k not in ("TTY_COMPATIBLE", "FORCE_COLOR")}
_TERMINAL = {**_PIPE, "TTY_COMPATIBLE": "1", "NO_COLOR": "1"}


def bcgprof() -> list[str]:
    """The console script beside this interpreter, else ``python -m bcgprof``."""
    script = Path(sys.executable).with_name("bcgprof")
    found = str(script) if script.is_file() else shutil.which("bcgprof")
    return [found] if found else [sys.executable, "-m", "bcgprof"]


def commands() -> list[tuple[str, list[str]]]:
    cli = bcgprof()
    return [
        ('python -c "import typer, rich"', [sys.executable, "-c", "import typer, rich"]),
        ("bcgprof show reports/gpt-oss-20b-h200", [*cli, "show", str(REPORTS / "gpt-oss-20b-h200")]),
        ("bcgprof show ... --section summary", [*cli, "show", str(REPORTS / "gpt-oss-20b-h200"), "--section", "summary"]),
        ("bcgprof --version", [*cli, "--version"]),
        ("bcgprof gate (two committed reports)", [*cli, "gate", "--baseline", str(REPORTS / "gpt-oss-20b-h200-unfused"),
                                                  "--current", str(REPORTS / "gpt-oss-20b-h200-unfused-rerun")]),
        ("bcgprof show, terminal tables", [*cli, "show", str(REPORTS / "gpt-oss-20b-h200"), TERMINAL]),
    ]


def run_once(argv: list[str]) -> float:
    env = _TERMINAL if argv[-1] == TERMINAL else _PIPE
    argv = [a for a in argv if a != TERMINAL]
    start = time.perf_counter()
    done = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=ROOT, env=env)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"error: {' '.join(argv)} exited {done.returncode}: {done.stderr.decode()[-300:]}")
    return elapsed


def medians(argvs: list[list[str]], runs: int) -> list[float]:
    """Each command's median over ``runs`` rounds; a round runs every command once, in turn, so
    that a busy machine slows all of them alike. One untimed round first warms the file cache."""
    for argv in argvs:
        run_once(argv)
    times: list[list[float]] = [[] for _ in argvs]
    for _ in range(runs):
        for i, argv in enumerate(argvs):
            times[i].append(run_once(argv))
    return [statistics.median(t) for t in times]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15, help="timed runs of each command (default 15)")
    parser.add_argument("--max-ratio", type=float, default=None,
                        help="exit 1 when `bcgprof show` takes more than this many times the baseline")
    args = parser.parse_args()
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    import bcgprof

    compileall.compile_dir(str(Path(bcgprof.__file__).parent), quiet=1)
    named = commands()
    results = list(zip([name for name, _ in named], medians([argv for _, argv in named], args.runs), strict=True))
    base = results[0][1]
    print(f"median of {args.runs} fresh-interpreter runs ({sys.executable}, Python {sys.version.split()[0]})")
    for name, seconds in results:
        print(f"  {name:<40} {seconds * 1000:8.0f} ms  {seconds / base:5.2f}x")
    show_ratio = results[1][1] / base
    if args.max_ratio is not None and show_ratio > args.max_ratio:
        print(f"bcgprof show is {show_ratio:.2f}x the bare import, over --max-ratio {args.max_ratio}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
