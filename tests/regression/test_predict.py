"""Predictions against the committed H200 reports (no GPU): 2- and 4-layer captures predict the full
depth captured and the free memory it needed, the committed gpt-oss-120b prediction is what predict
says now, and predict reads the layer directories a capture writes. On synthetic reports:
tests/unit/test_predict.py."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from bcgprof.analysis.predict.advise import advise
from bcgprof.analysis.predict.layers import predict_layers
from bcgprof.analysis.predict.lists import PredictionError
from bcgprof.report import read_report

from unit.test_predict import _synthetic

MIB = 1 << 20
REFERENCE = "reports/gpt-oss-20b-h200"


def test_layer_prediction_refuses_a_report_that_records_no_layer_count():
    """run.json without ``layers`` reads as 0: no depth a line can go through."""
    few = [read_report(f"reports/gpt-oss-20b-h200-layers/layers-{n}") for n in (2, 4)]
    few[0] = dataclasses.replace(few[0], run=dataclasses.replace(few[0].run, layers=0))
    with pytest.raises(PredictionError, match="records no layer count"):
        predict_layers(few)


def test_advice_on_a_report_without_traces_is_refused_in_one_line():
    with pytest.raises(PredictionError, match="has no allocator traces"):
        advise(read_report(REFERENCE), 4 << 30, mode="shared")


LAYER_SETS = [
    ("gpt-oss-20b-h200-layers", "gpt-oss-20b-h200"),
    ("llama-3.1-8b-h200-layers", "llama-3.1-8b-h200"),
    ("qwen3-30b-a3b-h200-layers", "qwen3-30b-a3b-h200"),
]


@pytest.mark.parametrize("few, full", LAYER_SETS)
def test_two_and_four_layers_predict_the_full_depth_captured_on_the_h200(few, full):
    """2- and 4-layer captures predict every mode of the full-depth capture within 1%, inside the
    band."""
    measured = read_report(f"reports/{full}")
    pred = predict_layers(
        [read_report(f"reports/{few}/layers-2"), read_report(f"reports/{few}/layers-4")]
    )
    assert pred.layers == measured.run.layers and pred.label == "predicted, not measured"
    totals = {s.mode: s.device_used_bytes for s in measured.summary}
    assert {m.mode for m in pred.modes} == set(totals)
    for m in pred.modes:
        assert abs(m.device_used_bytes - totals[m.mode]) <= 0.01 * totals[m.mode], (
            m.mode,
            m.device_used_bytes,
        )
        assert m.low_bytes <= totals[m.mode] <= m.high_bytes, m.mode
        assert m.pool_bytes == next(s.pool_bytes for s in measured.summary if s.mode == m.mode)


FULL_DEPTH_SETS = LAYER_SETS + [
    ("gpt-oss-120b-h200-layers", "gpt-oss-120b-h200"),
    ("llama-3.1-70b-h200-layers", "llama-3.1-70b-h200"),
]


@pytest.mark.parametrize("few, full", FULL_DEPTH_SETS)
def test_two_and_four_layers_predict_the_free_memory_the_full_depth_needed_on_the_h200(few, full):
    """The needs-free figure at full depth, from 2 and 4 layers, lies inside its band around the
    measured one; the models whose warm-ups cache the same at every depth (all but Qwen3-30B-A3B's
    per-bucket list, where the full depth cached one more MoE intermediate) within two NVML
    steps."""
    from bcgprof.analysis.predict.needs_free import measured_needs_free_bytes

    measured = read_report(f"reports/{full}")
    pred = predict_layers(
        [read_report(f"reports/{few}/layers-2"), read_report(f"reports/{few}/layers-4")]
    )
    for m in pred.modes:
        truth = measured_needs_free_bytes(
            [r for r in measured.buckets if r.mode == m.mode and r.rank == 0]
        )
        h = m.needs_free
        assert h is not None and truth is not None
        assert h.needs_free_bytes - h.band_bytes <= truth <= h.needs_free_bytes + h.band_bytes, (
            m.mode
        )
        if (full, m.mode) != ("qwen3-30b-a3b-h200", "per-bucket"):
            assert abs(truth - h.needs_free_bytes) <= 2 * 2 * MIB + MIB // 8, (
                m.mode,
                truth - h.needs_free_bytes,
            )


def test_the_committed_gpt_oss_120b_prediction_is_what_predict_says_now():
    import json

    committed = json.loads(Path("reports/gpt-oss-120b-h200-predicted.json").read_text())
    few = "reports/gpt-oss-120b-h200-layers"
    pred = predict_layers([read_report(f"{few}/layers-2"), read_report(f"{few}/layers-4")])
    assert (
        committed["label"] == "predicted, not measured" and committed["layers"] == 36 == pred.layers
    )
    assert [m["device_used_bytes"] for m in committed["modes"]] == [
        m.device_used_bytes for m in pred.modes
    ]


def test_predict_reads_the_directory_that_a_layer_list_capture_wrote():
    from typer.testing import CliRunner

    from bcgprof.cli import app

    result = CliRunner().invoke(
        app, ["predict", "--from", "reports/gpt-oss-20b-h200-layers", "-f", "json"]
    )
    assert result.exit_code == 0, result.output
    import json

    data = json.loads(result.output)
    assert data["layers"] == 24 and len(data["basis"]) == 2
    assert data["basis"][0].endswith("layers-2") and data["basis"][1].endswith("layers-4")


def test_the_layer_report_name_capture_writes_is_the_one_predict_reads_back(tmp_path):
    """`capture --num-layers` names its reports with layer_report_name; predict --from DIR finds
    them by layer_count_of, in depth order, and ignores any other directory beside them."""
    import shutil

    from bcgprof.cli.whatif import _layer_reports
    from bcgprof.report.schema import layer_count_of, layer_report_name

    assert [layer_count_of(layer_report_name(n)) for n in (2, 4, 10)] == [2, 4, 10]
    for other in ("layers-", "layers-x", "layers-\u00b2", "layers-1234567", "layer-2", "notes"):
        assert layer_count_of(other) is None
    for n in (10, 2):  # written out of order: read back by depth, not by name
        shutil.copytree("reports/gpt-oss-20b-h200-layers/layers-2", tmp_path / layer_report_name(n))
    (tmp_path / "layers-x").mkdir()
    assert _layer_reports([tmp_path]) == [tmp_path / "layers-2", tmp_path / "layers-10"]


def test_the_per_layer_note_gives_kernel_nodes_only_where_the_captures_counted_them():
    """Node counts need the CUDA bindings; captures without them leave the column empty, which is no
    count of 0 nodes per layer."""
    few = [read_report(f"reports/gpt-oss-20b-h200-layers/layers-{n}") for n in (2, 4)]
    note = next(n for n in predict_layers(few).notes if n.startswith("each layer adds"))
    assert "0 kernel nodes" not in note and "kernel nodes (by the bucket's kernels)" in note
    unrecorded = [
        dataclasses.replace(
            r, buckets=[dataclasses.replace(b, graph_nodes=None) for b in r.buckets]
        )
        for r in few
    ]
    note = next(n for n in predict_layers(unrecorded).notes if n.startswith("each layer adds"))
    assert "kernel nodes not recorded" in note and "0 kernel nodes" not in note


def test_predict_gives_every_buckets_row_in_json_and_with_rows():
    """Every bucket's predicted row: in the JSON always, in the table with --rows; the rows sum
    to the mode."""
    import json

    from typer.testing import CliRunner

    from bcgprof.cli import app

    runner = CliRunner()
    data = json.loads(
        runner.invoke(
            app, ["predict", "--from", "reports/gpt-oss-20b-h200-layers", "-f", "json"]
        ).output
    )
    full = read_report(REFERENCE)
    for m in data["modes"]:
        assert [r["bucket"] for r in m["rows"]] == [
            r.bucket
            for r in sorted((r for r in full.buckets if r.mode == m["mode"]), key=lambda r: r.order)
        ]
        assert sum(r["device_used_delta_bytes"] for r in m["rows"]) == m["device_used_bytes"]
        assert m["rows"][-1]["pool_bytes"] == m["pool_bytes"]
    table = runner.invoke(
        app,
        ["predict", "--from", "reports/gpt-oss-20b-h200-layers", "--rows"],
        env={"COLUMNS": "100"},
    ).output
    assert "every bucket, predicted" in table and "15872" in table
    assert (
        "every bucket, predicted"
        not in runner.invoke(app, ["predict", "--from", "reports/gpt-oss-20b-h200-layers"]).output
    )


def test_predict_checks_free_memory_at_another_layer_count(tmp_path):
    import json

    from typer.testing import CliRunner

    from bcgprof.cli import app

    runner = CliRunner()
    result = runner.invoke(
        app,
        ["predict", "--from", "reports/llama-3.1-8b-h200-layers", "--free", "5GiB", "-f", "json"],
    )
    assert result.exit_code == 0, result.output
    modes = {m["mode"]: m for m in json.loads(result.output)["modes"]}
    # per-bucket at 32 layers needs about 5.14 GiB: it runs out at its tightest bucket; floor needs
    # 4.59 GiB
    assert modes["per-bucket"]["fits"] is False and modes["per-bucket"]["first_oom_bucket"] == 14336
    assert modes["floor"]["fits"] is True
    for m in modes.values():
        assert m["needs_free_low_bytes"] < m["needs_free_bytes"] < m["needs_free_high_bytes"]
    table = runner.invoke(
        app,
        ["predict", "--from", "reports/llama-3.1-8b-h200-layers", "--free", "5GiB"],
        env={"COLUMNS": "100"},
    ).output
    assert "with --free" in table and "OOM at 14336" in table
    # reports written before each bucket's device peak was recorded cannot answer --free
    for n in (2, 4):
        _synthetic(tmp_path, n)
        old = tmp_path / f"l{n}" / "buckets.csv"
        lines = old.read_text().splitlines()
        col = lines[0].split(",").index("device_peak_delta_bytes")
        old.write_text(
            "\n".join(
                ",".join(c for i, c in enumerate(line.split(",")) if i != col) for line in lines
            )
            + "\n"
        )
    refused = runner.invoke(
        app,
        [
            "predict",
            "--from",
            str(tmp_path / "l2"),
            "--from",
            str(tmp_path / "l4"),
            "--num-layers",
            "12",
            "--free",
            "5GiB",
        ],
    )
    assert refused.exit_code == 2 and "device_peak_delta_bytes" in refused.output
