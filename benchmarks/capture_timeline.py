"""Where the wall time of a capture goes between and around its mode processes (needs a CUDA GPU).

Runs ``bcgprof capture`` (any arguments after ``--``) in this process with every mode process
replaced by ``benchmarks/_timeline_child.py``, which marks its steps, and the runner's hand-offs
timed from here. For each mode process it prints, in seconds: spawn to preloaded (the imports
before its turn), the wait for its ``go`` after it was sent (a preload not done in time), go to
the ``start`` event (CUDA context, NVML, model build), start to ``done`` (pre-warm, buckets,
verify), done to ``main`` returning (the mode's last writes), that to the process being reaped
(its exit), and reaped to the next mode's go (the runner). Then the command's start to the first
go and the last reap to its end. A mode process ends without the interpreter's teardown, as ``bcgprof.measure.mode`` does;
``--slow-exit`` ends it through ``sys.exit`` instead, to see what that teardown costs (the two
reports should agree at zero tolerance).

    python benchmarks/capture_timeline.py [--slow-exit] [--json FILE] -- --num-layers 2,4 --out DIR
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import types
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
CHILD = HERE / "_timeline_child.py"
COLUMNS = [("preload", "spawned", "preloaded"), ("go wait", "go-sent", "go-read"),
           ("to start", "go-read", "start"), ("modework", "start", "done"), ("finish", "done", "returned"),
           ("exit", "returned", "reaped"), ("to next", "reaped", "next-go")]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--slow-exit", action="store_true", help="end each mode process through sys.exit")
    ap.add_argument("--json", type=Path, default=None, help="write every mark here")
    ap.add_argument("capture_args", nargs="*", help="after --: arguments for `bcgprof capture`")
    args = ap.parse_args(argv)
    if args.slow_exit:
        os.environ["TIMELINE_SLOW_EXIT"] = "1"

    from bcgprof.measure import launch

    marks: dict[tuple[str, str], dict[str, float]] = defaultdict(dict)
    order: list[tuple[str, str]] = []

    logs: dict[tuple[str, str], Path] = {}

    def key_of(procs) -> tuple[str, str]:
        log = Path(procs.logs[0].name)  # <report>/<mode>.log: the child's marks
        logs[(log.parent.name, procs.mode)] = log
        return (log.parent.name, procs.mode)

    real_popen = subprocess.Popen

    def popen(cmd, **kw):
        if list(cmd[1:3]) == ["-m", "bcgprof.measure.mode"]:
            cmd = [cmd[0], str(CHILD), *cmd[3:]]
        return real_popen(cmd, **kw)

    proxy = types.ModuleType("subprocess")
    proxy.__dict__.update(subprocess.__dict__)
    proxy.Popen = popen  # type: ignore[attr-defined]
    launch.subprocess = proxy  # type: ignore[attr-defined]

    go, relay = launch.ModeProcesses.go, launch.ModeProcesses.relay

    def timed_go(self):
        if order:
            marks[order[-1]]["next-go"] = time.time()
        order.append(key_of(self))
        marks[key_of(self)]["go-sent"] = time.time()
        return go(self)

    def timed_relay(self, on_event, grace_s):
        mine = marks[key_of(self)]

        def event(e):
            if e.get("event") in ("start", "done"):
                mine[e["event"]] = time.time()
            on_event(e)

        code = relay(self, event, grace_s)
        mine["reaped"] = time.time()
        return code

    launch.ModeProcesses.go, launch.ModeProcesses.relay = timed_go, timed_relay
    began = time.time()
    sys.argv = ["bcgprof", "capture", *args.capture_args]
    from bcgprof.cli import main as cli_main

    try:
        cli_main()
        code = 0
    except SystemExit as e:
        code = int(e.code or 0)
    ended = time.time()

    for k in order:  # the child's own marks, from its log
        if logs[k].exists():
            for line in logs[k].read_text().splitlines():
                if line.startswith("TIMELINE "):
                    _, step, t = line.split()
                    marks[k][step] = float(t)

    width = 10
    print(f"capture {' '.join(args.capture_args)}{' (slow exit)' if args.slow_exit else ''}: exit {code}, "
          f"{ended - began:.1f} s; per mode process, seconds")
    print(f"{'report':<10} {'mode':<15}" + "".join(f"{c[0]:>{width}}" for c in COLUMNS))
    sums = defaultdict(float)
    for k in order:
        m = marks[k]
        cells = []
        for name, a, b in COLUMNS:
            if a in m and b in m:
                v = m[b] - m[a]
                sums[name] += v
                cells.append(f"{v:{width}.2f}")
            else:
                cells.append(f"{'-':>{width}}")
        print(f"{k[0][-10:]:<10} {k[1]:<15}" + "".join(cells))
    print(f"{'sum':<26}" + "".join(f"{sums[c[0]]:{width}.2f}" for c in COLUMNS))
    if order:
        print(f"command start to first go {marks[order[0]]['go-sent'] - began:.2f} s; "
              f"last reaped to command end {ended - marks[order[-1]].get('reaped', ended):.2f} s")
    if args.json:
        args.json.write_text(json.dumps({"began": began, "ended": ended, "exit": code,
                                         "marks": {f"{a}/{b}": v for (a, b), v in marks.items()}}, indent=1))
    return code



if __name__ == "__main__":
    sys.exit(main())
