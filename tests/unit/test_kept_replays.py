"""Replays and programmes kept across commands (bcgprof.analysis.predict.kept_replays, the
programmes of bcgprof.analysis.predict.search), and the check's replay answering for a profile's own
list, on a small synthetic traced profile: a later command gives the answer a cold one gives,
replaying no list an earlier one replayed; what does not read back whole, or was kept for other
traces, is worked out again."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from bcgprof.analysis.predict import kept_advice
from bcgprof.analysis.predict.advise import advice_json, advise
from bcgprof.analysis.predict.lists import bucket_profile, predict_buckets
from bcgprof.analysis.predict.prediction import prediction_json

from traced_profile import BUCKETS, write_profile

MODE = "per-bucket"


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    """Each test with its own cache directory (XDG_CACHE_HOME)."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    return tmp_path / "xdg" / "bcgprof"


@pytest.fixture(scope="module")
def profile(tmp_path_factory):
    return write_profile(tmp_path_factory.mktemp("traced") / "profile")


def _budgets(profile) -> list[int]:
    """Two budgets above the largest bucket alone, a list of several buckets fitting each."""
    alone = predict_buckets(profile, [max(BUCKETS)], [MODE]).mode(MODE).high_bytes
    return [alone + (64 << 20), alone + (160 << 20)]


def _advice(profile, budget: int) -> tuple[dict, dict]:
    made = advise(profile, budget, mode=MODE)
    return advice_json(made), made.work


def test_a_later_advise_replays_no_list_an_earlier_one_replayed(profile, cache, monkeypatch):
    low, high = _budgets(profile)
    first, work = _advice(profile, low)
    assert work["bucket_replays"] > 0
    assert any((cache / "replays").iterdir()) and any((cache / "programmes").iterdir())
    again, work = _advice(profile, low)
    assert again == first and work["bucket_replays"] == 0
    # another budget: the answer a cold advise gives, with fewer buckets replayed than it
    other, work = _advice(profile, high)
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache.parent.parent / "cold"))
    cold, cold_work = _advice(profile, high)
    assert other == cold and work["bucket_replays"] < cold_work["bucket_replays"]


@pytest.mark.parametrize("damage", ["cut", "garbage", "pools", "digests", "done"])
def test_kept_replays_and_programmes_are_used_only_when_they_read_back_whole(
    profile, cache, damage, monkeypatch
):
    budget = _budgets(profile)[0]
    first, _ = _advice(profile, budget)
    # the advice itself not looked up: the search runs again, on what the damage left
    monkeypatch.setattr(kept_advice, "recall", lambda key, near: None)
    for path in [*(cache / "replays").iterdir(), *(cache / "programmes").iterdir()]:
        text = path.read_text()
        entry = json.loads(text)
        value = entry["value"]
        if damage == "cut":
            path.write_text(text[: len(text) // 2])
            continue
        if damage == "garbage":
            path.write_text(json.dumps({"key": entry["key"], "value": "garbage"}))
            continue
        if path.parent.name == "programmes":
            value["paths"] = value["paths"][:-4] + "@@@@"  # not base64
        else:
            for kept in value.values():
                if damage == "pools":
                    kept[1] = [-1.5] * len(kept[1])
                elif damage == "digests":
                    kept[0] = {source: "0" * 64 for source in kept[0]}
                else:
                    kept[2] = [True, 0] if kept[2] else [1, 2, 3]
        path.write_text(json.dumps({"key": entry["key"], "value": value}))
    again, work = _advice(profile, budget)
    assert again == first and work["bucket_replays"] > 0  # worked out again


def test_the_checks_replay_answers_for_the_profiles_own_list(profile, cache):
    p = bucket_profile(profile)
    own = sorted(BUCKETS)
    predicted = prediction_json(predict_buckets(profile, own, [MODE], profile=p))
    assert p.replayer.bucket_replays == 0  # the check's replay, not another
    assert p.replayer.bucket_sources.traces.verified == {MODE}
    fresh = bucket_profile(profile)
    fresh.replayer.bucket_sources.has(MODE)  # its check's verdict, and replay, from the cache
    fresh.replayer.bucket_sources.known.clear()
    replayed = fresh.replayer.replay(MODE, own)
    assert fresh.replayer.bucket_replays > 0
    assert [r["pool_bytes"] for r in predicted["modes"][0]["rows"]] == replayed.pool_bytes


def test_the_same_question_on_the_same_report_gets_the_kept_advice(profile, cache):
    low, high = _budgets(profile)
    first, work = _advice(profile, low)
    assert work["lists_checked"] > 0
    again, work = _advice(profile, low)
    assert again == first and set(work.values()) == {0}  # no search, no replay
    # asked otherwise (another budget, free memory, lengths): worked out, as a cold advise does
    other = advise(profile, high, mode=MODE)
    assert other.work["lists_checked"] > 0
    freer = advise(profile, low, mode=MODE, free=1 << 40)
    assert freer.work["lists_checked"] > 0
    # the same traces beside rows that differ in one figure: worked out again
    rows = list(profile.buckets)
    rows[-1] = dataclasses.replace(rows[-1], capture_ms=rows[-1].capture_ms + 1.0)
    changed = advise(dataclasses.replace(profile, buckets=rows), low, mode=MODE)
    assert changed.work["lists_checked"] > 0


@pytest.mark.parametrize("damage", ["cut", "garbage", "fields", "curve"])
def test_a_kept_advice_is_used_only_when_it_reads_back_whole(profile, cache, damage):
    budget = _budgets(profile)[0]
    first, _ = _advice(profile, budget)
    for path in (cache / "facts").iterdir():
        text = path.read_text()
        entry = json.loads(text)
        value = entry["value"]
        if not (isinstance(value, dict) and "curve" in value):
            continue  # another kind of fact
        if damage == "cut":
            path.write_text(text[: len(text) // 2])
            continue
        if damage == "garbage":
            value = "garbage"
        elif damage == "fields":
            value["buckets"] = ["4096"]
        else:
            value["curve"] = [[1, 2, 3, 4]]
        path.write_text(json.dumps({"key": entry["key"], "value": value}))
    again, work = _advice(profile, budget)
    assert again == first and work["lists_checked"] > 0  # worked out again
