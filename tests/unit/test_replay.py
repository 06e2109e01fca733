"""Bucket-list predictions by replaying allocator traces (no GPU).

On a synthetic profile whose pool figures come from the allocator model fed with a forward's
requests (tests/traced_profile.py): replaying the profile's own list reproduces every row to the
byte (self-consistency); a list sharing the profile's leading buckets predicts those rows as
measured (prefix); any other list predicts what "capturing" that list gives (held out). Then the
refusals: a report without traces, a damaged trace, another capture's trace (the committed reports
without traces: tests/regression/test_replay.py).
"""

from __future__ import annotations

import itertools
import random
import subprocess
import sys

import pytest

from bcgprof.analysis.predict.lists import PredictionError, bucket_profile, predict_buckets
from bcgprof.analysis.predict.prediction import prediction_json
from bcgprof.analysis.predict.replay import Replayer

from traced_profile import BUCKETS, MODES, capture, forward, write_profile

MIB = 1 << 20


@pytest.fixture(scope="module")
def profile(tmp_path_factory):
    return write_profile(tmp_path_factory.mktemp("traced") / "profile")


def _measured(report, mode):
    return sorted((r for r in report.buckets if r.mode == mode), key=lambda r: r.order)


def test_replaying_the_profiles_own_list_reproduces_every_row_and_total(profile):
    pred = predict_buckets(profile, profile.run.buckets)
    assert [m.mode for m in pred.modes] == list(MODES)
    for m in pred.modes:
        rows = _measured(profile, m.mode)
        assert [r.pool_bytes for r in m.buckets] == [r.pool_bytes for r in rows], m.mode
        assert [r.pool_delta_bytes for r in m.buckets] == [r.pool_delta_bytes for r in rows], m.mode
        summary = next(s for s in profile.summary if s.mode == m.mode)
        assert (m.pool_bytes, m.device_used_bytes) == (
            summary.pool_bytes,
            summary.device_used_bytes,
        ), m.mode
        assert m.exact and m.low_bytes <= m.device_used_bytes <= m.high_bytes
    grew = [r.bucket for r in _measured(profile, "per-bucket")[1:] if r.pool_delta_bytes > 0]
    # the profile has growth after its first bucket, so this is not only the first row
    assert 3072 in grew


def test_every_recorded_block_lands_where_it_was_recorded(profile):
    replayer = bucket_profile(profile).replayer
    for mode in MODES:
        assert replayer.check(mode).mismatches == 0, mode


def test_a_list_sharing_the_leading_buckets_predicts_those_rows_as_measured(profile):
    for mode in ("per-bucket", "shared", "shared-largest"):
        rows = _measured(profile, mode)
        for keep in (1, 2, 4):
            head = [r.bucket for r in rows[:keep]]
            tail = [64] if 64 not in head else []
            pred = predict_buckets(profile, head + tail, [mode]).mode(mode)
            assert [r.pool_bytes for r in pred.buckets[:keep]] == [
                r.pool_bytes for r in rows[:keep]
            ], (mode, keep)


def test_a_list_sharing_the_checked_lists_leading_buckets_replays_only_the_rest(
    profile, tmp_path, monkeypatch
):
    """The check of a trace (its own list, replayed against the report) leaves the state after
    each bucket: a list sharing its leading buckets starts there, in either placement, and gives
    what a replay from the first bucket gives."""
    monkeypatch.setenv("BCGPROF_NO_CACHE", "1")  # every trace checked here, by a replay
    for mode in ("per-bucket", "shared"):
        own = [r.bucket for r in _measured(profile, mode)]
        wanted = [*own[:3], min(own)]
        checked = bucket_profile(profile).replayer
        assert checked.bucket_sources.has(mode) and mode in checked.bucket_sources.paths
        replays = [checked.replay(mode, wanted), checked.other_placement().replay(mode, wanted)]
        assert checked.bucket_replays == 1 and checked.other_placement().bucket_replays == 1
        alone = Replayer(checked.bucket_sources.traces)  # verified already: no check's states
        assert alone.bucket_sources.has(mode) and not alone.bucket_sources.paths
        assert [r.pool_bytes for r in replays] == [
            alone.replay(mode, wanted).pool_bytes,
            alone.other_placement().replay(mode, wanted).pool_bytes,
        ]
        assert alone.bucket_replays == len(wanted)


