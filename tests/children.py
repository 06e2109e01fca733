"""Child processes whose outcome tests read, run ahead of those tests (helpers only, no tests;
tests/conftest.py hands them out as the ``prestarted`` fixture).

A test module whose tests start a program only to read what it left (its exit status, what it
printed, the files it wrote) declares those programs in ``CHILDREN``: a name and a function that
is given a fresh folder of the child's own, writes there what the child needs and returns its
:class:`Command`. A test names the children it reads in its ``prestart`` mark and reads each with
``prestarted(name)`` -> (the completed process, its folder).

Mechanism: when the session's first test starts, a thread starts running the children that the
selected tests name, one at a time, in the tests' order (and other work that tests wait for, such
as tests/hopper.py's compiles, in its place in that order). The tests run on one thread (torch
too: tests/conftest.py), and these children spend most of their time loading torch or the CLI;
run ahead, they use the machine's other CPU while the tests before theirs run, instead of keeping
a test waiting, and one at a time they never take a CPU from the tests. A test that asks for a
child the thread has not started runs it itself at once, beside the thread's; so does a worker of
pytest-xdist, which starts nothing ahead.

Invariant: a child's outcome is the one the test would get running it itself: a fresh process of
the same command, environment (the session's, as it stood when the first test started, with the
command's changes), working directory and time limit, in a folder nothing else writes, with its
output captured. A test that times its child, signals it or watches it run keeps starting it
itself. Cost: one thread, and at most one child ahead of the tests at a time.
"""

from __future__ import annotations

import os
import subprocess
import threading
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path

Outcome = tuple[subprocess.CompletedProcess, Path]


@dataclass(frozen=True)
class Command:
    """A child: its argument vector, changes to the session's environment, its working directory
    (None: the session's), its time limit in seconds (None: none), and what its stdin reads
    (None: the session's stdin, as ``subprocess.run`` leaves it)."""

    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    cwd: Path | None = None
    timeout: float | None = 120
    input: str | None = None


Make = Callable[[Path], Command]


class Prestarted:
    """The session's children: ``start`` runs them on a thread, ``outcome`` waits for one."""

    def __init__(self, folder_for: Callable[[str], Path]) -> None:
        self._folder_for = folder_for
        self._environ = dict(os.environ)
        self._cwd = os.getcwd()
        self._lock = threading.Lock()
        self._outcomes: dict[str, Future] = {}
        self._queue: list[Callable[[], None]] = []
        self._running: set[subprocess.Popen] = set()
        self._stopping = False
        self._thread: threading.Thread | None = None

    def start(self, jobs: list[Callable[[], None]]) -> None:
        """Run these jobs (:meth:`child`, or other work to do ahead) one after another on a
        thread."""
        self._queue = list(jobs)
        if self._queue:
            self._thread = threading.Thread(target=self._work, name="prestarted", daemon=True)
            self._thread.start()

    def child(self, key: str, make: Make) -> Callable[[], None]:
        """A job of :meth:`start`: child ``key`` (a unique key), unless a test has run it."""

        def job() -> None:
            future, mine = self._claim(key)
            if mine:
                self._run(key, make, future)

        return job

    def outcome(self, key: str, make: Make) -> Outcome:
        """The outcome of child ``key``: waited for when it was started ahead, else run now. The
        exception the child's run raised (its time limit passed) is raised here."""
        future, mine = self._claim(key)
        if mine:
            self._run(key, make, future)
        return future.result()

    def stop(self) -> None:
        """Start no more jobs and end the children running (other work the thread waits for is
        ended by its owner; then :meth:`join`)."""
        with self._lock:
            self._stopping = True
            running = list(self._running)
        for proc in running:
            proc.kill()

    def join(self) -> None:
        """Wait for the thread to end, after :meth:`stop`."""
        if self._thread is not None:
            self._thread.join(timeout=30)

    def _claim(self, key: str) -> tuple[Future, bool]:
        """(the child's future, whether the caller is to run it)."""
        with self._lock:
            if key in self._outcomes:
                return self._outcomes[key], False
            future: Future = Future()
            self._outcomes[key] = future
            return future, True

    def _work(self) -> None:
        for job in self._queue:
            with self._lock:
                if self._stopping:
                    return
            job()

    def _run(self, key: str, make: Make, future: Future) -> None:
        try:
            folder = self._folder_for(key)
            command = make(folder)
            future.set_result((self._complete(command), folder))
        except BaseException as e:  # the test that reads it raises it
            future.set_exception(e)

    def _complete(self, command: Command) -> subprocess.CompletedProcess:
        """``subprocess.run(argv, input=..., capture_output=True, text=True, env=..., cwd=...,
        timeout=...)``, ended by :meth:`stop`."""
        with self._lock:
            if self._stopping:
                raise RuntimeError("the session is ending")
            proc = subprocess.Popen(
                command.argv,
                stdin=None if command.input is None else subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env={**self._environ, **command.env},
                cwd=command.cwd or self._cwd,
            )
            self._running.add(proc)
        try:
            try:
                stdout, stderr = proc.communicate(command.input, timeout=command.timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                stdout, stderr = proc.communicate()
                raise subprocess.TimeoutExpired(
                    command.argv, command.timeout, output=stdout, stderr=stderr
                ) from None
        finally:
            with self._lock:
                self._running.discard(proc)
        return subprocess.CompletedProcess(command.argv, proc.returncode, stdout, stderr)
