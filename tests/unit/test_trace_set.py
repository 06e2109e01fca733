"""A report's traces read once (bcgprof.analysis.predict.trace_set) and what is kept of them between
commands (bcgprof.analysis.predict.trace_cache), on a small synthetic traced profile
(tests/traced_profile.py; no GPU).

The trace set must hold every bucket's events exactly as a row-by-row reading groups them; the cache
must give the same answers as working them out (a hit skips reading and checking the trace, a
changed trace misses, a damaged entry is ignored, an unwritable cache is skipped); a list is checked
whole, and its work bounded, before any replay (a layer prediction from the committed reports opens
no trace it does not need: tests/regression/test_trace_set.py).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from bcgprof.analysis.predict import bucket_ops, replay, trace_cache, trace_set
from bcgprof.analysis.predict import sources as replay_sources
from bcgprof.analysis.predict.fold import ALLOC, FREE
from bcgprof.analysis.predict.lists import PredictionError, bucket_profile, predict_buckets
from bcgprof.analysis.predict.prediction import prediction_json
from bcgprof.report import read_report
from bcgprof.report.traces import read_trace, trace_name, write_trace

from traced_profile import BUCKETS, MODES, write_profile

LIST = [4096, 1536, 512, 64]


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch) -> Path:
    """Each test with its own cache directory (XDG_CACHE_HOME)."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    return tmp_path / "xdg" / "bcgprof"


@pytest.fixture(scope="module")
def profile(tmp_path_factory):
    return write_profile(tmp_path_factory.mktemp("traced") / "profile")


@pytest.fixture
def work(monkeypatch) -> dict:
    """Counts what a command works out: traces parsed, and checks replayed against the measured
    pools."""
    counted = {"parsed": 0, "checked": 0}
    parse, check = trace_set.parse, replay.Replayer.replay

    def parsing(*args, **kwargs):
        counted["parsed"] += 1
        return parse(*args, **kwargs)

    def checking(self, mode, buckets, check=False, **kwargs):
        counted["checked"] += bool(check)
        return check_replay(self, mode, buckets, check, **kwargs)

    check_replay = check
    monkeypatch.setattr(trace_set, "parse", parsing)
    monkeypatch.setattr(replay.Replayer, "replay", checking)
    return counted


def _grouped(trace) -> dict[int, list]:
    """Each bucket's events, grouped row by row as the replay's rules say (the reference for the
    trace set)."""
    owner, events, numbers = {}, {b: [] for b in trace.buckets}, {}
    for r in trace.rows:
        if r.pool != "graph" or r.action not in ("alloc", "free_completed"):
            continue
        if r.action == "alloc":
            owner[r.id] = r.bucket
            events[r.bucket].append(("a", r.id, r.size, r.stream, r.offset))
        elif r.id in owner:  # a free recorded after its owner's capture ended is its owner's
            late = owner[r.id] != r.bucket and r.phase == "warmup"
            events[owner[r.id] if late else r.bucket].append(("f", r.id))
    for r in sorted(
        (r for r in trace.rows if r.action == "alloc" and r.pool == "graph"), key=lambda r: r.id
    ):
        numbers[r.id] = len(numbers) + 1
    return {b: [(e[0], numbers[e[1]], *e[2:]) for e in evs] for b, evs in events.items()}


def _ops(ops) -> list:
    return [("a", op[3], op[1], op[2]) if op[0] == ALLOC else ("f", op[1]) for op in ops]


def test_a_mode_trace_holds_each_buckets_events_as_the_rows_group_them(profile):
    for mode in MODES:
        path = profile.path / trace_name(mode)
        loaded = trace_set.load(path)
        expected = _grouped(read_trace(path))
        assert loaded.order == tuple(read_trace(path).buckets)
        for bucket, events in expected.items():
            ops = loaded.bucket_ops(bucket, 0).ops
            assert _ops(ops) == [e[:4] for e in events], (mode, bucket)
            # offsets
            assert all(op[5] - op[4] == e[4] for op, e in zip(ops, events) if op[0] == ALLOC)


def test_a_cache_hit_gives_the_cold_answer_without_reading_or_checking_again(profile, cache, work):
    cold = prediction_json(predict_buckets(profile, LIST))
    assert work == {"parsed": len(MODES), "checked": len(MODES)}
    assert (
        sorted(p.parent.name for p in cache.rglob("*") if p.is_file())
        == ["entries"] * 4 + ["facts"] * 4 + ["replays"] * 3  # the lists it replayed, a mode
    )
    warm = prediction_json(predict_buckets(profile, LIST))
    assert warm == cold
    assert work == {"parsed": len(MODES), "checked": len(MODES)}  # nothing read or checked again


