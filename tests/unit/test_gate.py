"""Every gate outcome, decided by bcgprof.analysis.gate on reports written to disk and read back."""

from fractions import Fraction

import pytest

from bcgprof.analysis.gate import GateMismatchError, GateOptions, gate_reports
from bcgprof.analysis.tolerance import (
    DEFAULT_ABS_TOL_BYTES,
    IMPROVEMENT,
    PASS,
    REGRESSION,
    Tolerance,
    judge,
    parse_rel,
    parse_tolerance,
)
from bcgprof.errors import BcgprofError, ReportError
from bcgprof.report import read_report

MIB = 1024**2


def gate(base_path, cur_path, **options):
    return gate_reports(read_report(base_path), read_report(cur_path), GateOptions(**options))


def find(result, mode, metric, bucket=None, rank="0"):
    (check,) = [
        c
        for c in result.checks
        if c.mode == mode and c.metric == metric and c.bucket == bucket and c.rank == rank
    ]
    return check


def grow_bucket(row, pool=0, device=0, non_torch=0):
    """Grow one bucket's figures; pool growth also raises the pool after it (the caller fixes
    later rows)."""
    row.pool_delta_bytes += pool
    row.pool_bytes += pool
    row.torch_reserved_delta_bytes += pool
    row.device_used_delta_bytes += device
    row.non_torch_delta_bytes += non_torch


def test_identical_reports_pass(data_dir, report_copy):
    result = gate(data_dir / "baseline", report_copy("baseline"))
    assert result.passed and result.exit_code == 0
    assert not result.improvements
    # two totals per mode, nothing per bucket without each_bucket
    assert sorted((c.mode, c.metric) for c in result.checks) == sorted(
        (m, k)
        for m in ("per-bucket", "shared", "floor")
        for k in ("pool_bytes", "device_used_bytes")
    )


def test_committed_grown_report_fails_on_both_totals(data_dir):
    result = gate(data_dir / "baseline", data_dir / "grown")
    assert result.exit_code == 1
    assert {(c.mode, c.metric) for c in result.regressions} == {
        ("per-bucket", "pool_bytes"),
        ("per-bucket", "device_used_bytes"),
    }
    check = find(result, "per-bucket", "pool_bytes")
    assert check.delta == 40 * MIB and "grew 40.00 MiB" in check.detail


def test_fail_by_pool_bytes_alone(write_report, rows):
    base = write_report("base")
    grouped = rows()
    for r in grouped["shared"].values():  # pool grew by 20 MiB that NVML had already counted
        r.pool_bytes += 20 * MIB
    cur = write_report("cur", grouped.all())
    result = gate(base, cur)
    assert [(c.mode, c.metric) for c in result.regressions] == [("shared", "pool_bytes")]
    assert find(result, "shared", "device_used_bytes").verdict == PASS


def test_fail_by_device_used_alone(write_report, rows):
    base = write_report("base")
    grouped = rows()
    # Graph executables grew (non-torch memory): NVML sees it, the pool does not.
    grow_bucket(grouped["per-bucket"][256], device=20 * MIB, non_torch=20 * MIB)
    cur = write_report("cur", grouped.all())
    result = gate(base, cur)
    assert [(c.mode, c.metric) for c in result.regressions] == [("per-bucket", "device_used_bytes")]
    assert find(result, "per-bucket", "pool_bytes").verdict == PASS


def test_each_bucket_checks_catch_growth_that_totals_hide(write_report, rows):
    base = write_report("base")
    grouped = rows()
    # 20 MiB moves from the largest bucket to bucket 512: the totals stay put.
    big, small = grouped["per-bucket"][4096], grouped["per-bucket"][512]
    big.pool_delta_bytes -= 20 * MIB
    big.torch_reserved_delta_bytes -= 20 * MIB
    big.device_used_delta_bytes -= 20 * MIB
    small.pool_delta_bytes += 20 * MIB
    small.torch_reserved_delta_bytes += 20 * MIB
    small.device_used_delta_bytes += 20 * MIB
    for b in (4096, 2048, 1024):
        grouped["per-bucket"][b].pool_bytes -= 20 * MIB
    cur = write_report("cur", grouped.all())

    assert gate(base, cur).passed
    result = gate(base, cur, each_bucket=True)
    assert result.exit_code == 1
    assert {(c.bucket, c.metric) for c in result.regressions} == {
        (512, "pool_delta_bytes"),
        (512, "device_used_delta_bytes"),
    }
    assert {(c.bucket, c.metric) for c in result.improvements} == {
        (4096, "pool_delta_bytes"),
        (4096, "device_used_delta_bytes"),
    }


