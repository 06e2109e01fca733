"""Parts of one command run side by side (bcgprof.analysis.predict.side_by_side): each later part in
a child process that keeps what it learns in the cache, on a small synthetic traced profile
(tests/traced_profile.py; no GPU).

The command's answer and its errors must be those of the parts done one after another; a child
must hand nothing back but the cache, print nothing, and be stopped when the first part fails;
nothing is forked where the cache cannot take what a child learns.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest

from bcgprof.analysis.predict import side_by_side, trace_cache, trace_set
from bcgprof.analysis.predict.lists import PredictionError, predict_buckets
from bcgprof.analysis.predict.prediction import prediction_json
from bcgprof.report import read_report
from bcgprof.report.traces import read_trace, trace_name, write_trace

from traced_profile import MODES, write_profile

LIST = [4096, 1536, 512, 64]


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch) -> Path:
    """Each test with its own cache directory, and parts forked here whatever the machine (one
    processor, a test runner's threads) would allow."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setattr(side_by_side, "_processors", lambda: 2)
    monkeypatch.setattr(side_by_side.threading, "active_count", lambda: 1)
    return tmp_path / "xdg" / "bcgprof"


@pytest.fixture(scope="module")
def profile(tmp_path_factory):
    return write_profile(tmp_path_factory.mktemp("traced") / "profile")


@pytest.fixture
def parsed(monkeypatch) -> list:
    """The traces this process parsed (a child's parsing is not counted here)."""
    seen: list = []
    parse = trace_set.parse

    def parsing(path, *args, **kwargs):
        seen.append(Path(path).name)
        return parse(path, *args, **kwargs)

    monkeypatch.setattr(trace_set, "parse", parsing)
    return seen


def test_later_parts_run_in_children_that_hand_back_only_what_they_keep(capfd):
    def part(i: int) -> None:
        print(f"part {i} prints nothing the command shows")
        trace_cache.remember("test part", [i], {"pid": __import__("os").getpid(), "i": i})

    side_by_side.side_by_side([lambda i=i: part(i) for i in range(3)])
    kept = [trace_cache.recall("test part", [i]) for i in range(3)]
    assert [k["i"] for k in kept] == [0, 1, 2]
    pids = {k["pid"] for k in kept}
    assert len(pids) == 3 and __import__("os").getpid() in pids  # the first here, two children
    assert capfd.readouterr().out.count("prints nothing") == 1  # the first part's own print only


def test_the_children_are_stopped_when_the_first_part_fails():
    def first() -> None:
        raise ValueError("the command fails here first")

    def slow() -> None:
        time.sleep(30)
        trace_cache.remember("test part", ["slow"], True)

    start = time.monotonic()
    side_by_side.side_by_side([first, slow])  # errors are the command's to raise, in its order
    assert time.monotonic() - start < 10
    assert trace_cache.recall("test part", ["slow"]) is None


def test_nothing_is_forked_without_a_cache_to_hand_back_through(monkeypatch):
    ran: list[int] = []
    monkeypatch.setenv("BCGPROF_NO_CACHE", "1")
    assert not side_by_side.available()
    side_by_side.side_by_side([lambda: ran.append(0), lambda: ran.append(1)])
    assert ran == []  # the command does both itself, in its order


def test_traces_read_side_by_side_give_the_sequential_answer(profile, parsed, monkeypatch):
    available = side_by_side.available
    monkeypatch.setattr(side_by_side, "available", lambda: False)
    alone = prediction_json(predict_buckets(profile, LIST))
    assert parsed == [trace_name(m) for m in MODES]
    shutil.rmtree(trace_cache.cache_root())
    parsed.clear()
    monkeypatch.setattr(side_by_side, "available", available)
    monkeypatch.setattr(side_by_side, "MIN_TRACE_BYTES", 0)  # every trace worth a child here
    side = prediction_json(predict_buckets(profile, LIST))
    assert side == alone
    # the first trace parsed here, the others in children and read back from the cache
    assert parsed == [trace_name(MODES[0])]


def test_a_trace_refused_in_a_child_is_refused_by_the_command(tmp_path, monkeypatch, parsed):
    copy = tmp_path / "damaged"
    shutil.copytree(write_profile(tmp_path / "profile").path, copy)
    trace = read_trace(copy / trace_name("shared"))
    at = next(
        i
        for i, r in enumerate(trace.rows)
        if r.pool == "graph" and r.action == "alloc" and r.size > 1 << 20
    )
    trace.rows[at] = trace.rows[at]._replace(size=trace.rows[at].size * 4)  # an allocation grew
    write_trace(copy, trace)
    monkeypatch.setattr(side_by_side, "MIN_TRACE_BYTES", 0)
    with pytest.raises(PredictionError, match="does not replay to the report's own pool"):
        predict_buckets(read_report(copy), LIST)
    # the child kept the trace's events (read back here) but no verdict: checked and refused here
    assert parsed == [trace_name(MODES[0])]