def test_a_changed_trace_misses_the_cache(tmp_path, profile, work):
    predict_buckets(profile, LIST, ["shared"])
    copy = tmp_path / "changed"
    shutil.copytree(profile.path, copy)
    trace = read_trace(copy / trace_name("shared"))
    at = next(
        i
        for i, r in enumerate(trace.rows)
        if r.pool == "graph" and r.action == "alloc" and r.size > 1 << 20
    )
    # damaged: an allocation grew
    trace.rows[at] = trace.rows[at]._replace(size=trace.rows[at].size * 4)
    write_trace(copy, trace)
    with pytest.raises(PredictionError, match="does not replay to the report's own pool"):
        predict_buckets(read_report(copy), LIST, ["shared"])
    assert work["parsed"] == 2 and work["checked"] == 2


@pytest.mark.parametrize("damage", ["flip", "cut", "empty", "garbage"])
def test_a_damaged_cache_entry_is_ignored(profile, cache, work, damage):
    cold = prediction_json(predict_buckets(profile, LIST))
    for entry in [p for p in cache.rglob("*") if p.is_file()]:
        data = entry.read_bytes()
        entry.write_bytes(
            {
                "flip": data[:-20] + bytes([data[-20] ^ 0xFF]) + data[-19:],
                "cut": data[: len(data) // 2],
                "empty": b"",
                "garbage": b"{" * 1000,
            }[damage]
        )
    assert prediction_json(predict_buckets(profile, LIST)) == cold
    assert work == {
        "parsed": 2 * len(MODES),
        "checked": 2 * len(MODES),
    }  # worked out again, all of it


def test_a_fact_kept_for_other_inputs_is_not_taken(profile, cache, work):
    predict_buckets(profile, LIST, ["shared"])
    fact = next(cache.glob("facts/*.json"))
    entry = json.loads(fact.read_text())
    fact.write_text(json.dumps({"key": "another", "value": entry["value"]}))
    predict_buckets(profile, LIST, ["shared"])
    assert work["checked"] == 2


def test_a_cache_that_cannot_be_written_is_skipped(tmp_path, profile, monkeypatch, work):
    blocked = tmp_path / "a-file"
    blocked.write_text("not a directory")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocked))
    first = prediction_json(predict_buckets(profile, LIST))
    assert prediction_json(predict_buckets(profile, LIST)) == first
    assert work["parsed"] == 2 * len(MODES)


def test_the_cache_is_never_inside_a_report(tmp_path, monkeypatch, work):
    report = write_profile(tmp_path / "report", modes=("per-bucket",))
    before = sorted(p.name for p in report.path.rglob("*"))
    for inside in (report.path, report.path.parent):
        monkeypatch.setenv("XDG_CACHE_HOME", str(inside))
        predict_buckets(report, [4096, 512])
    assert sorted(p.name for p in report.path.rglob("*")) == before
    assert trace_cache.cache_root() == report.path.parent / "bcgprof"