@pytest.mark.parametrize(
    "growth, verdict",
    [
        (16 * MIB, PASS),  # exactly the absolute tolerance (larger than 1% of 314 MiB)
        (16 * MIB + 1, REGRESSION),
    ],
)
def test_exactly_at_the_absolute_threshold_passes(write_report, rows, growth, verdict):
    base = write_report("base")
    grouped = rows()
    grow_bucket(grouped["per-bucket"][256], device=growth, non_torch=growth)
    cur = write_report("cur", grouped.all())
    assert find(gate(base, cur), "per-bucket", "device_used_bytes").verdict == verdict


@pytest.mark.parametrize("extra, verdict", [(0, PASS), (1, REGRESSION)])
def test_exactly_at_the_relative_threshold_passes(write_report, rows, extra, verdict):
    base = write_report("base")
    baseline_used = 314 * MIB
    grouped = rows()
    growth = baseline_used // 4 + extra  # 25% of the baseline, with the absolute tolerance at 0
    grow_bucket(grouped["per-bucket"][256], device=growth, non_torch=growth)
    cur = write_report("cur", grouped.all())
    result = gate(base, cur, default=Tolerance(rel=0.25, abs_bytes=0))
    assert find(result, "per-bucket", "device_used_bytes").verdict == verdict


@pytest.mark.parametrize("text", ["35%", "0.35", "7%", "0.1", "33.333%"])
def test_growth_exactly_at_a_decimal_tolerance_passes_where_binary_floats_fall_short(text):
    """35% of 377487360 bytes is 132120576 exactly; 0.35 * 377487360 in floats is
    132120575.99999999."""
    rel = parse_rel(text)
    frac = Fraction(text[:-1]) / 100 if text.endswith("%") else Fraction(text)
    # baselines whose exact share is a whole number of bytes
    baselines = [b for b in (377487360, 314 * MIB, 2_781_872_128) if (frac * b).denominator == 1]
    for baseline in baselines + [frac.denominator * k for k in (1, 123_456_789, 987_654_321)]:
        exact = frac * baseline
        tol = Tolerance(rel=rel, abs_bytes=0)
        assert tol.limit(baseline) == exact
        assert judge(baseline, baseline + int(exact), tol) == PASS
        assert judge(baseline, baseline + int(exact) + 1, tol) == REGRESSION


def test_growth_must_exceed_both_tolerances(write_report, rows):
    base = write_report("base")
    grouped = rows()
    # 3.2%, but under 16 MiB
    grow_bucket(grouped["per-bucket"][256], device=10 * MIB, non_torch=10 * MIB)
    cur = write_report("cur", grouped.all())
    assert gate(base, cur).passed
    # Over 8 MiB but under 5%: still passes.
    assert gate(base, cur, default=Tolerance(rel=0.05, abs_bytes=8 * MIB)).passed
    # Over 8 MiB and over 1%: fails.
    assert not gate(base, cur, default=Tolerance(rel=0.01, abs_bytes=8 * MIB)).passed


def test_per_metric_tolerance(data_dir):
    loose = {"pool_bytes": Tolerance(0.2, 0), "device_used_bytes": Tolerance(0.01, 64 * MIB)}
    result = gate(data_dir / "baseline", data_dir / "grown", per_metric=loose)
    assert result.passed
    result = gate(
        data_dir / "baseline", data_dir / "grown", per_metric={"pool_bytes": Tolerance(0.2, 0)}
    )
    assert [c.metric for c in result.regressions] == ["device_used_bytes"]


