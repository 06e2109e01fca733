"""The free memory a capture needs against the committed H200 captures that the rule must reproduce:
the traced profile's measured peaks, the other lists captured beside it, the own list without
traces, and captures under memory pressure. The rule on synthetic buckets:
tests/unit/test_needs_free.py."""

from __future__ import annotations

import pytest

from bcgprof.analysis.predict.lists import predict_buckets, predict_own_list
from bcgprof.analysis.predict.needs_free import WARMUP, measured_needs
from bcgprof.report import read_report

MIB = 1 << 20
PROFILE = "reports/gpt-oss-20b-h200-traced"
# lists captured on the H200 that start from the profile's largest bucket
# (tests/regression/test_replay_h200.py)
SAME_TOP = [
    "subset20",
    "snapshot",
    "second-13824-per-bucket",
    "second-13824-shared-largest",
    "second-15360-per-bucket",
    "second-15360-shared-largest",
    "advised-per-bucket",
    "advised-shared",
    "advised-shared-largest",
]


@pytest.fixture
def profile(committed_profiles):
    return committed_profiles(PROFILE)  # prepared once for the session


def test_the_traces_account_for_every_measured_peak_of_the_profile(profile):
    """Warm-up cache + pool growth + executables = the NVML peak each bucket reached (the
    mechanism), to the executables' staircase and NVML's 2 MiB steps."""
    report, p = profile
    for mode in report.modes():
        rows = sorted((r for r in report.buckets if r.mode == mode), key=lambda r: r.order)
        traced = (
            predict_buckets(report, report.run.buckets, [mode], profile=p).mode(mode).needs_free
        )
        measured = measured_needs(mode, rows)
        assert [b.bucket for b in traced.buckets] == [r.bucket for r in rows]
        for t, m in zip(traced.buckets, measured.buckets, strict=True):
            assert abs(t.need_bytes - m.need_bytes) <= 4.5 * MIB, (mode, t.bucket)
        assert abs(traced.needs_free_bytes - measured.needs_free_bytes) <= 2 * MIB, mode


@pytest.mark.parametrize("name", SAME_TOP)
def test_other_lists_need_what_they_measured_on_the_h200(profile, name):
    report, p = profile
    measured = read_report(f"reports/gpt-oss-20b-h200-{name}")
    for mode in measured.modes():
        rows = sorted((r for r in measured.buckets if r.mode == mode), key=lambda r: r.order)
        h = (
            predict_buckets(report, [r.bucket for r in rows], [mode], profile=p)
            .mode(mode)
            .needs_free
        )
        assert not h.upper_bound
        assert abs(h.needs_free_bytes - measured_needs(mode, rows).needs_free_bytes) <= 2 * MIB, (
            mode
        )
        for t, r in zip(h.buckets, rows, strict=True):  # never under, by more than NVML's steps
            assert t.need_bytes >= r.device_peak_delta_bytes - 4.5 * MIB, (mode, r.bucket)


def test_a_smaller_largest_bucket_gives_an_upper_bound_that_holds(profile):
    report, p = profile
    # 8192 first: its warm-ups cached more
    measured = read_report("reports/gpt-oss-20b-h200-sparse")
    for mode in measured.modes():
        rows = sorted((r for r in measured.buckets if r.mode == mode), key=lambda r: r.order)
        h = (
            predict_buckets(report, [r.bucket for r in rows], [mode], profile=p)
            .mode(mode)
            .needs_free
        )
        actual = measured_needs(mode, rows).needs_free_bytes
        assert h.upper_bound and actual <= h.needs_free_bytes <= actual + 200 * MIB, mode


def test_the_own_list_without_traces_uses_the_measured_peaks():
    pred = predict_own_list(read_report("reports/llama-3.1-8b-h200"), free=5164 * MIB)
    per_bucket = pred.mode("per-bucket").needs_free
    assert per_bucket.source.startswith("measured") and per_bucket.first_oom.bucket == 14336
    assert per_bucket.first_oom.order == 4 and per_bucket.first_oom_certain
    assert pred.mode("shared").needs_free.fits


# Captured on the H200 under memory held by another process (benchmarks/gpu/free_check.py): report
# -> its profile
PRESSURE = {
    "llama-3.1-8b-h200-free-5164": "llama-3.1-8b-h200",
    "llama-3.1-8b-h200-free-4884": "llama-3.1-8b-h200",
    "llama-3.1-8b-h200-free-5300": "llama-3.1-8b-h200",
    "qwen3-30b-a3b-h200-free-3182": "qwen3-30b-a3b-h200",
    "qwen3-30b-a3b-h200-free-3300": "qwen3-30b-a3b-h200",
    "gpt-oss-20b-h200-free-4500": "gpt-oss-20b-h200",
}


@pytest.mark.parametrize("name", sorted(PRESSURE))
def test_under_memory_pressure_the_predicted_bucket_failed_first(name):
    measured = read_report(f"reports/{name}")
    rows = sorted(measured.buckets, key=lambda r: r.order)
    first = rows[0]
    # NVML free when the first warm-up began
    free = first.free_bytes + first.device_used_delta_bytes
    h = (
        predict_own_list(read_report(f"reports/{PRESSURE[name]}"), free=free)
        .mode("per-bucket")
        .needs_free
    )
    failed = next((r for r in rows if r.status != "ok"), None)
    if h.first_oom is not None and h.first_oom_certain:
        assert failed is not None and (failed.bucket, failed.status) == (h.first_oom.bucket, "oom")
        assert all(r.status == "ok" for r in rows if r.order < failed.order)
    elif h.first_oom is None:
        assert failed is None and len(rows) == len(measured.run.buckets)
        # every bucket captured; bcgprof's own check after them ran out where predicted
        assert h.verify_fits is False and measured.run.status == "partial"
    else:  # a warm-up short of its cache: the allocator freed it, and the capture went on
        assert h.first_oom_phase == WARMUP and failed is None


def test_the_summary_says_when_warm_up_outputs_were_held_and_how_to_measure_an_engine_that_frees_them():  # noqa: E501 (the test's name)
    """Held outputs raise the measured peaks (on the H200 gpt-oss-20b needed 128 to 350 MiB more
    free memory than with them freed, as SGLang's warm-up does), so the needs-free line says which
    way they were."""
    from dataclasses import replace

    from bcgprof.render.views import summary_sheet

    report = read_report("reports/gpt-oss-20b-h200")
    held = [n for n in summary_sheet(report).notes if "--warmup-output freed" in n]
    assert len(held) == 1 and "held" in held[0]
    run = replace(report.run, extra={**report.run.extra, "warmup_output": "freed"})
    assert not [
        n for n in summary_sheet(replace(report, run=run)).notes if "--warmup-output freed" in n
    ]


def test_a_report_written_before_the_ledger_counts_memory_outside_the_pool_in_each_warm_up():
    """Without the ``outside_pool_delta_bytes`` column the warm-up's cache still counts the bucket's
    torch memory outside the pool (its definition: reserved growth less pool growth), not zero."""
    from dataclasses import replace

    report = read_report(PROFILE)
    shared = sorted((r for r in report.buckets if r.mode == "shared"), key=lambda r: r.order)
    assert shared[0].outside_pool_delta_bytes > 0  # the shared buffer
    without = [replace(r, outside_pool_delta_bytes=None) for r in shared]
    full, old = measured_needs("shared", shared), measured_needs("shared", without)
    assert [b.warmup_bytes for b in old.buckets] == [b.warmup_bytes for b in full.buckets]
    assert old.needs_free_bytes == full.needs_free_bytes
