"""tests/children.py, the children run ahead of their tests: a child run ahead gives the outcome
the test would get running it itself, runs once, and ends with the session."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from children import Command, Prestarted

SHOW = (
    "import json, os, sys; print(json.dumps({'cwd': os.getcwd(), 'env': os.environ.get('CHILD_X'),"
    " 'stdin': sys.stdin.read() if len(sys.argv) > 1 else None}))"
)


def _children(tmp_path) -> Prestarted:
    return Prestarted(lambda key: (tmp_path / key).mkdir() or tmp_path / key)


def test_a_child_gets_its_folder_environment_directory_and_input(tmp_path, monkeypatch):
    monkeypatch.setenv("CHILD_X", "session")
    children = _children(tmp_path)  # the environment as it stands now
    monkeypatch.setenv("CHILD_X", "a later test's")
    made = []

    def make(folder):
        made.append(folder)
        (folder / "mine").mkdir()
        return Command([sys.executable, "-c", SHOW, "read"], cwd=folder / "mine", input="in")

    done, folder = children.outcome("a", make)
    assert made == [folder] and folder == tmp_path / "a"
    assert done.returncode == 0 and done.args == [sys.executable, "-c", SHOW, "read"]
    shown = json.loads(done.stdout)
    assert shown == {"cwd": str(folder / "mine"), "env": "session", "stdin": "in"}
    changed = children.outcome(
        "b", lambda f: Command([sys.executable, "-c", SHOW], env={"CHILD_X": "own"})
    )[0]
    assert json.loads(changed.stdout) == {"cwd": os.getcwd(), "env": "own", "stdin": None}


def test_a_child_run_ahead_runs_once_and_its_test_waits_for_it(tmp_path):
    children = _children(tmp_path)
    runs = []

    def make(folder):
        runs.append(folder)
        return Command([sys.executable, "-c", "import time; time.sleep(0.3); print('done')"])

    children.start([children.child("slow", make)])
    time.sleep(0.1)  # the thread has started it
    done, _ = children.outcome("slow", make)
    assert done.stdout == "done\n" and len(runs) == 1
    children.stop()
    children.join()


def test_a_child_past_its_time_limit_is_killed_and_its_test_gets_the_timeout(tmp_path):
    children = _children(tmp_path)
    slow = Command([sys.executable, "-c", "import time; time.sleep(30)"], timeout=0.5)
    with pytest.raises(subprocess.TimeoutExpired):
        children.outcome("slow", lambda folder: slow)
    with pytest.raises(subprocess.TimeoutExpired):  # the same outcome, not a second run
        children.outcome("slow", lambda folder: pytest.fail("ran twice"))


def test_stopping_ends_the_child_running_and_starts_no_more(tmp_path):
    children = _children(tmp_path)
    started = time.monotonic()
    slow = Command([sys.executable, "-c", "import time; time.sleep(30)"])
    children.start([children.child("slow", lambda f: slow), children.child("next", lambda f: slow)])
    time.sleep(0.3)
    children.stop()
    children.join()
    assert time.monotonic() - started < 10
    done, _ = children.outcome("slow", lambda f: slow)
    assert done.returncode == -9  # killed
    assert not (tmp_path / "next").exists()  # never made
