"""The engines' capture-memory estimators (bcgprof.analysis.audit): each formula on hand-computed
cases, and the audit of synthetic reports, every expected figure derived here from the rows the
report was written with (no GPU)."""

from __future__ import annotations

from statistics import median

import pytest

from bcgprof.analysis.audit import (
    SGLANG,
    TOKENSPEED,
    TOKENSPEED_CAPPED,
    VLLM,
    AuditError,
    SglangSettings,
    audit_json,
    audit_report,
    sglang_estimate,
    tokenspeed_capped_estimate,
    tokenspeed_estimate,
    vllm_estimate,
)
from bcgprof.report import read_report

MIB = 1 << 20


# ---------------------------------------------------------------- the formulas


def test_vllm_is_the_first_sample_plus_the_second_for_every_other_graph():
    assert vllm_estimate([300 * MIB, 20 * MIB], 10) == 300 * MIB + 9 * 20 * MIB


def test_vllm_counts_at_least_one_mib_per_graph():
    # a second sample below 1 MiB (NVML steps, a reused block) still costs 1 MiB a graph
    assert vllm_estimate([300 * MIB, 0], 5) == 300 * MIB + 4 * MIB
    assert vllm_estimate([300 * MIB, -6 * MIB], 5) == 300 * MIB + 4 * MIB


def test_vllm_on_one_graph_is_its_one_sample():
    assert vllm_estimate([123 * MIB], 1) == 123 * MIB


def test_vllm_takes_two_samples_at_most():
    with pytest.raises(ValueError):
        vllm_estimate([1, 2, 3], 10)


def test_tokenspeed_adds_the_marginals_median_for_every_entry_not_captured():
    samples = [500 * MIB, 40 * MIB, 2 * MIB, 6 * MIB]
    # first + measured marginals + median(40, 2, 6) = 6 MiB for each of the 16 entries left
    assert tokenspeed_estimate(samples, 20) == 500 * MIB + 48 * MIB + 16 * 6 * MIB


def test_tokenspeed_floors_a_negative_median_at_zero():
    samples = [500 * MIB, -4 * MIB, -2 * MIB, 10 * MIB]  # median -2 MiB: the tail costs nothing
    assert tokenspeed_estimate(samples, 30) == 500 * MIB + 4 * MIB


def test_tokenspeed_on_a_ladder_it_captured_whole_is_the_sum_of_its_samples():
    assert tokenspeed_estimate([500 * MIB, 40 * MIB, 2 * MIB], 3) == 542 * MIB


