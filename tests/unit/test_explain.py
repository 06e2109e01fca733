"""`bcgprof explain` on synthetic reports: the ledger sums, the executable fit, the floor's sites,
KV tokens, and reports written before the ledger."""

from __future__ import annotations

import dataclasses

import pytest

from bcgprof.analysis.explain import (
    CAUSES,
    causes_of,
    explain_report,
    explanation_json,
    fit_executables,
)
from bcgprof.report import BucketRecord, ReportWriter, RunInfo, SiteRecord, read_report

MIB = 1 << 20
HIDDEN = 2880


def _row(
    mode,
    bucket,
    order,
    *,
    pool_before,
    pool_after,
    live,
    free,
    output,
    outside,
    segments=25,
    nodes=None,
):
    pool_delta = pool_after - pool_before
    assert live + free == pool_delta
    nodes = nodes if nodes is not None else 90 * segments
    non_torch = 2 * MIB * (1 + nodes // 4000)  # NVML's 2 MiB steps
    reserved = pool_delta + outside
    return BucketRecord(
        mode=mode,
        bucket=bucket,
        order=order,
        status="ok",
        segments=segments,
        graph_nodes=nodes,
        pool_bytes=pool_after,
        pool_delta_bytes=pool_delta,
        retained_output_bytes=output,
        torch_reserved_delta_bytes=reserved,
        device_used_delta_bytes=reserved + non_torch,
        non_torch_delta_bytes=non_torch,
        pool_live_delta_bytes=live,
        pool_free_delta_bytes=free,
        outside_pool_delta_bytes=outside,
        pool_output_bytes=output if mode != "shared" else 0,
    )


def _report(tmp_path, *, ledger=True, sites=True):
    buckets = [4096, 2048, 1024, 512]
    rows = []
    floor_pool = 600 * MIB
    # per-bucket: the first bucket leaves its output live; later outputs partly reuse freed space
    pool = 0
    for order, b in enumerate(buckets):
        out = b * HIDDEN * 2
        grow = floor_pool if order == 0 else (0 if order < 3 else 2 * MIB)
        rows.append(
            _row(
                "per-bucket",
                b,
                order,
                pool_before=pool,
                pool_after=pool + grow,
                live=out,
                free=grow - out,
                output=out,
                outside=0,
                nodes=2000 + 100 * order,
            )
        )
        pool += grow
    pool = 0
    for order, b in enumerate(buckets):
        grow = floor_pool if order == 0 else 0
        buf = buckets[0] * HIDDEN * 2 if order == 0 else 0
        rows.append(
            _row(
                "shared",
                b,
                order,
                pool_before=pool,
                pool_after=pool + grow,
                live=0,
                free=grow,
                output=buf,
                outside=buf,
                nodes=2000 + 100 * order,
            )
        )
        pool += grow
    rows.append(
        _row(
            "floor",
            4096,
            0,
            pool_before=0,
            pool_after=floor_pool,
            live=4096 * HIDDEN * 2,
            free=floor_pool - 4096 * HIDDEN * 2,
            output=4096 * HIDDEN * 2,
            outside=0,
            nodes=2000,
        )
    )
    if not ledger:
        for r in rows:
            r.pool_live_delta_bytes = r.pool_free_delta_bytes = r.outside_pool_delta_bytes = None
            r.pool_output_bytes = None
    run = RunInfo(
        model="gpt-oss-20b",
        model_source="preset",
        layers=2,
        dtype="bfloat16",
        hidden_size=HIDDEN,
        buckets=sorted(buckets),
        modes=["per-bucket", "shared", "floor"],
        status="complete",
    )
    from bcgprof.spec import resolve_model

    run.config_hash = resolve_model("gpt-oss-20b").config_hash
    writer = ReportWriter(tmp_path / "r", run, rows)
    if sites:
        writer.add_sites(
            [
                SiteRecord(
                    "floor",
                    0,
                    4096,
                    "site",
                    "layers.N.mlp.experts: fused_experts (cache13)",
                    300 * MIB,
                    2,
                ),
                SiteRecord(
                    "floor",
                    0,
                    4096,
                    "site",
                    "layers.N.mlp.experts: fused_experts (cache2)",
                    150 * MIB,
                    2,
                ),
                SiteRecord("floor", 0, 4096, "site", "model: forward (x)", 30 * MIB, 3),
                SiteRecord(
                    "floor",
                    0,
                    4096,
                    "slack",
                    "pool bytes not live at the peak (allocator slack)",
                    120 * MIB,
                ),
            ]
        )
    return read_report(tmp_path / "r")


def test_causes_sum_exactly_to_device_used_for_every_row_and_mode(tmp_path):
    report = _report(tmp_path)
    for r in report.buckets:
        assert sum(causes_of(r).values()) == r.device_used_delta_bytes
    exp = explain_report(report)
    assert {m.mode for m in exp.modes} == {"per-bucket", "shared", "floor"}
    for m in exp.modes:
        assert set(m.causes) == set(CAUSES)
        assert sum(m.causes.values()) == m.device_used_bytes
    shared = next(m for m in exp.modes if m.mode == "shared")
    assert shared.causes["outside_pool"] == 4096 * HIDDEN * 2 and shared.causes["pool_output"] == 0


def test_a_recorded_kv_size_of_true_is_no_byte_count(tmp_path):
    """run.json's kv_bytes_per_token must be a positive integer; ``true`` (1 in Python) is ignored,
    and the figure comes from the model's config as for a report that recorded none."""
    from dataclasses import replace

    from bcgprof.analysis.explain import kv_bytes_per_token

    report = _report(tmp_path)
    recorded, _ = kv_bytes_per_token(report)
    odd = replace(
        report, run=replace(report.run, extra={**report.run.extra, "kv_bytes_per_token": True})
    )
    assert recorded > 1 and kv_bytes_per_token(odd)[0] != 1


def test_json_contract(tmp_path):
    data = explanation_json(explain_report(_report(tmp_path)))
    for m in data["modes"]:
        assert isinstance(m["mode"], str) and isinstance(m["rank"], int)
        assert isinstance(m["device_used_bytes"], int)
        assert sum(m["causes"].values()) == m["device_used_bytes"]
    floor = data["floor"]
    assert floor["peak_live_bytes"] + floor["slack_bytes"] == floor["pool_bytes"] == 600 * MIB
    assert floor["sites"][0] == {
        "site": "layers.N.mlp.experts: fused_experts (cache13)",
        "bytes": 300 * MIB,
    }
    # 2 layers x K,V x 8 KV heads x 64 x bf16
    assert data["kv_bytes_per_token"] == 2 * 2 * 8 * 64 * 2
    assert all(isinstance(s, str) and s for s in data["sentences"])


def test_sentences_say_what_fitted_and_what_sharing_saves(tmp_path):
    exp = explain_report(_report(tmp_path))
    text = " | ".join(exp.sentences)
    assert "fitted in pool space the largest bucket had freed" in text
    assert "sharing the output saves" in text and "buffer outside the pool" in text
    assert "allocator slack" in text and "tokens of KV cache" in text


def test_the_fit_recovers_per_graph_and_per_node_costs():
    rows = []
    for i, (segments, nodes) in enumerate(
        [(25, 2000), (25, 2100), (50, 4000), (10, 900), (30, 3300), (5, 200)]
    ):
        rows.append(
            BucketRecord(
                mode="per-bucket",
                bucket=100 + i,
                order=i + 1,
                status="ok",
                segments=segments,
                graph_nodes=nodes,
                non_torch_delta_bytes=1000 * segments + 300 * nodes,
            )
        )
    fit = fit_executables(rows)
    assert fit.bytes_per_graph == pytest.approx(1000, rel=1e-6)
    assert fit.bytes_per_node == pytest.approx(300, rel=1e-6)
    assert fit.rms_residual_bytes == pytest.approx(0, abs=1e-3) and fit.r2 == pytest.approx(1.0)
    assert fit.fitted_bytes == fit.measured_bytes


def test_the_fit_never_goes_negative():
    rows = [
        BucketRecord(
            mode="m",
            bucket=i,
            order=i + 1,
            status="ok",
            segments=s,
            graph_nodes=n,
            non_torch_delta_bytes=y,
        )
        for i, (s, n, y) in enumerate([(1, 10, 100), (2, 5, 200), (3, 20, 300), (4, 1, 400)])
    ]
    fit = fit_executables(rows)
    assert fit.bytes_per_graph >= 0 and fit.bytes_per_node >= 0


def test_a_report_written_before_the_ledger_still_explains_what_it_can(tmp_path):
    exp = explain_report(_report(tmp_path, ledger=False, sites=False))
    assert all(m.causes is None for m in exp.modes)
    assert any("no ledger columns" in n for n in exp.notes)
    assert any("no sites.csv" in n for n in exp.notes)
    assert exp.fit is not None  # segments, nodes and non-torch deltas were always there


def test_the_same_nodes_per_graph_everywhere_fits_a_cost_per_graph_only():
    rows = [
        BucketRecord(
            mode="m",
            bucket=i,
            order=i + 1,
            status="ok",
            segments=25,
            graph_nodes=2250,
            non_torch_delta_bytes=y,
        )
        for i, y in enumerate([6 << 20, 8 << 20, 8 << 20, 6 << 20])
    ]
    fit = fit_executables(rows)
    assert not fit.separable and fit.bytes_per_node == 0
    assert fit.bytes_per_graph == pytest.approx((28 << 20) / 100)


def test_shared_executables_are_fitted_per_executable_instantiated_not_per_segment():
    rows = [
        BucketRecord(
            mode="m",
            bucket=i,
            order=i + 1,
            status="ok",
            segments=25,
            graph_nodes=nodes,
            executables=execs,
            signatures=execs,
            non_torch_delta_bytes=300_000 * execs,
        )
        for i, (execs, nodes) in enumerate([(3, 2250), (4, 2300), (2, 2100), (5, 2600)])
    ]
    fit = fit_executables(rows)
    assert fit.shared and not fit.separable and fit.bytes_per_node == 0
    assert fit.bytes_per_graph == pytest.approx(300_000, rel=1e-6)
    assert fit.fitted_bytes == fit.measured_bytes
    # one executable per segment: the segments are the regressor, as before
    per_segment = [dataclasses.replace(r, executables=r.segments, signatures=None) for r in rows]
    assert not fit_executables(per_segment).shared
