"""What `bcgprof record` costs the program it records (needs a GPU).

Runs ``examples/record/graph_loop.py`` (``--sizes`` buckets) alone and under ``bcgprof record`` in
turn (with ``--trace``, under ``bcgprof record --trace`` too; with ``--no-sampler``, under
``bcgprof record --sample-interval-ms 0`` too, which tells the peak sampler's share), ``--rounds``
times each, and prints, from the program's own output, the capture loop's wall time and the free
memory it took. The goal: a time ratio of at most 1.05 and the same free-memory figure to the byte;
``--trace`` states what recording the allocator's history adds.

    python benchmarks/record_overhead.py --rounds 3 --out /tmp/overhead [--repeat 25] [--trace]
        [--no-sampler]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROGRAM = ROOT / "examples" / "record" / "graph_loop.py"
LINE = re.compile(r"program: capture loop took (\d+) bytes of free memory in ([0-9.]+) s")


def once(recorded: bool, out: Path, sizes: int, repeat: int, *options: str) -> tuple[int, float]:
    """One run of the program, plain or under ``bcgprof record *options``: the free memory its
    capture loop took and the loop's seconds, as the program printed them."""
    cmd = [sys.executable, str(PROGRAM), str(sizes), str(repeat)]
    if recorded:
        cmd = [sys.executable, "-m", "bcgprof", "record", *options,
               "--bucket", "loops:capture_one:size", "--out", str(out), "--", *cmd]  # fmt: skip
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    env = dict(os.environ, PYTHONPATH=path)
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True)
    m = LINE.search(proc.stdout)
    if m is None:
        raise SystemExit(f"no capture line in the program's output:\n{proc.stdout}\n{proc.stderr}")
    return int(m[1]), float(m[2])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--out", type=Path, default=Path("/tmp/bcgprof-record-overhead"))
    p.add_argument("--sizes", type=int, default=32,
                   help="buckets the program captures (multiples of 256 tokens)")  # fmt: skip
    p.add_argument("--repeat", type=int, default=1,
                   help="times the program's layers run in a row (longer graphs)")  # fmt: skip
    p.add_argument("--trace", action="store_true",
                   help="also run under bcgprof record --trace")  # fmt: skip
    p.add_argument("--no-sampler", action="store_true",
                   help="also run under bcgprof record --sample-interval-ms 0")  # fmt: skip
    a = p.parse_args()
    kinds: dict[str, tuple[str, ...]] = {"recorded": ()}
    if a.trace:
        kinds["traced"] = ("--trace",)
    if a.no_sampler:
        kinds["no-sampler"] = ("--sample-interval-ms", "0")
    plain: list[tuple[int, float]] = []
    runs_of: dict[str, list[tuple[int, float]]] = {name: [] for name in kinds}
    for i in range(a.rounds):
        plain.append(once(False, a.out, a.sizes, a.repeat))
        for name, options in kinds.items():
            runs_of[name].append(once(True, a.out / f"{name}-{i}", a.sizes, a.repeat, *options))
    print(f"{'run':<10} {'free memory taken (bytes)':>26} {'capture loop (s)':>17}")
    for name, runs in {"plain": plain, **runs_of}.items():
        for took, seconds in runs:
            print(f"{name:<10} {took:>26} {seconds:>17.3f}")
    median_plain = statistics.median(s for _, s in plain)
    for name, runs in runs_of.items():
        median = statistics.median(s for _, s in runs)
        print(f"{a.sizes} buckets: {median_plain:.3f} s plain, {median:.3f} s {name}, "
              f"{(median - median_plain) / a.sizes * 1e3:.2f} ms a bucket")  # fmt: skip
        same = {t for t, _ in plain} == {t for t, _ in runs} and len({t for t, _ in plain}) == 1
        print(f"median time ratio {name}/plain: {median / median_plain:.3f}; "
              f"free memory taken identical in every run: {same}")  # fmt: skip


if __name__ == "__main__":
    main()