def test_tokenspeed_capped_takes_the_ceiling_of_the_floored_marginals_mean():
    samples = [500 * MIB, 10 * MIB, -5 * MIB, 3]  # floored: 10 MiB, 0, 3 bytes
    rate = -(-(10 * MIB + 3) // 3)  # the ceiling of their mean
    assert tokenspeed_capped_estimate(samples, 6) == 500 * MIB + 10 * MIB + 3 + 2 * rate


def test_tokenspeed_capped_caps_the_tail_at_what_the_probe_measured():
    samples = [
        100 * MIB,
        50 * MIB,
        50 * MIB,
        50 * MIB,
    ]  # 250 MiB measured; 50 MiB x 96 would be far more
    assert tokenspeed_capped_estimate(samples, 100) == 2 * 250 * MIB


def test_tokenspeed_needs_two_samples_unless_the_ladder_has_one_entry():
    assert tokenspeed_estimate([7 * MIB], 1) == 7 * MIB
    with pytest.raises(ValueError):
        tokenspeed_estimate([7 * MIB], 5)
    with pytest.raises(ValueError):
        tokenspeed_capped_estimate([1, 2, 3], 2)


def test_sglang_prefill_is_eight_mib_a_bucket():
    buckets = list(range(256, 8193, 256))
    assert (
        sglang_estimate("prefill", buckets, "breakable", SglangSettings()) == len(buckets) * 8 * MIB
    )


def test_sglang_prefill_with_mla_is_flat_and_deepep_adds_to_breakable_graphs_only():
    assert (
        sglang_estimate("prefill", [4, 8, 16], "breakable", SglangSettings(mla=True)) == 1536 * MIB
    )
    assert (
        sglang_estimate("prefill", [4, 8, 16], "breakable", SglangSettings(deepep=True))
        == (24 + 1024) * MIB
    )
    assert sglang_estimate("prefill", [4, 8, 16], "full", SglangSettings(deepep=True)) == 24 * MIB


def test_sglang_decode_is_two_mib_per_batch_size_of_the_largest():
    assert sglang_estimate("decode", [1, 2, 4, 160], "full", SglangSettings()) == 160 * 2 * MIB


def test_sglang_decode_with_dp_attention_and_deepep():
    small, large = [1, 8, 128], [1, 64, 512]
    dp = SglangSettings(dp_attention=4)
    assert sglang_estimate("decode", small, "full", dp) == (128 * 2 + 128 * 4 * 3) * MIB
    # above 300 a further 1.5 MiB per batch size and rank
    assert sglang_estimate("decode", large, "full", dp) == round(
        (512 * 2 + 512 * 4 * 3 + 512 * 4 * 1.5) * MIB
    )
    deepep = SglangSettings(deepep=True)
    assert sglang_estimate("decode", small, "full", deepep) == (128 * 2 + 2048) * MIB


# ---------------------------------------------------------------- against a report


def _in_order(rows, mode):
    return sorted(rows[mode].values(), key=lambda r: r.order)


def _need(r):
    return max(r.device_peak_delta_bytes, r.device_used_delta_bytes)


def _needs_free(mode_rows):
    need = kept = 0
    for r in mode_rows:
        need = max(need, kept + _need(r))
        kept += r.device_used_delta_bytes
    return need


def test_the_audit_reproduces_each_probe_from_the_rows(write_report, rows):
    built = rows()
    audit = audit_report(read_report(write_report("r", built.all())))
    shared = next(m for m in audit.modes if m.mode == "shared")
    ordered = _in_order(built, "shared")
    n = len(ordered)
    kept = [r.device_used_delta_bytes for r in ordered]
    first = _need(ordered[0])
    est = {e.estimator: e for e in shared.estimates}
    assert n == 5 and shared.buckets == n
    assert shared.measured_bytes == sum(kept)
    assert shared.needs_free_bytes == _needs_free(ordered)
    assert est[VLLM].estimate_bytes == first + max(kept[1], MIB) * (n - 1)
    assert est[TOKENSPEED].estimate_bytes == first + sum(kept[1:4]) + max(median(kept[1:4]), 0) * (
        n - 4
    )
    marginals = [max(k, 0) for k in kept[1:4]]
    rate = -(-sum(marginals) // 3)
    measured = first + sum(marginals)
    assert est[TOKENSPEED_CAPPED].estimate_bytes == measured + min(rate * (n - 4), measured)
    assert est[SGLANG].estimate_bytes == n * 8 * MIB


def test_each_error_and_oom_verdict_follows_from_estimate_measured_and_needs_free(
    write_report, rows
):
    audit = audit_report(read_report(write_report("r", rows().all())))
    for m in audit.modes:
        for e in m.estimates:
            assert e.error_bytes == e.estimate_bytes - m.measured_bytes
            assert e.error_pct == pytest.approx(100 * e.error_bytes / m.measured_bytes)
            assert e.free_margin_bytes == e.estimate_bytes - m.needs_free_bytes
            assert e.oom == (e.estimate_bytes < m.needs_free_bytes)


def test_sglang_would_let_a_costly_capture_run_out_and_a_cheap_one_fit(write_report, rows):
    # the baseline's five buckets need far more than 5 x 8 MiB free
    audit = audit_report(read_report(write_report("r", rows().all())), mode="per-bucket")
    sglang = next(e for e in audit.modes[0].estimates if e.estimator == SGLANG)
    assert sglang.oom is True and sglang.free_margin_bytes < 0
    vllm = next(e for e in audit.modes[0].estimates if e.estimator == VLLM)
    assert vllm.oom is False  # its first sample alone is the first bucket's need


def test_a_decode_report_gets_the_decode_term(write_report, rows):
    built = rows()
    audit = audit_report(read_report(write_report("r", built.all(), phase="decode")), mode="shared")
    sglang = next(e for e in audit.modes[0].estimates if e.estimator == SGLANG)
    assert sglang.estimate_bytes == max(built["shared"]) * 2 * MIB


def test_one_mode_alone_and_an_unknown_mode_refused(write_report, rows):
    path = write_report("r", rows().all())
    audit = audit_report(read_report(path), mode="floor")
    assert [m.mode for m in audit.modes] == ["floor"]
    floor = audit.modes[0]
    est = {e.estimator: e.estimate_bytes for e in floor.estimates}
    # one bucket: every probe's estimate is that bucket's need
    assert est[VLLM] == est[TOKENSPEED] == est[TOKENSPEED_CAPPED] == floor.needs_free_bytes
    with pytest.raises(AuditError, match="no mode 'nope'"):
        audit_report(read_report(path), mode="nope")


def test_a_list_captured_smallest_first_has_no_probe_estimate(write_report, rows):
    built = rows()
    for mode in ("per-bucket", "shared"):
        ordered = _in_order(built, mode)
        for i, r in enumerate(reversed(ordered)):
            r.order = i
    path = write_report("r", built.all(), order="smallest-first")
    audit = audit_report(read_report(path), mode="shared")
    est = {e.estimator: e for e in audit.modes[0].estimates}
    for name in (VLLM, TOKENSPEED, TOKENSPEED_CAPPED):
        assert est[name].estimate_bytes is None and "largest first" in est[name].note
        assert est[name].oom is None and est[name].error_bytes is None
    assert est[SGLANG].estimate_bytes == 5 * 8 * MIB


def test_a_report_without_device_peaks_says_what_it_cannot_tell(write_report, rows):
    built = rows()
    for r in built.all():
        r.device_peak_delta_bytes = None
    audit = audit_report(read_report(write_report("r", built.all())), mode="shared")
    m = audit.modes[0]
    assert m.needs_free_bytes is None
    est = {e.estimator: e for e in m.estimates}
    assert est[VLLM].estimate_bytes is None and "device peak" in est[VLLM].note
    assert est[SGLANG].estimate_bytes == 5 * 8 * MIB and est[SGLANG].oom is None
    assert audit.notes


def test_an_incomplete_report_is_refused(write_report, rows):
    path = write_report("r", rows().all(), status="interrupted")
    with pytest.raises(AuditError, match="interrupted"):
        audit_report(read_report(path))


def test_the_json_document_holds_bytes_as_integers(write_report, rows):
    doc = audit_json(
        audit_report(
            read_report(write_report("r", rows().all())), settings=SglangSettings(dp_attention=2)
        )
    )
    assert doc["sglang_settings"] == {"mla": False, "dp_attention": 2, "deepep": False}
    assert [e["name"] for e in doc["estimators"]] == [VLLM, SGLANG, TOKENSPEED, TOKENSPEED_CAPPED]
    for m in doc["modes"]:
        assert isinstance(m["measured_bytes"], int) and isinstance(m["needs_free_bytes"], int)
        for e in m["estimates"]:
            assert isinstance(e["estimate_bytes"], int) and isinstance(e["error_bytes"], int)