def test_improvement_is_reported_and_passes(data_dir):
    result = gate(data_dir / "grown", data_dir / "baseline")
    assert result.passed and result.exit_code == 0
    assert {(c.mode, c.metric) for c in result.improvements} == {
        ("per-bucket", "pool_bytes"),
        ("per-bucket", "device_used_bytes"),
    }


def test_small_shrink_is_a_plain_pass(write_report, rows):
    base = write_report("base")
    grouped = rows()
    grow_bucket(grouped["shared"][256], device=-2 * MIB, non_torch=-2 * MIB)
    result = gate(base, write_report("cur", grouped.all()))
    assert find(result, "shared", "device_used_bytes").verdict == PASS


def test_oom_bucket_is_a_regression(write_report, rows):
    base = write_report("base")
    grouped = rows()
    grouped["shared"][2048].status = "oom"
    grouped["shared"][2048].detail = "CUDA out of memory"
    result = gate(base, write_report("cur", grouped.all()))
    assert result.exit_code == 1
    (check,) = result.regressions
    assert (check.mode, check.bucket, check.metric) == ("shared", 2048, "status")
    assert check.detail == "oom in the current report (baseline ok): CUDA out of memory"


def test_bucket_fixed_since_baseline_is_an_improvement(write_report, rows):
    grouped = rows()
    grouped["shared"][2048].status = "error"
    base = write_report("base", grouped.all())
    result = gate(base, write_report("cur"))
    assert result.passed
    assert [(c.bucket, c.metric) for c in result.improvements] == [(2048, "status")]


def test_missing_bucket_is_unusable_without_allow_mismatch(write_report, rows):
    base = write_report("base")
    grouped = rows()
    for mode in ("per-bucket", "shared"):
        del grouped[mode][256]
    cur = write_report("cur", grouped.all())
    with pytest.raises(GateMismatchError, match=r"bucket list differs \(only in old: 256\)") as e:
        gate(base, cur)
    assert e.value.exit_code == 2 and "--allow-mismatch" in str(e.value)

    result = gate(base, cur, allow_mismatch=True)
    assert result.passed
    assert any("bucket list differs" in n for n in result.notes)
    assert any("bucket 256 is only in the baseline" in n for n in result.notes)
    # Totals over the common buckets: the baseline's figures without bucket 256 on both sides.
    check = find(result, "per-bucket", "device_used_bytes")
    assert check.baseline == check.current == (314 - 4) * MIB


def test_extra_bucket_is_unusable_without_allow_mismatch(write_report, rows, data_dir):
    base = write_report("base")
    extra = rows(buckets=[128, 256, 512, 1024, 2048, 4096])
    cur = write_report("cur", extra.all())
    with pytest.raises(GateMismatchError, match=r"only in new: 128"):
        gate(base, cur)
    result = gate(base, cur, allow_mismatch=True)
    assert result.passed
    assert any("bucket 128 is only in the current report" in n for n in result.notes)


def test_growth_in_common_buckets_still_fails_under_allow_mismatch(write_report, rows):
    base = write_report("base")
    grouped = rows(buckets=[128, 256, 512, 1024, 2048, 4096])
    grow_bucket(grouped["per-bucket"][512], device=32 * MIB, non_torch=32 * MIB)
    result = gate(base, write_report("cur", grouped.all()), allow_mismatch=True)
    assert [(c.mode, c.metric) for c in result.regressions] == [("per-bucket", "device_used_bytes")]


def test_mismatched_model_is_unusable(data_dir):
    with pytest.raises(GateMismatchError, match="model differs: gpt-oss-20b .* vs Qwen3-8B"):
        gate(data_dir / "baseline", data_dir / "other-model")
    assert (
        gate(data_dir / "baseline", data_dir / "other-model", allow_mismatch=True)
        .notes[0]
        .startswith("allowed mismatch: model differs")
    )


@pytest.mark.parametrize(
    "change, message",
    [
        ({"gpu_name": "NVIDIA B200"}, "GPU differs: NVIDIA H200 vs NVIDIA B200"),
        ({"layers": 4}, "layers differ: 2 vs 4"),
        ({"dtype": "float16"}, "dtype differ: bfloat16 vs float16"),
        ({"config_hash": "0000000000000000"}, "model differs"),
    ],
)
def test_other_mismatches_are_unusable(write_report, change, message):
    base = write_report("base")
    cur = write_report("cur", **change)
    with pytest.raises(GateMismatchError, match=message):
        gate(base, cur)