def test_a_relative_xdg_cache_home_is_not_used(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/dir")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert trace_cache.cache_root() == tmp_path / ".cache" / "bcgprof"


def test_a_list_is_checked_whole_before_any_replay(tmp_path, monkeypatch):
    """A bucket that cannot be drawn from its neighbours, last in a long list, is refused before any
    bucket of any mode is replayed; so is a list whose buckets not profiled hold more events than
    one prediction replays."""
    from traced_profile import forward

    # the smallest bucket's capture allocates once more: nothing can be drawn from it
    def uneven(
        tokens,
    ):
        return forward(tokens) + ([("a", "extra", 4096), ("f", "extra")] if tokens == 64 else [])

    report = write_profile(tmp_path / "p", modes=("per-bucket", "shared"), requests=uneven)
    p = bucket_profile(report)
    # read and checked
    assert p.replayer.bucket_sources.has("per-bucket") and p.replayer.bucket_sources.has("shared")
    steps = []
    monkeypatch.setattr(replay.Replayer, "_step", lambda self, *a: steps.append(a))
    # hundreds of buckets; 121, 114, ... (replayed last) cannot be drawn
    wanted = list(range(100, 4096, 7))
    with pytest.raises(
        PredictionError, match="bucket 121 cannot be interpolated: the captures of 64 and 128"
    ):
        predict_buckets(report, wanted, profile=p)
    assert steps == []
    monkeypatch.setattr(replay_sources, "MAX_DRAWN_EVENTS", 1000)
    with pytest.raises(
        PredictionError, match=r"not profiled hold [\d,]+ allocator events .* more than the 1,000"
    ):
        predict_buckets(report, list(range(1100, 4097, 50)), profile=p)
    assert steps == []
    monkeypatch.undo()
    assert (
        predict_buckets(report, list(range(1100, 4097, 50)), profile=p).mode("shared").pool_bytes
        > 0
    )


def test_events_are_made_into_tuples_only_when_asked_and_dropped_beyond_the_budget(
    profile, monkeypatch
):
    monkeypatch.setattr(bucket_ops, "MADE_EVENTS", 200)
    loaded = trace_set.load(profile.path / trace_name("per-bucket"))
    ops = [loaded.bucket_ops(b, 0) for b in BUCKETS]
    assert all(o._ops is None for o in ops) and sum(o.size for o in ops) > 400
    made = [o.ops for o in ops]
    held = [o for o in ops if o._ops is not None]
    assert sum(o.size for o in held) <= 200 + max(o.size for o in ops) and ops[-1] in held
    assert [o.ops for o in ops] == made  # made again, the same
    assert all(op[0] in (ALLOC, FREE) for o in made for op in o)


def test_the_check_of_a_traces_own_list_skips_repeated_layers_and_counts_every_misplaced_allocation(
    tmp_path,
):
    """Recorded addresses moved in a deep stack's trace (most of its events lie in repeated layers,
    which the check skips): the folded check counts exactly the allocations a full replay finds
    misplaced."""
    import random

    from bcgprof.analysis.predict.replay import Replayer
    from bcgprof.analysis.predict.trace_set import TraceSet, mode_trace_of

    import traced_profile

    def deep(tokens):
        layers, traced_profile.LAYERS = traced_profile.LAYERS, 12
        try:
            return traced_profile.forward(tokens)
        finally:
            traced_profile.LAYERS = layers

    report = write_profile(tmp_path / "deep", modes=("per-bucket",), requests=deep)
    rng = random.Random(5)
    for moved in (0, 1, 7):
        trace = read_trace(report.path / trace_name("per-bucket"))
        allocs = [i for i, r in enumerate(trace.rows) if r.action == "alloc" and r.pool == "graph"]
        for i in rng.sample(allocs, moved):
            trace.rows[i] = trace.rows[i]._replace(
                offset=trace.rows[i].offset + 512 * rng.randrange(1, 4)
            )
        loaded = mode_trace_of(trace)
        folded, full = (Replayer(TraceSet({"per-bucket": loaded})) for _ in range(2))
        assert folded.bucket_sources.has("per-bucket") and full.bucket_sources.has("per-bucket")
        for ops in full.bucket_sources.ops["per-bucket"].values():
            ops.fold = None
        quick, slow = folded.check("per-bucket"), full.check("per-bucket")
        assert (quick.pool_bytes, quick.mismatches) == (slow.pool_bytes, slow.mismatches)
        assert (
            quick.mismatches == moved
            and folded.events_replayed < slow.mismatches + full.events_replayed / 3
        )


@pytest.mark.parametrize("kept", [None, [], [[]], "garbage", [[[1, 2, 3]]], [[[[1], True, 0, 0]]]])
def test_an_advice_takes_its_setup_from_the_cache_only_when_it_reads_back_whole(
    profile, kept, monkeypatch
):
    """advise keeps the replays that do not depend on the budget; a later one takes them, and the
    same advice comes out; a kept entry of another shape is ignored."""
    from bcgprof.analysis.predict.advise import advice_json, advise

    budget = predict_buckets(profile, [max(BUCKETS)], ["per-bucket"]).mode(
        "per-bucket"
    ).high_bytes + (64 << 20)
    first = advice_json(advise(profile, budget, mode="per-bucket"))
    p = bucket_profile(profile)
    setup = [sorted(BUCKETS), [max(BUCKETS)], *([b, max(BUCKETS)] for b in sorted(BUCKETS)[:-1])]
    assert p.replayer.recall_replays("per-bucket", setup)  # kept by the first
    assert advice_json(advise(profile, budget, mode="per-bucket")) == first
    monkeypatch.setattr(trace_cache, "recall", lambda *a, **k: kept)
    assert not bucket_profile(profile).replayer.recall_replays("per-bucket", setup)
    assert advice_json(advise(profile, budget, mode="per-bucket")) == first


def test_the_cache_goes_where_bcgprof_cache_dir_says_or_nowhere_with_bcgprof_no_cache(
    tmp_path, profile, monkeypatch, work
):
    chosen = tmp_path / "chosen"
    monkeypatch.setenv("BCGPROF_CACHE_DIR", str(chosen))
    cold = prediction_json(predict_buckets(profile, LIST))
    assert trace_cache.cache_root() == chosen and any(chosen.glob("entries/*"))
    assert prediction_json(predict_buckets(profile, LIST)) == cold
    assert work["parsed"] == len(MODES)  # the second read them back from there
    monkeypatch.setenv("BCGPROF_NO_CACHE", "1")
    assert trace_cache.cache_root() is None
    kept = sorted(chosen.rglob("*"))
    assert prediction_json(predict_buckets(profile, LIST)) == cold
    assert work["parsed"] == 2 * len(MODES)  # read again, nothing looked up
    assert sorted(chosen.rglob("*")) == kept  # nor written
    monkeypatch.setenv("BCGPROF_NO_CACHE", "0")
    assert trace_cache.cache_root() == chosen
