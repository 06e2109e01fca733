"""Where the time ``bcgprof record`` adds to a capture loop goes, function by function (needs a
GPU).

Runs ``examples/record/graph_loop.py`` under ``python -m cProfile`` alone and under ``bcgprof
record`` in turn (``--rounds`` times each), then sets the median of each function's own time
(``tottime``) in the recorded runs beside the plain runs' and prints the functions whose time grew
most: the hook's own functions (``bcgprof/record/hook.py``, the readings) and any of the program's
or torch's that the hook made slower. cProfile slows Python calls, so the figures are relative: they
place the wall-time difference that ``benchmarks/record_overhead.py`` measures, not restate it.

    python benchmarks/gpu/hook_profile.py [--rounds 2] [--sizes 16] [--top 25]
"""

from __future__ import annotations

import argparse
import os
import pstats
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROGRAM = ROOT / "examples" / "record" / "graph_loop.py"


def profile(recorded: bool, work: Path, name: str, sizes: int) -> dict[str, float]:
    """One run's own time per function, in milliseconds, keyed ``file:line(function)``."""
    stats_file = work / f"{name}.prof"
    cmd = [sys.executable, "-m", "cProfile", "-o", str(stats_file), str(PROGRAM), str(sizes)]
    if recorded:
        cmd = [sys.executable, "-m", "bcgprof", "record", "--bucket", "loops:capture_one:size",
               "--out", str(work / name), "--", *cmd]  # fmt: skip
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    subprocess.run(cmd, capture_output=True, text=True, check=True,
                   env=dict(os.environ, PYTHONPATH=path))  # fmt: skip
    own: dict[str, float] = {}
    for (file, line, function), row in pstats.Stats(str(stats_file)).stats.items():  # type: ignore[attr-defined]
        key = f"{Path(file).name}:{line}({function})"
        own[key] = own.get(key, 0.0) + row[2] * 1e3
    return own


def median_by_function(runs: list[dict[str, float]]) -> dict[str, float]:
    keys = set().union(*runs)
    return {k: statistics.median(r.get(k, 0.0) for r in runs) for k in keys}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--sizes", type=int, default=16)
    p.add_argument("--top", type=int, default=25)
    a = p.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bcgprof-hook-profile-"))
    plain, hooked = [], []
    for i in range(a.rounds):
        plain.append(profile(False, work, f"plain-{i}", a.sizes))
        hooked.append(profile(True, work, f"recorded-{i}", a.sizes))
    before, after = median_by_function(plain), median_by_function(hooked)
    grown = sorted(after, key=lambda k: after[k] - before.get(k, 0.0), reverse=True)
    total_plain, total_hooked = sum(before.values()), sum(after.values())
    print(f"profiled time, median of {a.rounds}: plain {total_plain:.1f} ms, recorded "
          f"{total_hooked:.1f} ms ({total_hooked - total_plain:+.1f} ms)")  # fmt: skip
    print(f"{'function':<64} {'plain':>9} {'recorded':>9} {'grew':>9}   (ms)")
    for key in grown[: a.top]:
        print(f"{key[:64]:<64} {before.get(key, 0.0):>9.2f} {after[key]:>9.2f} "
              f"{after[key] - before.get(key, 0.0):>+9.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
