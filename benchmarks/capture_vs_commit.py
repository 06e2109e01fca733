"""The default capture of another commit and of this working tree, side by side on one GPU.

    python benchmarks/capture_vs_commit.py --commit REF [--rounds N] [--out DIR] [-- CAPTURE ARGS...]
    python benchmarks/capture_vs_commit.py --tree DIR ...     # a checkout or `git archive` of the commit

Runs `python -m bcgprof capture` from each tree in turn (old, new; then new, old in the next
round, so that neither always runs on a warmer machine), each in a fresh process as users run
it, and prints per phase the median seconds of each tree and their ratio (new / old): start-up
(the command's wall less its modes' parts: imports, CUDA context, NVML, the runner), model
build, pre-warm, eager warm-up, capture, measure, verify, and the whole command. Last, whether
the two trees' reports agree at zero tolerance (`bcgprof gate --each-bucket --rel-tol 0
--abs-tol-mib 0`, every figure of every bucket). The phase times are read from each report's
run.json (``extra.modes``). With ``--num-layers 2,4`` among the capture arguments, each tree
writes one report per layer count: the phases are summed over them and each pair is gated.
Needs a CUDA GPU; figures are wall-clock seconds on that GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
PARTS = ("build_s", "prewarm_s", "warmup_s", "capture_s", "measure_s", "verify_s")
NAMES = {"startup_s": "start-up", "build_s": "build", "prewarm_s": "pre-warm", "warmup_s": "warm-up",
         "capture_s": "capture", "measure_s": "measure", "verify_s": "verify", "wall_s": "whole command"}


def archive(ref: str, into: Path) -> Path:
    """``git archive REF`` of this repository, unpacked into ``into``."""
    into.mkdir(parents=True)
    data = subprocess.run(["git", "-C", str(HERE), "archive", ref], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=data, check=True)
    return into


def report_dirs(out: Path) -> list[Path]:
    """The reports one capture wrote: ``out`` itself, or one ``layers-N`` directory per layer count."""
    if (out / "run.json").exists():
        return [out]
    found = sorted(p for p in out.glob("layers-*") if (p / "run.json").exists())
    if not found:
        raise SystemExit(f"error: {out} holds no report (no run.json, no layers-*/run.json)")
    return found


def capture(tree: Path, out: Path, args: list[str], log: Path) -> dict:
    """One capture from ``tree``; its phases in seconds (summed over modes) and the command's wall."""
    env = dict(os.environ, PYTHONPATH=str(tree))
    start = time.perf_counter()
    with open(log, "w") as f:
        rc = subprocess.run([sys.executable, "-m", "bcgprof", "capture", *args, "--out", str(out)], cwd=tree, env=env,
                            stdout=f, stderr=subprocess.STDOUT, check=False).returncode
    wall = time.perf_counter() - start
    if rc != 0:
        raise SystemExit(f"error: the capture from {tree} exited {rc}; see {log}")
    modes = [m for d in report_dirs(out)
             for m in json.loads((d / "run.json").read_text()).get("extra", {}).get("modes", {}).values()]
    phases = {p: sum(float(m.get(p) or 0.0) for m in modes) for p in PARTS}
    phases["startup_s"] = wall - sum(phases.values())
    phases["wall_s"] = wall
    return phases


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    which = ap.add_mutually_exclusive_group(required=True)
    which.add_argument("--commit", help="the commit to compare with (git archive of this repository)")
    which.add_argument("--tree", type=Path, help="a directory holding the other tree")
    ap.add_argument("--rounds", type=int, default=1, help="captures per tree (default 1)")
    ap.add_argument("--out", type=Path, default=None, help="keep reports and logs here (default: a temporary dir)")
    ap.add_argument("capture_args", nargs="*", help="after --: arguments for `bcgprof capture` (default: none)")
    args = ap.parse_args(argv)
    if args.rounds < 1:
        ap.error("--rounds must be at least 1")
    out = args.out or Path(tempfile.mkdtemp(prefix="bcgprof-vs-"))
    out.mkdir(parents=True, exist_ok=True)
    old = args.tree.resolve() if args.tree else archive(args.commit, out / "old-tree")
    trees = {"old": old, "new": HERE}
    times: dict[str, list[dict]] = {"old": [], "new": []}
    for n in range(args.rounds):
        for name in (("old", "new") if n % 2 == 0 else ("new", "old")):
            print(f"round {n + 1}: {name} ({trees[name]})", file=sys.stderr, flush=True)
            times[name].append(capture(trees[name], out / f"{name}-{n + 1}", args.capture_args,
                                       out / f"{name}-{n + 1}.log"))
    pairs = list(zip(report_dirs(out / "old-1"), report_dirs(out / "new-1"), strict=True))
    gates = [subprocess.run([sys.executable, "-m", "bcgprof", "gate", "--baseline", str(a), "--current", str(b),
                             "--each-bucket", "--rel-tol", "0", "--abs-tol-mib", "0"],
                            cwd=HERE, env=dict(os.environ, PYTHONPATH=str(HERE)), capture_output=True, text=True)
             for a, b in pairs]
    (out / "gate.txt").write_text("".join(g.stdout + g.stderr for g in gates))
    failed = next((g.returncode for g in gates if g.returncode != 0), 0)
    label = args.commit or str(args.tree)
    card = json.loads((pairs[0][1] / "run.json").read_text()).get("gpu_name") or "an unnamed GPU"
    print(f"bcgprof capture {' '.join(args.capture_args)}: {label} (old) vs the working tree (new), "
          f"median of {args.rounds} run(s) each, seconds, on {card}")
    print(f"{'phase':<15} {'old':>8} {'new':>8} {'new/old':>8}")
    for key in ("startup_s", *PARTS, "wall_s"):
        a = statistics.median(t[key] for t in times["old"])
        b = statistics.median(t[key] for t in times["new"])
        print(f"{NAMES[key]:<15} {a:8.1f} {b:8.1f} {(b / a if a > 0 else float('nan')):8.2f}")
    verdict = "agree (PASS)" if not failed else f"differ (gate exit {failed}; see gate.txt)"
    print(f"zero-tolerance gate, every bucket: the two trees' {len(pairs)} report(s) {verdict}")
    print(f"reports and logs: {out}", file=sys.stderr)
    (out / "times.json").write_text(json.dumps(times, indent=1))
    return 0 if not failed else 1


if __name__ == "__main__":
    sys.exit(main())