def test_corrupt_and_wrong_schema_reports_are_report_errors(data_dir):
    with pytest.raises(ReportError, match="corrupt"):
        gate(data_dir / "baseline", data_dir / "corrupt")
    with pytest.raises(ReportError, match="schema version 99"):
        gate(data_dir / "wrong-schema", data_dir / "baseline")


def test_interrupted_current_report_fails_on_its_missing_rows(data_dir):
    result = gate(data_dir / "baseline", data_dir / "partial")
    assert result.exit_code == 1
    failed = {(c.mode, c.bucket) for c in result.regressions}
    # shared stopped after 4096 and 2048; floor never ran
    assert failed == {("shared", 1024), ("shared", 512), ("shared", 256), ("floor", None)}
    assert any("status is 'interrupted'" in n for n in result.notes)


def test_tensor_parallel_reports_gate_per_rank_and_fail_on_the_worst(write_report, rows):
    def tp_rows(grow_rank1=0):
        out = []
        for rank in (0, 1):
            grouped = rows()
            for r in grouped.all():
                r.rank = rank
            if rank == 1:
                grow_bucket(grouped["shared"][4096], device=grow_rank1, non_torch=grow_rank1)
            out += grouped.all()
        return out

    base = write_report("base", tp_rows(), tp=2)
    cur = write_report("cur", tp_rows(grow_rank1=24 * MIB), tp=2)
    result = gate(base, cur)
    assert result.multi_rank
    assert [(c.mode, c.rank, c.metric) for c in result.regressions] == [
        ("shared", "1", "device_used_bytes")
    ]
    assert find(result, "shared", "device_used_bytes", rank="0").verdict == PASS
    assert result.worst().rank == "1"


def test_judge_and_tolerance_parsing():
    tol = Tolerance(rel=0.01, abs_bytes=16 * MIB)
    assert judge(1000 * MIB, 1010 * MIB, tol) == PASS  # 10 MiB < 16 MiB
    assert judge(1000 * MIB, 1017 * MIB, tol) == REGRESSION
    assert judge(4000 * MIB, 4040 * MIB, tol) == PASS  # exactly 1% of 4000 MiB
    assert judge(4000 * MIB, 3900 * MIB, tol) == IMPROVEMENT
    assert Tolerance().abs_bytes == DEFAULT_ABS_TOL_BYTES == 16 * MIB
    assert parse_rel("1%") == parse_rel("0.01") == 0.01
    assert parse_tolerance("pool_bytes=0.5%:8MiB", tol) == ("pool_bytes", Tolerance(0.005, 8 * MIB))
    assert parse_tolerance("device_used_bytes=:1GiB", tol) == (
        "device_used_bytes",
        Tolerance(0.01, 1024 * MIB),
    )
    assert parse_tolerance("pool_delta_bytes=2%", tol) == (
        "pool_delta_bytes",
        Tolerance(0.02, 16 * MIB),
    )
    assert parse_tolerance("pool_bytes=0:1048576B", tol) == (
        "pool_bytes",
        Tolerance(0.0, MIB),
    )  # B: bytes


@pytest.mark.parametrize(
    "text, message",
    [
        ("pool=1%", "unknown metric 'pool'"),
        ("pool_bytes", "write METRIC=REL:ABS"),
        ("pool_bytes=:", "sets nothing"),
        ("pool_bytes=lots", "relative tolerance 'lots' is not a number"),
        ("pool_bytes=1%:8 parsecs", "absolute tolerance '8 parsecs' is not a size"),
        ("pool_bytes=-1%", "is negative"),
        (
            "pool_bytes=0:16",
            "absolute tolerance '16' has no unit",
        ),  # 16 bytes or 16 MiB: one rule, a unit
    ],
)
def test_bad_tolerances(text, message):
    with pytest.raises(BcgprofError) as e:
        parse_tolerance(text, Tolerance())
    assert message in str(e.value)
