"""What `bcgprof record` costs the program it records (needs a GPU).

Runs ``examples/record/graph_loop.py`` (``--sizes`` buckets) alone and under ``bcgprof record`` in
turn (with ``--trace``, under ``bcgprof record --trace`` too; with ``--no-sampler``, under
``bcgprof record --sample-interval-ms 0`` too, which tells the peak sampler's share), ``--rounds``
times each, and prints, from the program's own output, the capture loop's wall time and the free
memory it took. The goal: a time ratio of at most 1.05 and the same free-memory figure to the byte;
``--trace`` states what recording the allocator's history adds. Per size, it sets the time each
bucket added (the program times each ``capture_one`` call) beside what the hook counted of its own
work (``hook_ms`` in the recording's lines): the difference is the program's work slowed beside the
hook, or the wrapper's untimed calls; the first bucket apart (a process's one-off start-up).

    python benchmarks/record_overhead.py --rounds 3 --out /tmp/overhead [--repeat 25] [--trace]
        [--no-sampler]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROGRAM = ROOT / "examples" / "record" / "graph_loop.py"
LINE = re.compile(r"program: capture loop took (\d+) bytes of free memory in ([0-9.]+) s")
SIZES_LINE = re.compile(r"program: ms a size (.*)")


@dataclass
class Run:
    took: int  # bytes of free memory the capture loop took, as the program measured
    seconds: float  # the capture loop's wall time, as the program measured
    ms_of_size: dict[int, float]  # each capture_one call's wall time, as the program measured
    hook_ms_of_size: dict[int, float] = field(default_factory=dict)  # the hook's own count


def once(recorded: bool, out: Path, sizes: int, repeat: int, *options: str) -> Run:
    """One run of the program, plain or under ``bcgprof record *options``."""
    cmd = [sys.executable, str(PROGRAM), str(sizes), str(repeat)]
    if recorded:
        cmd = [sys.executable, "-m", "bcgprof", "record", *options,
               "--bucket", "loops:capture_one:size", "--out", str(out), "--", *cmd]  # fmt: skip
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    env = dict(os.environ, PYTHONPATH=path)
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} exited {proc.returncode}:\n{proc.stderr[-2000:]}")
    m, per_size = LINE.search(proc.stdout), SIZES_LINE.search(proc.stdout)
    if m is None or per_size is None:
        raise SystemExit(f"no capture lines in the program's output:\n{proc.stdout}\n{proc.stderr}")
    ms_of_size = {int(k): float(v) for k, v in (item.split(":") for item in per_size[1].split())}
    return Run(int(m[1]), float(m[2]), ms_of_size, hook_counts(out) if recorded else {})


def hook_counts(report: Path) -> dict[int, float]:
    """``hook_ms`` of each bucket line the recorded process wrote (its spool, ``.record``)."""
    counts = {}
    for spool in (report / ".record").glob("*.jsonl"):
        for line in spool.read_text().splitlines():
            item = json.loads(line)
            if item.get("kind") == "bucket" and item.get("size") is not None:
                counts[int(item["size"])] = float(item["hook_ms"])
    return counts


def per_size(name: str, plain: list[Run], runs: list[Run]) -> None:
    """The first bucket, and the others summed: medians over the rounds, in ms, of the time each
    took, what it added, and what the hook counted of its own work."""
    order = list(plain[0].ms_of_size)
    print(f"  {name + ', ms':<16} {'plain':>9} {name:>10} {'added':>8} {'hook count':>11} "
          f"{'outside it':>11}")  # fmt: skip
    for label, sizes in (("first bucket", order[:1]), (f"other {len(order) - 1}", order[1:])):
        base = statistics.median(sum(r.ms_of_size[s] for s in sizes) for r in plain)
        took = statistics.median(sum(r.ms_of_size[s] for s in sizes) for r in runs)
        hook = statistics.median(sum(r.hook_ms_of_size.get(s, 0.0) for s in sizes) for r in runs)
        print(f"  {label:<16} {base:>9.1f} {took:>10.1f} {took - base:>+8.1f} {hook:>11.1f} "
              f"{took - base - hook:>+11.1f}")  # fmt: skip


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
    if a.out.exists() and any(a.out.iterdir()):
        raise SystemExit(f"--out {a.out} is not empty; give a new folder for the recordings")
    kinds: dict[str, tuple[str, ...]] = {"recorded": ()}
    if a.trace:
        kinds["traced"] = ("--trace",)
    if a.no_sampler:
        kinds["no-sampler"] = ("--sample-interval-ms", "0")
    plain: list[Run] = []
    runs_of: dict[str, list[Run]] = {name: [] for name in kinds}
    for i in range(a.rounds):
        plain.append(once(False, a.out, a.sizes, a.repeat))
        for name, options in kinds.items():
            runs_of[name].append(once(True, a.out / f"{name}-{i}", a.sizes, a.repeat, *options))
    print(f"{'run':<10} {'free memory taken (bytes)':>26} {'capture loop (s)':>17}")
    for name, runs in {"plain": plain, **runs_of}.items():
        for run in runs:
            print(f"{name:<10} {run.took:>26} {run.seconds:>17.3f}")
    median_plain = statistics.median(r.seconds for r in plain)
    for name, runs in runs_of.items():
        median = statistics.median(r.seconds for r in runs)
        print(f"{a.sizes} buckets: {median_plain:.3f} s plain, {median:.3f} s {name}, "
              f"{(median - median_plain) / a.sizes * 1e3:.2f} ms a bucket")  # fmt: skip
        same = len({r.took for r in plain + runs}) == 1
        print(f"median time ratio {name}/plain: {median / median_plain:.3f}; "
              f"free memory taken identical in every run: {same}")  # fmt: skip
        per_size(name, plain, runs)


if __name__ == "__main__":
    main()
