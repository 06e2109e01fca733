"""The report reader on the committed reports: every one reads and is what the writer writes, and
`-f json` holds their CSV figures as strict JSON. On hand-made and corrupted reports:
tests/unit/test_report_validation.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from bcgprof.report import BucketRecord, SiteRecord, SummaryRecord, read_report, records_to_csv

from unit.test_report_validation import (
    _bytes_are_integers,
    _numbers_match,
    csv_rows,
    run,
    strict_json,
)

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"
COMMITTED = sorted(p.parent for p in (ROOT / "reports").rglob("run.json")) + [
    DATA / name for name in ("baseline", "grown", "partial", "other-model")
]


def test_every_committed_report_reads_and_is_what_the_writer_writes():
    assert len(COMMITTED) >= 30
    for path in COMMITTED:
        report = read_report(path, phased=True)  # a pair of phases in one pool (schema 2) too
        assert report.buckets, path
        files = {
            "buckets.csv": records_to_csv(report.buckets, BucketRecord, report.columns["buckets"])
        }
        if report.run.status == "complete":
            files["summary.csv"] = records_to_csv(
                report.summary, SummaryRecord, report.columns["summary"]
            )
        if (path / "sites.csv").exists():
            files["sites.csv"] = records_to_csv(report.sites, SiteRecord)
        for name, text in files.items():
            assert text == (path / name).read_text(encoding="utf-8"), (path, name)


@pytest.mark.parametrize(
    "name", ["tests/data/baseline", "reports/gpt-oss-20b-h200", "reports/llama-3.1-8b-h200"]
)
def test_show_json_is_strict_and_holds_the_csv_figures(name):
    path = ROOT / name
    data = strict_json(run("show", path, "-f", "json").stdout)
    rows = csv_rows(path / "buckets.csv")
    assert len(data["buckets"]) == len(rows)
    for item, row in zip(data["buckets"], rows, strict=True):
        _numbers_match(item, row)
    summary = {(r["mode"], r["rank"]): r for r in csv_rows(path / "summary.csv")}
    for item in data["summary"]:
        _numbers_match(item, summary[(item["mode"], str(item["rank"]))])


@pytest.fixture(scope="module")
def traced(tmp_path_factory):
    """A profile with allocator traces (what predict --buckets and advise need)."""
    from traced_profile import write_profile

    return write_profile(tmp_path_factory.mktemp("traced") / "profile")


def test_explain_estimate_predict_and_advise_json_are_strict(traced):
    reference = ROOT / "reports" / "gpt-oss-20b-h200"
    explain = strict_json(run("explain", reference, "-f", "json").stdout)
    summary = {r["mode"]: r for r in csv_rows(reference / "summary.csv") if r["rank"] == "0"}
    for mode in explain["modes"]:
        assert mode["device_used_bytes"] == int(summary[mode["mode"]]["device_used_bytes"])
        assert mode["pool_bytes"] == int(summary[mode["mode"]]["pool_bytes"])
    outputs = [explain]
    for args in (
        ("estimate", "-f", "json"),
        ("predict", "--from", ROOT / "reports" / "gpt-oss-20b-h200-layers", "-f", "json"),
        ("predict", "--from", traced.path, "--buckets", "512,1024,4096", "-f", "json"),
        ("advise", "--from", traced.path, "--budget", "100MiB", "--mode", "shared", "-f", "json"),
    ):
        result = run(*args)
        assert result.exit_code == 0, (args, result.stderr)
        outputs.append(strict_json(result.stdout))
    assert all(_bytes_are_integers(data) > 0 for data in outputs)


def test_read_frames_gives_the_sites_of_a_committed_report_as_integers():
    import bcgprof

    reference = bcgprof.read_frames(ROOT / "reports" / "gpt-oss-20b-h200")
    assert str(reference.sites["bytes"].dtype) == "int64"
    assert reference.sites["bytes"].tolist() == [
        int(r["bytes"]) for r in csv_rows(reference.path / "sites.csv")
    ]
