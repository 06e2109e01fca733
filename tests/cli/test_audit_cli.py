"""`bcgprof audit` through the command line: its JSON contract, its formats and its refusals
(no GPU)."""

from __future__ import annotations

import csv
import io
import json

import pytest
from typer.testing import CliRunner

from bcgprof.cli import app

from helpers import refused

runner = CliRunner()
MIB = 1 << 20


def run(*args):
    return runner.invoke(app, [str(a) for a in args])


def test_json_is_the_contract(write_report, rows):
    built = rows()
    path = write_report("r", built.all())
    result = run("audit", path, "-f", "json")
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["report"] == str(path) and doc["phase"] == "prefill"
    assert [m["mode"] for m in doc["modes"]] == ["per-bucket", "shared", "floor"]
    shared = next(m for m in doc["modes"] if m["mode"] == "shared")
    assert shared["measured_bytes"] == sum(
        r.device_used_delta_bytes for r in built["shared"].values()
    )
    by_name = {e["estimator"]: e for e in shared["estimates"]}
    assert set(by_name) == {"vllm", "sglang", "tokenspeed", "tokenspeed-capped"}
    assert by_name["sglang"]["estimate_bytes"] == len(built["shared"]) * 8 * MIB
    for e in shared["estimates"]:
        assert isinstance(e["estimate_bytes"], int)
        assert e["error_bytes"] == e["estimate_bytes"] - shared["measured_bytes"]
        assert e["oom"] == (e["estimate_bytes"] < shared["needs_free_bytes"])


def test_mode_and_sglang_settings_reach_the_json(write_report, rows):
    path = write_report("r", rows().all(), phase="decode")
    doc = json.loads(
        run(
            "audit",
            path,
            "--mode",
            "shared",
            "--sglang-dp-attention",
            "2",
            "--sglang-deepep",
            "-f",
            "json",
        ).stdout
    )
    assert [m["mode"] for m in doc["modes"]] == ["shared"]
    sglang = next(e for e in doc["modes"][0]["estimates"] if e["estimator"] == "sglang")
    assert sglang["estimate_bytes"] == (4096 * 2 + 4096 * 2 * 3 + 4096 * 2 * 1.5 + 2048) * MIB


@pytest.mark.parametrize("fmt", ["table", "markdown"])
def test_tables_name_every_estimator_and_their_sources(write_report, rows, fmt):
    out = run("audit", write_report("r", rows().all()), "--mode", "per-bucket", "-f", fmt).stdout
    for name in (
        "vllm",
        "sglang",
        "tokenspeed",
        "tokenspeed-capped",
        "profile_cudagraph_memory",
        "reserve_for_graph_mb",
        "_estimate_family",
    ):
        assert name in out


def test_csv_has_one_row_per_mode_and_estimator(write_report, rows):
    out = run("audit", write_report("r", rows().all()), "-f", "csv").stdout
    body = [line for line in out.splitlines() if not line.startswith("#")]
    table = list(csv.DictReader(io.StringIO("\n".join(body))))
    assert len(table) == 3 * 4
    assert {r["estimator"] for r in table} == {"vllm", "sglang", "tokenspeed", "tokenspeed-capped"}


@pytest.mark.parametrize(
    "args, message",
    [
        (["--mode", "nope"], "no mode 'nope'"),
        (["--sglang-dp-attention", "0"], "--sglang-dp-attention"),
        (["--sglang-dp-attention", "x"], "--sglang-dp-attention"),
        (["-f", "yaml"], "--format"),
    ],
)
def test_bad_options_are_one_line(write_report, rows, args, message):
    assert message in refused(run("audit", write_report("r", rows().all()), *args))


def test_a_missing_report_is_one_line(tmp_path):
    assert "does not exist" in refused(run("audit", tmp_path / "nothing"))


def test_an_incomplete_report_is_one_line(write_report, rows):
    path = write_report("r", rows().all(), status="interrupted")
    assert "audit a complete report" in refused(run("audit", path))
