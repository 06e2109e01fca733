"""A mode process (``python -m bcgprof.measure.mode``) that marks when it reaches each step.

Run by ``benchmarks/capture_timeline.py`` in place of the mode module. Each mark is one line,
``TIMELINE <step> <unix time>``, on stderr, which the runner keeps as the mode's log.
It ends as the mode module does (``mode.exit_now``: no interpreter teardown), or with
``TIMELINE_SLOW_EXIT=1`` through ``sys.exit``, the interpreter's teardown of torch included.
"""

from __future__ import annotations

import atexit
import os
import sys
import time


def mark(step: str) -> None:
    sys.stderr.write(f"TIMELINE {step} {time.time():.6f}\n")
    sys.stderr.flush()


mark("spawned")
atexit.register(mark, "teardown")  # registered first, so it runs after every other exit handler

from bcgprof.measure import mode  # noqa: E402

_preload = mode._preload


def preload(opts) -> None:
    _preload(opts)
    mark("preloaded")


class _Stdin:
    """Marks when the ``go`` line is read (the later of its sending and the preload's end)."""

    def readline(self) -> str:
        line = sys.__stdin__.readline()
        mark("go-read")
        return line


mode._preload = preload
sys.stdin = _Stdin()  # type: ignore[assignment]
code = mode.main(sys.argv[1:])
mark("returned")
if os.environ.get("TIMELINE_SLOW_EXIT") == "1":
    sys.exit(code)
mode.exit_now(code)
