"""The replay against the H200: a profile of gpt-oss-20b captured with allocator traces
(``reports/gpt-oss-20b-h200-traced``, torch 2.11.0+cu130) predicts the graph pool of every other list
captured on that machine, row by row, to the byte (no GPU needed here: the reports are committed).

The held-out reports were captured before traces were recorded, from the same model code: the
traced profile gates at zero tolerance against ``reports/gpt-oss-20b-h200`` (every pool row equal),
so their pools are what this code's capture of those lists gives.
"""

from __future__ import annotations

import pytest

from bcgprof.analysis.predict import bucket_profile, predict_buckets
from bcgprof.report import read_report

PROFILE = "reports/gpt-oss-20b-h200-traced"
HELD_OUT = ["sparse", "subset20", "snapshot", "second-13824-per-bucket", "second-13824-shared-largest",
            "second-15360-per-bucket", "second-15360-shared-largest", "advised-per-bucket", "advised-shared",
            "advised-shared-largest"]


def _rows(report, mode):
    return sorted((r for r in report.buckets if r.mode == mode), key=lambda r: r.order)


@pytest.fixture(scope="module")
def profile():
    report = read_report(PROFILE)
    return report, bucket_profile(report)


def test_the_profile_is_the_reference_capture_again(profile):
    report, _ = profile
    reference = read_report("reports/gpt-oss-20b-h200")
    assert report.run.torch_version == "2.11.0+cu130" and report.run.buckets == reference.run.buckets
    assert [r.pool_bytes for r in report.buckets] == [r.pool_bytes for r in reference.buckets]


def test_replaying_the_profiles_own_list_places_every_allocation_where_the_gpu_did(profile):
    report, p = profile
    for mode in report.modes():
        check = p.replayer.check(mode)
        assert check.mismatches == 0, mode
        assert check.pool_bytes == [r.pool_bytes for r in _rows(report, mode)], mode


@pytest.mark.parametrize("name", HELD_OUT)
def test_every_list_captured_on_the_h200_is_predicted_row_by_row(profile, name):
    report, p = profile
    measured = read_report(f"reports/gpt-oss-20b-h200-{name}")
    for mode in measured.modes():
        rows = _rows(measured, mode)
        pred = predict_buckets(report, [r.bucket for r in rows], [mode], profile=p).mode(mode)
        assert pred.exact
        assert [r.pool_bytes for r in pred.buckets] == [r.pool_bytes for r in rows], mode
        total = next(s.device_used_bytes for s in measured.summary if s.mode == mode)
        assert abs(pred.device_used_bytes - total) <= 0.01 * total, mode  # the rest is executables (NVML)