def _lists(k: int, seed: int = 0) -> list[tuple[int, ...]]:
    rng = random.Random(seed)
    every = [c for n in range(1, len(BUCKETS) + 1) for c in itertools.combinations(BUCKETS, n)]
    return [*rng.sample(every, k), (4096, 3072), (3072, 2048, 64), (64,), (2048, 1024, 512)]


@pytest.mark.parametrize("mode", MODES)
def test_held_out_lists_predict_what_capturing_them_gives(profile, mode):
    """Lists the profile never captured, among them lists whose largest bucket is not the profile's
    and lists that grow the pool beside a kept output: the replay predicts each row's pool to the
    byte."""
    for chosen in _lists(40):
        measured, _ = capture(mode, chosen)
        pred = predict_buckets(profile, chosen, [mode]).mode(mode)
        assert [r.pool_bytes for r in pred.buckets] == [r.pool_bytes for r in measured], chosen
        assert pred.exact


def test_the_largest_bucket_of_a_list_keeps_its_output_in_shared_largest_mode(profile):
    pred = predict_buckets(profile, [2048, 1024], ["shared-largest", "shared"])
    assert any("keeps its own output" in n and "per-bucket capture" in n for n in pred.notes)
    assert pred.mode("shared-largest").pool_bytes >= pred.mode("shared").pool_bytes


def test_skipping_repeated_layers_changes_no_result(tmp_path, monkeypatch):
    """A deeper stack (12 layers), replayed with and without skipping the periods whose state
    repeats."""
    import bcgprof.analysis.predict.replay

    import traced_profile

    jumps = []
    rename = bcgprof.analysis.predict.replay.rename
    monkeypatch.setattr(
        bcgprof.analysis.predict.replay, "rename", lambda *a: jumps.append(rename(*a)) or jumps[-1]
    )

    def deep(tokens):
        layers, traced_profile.LAYERS = traced_profile.LAYERS, 12
        try:
            return forward(tokens)
        finally:
            traced_profile.LAYERS = layers

    report = write_profile(tmp_path / "deep", modes=("per-bucket", "shared"), requests=deep)
    folded = bucket_profile(report).replayer
    plain = Replayer.load(report.path, ["per-bucket", "shared"])
    assert plain is not None
    for mode in ("per-bucket", "shared"):
        assert folded.bucket_sources.has(mode) and plain.bucket_sources.has(mode)
        # there is something to skip
        assert any(ops.fold for ops in folded.bucket_sources.ops[mode].values())
        for ops in plain.bucket_sources.ops[mode].values():
            ops.fold = None
        for chosen in _lists(25, seed=3):
            assert (
                folded.replay(mode, chosen).pool_bytes == plain.replay(mode, chosen).pool_bytes
            ), (mode, chosen)
    assert any(j is not None for j in jumps)  # periods were skipped


def test_the_json_says_exact_and_where_the_band_comes_from(profile):
    data = prediction_json(predict_buckets(profile, [4096, 512]))
    for m in data["modes"]:
        assert m["exact"] is True and "replayed exactly" in m["band_source"]


def test_buckets_outside_the_profiled_range_are_refused(profile):
    with pytest.raises(
        PredictionError, match=r"8192 lies outside the profiled buckets .* \(64 to 4096\)"
    ):
        predict_buckets(profile, [8192, 1024])
    with pytest.raises(PredictionError, match="buckets 8192, 32 lie outside"):
        predict_buckets(profile, [8192, 32])


def test_a_report_without_traces_keeps_everything_but_list_predictions(tmp_path):
    report = write_profile(tmp_path / "old", traces=False)
    with pytest.raises(PredictionError) as caught:
        predict_buckets(report, [4096, 512])
    assert str(caught.value) == (
        f"{report.path} has no allocator traces (captured before they were recorded); "
        "re-capture with this bcgprof to predict other bucket lists"
    )


