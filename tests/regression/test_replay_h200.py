"""The replay against the H200: a profile captured with allocator traces (torch 2.11.0+cu130)
predicts the graph pool of every other list captured on that machine from the same model, row by
row, to the byte, and its device used within 0.5% and inside the band it prints (no GPU needed here:
the reports are committed).

Three profiles: ``reports/gpt-oss-20b-h200-traced``, ``reports/llama-3.1-8b-h200-traced`` and
``reports/qwen3-30b-a3b-h200-traced``, each the default capture made again with traces, which gates
at zero tolerance against the reference report of its model (every pool row equal). gpt-oss-20b's
held-out reports were captured before traces were recorded, from the same model code, so their pools
are what this code's capture of those lists gives.

One more profile was captured on an H100 80GB (same torch, same model code):
``reports/gpt-oss-20b-h100-traced``, whose pool rows are the H200 reference's. On each card the
every-third list was captured after its prediction from that card's profile was committed
(``reports/gpt-oss-20b-h100-third/predicted.json``,
``reports/gpt-oss-20b-h200-third/predicted.json``), and on both cards a 13-bucket list none of whose
buckets was profiled, its largest (12000) included (``reports/gpt-oss-20b-h100-interpolated``,
``reports/gpt-oss-20b-h200-interpolated``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bcgprof.analysis.predict.lists import predict_buckets
from bcgprof.analysis.predict.needs_free import measured_needs_free_bytes
from bcgprof.report import read_report

REFERENCES = {  # profile prefix -> the lists captured on the H200 besides the profile's own
    "gpt-oss-20b-h200": [
        "sparse",
        "subset20",
        "snapshot",
        "second-13824-per-bucket",
        "second-13824-shared-largest",
        "second-15360-per-bucket",
        "second-15360-shared-largest",
        "advised-per-bucket",
        "advised-shared",
        "advised-shared-largest",
        "range512",
        "third",
        "interpolated",
    ],
    "llama-3.1-8b-h200": [
        "range512",
        "sparse",
        "subset20",
        "third",
        "tophalf",
        "unprofiled",
        "advised-per-bucket",
        "advised-shared",
    ],
    "qwen3-30b-a3b-h200": ["range512", "sparse", "subset20", "third", "tophalf", "step600"],
    "gpt-oss-20b-h100": ["third", "interpolated"],
}
# the graph pool does not depend on the card
REFERENCE_OF = {"gpt-oss-20b-h100": "gpt-oss-20b-h200"}
# lists with buckets the profile lacks: each allocation's size is interpolated, so the replay is not
# exact
INTERPOLATED = {
    "llama-3.1-8b-h200-unprofiled",
    "qwen3-30b-a3b-h200-step600",
    "gpt-oss-20b-h100-interpolated",
    "gpt-oss-20b-h200-interpolated",
}
CASES = [(prefix, name) for prefix, names in REFERENCES.items() for name in names]


def _rows(report, mode):
    return sorted((r for r in report.buckets if r.mode == mode), key=lambda r: r.order)


@pytest.fixture
def profile(committed_profiles):
    """profile(prefix) -> the traced profile's report and its prepared profile, shared by the
    session."""
    return lambda prefix: committed_profiles(f"reports/{prefix}-traced")


@pytest.mark.parametrize("prefix", list(REFERENCES))
def test_the_profile_is_the_reference_capture_again(prefix, profile):
    report, _ = profile(prefix)
    reference = read_report(f"reports/{REFERENCE_OF.get(prefix, prefix)}")
    assert (
        report.run.torch_version == "2.11.0+cu130" and report.run.buckets == reference.run.buckets
    )
    assert [r.pool_bytes for r in report.buckets] == [r.pool_bytes for r in reference.buckets]


@pytest.mark.parametrize("prefix", list(REFERENCES))
def test_replaying_the_profiles_own_list_places_every_allocation_where_the_gpu_did(prefix, profile):
    report, p = profile(prefix)
    for mode in report.modes():
        check = p.replayer.check(mode)
        assert check.mismatches == 0, mode
        assert check.pool_bytes == [r.pool_bytes for r in _rows(report, mode)], mode


@pytest.mark.parametrize(("prefix", "name"), CASES)
def test_every_list_captured_beside_a_profile_is_predicted_row_by_row(prefix, name, profile):
    report, p = profile(prefix)
    measured = read_report(f"reports/{prefix}-{name}")
    assert measured.run.model == report.run.model
    for mode in measured.modes():
        rows = _rows(measured, mode)
        pred = predict_buckets(report, [r.bucket for r in rows], [mode], profile=p).mode(mode)
        lacking = [r.bucket for r in rows if r.bucket not in report.run.buckets]
        assert bool(lacking) == (f"{prefix}-{name}" in INTERPOLATED) or mode == "floor", mode
        assert [r.bucket for r in pred.buckets if r.interpolated_from] == lacking, mode
        assert pred.exact == (not lacking), mode
        assert [r.pool_bytes for r in pred.buckets] == [r.pool_bytes for r in rows], mode
        total = next(s.device_used_bytes for s in measured.summary if s.mode == mode)
        # the rest is executables (NVML)
        assert abs(pred.device_used_bytes - total) <= 0.005 * total, mode
        assert pred.low_bytes <= total <= pred.high_bytes, mode


@pytest.mark.parametrize(
    ("prefix", "name"),
    [
        ("gpt-oss-20b-h100", "third"),
        ("gpt-oss-20b-h200", "third"),
        ("gpt-oss-20b-h100", "interpolated"),
        ("gpt-oss-20b-h200", "interpolated"),
    ],
)
def test_the_prediction_committed_before_the_capture_is_what_predict_gives_and_it_held(
    prefix, name, profile
):
    report, p = profile(prefix)
    measured = read_report(f"reports/{prefix}-{name}")
    saved = {
        m["mode"]: m
        for m in json.loads(Path(f"reports/{prefix}-{name}/predicted.json").read_text())["modes"]
    }
    for mode in measured.modes():
        rows = _rows(measured, mode)
        pred = predict_buckets(report, [r.bucket for r in rows], [mode], profile=p).mode(mode)
        assert (saved[mode]["pool_bytes"], saved[mode]["device_used_bytes"]) == (
            pred.pool_bytes,
            pred.device_used_bytes,
        )
        measured_needs = measured_needs_free_bytes(rows)
        assert measured_needs is not None
        assert (
            saved[mode]["low_bytes"]
            <= next(x.device_used_bytes for x in measured.summary if x.mode == mode)
            <= saved[mode]["high_bytes"]
        ), mode
        if saved[mode]["needs_free_upper_bound"]:
            # a smaller largest bucket than the profile's: a bound, and it held
            assert measured_needs <= saved[mode]["needs_free_bytes"], mode
        else:
            # one NVML step
            assert abs(saved[mode]["needs_free_bytes"] - measured_needs) <= 2 << 20, mode
