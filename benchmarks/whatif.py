"""How long the what-if commands the README and docs show take, cold and warm, beside ``show``.

Every ``predict``, ``advise`` and ``explain`` command that README.md and docs/*.md give on a
committed report (:data:`COMMANDS`; ``--all`` adds the lists and layer sets docs/evidence-predict.md
names by ``<model>``) runs in a fresh interpreter, N rounds, the commands taking turns (one untimed
round first, which also fills the warm cache), so that a busy machine slows all alike:

* cold: every run with an empty cache directory of its own (``BCGPROF_CACHE_DIR``, and
  ``XDG_CACHE_HOME`` for a bcgprof before that variable, set to a new one): the first command
  ever run on those traces;
* warm: every run with the one cache directory the untimed round filled;
* show: ``bcgprof show`` on the report the command reads (the deepest, for a layer set; the second
  phase, for a pair), warm.

Python's compiled modules go to a directory of the run's own (``PYTHONPYCACHEPREFIX``), which the
untimed round fills, as an installed bcgprof has them; ``--compile`` compiles every module of every
run instead (a checkout run with ``PYTHONDONTWRITEBYTECODE`` set). ``--baseline TREE`` also runs
every command with another bcgprof source tree first on ``PYTHONPATH`` (``git worktree add TREE
REV``), in turns with this one, so that a before and after come from the same minutes of the same
machine. It prints each command's median wall time cold and warm, ``show``'s, and warm over
``show``, with the machine's load average (1 minute) before and after: other work on a 2-core
machine slows every command alike. ``--max-cold S`` and ``--max-ratio R`` make those limits an
exit code (1 when a command's median passes one; this tree's figures).

    python benchmarks/whatif.py                  # 3 rounds
    python benchmarks/whatif.py --runs 5 --max-cold 3 --max-ratio 3
    python benchmarks/whatif.py --baseline ../bcgprof-main
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
R = "reports/"
LENGTHS = "tokens\n900\n3000\n3100\n7000\n20000\n"  # docs/predict-advise.md's lengths.csv
# (the command's arguments after `bcgprof`, the report `show` is timed on); {tmp}: a directory of
# the run's own (advise's lengths.csv and plot)
COMMANDS = [
    (["predict", "--from", R + "gpt-oss-20b-h200-layers"], "gpt-oss-20b-h200-layers/layers-4"),
    (
        ["predict", "--from", R + "gpt-oss-20b-h200-traced", "--buckets", "1024,2048,4096,8192"],
        "gpt-oss-20b-h200-traced",
    ),
    (["advise", "--from", R + "gpt-oss-20b-h200-traced", "--budget", "2.2GiB"], None),
    (
        [
            "advise",
            "--from",
            R + "llama-3.1-8b-h200-traced",
            "--budget",
            "3.3GiB",
            "--mode",
            "per-bucket",
            "--free",
            "4.75GiB",
        ],
        "llama-3.1-8b-h200-traced",
    ),
    (["predict", "--from", R + "llama-3.1-8b-h200", "--free", "5GiB"], "llama-3.1-8b-h200"),
    (["explain", R + "gpt-oss-20b-h200"], "gpt-oss-20b-h200"),
    (["explain", R + "gpt-oss-20b-h200", "-f", "json"], "gpt-oss-20b-h200"),
    (["explain", R + "gpt-oss-20b-h200-unfused"], "gpt-oss-20b-h200-unfused"),
    (["explain", R + "llama-3.1-8b-h200-decode"], "llama-3.1-8b-h200-decode"),
    (
        [
            "predict",
            "--from",
            R + "gpt-oss-20b-h100-phases/phase-decode",
            "--after",
            R + "gpt-oss-20b-h100-phases/phase-prefill",
        ],
        "gpt-oss-20b-h100-phases/phase-decode",
    ),
    (
        [
            "predict",
            "--from",
            R + "gpt-oss-20b-h200-layers/layers-2",
            "--from",
            R + "gpt-oss-20b-h200-layers/layers-4",
        ],
        "gpt-oss-20b-h200-layers/layers-4",
    ),
    (
        [
            "predict",
            "--from",
            R + "gpt-oss-120b-h200-layers/layers-2",
            "--from",
            R + "gpt-oss-120b-h200-layers/layers-4",
            "-f",
            "json",
        ],
        "gpt-oss-120b-h200-layers/layers-4",
    ),
    (
        ["predict", "--from", R + "llama-3.1-8b-h200-layers", "--free", "5GiB"],
        "llama-3.1-8b-h200-layers/layers-4",
    ),
    (["predict", "--from", R + "llama-3.1-8b-h200", "--free", "5164MiB"], "llama-3.1-8b-h200"),
    (
        [
            "predict",
            "--from",
            R + "gpt-oss-20b-h200-traced",
            "--buckets",
            "512:16384:512",
            "--free",
            "4.4GiB",
        ],
        "gpt-oss-20b-h200-traced",
    ),
    (
        [
            "advise",
            "--from",
            R + "gpt-oss-20b-h200-traced",
            "--budget",
            "2.5GiB",
            "--mode",
            "shared",
            "--lengths",
            "{tmp}/lengths.csv",
            "-o",
            "{tmp}/curve.png",
        ],
        "gpt-oss-20b-h200-traced",
    ),
]
# docs/evidence-predict.md's `predict --from reports/<model>-h200-traced --buckets L` and
# `--from reports/<model>-h200-layers[-8-16]`, on the lists and sets it names
EVIDENCE = (
    [
        (["predict", "--from", R + f"{m}-h200-layers"], f"{m}-h200-layers/layers-4")
        for m in ("llama-3.1-8b", "llama-3.1-70b", "qwen3-30b-a3b", "gpt-oss-120b", "qwen3-8b")
    ]
    + [
        (["predict", "--from", R + f"{m}-h200-layers-8-16"], f"{m}-h200-layers-8-16/layers-16")
        for m in ("llama-3.1-8b", "qwen3-30b-a3b")
    ]
    + [
        (["predict", "--from", R + f"{m}-h200-traced", "--buckets", b], f"{m}-h200-traced")
        for m, b in (
            ("gpt-oss-20b", "512:16384:512"),
            ("llama-3.1-8b", "1024,2048,4096,8192"),
            ("llama-3.1-8b", "512:16384:512"),
            ("llama-3.1-8b", "1000,3000,6000,12000,16384"),
            ("qwen3-30b-a3b", "1024,2048,4096,8192"),
            ("qwen3-30b-a3b", "8192:16384:512"),
            ("qwen3-30b-a3b", "600:16384:600"),
        )
    ]
)


TIMED = ("cold", "warm", "show")


def bcgprof() -> list[str]:
    """The console script beside this interpreter, else ``python -m bcgprof``."""
    script = Path(sys.executable).with_name("bcgprof")
    found = str(script) if script.is_file() else shutil.which("bcgprof")
    return [found] if found else [sys.executable, "-m", "bcgprof"]


def run_once(argv: list[str], cache: Path, env: dict) -> float:
    # the same directory whichever variable the bcgprof run reads
    env = {**env, "XDG_CACHE_HOME": str(cache), "BCGPROF_CACHE_DIR": str(cache / "bcgprof")}
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
        "--all", action="store_true", help="also the lists and layer sets of evidence-predict.md"
    )
    parser.add_argument(
        "--compile", action="store_true", help="compile every module of every run (no .pyc kept)"
    )
    parser.add_argument(
        "--baseline", type=Path, default=None, help="another bcgprof source tree, run in turns"
    )
    parser.add_argument(
        "--max-cold", type=float, default=None, help="exit 1 if a cold median passes this (s)"
    )
    parser.add_argument(
        "--max-ratio",
        type=float,
        default=None,
        help="exit 1 if a warm median passes this many times show's",
    )
    args = parser.parse_args()
    if args.runs < 1:
        parser.error("--runs must be 1 or more")
    chosen = COMMANDS + (EVIDENCE if args.all else [])
    cli = bcgprof()
    trees = {"this": ROOT} | ({"baseline": args.baseline.resolve()} if args.baseline else {})
    with tempfile.TemporaryDirectory(prefix="bcgprof-whatif-") as tmp:
        (Path(tmp) / "lengths.csv").write_text(LENGTHS)
        common = {
            k: v
            for k, v in os.environ.items()
            if k not in ("TTY_COMPATIBLE", "FORCE_COLOR", "PYTHONDONTWRITEBYTECODE", "PYTHONPATH")
            and not k.startswith("BCGPROF_")
        }
        envs = {}
        for name, tree in trees.items():
            env = {**common, "PYTHONPATH": str(tree)}
            if args.compile:
                env["PYTHONDONTWRITEBYTECODE"] = "1"
            else:
                env["PYTHONPYCACHEPREFIX"] = str(Path(tmp) / f"pycache-{name}")
            envs[name] = env
        runs = [
            ([*cli, *(a.format(tmp=tmp) for a in argv)], [*cli, "show", R + (shown or _read(argv))])
            for argv, shown in chosen
        ]
        for name, env in envs.items():  # untimed: compiled modules, the file cache, warm caches
            for command, show in runs:
                run_once(command, Path(tmp) / f"warm-{name}", env)
                run_once(show, Path(tmp) / f"warm-{name}", env)
        load_before = os.getloadavg()[0]
        times: dict = {(name, kind): [[] for _ in runs] for name in envs for kind in TIMED}
        for n in range(args.runs):
            for i, (command, show) in enumerate(runs):
                for name, env in envs.items():
                    cold = Path(tmp) / f"cold-{name}-{n}-{i}"
                    times[name, "cold"][i].append(run_once(command, cold, env))
                    shutil.rmtree(cold, ignore_errors=True)
                    warm = Path(tmp) / f"warm-{name}"
                    times[name, "warm"][i].append(run_once(command, warm, env))
                    times[name, "show"][i].append(run_once(show, warm, env))
        load_after = os.getloadavg()[0]
    print(
        f"median of {args.runs} run(s) each, seconds (cold: an empty cache; warm: the cache an "
        f"earlier run filled; show: `bcgprof show` on the report read"
        f"{'; every module compiled every run' if args.compile else ''}); load average "
        f"{load_before:.2f} before, {load_after:.2f} after"
    )
    print(f"{'command':<100} {'':>8} {'cold':>6} {'warm':>6} {'show':>6} {'warm/show':>9}")
    failed = []
    for i, (argv, _) in enumerate(chosen):
        label = " ".join(a.replace("{tmp}/", "") for a in argv)
        for name in reversed(envs):  # the baseline first
            cold, hot, show = (statistics.median(times[name, kind][i]) for kind in TIMED)
            print(
                f"{label:<100} {name:>8} {cold:>6.2f} {hot:>6.2f} {show:>6.2f} {hot / show:>8.1f}x"
            )
            if name != "this":
                continue
            if args.max_cold is not None and cold > args.max_cold:
                failed.append(f"{label}: cold {cold:.2f} s, above {args.max_cold} s")
            if args.max_ratio is not None and hot / show > args.max_ratio:
                failed.append(f"{label}: warm {hot / show:.1f}x show, above {args.max_ratio}x")
    for line in failed:
        print(line, file=sys.stderr)
    return 1 if failed else 0


def _read(argv: list[str]) -> str:
    """The report a command reads: what follows its --from (explain: its argument)."""
    at = argv.index("--from") + 1 if "--from" in argv else 1
    return argv[at].removeprefix(R)


if __name__ == "__main__":
    sys.exit(main())
