"""`explain`, `predict`, `advise` and the causes panel of `plot` through the command line: their
formats, their JSON contracts and their refusals (no GPU)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from bcgprof.cli import app

from helpers import refused
from unit.test_explain import _report
from unit.test_predict import _synthetic

runner = CliRunner()
REFERENCE = "reports/gpt-oss-20b-h200"
# written before the ledger columns and sites.csv
BEFORE_LEDGER = "reports/gpt-oss-20b-h200-unfused"
SEED = "reports/gpt-oss-20b-h100-seed"  # per-bucket and shared only


def run(*args):
    return runner.invoke(app, [str(a) for a in args])


@pytest.mark.parametrize("fmt", ["table", "markdown"])
def test_explain_shows_causes_fit_floor_and_sentences(tmp_path, fmt):
    report = _report(tmp_path)
    result = run("explain", report.path, "-f", fmt)
    assert result.exit_code == 0, result.stderr
    out = " ".join(result.stdout.split())
    for text in (
        "where the device memory went",
        "graph executables",
        "fused_experts (cache13)",
        "allocator slack",
        "fitted in pool space the largest bucket had freed",
    ):
        assert text in out, text


def test_explain_json_is_the_contract(tmp_path):
    result = run("explain", _report(tmp_path).path, "-f", "json")
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    for m in data["modes"]:
        assert sum(m["causes"].values()) == m["device_used_bytes"] and isinstance(m["rank"], int)
    f = data["floor"]
    assert f["peak_live_bytes"] + f["slack_bytes"] == f["pool_bytes"]


def test_explain_on_a_report_from_before_the_ledger_says_what_it_cannot_tell():
    result = run("explain", BEFORE_LEDGER)
    assert result.exit_code == 0, result.stderr
    assert "no ledger columns" in " ".join(result.stdout.split())
    for command in (
        ("show", BEFORE_LEDGER),
        ("compare", BEFORE_LEDGER, REFERENCE),
        ("gate", "--baseline", BEFORE_LEDGER, "--current", REFERENCE, "--allow-mismatch"),
    ):
        assert run(*command).exit_code == 0, command  # older reports still open everywhere


def test_explain_a_missing_report_is_one_line(tmp_path):
    assert "does not exist" in refused(run("explain", tmp_path / "nothing"))


def test_predict_layers_json_contract(tmp_path):
    two, four = _synthetic(tmp_path, 2), _synthetic(tmp_path, 4)
    result = run(
        "predict", "--from", two.path, "--from", four.path, "--num-layers", "12", "-f", "json"
    )
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["layers"] == 12 and data["buckets"] == [256, 512, 1024, 2048, 4096]
    assert data["label"] == "predicted, not measured"
    for m in data["modes"]:
        assert set(m) >= {
            "mode",
            "device_used_bytes",
            "pool_bytes",
            "non_torch_bytes",
            "low_bytes",
            "high_bytes",
        }
        assert m["low_bytes"] <= m["device_used_bytes"] <= m["high_bytes"]
    table = run("predict", "--from", two.path, "--from", four.path, "--num-layers", "12")
    assert "PREDICTED, NOT MEASURED" in table.stdout


@pytest.fixture(scope="module")
def traced(tmp_path_factory):
    """A profile with allocator traces (tests/traced_profile.py): list predictions replay it."""
    from traced_profile import write_profile

    return write_profile(tmp_path_factory.mktemp("traced") / "profile")


def test_predict_buckets_from_one_profile(traced):
    result = run("predict", "--from", traced.path, "--buckets", "512,1024,2048,4096", "-f", "json")
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["buckets"] == [512, 1024, 2048, 4096] and {m["mode"] for m in data["modes"]} == {
        "per-bucket",
        "shared",
        "shared-largest",
        "floor",
    }
    assert all(m["exact"] is True for m in data["modes"])


def test_predict_buckets_refuses_a_report_without_traces_in_one_line():
    message = refused(run("predict", "--from", REFERENCE, "--buckets", "1024,16384"))
    assert (
        "has no allocator traces (captured before they were recorded); re-capture with this bcgprof"
        in message
    )


@pytest.mark.parametrize(
    "args, message",
    [
        (("--from", REFERENCE), "two or more layer counts"),
        (("--from", REFERENCE, "--buckets", "1000"), "no allocator traces"),
        (("--from", REFERENCE, "--from", REFERENCE, "--buckets", "4096"), "a single --from"),
    ],
)
def test_predict_refusals_are_one_line(args, message):
    assert message in refused(run("predict", *args))


def test_advise_json_contract_and_plot(tmp_path, traced):
    result = run(
        "advise",
        "--from",
        traced.path,
        "--budget",
        "100MiB",
        "--mode",
        "shared",
        "-f",
        "json",
        "-o",
        tmp_path / "curve",
    )
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert set(data) >= {"buckets", "spec", "mode", "predicted_bytes", "expected_padding_pct"}
    assert data["spec"] == ",".join(map(str, data["buckets"])) and data["mode"] == "shared"
    assert data["predicted_bytes"] <= 100 << 20 and 4096 in data["buckets"]
    assert (tmp_path / "curve.png").stat().st_size > 0


@pytest.mark.parametrize(
    "args, message",
    [
        (("--budget", "lots"), "is not a size"),
        (("--budget", "10MiB", "--mode", "shared"), "above the budget"),
    ],
)
def test_advise_refusals_are_one_line(args, message, traced):
    assert message in refused(run("advise", "--from", traced.path, *args))


def test_advise_prints_its_bucket_list_whole_on_one_line(traced):
    spec = json.loads(
        run(
            "advise", "--from", traced.path, "--budget", "100MiB", "--mode", "shared", "-f", "json"
        ).stdout
    )["spec"]
    columns = 24  # narrower than the list: a wrapped list would break inside a number
    assert len(f"--buckets: {spec}") > columns
    result = runner.invoke(
        app,
        ["advise", "--from", str(traced.path), "--budget", "100MiB", "--mode", "shared"],
        env={"COLUMNS": str(columns)},
    )
    assert result.exit_code == 0, result.stderr
    assert f"--buckets: {spec}" in result.stdout.splitlines()


@pytest.mark.parametrize("tty", ["0", "1"])  # plain text, and rich's table output
def test_predict_prints_the_predicted_bucket_list_whole_on_one_line(traced, tty):
    wanted = sorted(traced.run.buckets)
    spec = ",".join(map(str, wanted))
    columns = 24  # narrower than the list: a wrapped list would break inside a number
    result = runner.invoke(
        app,
        ["predict", "--from", str(traced.path), "--buckets", spec],
        env={"COLUMNS": str(columns), "TTY_COMPATIBLE": tty, "NO_COLOR": "1"},
    )
    assert result.exit_code == 0, result.stderr
    assert any(line.endswith(f"buckets: {spec}") for line in result.stdout.splitlines()), (
        result.stdout
    )


def test_advise_offers_no_floor_mode():
    help_text = run("advise", "--help").stdout  # floor captures one bucket: no list to advise
    assert (
        "per-bucket|shared|shared-largest" in help_text and "shared-largest|floor" not in help_text
    )


def test_advise_refuses_a_report_without_traces_in_one_line():
    assert "no allocator traces" in refused(
        run("advise", "--from", REFERENCE, "--budget", "4GiB", "--mode", "shared")
    )


def test_advise_refuses_a_mode_the_profile_lacks():
    message = refused(
        run("advise", "--from", BEFORE_LEDGER, "--budget", "4GiB", "--mode", "shared-largest")
    )
    assert "has no shared-largest rows" in message


def test_advise_names_the_modes_a_profile_holds_when_it_lacks_the_default():
    message = refused(run("advise", "--from", SEED, "--budget", "2GiB"))
    assert "no shared-largest rows" in message
    assert "pass --mode shared or per-bucket, the modes it holds" in message


def test_plot_draws_the_causes_panel_for_a_report_with_the_ledger(tmp_path):
    from bcgprof.render.plot import build_figure

    report = _report(tmp_path)
    fig = build_figure(report)
    assert len(fig.axes) == 3
    labels = {t.get_text() for t in fig.axes[2].get_legend().get_texts()}
    assert {"graph executables", "pool: outputs kept"} <= labels
    result = run("plot", report.path, "-o", tmp_path / "cost.png")
    assert result.exit_code == 0 and (tmp_path / "cost.png").exists()


def _grown_copy(tmp_path, report, nodes=48000, exec_bytes=120 << 20):
    """The same capture with more graph-executable memory in every per-bucket row."""
    import dataclasses

    from bcgprof.report import ReportWriter

    rows = []
    for r in report.buckets:
        if r.mode == "per-bucket":
            per = exec_bytes // 4
            r = dataclasses.replace(
                r,
                non_torch_delta_bytes=r.non_torch_delta_bytes + per,
                device_used_delta_bytes=r.device_used_delta_bytes + per,
                graph_nodes=r.graph_nodes + nodes // 4,
            )
        rows.append(r)
    ReportWriter(tmp_path / "grown", report.run, rows)
    return tmp_path / "grown"


def test_compare_shows_cause_deltas_and_a_failing_gate_names_what_grew(tmp_path):
    report = _report(tmp_path)
    grown = _grown_copy(tmp_path, report)
    result = run("compare", report.path, grown, "--section", "summary", "-f", "json")
    assert result.exit_code == 0, result.stderr
    totals = {t["mode"]: t for t in json.loads(result.stdout)["totals"]}
    assert totals["per-bucket"]["causes"]["graph_executables"]["delta"] == 120 << 20
    assert totals["shared"]["causes"]["graph_executables"]["delta"] == 0
    table = " ".join(
        run("compare", report.path, grown, "--section", "summary", "--wide").stdout.split()
    )
    assert "cause: graph executables" in table
    gate = run("gate", "--baseline", report.path, "--current", grown)
    assert gate.exit_code == 1
    assert "what grew: graph executables +120.0 MiB (nodes +48,000)" in " ".join(
        gate.stdout.split()
    )


def test_predict_free_says_what_each_mode_needs_and_where_it_runs_out(traced):
    result = run("predict", "--from", traced.path, "--buckets", "512,1024,2048,4096", "-f", "json")
    needs = {m["mode"]: m["needs_free_bytes"] for m in json.loads(result.stdout)["modes"]}
    assert all(n > 0 for n in needs.values())
    short = needs["per-bucket"] - 1
    data = json.loads(
        run(
            "predict",
            "--from",
            traced.path,
            "--buckets",
            "512,1024,2048,4096",
            "--free",
            f"{short}B",
            "-f",
            "json",
        ).stdout
    )
    per_bucket = next(m for m in data["modes"] if m["mode"] == "per-bucket")
    assert per_bucket["free_bytes"] == short and per_bucket["fits"] is False
    assert per_bucket["first_oom_bucket"] == per_bucket["tightest_bucket"]
    assert per_bucket["first_oom_phase"] in ("capture", "warm-up")
    assert (
        per_bucket["keeps_bytes"]
        == per_bucket["device_used_bytes"]
        <= per_bucket["needs_free_bytes"]
    )
    roomy = json.loads(
        run(
            "predict",
            "--from",
            traced.path,
            "--buckets",
            "512,1024,2048,4096",
            "--free",
            f"{max(needs.values())}B",
            "-f",
            "json",
        ).stdout
    )
    assert all(m["fits"] is True and m["first_oom_bucket"] is None for m in roomy["modes"])
    table = run(
        "predict", "--from", traced.path, "--buckets", "512,1024,2048,4096", "--free", f"{short}B"
    )
    assert "needs free" in table.stdout and "OOM at" in table.stdout


def test_predict_free_on_the_profiles_own_list_and_show_say_the_same_need():
    data = json.loads(
        run(
            "predict", "--from", "reports/llama-3.1-8b-h200", "--free", "5164MiB", "-f", "json"
        ).stdout
    )
    shown = json.loads(
        run("show", "reports/llama-3.1-8b-h200", "--section", "summary", "-f", "json").stdout
    )
    needs = {s["mode"]: s["needs_free_bytes"] for s in shown["summary"]}
    assert {m["mode"]: m["needs_free_bytes"] for m in data["modes"]} == needs
    assert next(m for m in data["modes"] if m["mode"] == "per-bucket")["first_oom_bucket"] == 14336


@pytest.mark.parametrize(
    "args, message",
    [
        (("--free", "4"), "--free '4' has no unit"),
        (("--free", "lots"), "--free"),
        (("--free", "4GiB", "--num-layers", "8"), "needs reports at two or more layer counts"),
    ],
)
def test_predict_free_refusals_are_one_line(args, message):
    assert message in refused(run("predict", "--from", "reports/llama-3.1-8b-h200", *args))


def test_predict_json_keys_are_those_the_docs_document(traced):
    """The contract in docs/predict-advise.md names every key predict's JSON has, and no other."""
    import re
    from pathlib import Path

    text = Path("docs/predict-advise.md").read_text()
    section = text[text.index("## `predict`") : text.index("## The whole model")]
    documented = set(re.findall(r'"(\w+)":', section))
    data = json.loads(
        run(
            "predict", "--from", traced.path, "--buckets", "512,1024,2048,4096", "-f", "json"
        ).stdout
    )
    actual = (
        set(data)
        | {k for m in data["modes"] for k in m}
        | {k for m in data["modes"] for r in m["rows"] for k in r}
    )
    assert documented == actual, (documented - actual, actual - documented)