def test_the_read_side_of_the_replay_does_not_import_torch():
    code = (
        "import sys; import bcgprof.analysis.predict.replay, bcgprof.analysis.predict.allocator, "
        "bcgprof.report.traces, bcgprof.measure.trace_events, "
        "bcgprof.analysis.predict.lists, bcgprof.analysis.predict.advise; print(sorted(m for m in "
        "sys.modules if m.split('.')[0] == 'torch'))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_a_bucket_whose_trace_lost_events_is_refused(profile):
    from bcgprof.analysis.predict.replay import ReplayError
    from bcgprof.report.traces import read_trace, trace_name

    trace = read_trace(profile.path / trace_name("shared"))
    trace.incomplete = [1024]
    replayer = Replayer({"shared": trace})
    with pytest.raises(ReplayError, match="trace of bucket 1024 is incomplete"):
        replayer.replay("shared", [4096, 1024])
    assert replayer.replay("shared", [4096, 512]).exact


def _damaged(tmp_path, profile, mode, change):
    """A copy of the profile whose ``mode`` trace ``change`` (Trace -> None) has altered."""
    import shutil

    from bcgprof.report import read_report
    from bcgprof.report.traces import read_trace, trace_name, write_trace

    copy = tmp_path / "damaged"
    shutil.copytree(profile.path, copy)
    trace = read_trace(copy / trace_name(mode))
    change(trace)
    write_trace(copy, trace)
    return read_report(copy)


def _rows_dropped(keep):
    def change(trace):
        trace.rows = [r for r in trace.rows if keep(r)]

    return change


def _grown(trace):
    """One graph-pool allocation of the largest bucket made four times larger."""
    at = next(
        i
        for i, r in enumerate(trace.rows)
        if r.pool == "graph" and r.action == "alloc" and r.size > MIB
    )
    trace.rows[at] = trace.rows[at]._replace(size=trace.rows[at].size * 4)


@pytest.mark.parametrize(
    "what, change, message",
    [
        ("no rows under its header", _rows_dropped(lambda r: False), "holds no graph-pool events"),
        (
            "the last bucket's rows lost",
            _rows_dropped(lambda r: r.bucket != min(BUCKETS)),
            "holds no graph-pool events",
        ),
        (
            "its graph-pool rows lost",
            _rows_dropped(lambda r: r.pool != "graph"),
            "holds no graph-pool events",
        ),
        ("an allocation's size changed", _grown, "does not replay to the report's own pool"),
    ],
)
def test_a_trace_that_does_not_replay_to_its_reports_own_pool_is_refused(
    tmp_path, profile, what, change, message
):
    """A damaged trace (or another capture's) would otherwise replay as "exact" and predict other
    lists wrongly: before any prediction, each trace used must give back the report's own measured
    pool after every bucket, as every committed trace does."""
    report = _damaged(tmp_path, profile, "shared", change)
    with pytest.raises(PredictionError, match=message):
        predict_buckets(report, [4096, 1024, 512], ["shared"])
    # others unhurt
    assert predict_buckets(report, [4096, 1024, 512], ["per-bucket"]).mode("per-bucket").exact


def test_another_captures_trace_is_refused(tmp_path, profile):
    import shutil

    from bcgprof.report import read_report
    from bcgprof.report.traces import trace_name

    other = write_profile(tmp_path / "other", [b for b in BUCKETS if b != 1536])
    copy = tmp_path / "swapped"
    shutil.copytree(profile.path, copy)
    shutil.copy(other.path / trace_name("per-bucket"), copy / trace_name("per-bucket"))
    with pytest.raises(PredictionError, match="holds buckets .* where the report measured"):
        predict_buckets(read_report(copy), [4096, 512], ["per-bucket"])


def test_a_refused_trace_stays_refused_when_asked_again(tmp_path, profile):
    from bcgprof.analysis.predict.replay import ReplayError

    p = bucket_profile(_damaged(tmp_path, profile, "shared", _grown))
    for _ in range(2):
        with pytest.raises(ReplayError, match="does not replay to the report's own pool"):
            p.replayer.bucket_sources.has("shared")
    assert p.replayer.bucket_sources.has("per-bucket")
