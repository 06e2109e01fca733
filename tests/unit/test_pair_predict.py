"""Two phases in one pool, predicted from each phase's traced profile
(bcgprof.analysis.predict.pair): against the pair "captured" through the same allocator model
(tests/traced_profile.py), one pool for both phases."""

from __future__ import annotations

from pathlib import Path

import pytest

from bcgprof.analysis.predict import pair
from bcgprof.analysis.predict.pair import predict_pair
from bcgprof.errors import PredictionError
from bcgprof.report import ReportWriter, RunInfo, read_report
from bcgprof.report.traces import write_trace
from tests.traced_profile import HIDDEN, LAYERS, _Capture, capture, forward

PREFILL = [512, 1024, 2048]
DECODE = [128, 512, 700]
DECODE_STREAM = 7  # the second process's capture stream, another number than the first's (0)


def decode_forward(seqs: int):
    """A decode step's requests: another shape of stack than prefill's (wider per row)."""
    return forward(seqs * 3)


def _profile(directory: Path, phase: str, buckets, requests, stream: int = 0):
    """A traced one-phase report of ``phase`` (modes per-bucket and shared), its trace's requests
    on ``stream``."""
    rows, traces = [], []
    for mode in ("per-bucket", "shared"):
        records, trace = capture(mode, buckets, requests)
        trace.rows = [r._replace(stream=stream) for r in trace.rows]
        rows += records
        traces.append(trace)
    run = RunInfo(
        model="synthetic",
        layers=LAYERS,
        hidden_size=HIDDEN,
        phase=phase,
        buckets=sorted(buckets),
        modes=["per-bucket", "shared"],
        config_hash="0123456789abcdef",
        status="complete",
    )
    ReportWriter(directory, run, rows)
    for trace in traces:
        write_trace(directory, trace)
    return read_report(directory)


def _pair_truth(mode: str, late_frees: bool) -> int:
    """The pool of the pair "captured" by one process: prefill's list, then decode's, into one
    pool. ``late_frees``: the prefill's last workspace, freed after its capture ended, is freed
    before decode begins (as a process does; no trace records it)."""
    cap = _Capture(mode)
    for i, b in enumerate(sorted(PREFILL, reverse=True)):
        cap.bucket(b, i, forward)
    if not late_frees:
        cap.late = []
    for i, b in enumerate(sorted(DECODE, reverse=True)):
        cap.bucket(b, i, decode_forward)
    return cap.pool.reserved


@pytest.fixture
def profiles(tmp_path):
    first = _profile(tmp_path / "prefill", "prefill", PREFILL, forward)
    second = _profile(tmp_path / "decode", "decode", DECODE, decode_forward, DECODE_STREAM)
    return first, second


@pytest.mark.parametrize("mode", ["per-bucket", "shared"])
def test_the_pair_predicted_is_the_pair_captured_in_one_pool(profiles, mode):
    first, second = profiles
    prediction = predict_pair(first, second)
    got = next(m for m in prediction.modes if m.mode == mode)
    assert prediction.phases == ("prefill", "decode")
    # each phase alone is its replay, which equals what it measured
    assert got.first_alone_bytes == next(s.pool_bytes for s in first.summary if s.mode == mode)
    assert got.second_alone_bytes == next(s.pool_bytes for s in second.summary if s.mode == mode)
    # the second phase replayed into the pool the first left (its stream taken for the first's)
    assert got.pair_bytes == _pair_truth(mode, late_frees=False)
    # a process also frees the first phase's last workspace before the second begins, which no
    # trace records: the prediction is at most that much above
    assert got.pair_bytes >= _pair_truth(mode, late_frees=True)
    assert got.exact and got.to_json()["kind"] == "predicted"
    # one pool costs less than a pool per phase, and the pair at least the larger phase alone
    assert got.pair_bytes < got.first_alone_bytes + got.second_alone_bytes
    assert got.beyond_larger_bytes == got.pair_bytes - got.larger_alone_bytes
    if mode == "per-bucket":  # here the prefill's kept outputs leave decode too little room
        assert got.beyond_larger_bytes > 0


def test_two_captures_of_one_phase_are_not_a_pair(profiles, tmp_path):
    first, _ = profiles
    again = _profile(tmp_path / "again", "prefill", PREFILL, forward)
    with pytest.raises(PredictionError, match="both capture prefill"):
        predict_pair(first, again)


def test_a_pair_predicted_again_looks_its_figures_up(profiles, monkeypatch, tmp_path):
    """The second prediction of the same pair checks both traces (their kept verdicts) and takes
    the figures the first kept, replaying nothing; without the cache, it replays them again."""
    monkeypatch.setenv("BCGPROF_CACHE_DIR", str(tmp_path / "cache"))
    first, second = profiles
    replayed = []
    replay = pair._replayed

    def counting(*args, **kwargs):
        replayed.append(args[2])
        return replay(*args, **kwargs)

    monkeypatch.setattr(pair, "_replayed", counting)
    cold = predict_pair(first, second).to_json()
    assert replayed == ["per-bucket", "shared"]
    assert predict_pair(first, second).to_json() == cold
    assert replayed == ["per-bucket", "shared"]  # looked up
    monkeypatch.setenv("BCGPROF_NO_CACHE", "1")
    assert predict_pair(first, second).to_json() == cold
    assert replayed == ["per-bucket", "shared"] * 2
