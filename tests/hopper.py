"""Triton kernels compiled for sm_90 without a GPU, for the CPU tests of tests/models (helpers
only, no tests; tests/conftest.py hands them out as the ``hopper_compile`` fixture).

A test module that checks its kernels' compiled form holds a script, ``HOPPER_SCRIPT``: it imports
torch and triton, compiles kernels through Triton's whole pipeline to a cubin for an sm_90 target,
asserts on what came out and prints ``OK`` last (or ``SKIP`` and a reason, then exits 0, when this
triton cannot do it). The scripts run in a child process, because this session may run Triton's
interpreter, which is chosen before triton is first imported and cannot be left again.

Mechanism: one child for the session runs every selected module's script, one after another in a
namespace of its own, with its stdout captured; what a script prints, and the traceback of what it
raised (or the status it exited with), goes to a result file of its own as soon as it ends. The
session runs the child among the children it runs ahead of their tests (tests/children.py), in the
place of the first test that asks for a script (``run``), so the compiles, tens of seconds of one
CPU, overlap the tests that run before them, and torch and triton are imported once, not once a
script. A test waits for its own script's result (``outcome``).
Invariant: a script's outcome is what running it alone as ``python -c SCRIPT`` would give (exit
status 0 and its output, or the failure), with the Triton cache of the child's own (a
temporary folder, removed at the end of the session). Under pytest-xdist a worker starts the
child for one script when its test asks, so no two workers compile the same kernels.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]
WAIT_S = 900.0  # every script of a session, compiled on a loaded machine
# The child yields a CPU to the tests: torch's operators split their work over every CPU and wait
# for the slowest part, so a child competing at the same priority slows them many times over.
NICE = 10

_RUN_SCRIPTS = r"""
import contextlib, io, json, os, sys, traceback
from pathlib import Path

os.nice(NICE)
folder = Path(sys.argv[1])
scripts = json.loads((folder / "scripts.json").read_text())
for name, script in scripts:
    out, failure = io.StringIO(), ""
    try:
        with contextlib.redirect_stdout(out):
            exec(compile(script, name, "exec"), {"__name__": "__main__"})
    except SystemExit as e:
        if e.code not in (None, 0):
            failure = f"exit status {e.code}"
    except BaseException:
        failure = traceback.format_exc()[-6000:]
    done = folder / (name + ".json")
    part = folder / (name + ".part")
    part.write_text(json.dumps({"stdout": out.getvalue(), "failure": failure}))
    os.replace(part, done)
"""


class _Child:
    """One child process running scripts, and the folder of its results."""

    def __init__(self, scripts: list[tuple[str, str]]) -> None:
        self.names = [name for name, _ in scripts]
        self.folder = Path(tempfile.mkdtemp(prefix="bcgprof-hopper-"))
        (self.folder / "scripts.json").write_text(json.dumps(scripts))
        env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
        env["TRITON_CACHE_DIR"] = str(self.folder / "triton-cache")
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
        with open(self.folder / "stderr.txt", "wb") as stderr:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", _RUN_SCRIPTS.replace("NICE", str(NICE)), str(self.folder)],
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=stderr,
            )

    def outcome(self, name: str) -> tuple[str, str]:
        done = self.folder / (name + ".json")
        deadline = time.monotonic() + WAIT_S
        while not done.exists():
            if self.proc.poll() is not None and not done.exists():
                stderr = (self.folder / "stderr.txt").read_text(errors="replace")
                status = self.proc.returncode
                return "", f"the child exited with status {status}\n{stderr[-3000:]}"
            if time.monotonic() > deadline:
                return "", f"no result within {WAIT_S:g} s"
            time.sleep(0.1)
        result = json.loads(done.read_text())
        return result["stdout"], result["failure"]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        shutil.rmtree(self.folder, ignore_errors=True)


class HopperCompiles:
    """The session's child compiling the selected modules' ``HOPPER_SCRIPT``s."""

    def __init__(self) -> None:
        self.children: list[_Child] = []

    def start(self, modules: list[ModuleType]) -> None:
        """Start one child for these modules' scripts (each once, in the order given), leaving out
        any a child already runs."""
        running = {name for child in self.children for name in child.names}
        scripts: list[tuple[str, str]] = []
        for module in modules:
            name = module.__name__
            if name not in running and name not in [n for n, _ in scripts]:
                scripts.append((name, module.HOPPER_SCRIPT))
        if scripts:
            self.children.append(_Child(scripts))

    def run(self, modules: list[ModuleType]) -> None:
        """:meth:`start`, then wait until every child has ended (or :meth:`stop` ended it). The
        wait blocks in ``waitpid``; a wait with a time limit would poll, waking a thread of the
        tests' process many times a second."""
        self.start(modules)
        for child in list(self.children):
            child.proc.wait()

    def outcome(self, module: ModuleType) -> tuple[str, str]:
        """(what the module's script printed, its failure: '' when it ended as ``python -c`` would
        with status 0), waiting for the script to end; a child starts here for it when none has (a
        worker of pytest-xdist, a test asked for outside a collection)."""
        self.start([module])
        child = next(c for c in self.children if module.__name__ in c.names)
        return child.outcome(module.__name__)

    def stop(self) -> None:
        """End the children still running, and remove their folders."""
        for child in self.children:
            child.stop()
        self.children.clear()
