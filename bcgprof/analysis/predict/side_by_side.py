"""Independent parts of one command's work, run side by side: :func:`side_by_side`.

Mechanism. A command that reads and checks several large traces (or replays several modes' lists in
random segment layouts) does the same work for each of them, independently, and keeps what it
learns in the cache (:mod:`bcgprof.analysis.predict.trace_cache`) under the traces' content. Given
those parts in the command's own order, :func:`side_by_side` forks one child process for each part
after the first (at most :data:`MAX_CHILDREN`), runs the first part itself, and waits for the
children. A child runs its part with its output sent nowhere and leaves (``os._exit``: nothing of
the command's is flushed or run twice), what it learnt kept in the cache as any command keeps it.
The command then goes on exactly as without this: each part it reaches is found in the cache (or,
where a child could not keep it, worked out again), so its answer and its errors are those of the
command run part after part.

Invariant: nothing but the cache passes between the processes, and what is read back is checked as
every cache entry is (the content hashes it is named by); a child's failure costs only the time it
took. Nothing is forked unless the cache can be written, the machine has more than one processor
for this process, and this is the only thread of a Linux process that is not such a child itself;
when the first part fails, the children are stopped. Cost: a fork per part (its memory shared until
written); the parts' work at once on the processors that are free. Torch-free.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from bcgprof.analysis.predict import trace_cache

if TYPE_CHECKING:
    from bcgprof.analysis.predict.sources import BucketSources

MAX_CHILDREN = 3  # parts forked at once beside the first (a command has at most four modes)
# a smaller trace is read and checked in about the time a fork and reading it back take
MIN_TRACE_BYTES = 256 << 10
_child = False  # set in a child: it forks none of its own


def check_traces(traces: Sequence[tuple[BucketSources, str]]) -> None:
    """Each (a report's prepared traces, a mode) trace read and checked against its report
    (:meth:`~bcgprof.analysis.predict.sources.BucketSources.has`), in the command's order, those of
    at least :data:`MIN_TRACE_BYTES` side by side."""
    side_by_side(
        [
            partial(sources.has, mode)
            for sources, mode in traces
            if mode not in sources.ops and large(sources.traces.sources.get(mode), MIN_TRACE_BYTES)
        ]
    )


def large(source: object, least: int) -> bool:
    """Whether ``source`` is a file of at least ``least`` bytes."""
    if not isinstance(source, Path):
        return False
    try:
        return source.stat().st_size >= least
    except OSError:
        return False


def available() -> bool:
    """Whether parts can run side by side here (module docstring)."""
    return (
        not _child
        and sys.platform.startswith("linux")
        and hasattr(os, "fork")
        and threading.active_count() == 1
        and threading.current_thread() is threading.main_thread()
        and _processors() > 1
        and trace_cache.writable()
    )


def side_by_side(parts: Sequence[Callable[[], object]]) -> None:
    """Run ``parts`` (in the command's order) side by side, the first here and each later one in a
    child process (module docstring); return when all have ended. Errors are not raised here: the
    command meets them again, in its order, when it does the parts itself."""
    if len(parts) < 2 or not available():
        return
    children: list[int] = []
    finished = False
    try:
        for part in parts[1 : 1 + MAX_CHILDREN]:
            try:
                pid = os.fork()
            except OSError:
                break  # no more processes: the command does the rest itself
            if pid == 0:
                _run_child(part)  # never returns
            children.append(pid)
        try:
            parts[0]()
            finished = True
        except Exception:
            pass  # the command fails there first: the later parts are not needed
    finally:
        for pid in children:
            if not finished:
                _stop(pid)
            _reap(pid)


def _run_child(part: Callable[[], object]) -> None:
    """A child's life: the part, with nothing printed, then leave without flushing or unwinding
    anything of the command's."""
    global _child
    _child = True
    code = 1
    try:
        # stopped (the first part failed): unwind, so that a file being written is removed
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
        quiet = os.open(os.devnull, os.O_RDWR)
        os.dup2(quiet, 1)
        os.dup2(quiet, 2)
        with open(quiet, "w", closefd=False) as sink:
            sys.stdout = sys.stderr = sink  # whatever they were
            part()
        code = 0
    except BaseException:
        pass  # the command works the part out again, and says what went wrong
    finally:
        os._exit(code)


def _stop(pid: int) -> None:
    with contextlib.suppress(OSError):
        os.kill(pid, signal.SIGTERM)


def _reap(pid: int) -> None:
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)


def _processors() -> int:
    """The processors this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1
