"""Where a mode's warm-up and measurement time goes (needs a CUDA GPU).

Puts a timer around each step the capture takes between its warm-ups and captures (reading the
allocator's history, turning it into trace rows, writing the trace file, planning and making the
warm-up runs and graph breaks repeated by their requests, the memory readings), runs ``bcgprof capture
--in-process`` with the given options in this process, and prints each step's seconds and calls, and how many history entries
were read. The timers change no figure: they only wrap the functions.

    python benchmarks/mode_parts.py --modes per-bucket --out /tmp/parts [more capture options]
"""

from __future__ import annotations

import collections
import functools
import sys
import time
from typing import Any

from bcgprof.cli import main as bcgprof_main
from bcgprof.measure import break_repeat, capture, memory, trace_events, tracing
from bcgprof.report import traces

SECONDS: dict[str, float] = collections.defaultdict(float)
CALLS: collections.Counter = collections.Counter()
ENTRIES = [0]


def timed(owner: Any, name: str, label: str) -> None:
    """Replace ``owner.name`` with a wrapper that adds its time under ``label``."""
    inner = getattr(owner, name)

    @functools.wraps(inner)
    def wrapper(*args, **kwargs):
        start = time.perf_counter()
        try:
            result = inner(*args, **kwargs)
            if name == "_read":
                ENTRIES[0] += len(result[1])
            return result
        finally:
            SECONDS[label] += time.perf_counter() - start
            CALLS[label] += 1

    setattr(owner, name, wrapper)


def main(argv: list[str]) -> int:
    timed(tracing.AllocatorRecorder, "_read", "read the history (snapshot)")
    timed(trace_events.TraceBuilder, "window", "history to trace rows")
    timed(traces.TraceFileWriter, "write", "write the trace file")
    timed(capture, "plan_repeat", "plan a repeated run")
    timed(capture, "repeat_run", "make a repeated run")
    timed(capture, "read", "memory readings")
    timed(memory, "pool_state", "  of which pool state")
    timed(break_repeat, "plan_repeat", "plan a repeated break")
    timed(break_repeat, "repeat_run", "make a repeated break")
    start = time.perf_counter()
    sys.argv = ["bcgprof", "capture", "--in-process", *argv]
    code = 0
    try:
        bcgprof_main()
    except SystemExit as e:
        code = int(e.code or 0)
    print(f"capture exit {code}, {time.perf_counter() - start:.1f} s in all; {ENTRIES[0]:,} history entries read")
    print(f"{'step':<30} {'seconds':>8} {'calls':>6}")
    for label, seconds in sorted(SECONDS.items(), key=lambda item: -item[1]):
        print(f"{label:<30} {seconds:>8.2f} {CALLS[label]:>6}")
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
