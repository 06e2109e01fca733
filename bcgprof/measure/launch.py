"""The mode processes of a capture: started ahead of their turn, released one mode at a time.

Mechanism: :class:`ModeLauncher` runs a capture's modes one after another, each in fresh processes
(one per mode, or one per rank and mode for ``--tp N``) running ``python -m bcgprof.measure.mode``,
and relays rank 0's progress events. The next modes' processes (``LOOKAHEAD`` of them) start
while the current mode works: they import everything, then wait for ``go`` on stdin. A list of
captures (``--num-layers 2,4``) hands on the same way: once one capture's last mode is among those
started ahead, the next capture's first mode starts too (``then``; the runner's ``prestarted``).

Invariant: a mode's processes are released only after the previous mode's processes have exited,
so no mode ever measures another's memory; processes started and never released are cancelled
(EOF on stdin) and reaped.

Cost: up to ``LOOKAHEAD`` waiting processes beside the working one, each holding its imports (no
CUDA context) and a log file under the report directory, removed when empty.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Optional, cast

from bcgprof.errors import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK
from bcgprof.options import CaptureOptions

Emit = Callable[[dict], None]
# Once one rank process has exited with an error, how long the others get to finish.
PEER_GRACE_S = 60.0
# Mode processes started ahead of their turn. A process's imports can take longer than a mode of a
# 2-layer capture (benchmarks/capture_timeline.py times both), so with one started ahead the next
# mode would wait for its imports.
LOOKAHEAD = 2


class ModeProcesses:
    """The processes of one mode: one, or one per tensor-parallel rank. Started ahead of
    their turn; they import and wait for ``go``."""

    def __init__(self, opts: CaptureOptions, mode: str, out: Path):
        from bcgprof.measure import dist

        self.mode = mode
        self.logs, self.procs = [], []
        port = dist.free_port() if opts.tp > 1 else 0
        for rank in range(opts.tp):
            name = f"{mode}.log" if opts.tp == 1 else f"{mode}.rank{rank}.log"
            # held open for the child process; close_logs() closes it
            log = open(out / name, "w")  # noqa: SIM115
            self.logs.append(log)
            env = (
                dist.rank_environment(rank, opts.tp, port) if opts.tp > 1 else _single_environment()
            )
            self.procs.append(
                subprocess.Popen(
                    [sys.executable, "-m", "bcgprof.measure.mode", str(out), mode, opts.to_json()],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE if rank == 0 else log,
                    stderr=log,
                    text=True,
                    env=env,
                )
            )

    def go(self) -> None:
        for p in self.procs:
            assert p.stdin is not None  # Popen(stdin=PIPE)
            p.stdin.write("go\n")
            p.stdin.close()

    def cancel(self) -> None:
        """Let processes that never started work exit (EOF on stdin), then make sure they did."""
        for p in self.procs:
            assert p.stdin is not None  # Popen(stdin=PIPE)
            with contextlib.suppress(OSError):
                p.stdin.close()
        for p in self.procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
        self.close_logs()

    def relay(self, on_event: Emit, grace_s: float) -> int:
        """Pass rank 0's events on until every process exits; the mode's exit code."""
        done = threading.Event()
        watcher = threading.Thread(target=_watch, args=(self.procs, done, grace_s), daemon=True)
        watcher.start()
        try:
            stdout = self.procs[0].stdout
            assert stdout is not None  # rank 0: Popen(stdout=PIPE)
            for line in stdout:
                line = line.strip()
                if line.startswith("{"):
                    with contextlib.suppress(json.JSONDecodeError):
                        on_event(json.loads(line))
            codes = [p.wait() for p in self.procs]
        except KeyboardInterrupt:
            for p in self.procs:  # they got the same Ctrl-C; their finished rows are on disk
                try:
                    p.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    p.kill()
            raise
        finally:
            done.set()
            for p in self.procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
            self.close_logs()
        if codes[0] != EXIT_OK:
            return codes[0]
        failed = [(r, c) for r, c in enumerate(codes) if c != EXIT_OK]
        if failed:
            on_event(
                {
                    "event": "error",
                    "mode": self.mode,
                    "message": "; ".join(
                        f"rank {r} exited with {c} (see {self.mode}.rank{r}.log)" for r, c in failed
                    ),
                }
            )
            return failed[0][1] if failed[0][1] > 0 else EXIT_FAILED
        return EXIT_OK

    def close_logs(self) -> None:
        for log in self.logs:
            if log.closed:
                continue
            log.close()
            path = Path(log.name)
            # keep logs only when a process said something
            if path.exists() and path.stat().st_size == 0:
                path.unlink()


def _single_environment() -> dict:
    import os

    return dict(os.environ, PYTHONUNBUFFERED="1")


def _watch(procs: list, done: threading.Event, grace_s: float) -> None:
    """Once one rank process has failed, give the others ``grace_s`` to finish, then kill them."""
    failed_at = None
    while not done.is_set():
        codes = [p.poll() for p in procs]
        if failed_at is None and any(c not in (None, 0) for c in codes):
            failed_at = time.monotonic()
        if failed_at is not None and time.monotonic() - failed_at > grace_s:
            for p in procs:
                if p.poll() is None:
                    p.kill()
            return
        if all(c is not None for c in codes):
            return
        done.wait(0.5)


def _start_first(opts: CaptureOptions) -> Optional[ModeProcesses]:
    """The first mode's processes of the capture ``opts`` (prepared, its --out named), started
    early; None when they cannot be (its directory cannot be made, no process starts): its own run
    then says why."""
    out = Path(cast(str, opts.out))
    try:
        out.mkdir(parents=True, exist_ok=True)
        return ModeProcesses(opts, opts.modes[0], out)
    except OSError:
        return None


class ModeLauncher:
    """Runs the modes of a capture one after another, each in fresh processes, the next
    ``LOOKAHEAD`` modes' processes started (importing, waiting) while the current one works."""

    def __init__(
        self,
        opts: CaptureOptions,
        out: Path,
        grace_s: float = PEER_GRACE_S,
        then: Optional[CaptureOptions] = None,
    ):
        self.opts, self.out, self.grace_s = opts, out, grace_s
        self._ahead: deque[ModeProcesses] = deque()  # this capture's next modes, started, in order
        # prepared (see _handoff_options): its first mode starts during this run's last ones
        self.then = then
        self.handoff: Optional[ModeProcesses] = None  # ... and waits here for its own run

    def prestart(self) -> None:
        """Start the first mode's processes now (they import, then wait for ``go``)."""
        if not self._ahead and self.opts.modes:
            self._ahead.append(ModeProcesses(self.opts, self.opts.modes[0], self.out))

    def adopt(self, first: ModeProcesses) -> None:
        """The first mode's processes, started by the capture before this one."""
        if first.mode != (self.opts.modes[0] if self.opts.modes else None) or self._ahead:
            first.cancel()
            return
        self._ahead.append(first)

    def _start_ahead(self, modes: list[str], current: int) -> None:
        """Once mode ``current`` has its go: the processes of the modes up to ``LOOKAHEAD`` after
        it, and the next capture's first mode when this capture ends within that reach."""
        for j in range(current + 1 + len(self._ahead), min(len(modes), current + 1 + LOOKAHEAD)):
            self._ahead.append(ModeProcesses(self.opts, modes[j], self.out))
        if (
            current + LOOKAHEAD >= len(modes)
            and self.handoff is None
            and self.then is not None
            and self.then.modes
        ):
            self.handoff = _start_first(self.then)

    def run_all(self, on_event: Emit) -> tuple[dict[str, int], bool]:
        codes: dict[str, int] = {}
        modes = list(self.opts.modes)
        try:
            self.prestart()
            for i, mode in enumerate(modes):
                current = self._ahead.popleft()  # started by prestart(), adopt() or an earlier turn
                current.go()
                self._start_ahead(modes, i)
                codes[mode] = current.relay(on_event, self.grace_s)
                if codes[mode] == EXIT_INTERRUPTED:
                    return codes, True
        except KeyboardInterrupt:
            return codes, True
        return codes, False

    def run_one(self, mode: str, on_event: Emit) -> int:
        """One mode, started now (no look-ahead)."""
        procs = ModeProcesses(self.opts, mode, self.out)
        procs.go()
        return procs.relay(on_event, self.grace_s)

    def close(self) -> None:
        """Cancel what was started and not run: the next modes, and a handoff nobody took."""
        for procs in (*self._ahead, self.handoff):
            if procs is not None:
                procs.cancel()
        self._ahead.clear()
        self.handoff = None
