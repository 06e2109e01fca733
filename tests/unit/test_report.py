"""The report format: round trips, summaries, atomic and partial writes, unreadable input."""

import dataclasses
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from bcgprof.errors import ReportError
from bcgprof.report import (
    PHASED_SCHEMA_VERSION,
    SCHEMA_VERSION,
    BucketRecord,
    ReportWriter,
    RunInfo,
    SummaryRecord,
    atomic_write_text,
    read_csv_records,
    read_report,
    summarize,
)

# run.json fields that agree with the rows of the `rows` fixture (tests/data/baseline's shape)
BASELINE_RUN = dict(
    config_hash="5d1b7c0e2a9f4e61",
    buckets=[256, 512, 1024, 2048, 4096],
    modes=["per-bucket", "shared", "floor"],
)

REQUIRED_BUCKET_COLUMNS = [
    "mode",
    "bucket",
    "order",
    "status",
    "segments",
    "graph_nodes",
    "pool_bytes",
    "pool_delta_bytes",
    "retained_output_bytes",
    "torch_allocated_delta_bytes",
    "torch_reserved_delta_bytes",
    "device_used_delta_bytes",
    "non_torch_delta_bytes",
    "peak_transient_bytes",
    "warmup_ms",
    "capture_ms",
    "replay_max_abs_diff",
]
REQUIRED_SUMMARY_COLUMNS = [
    "mode",
    "buckets",
    "segments",
    "pool_bytes",
    "torch_reserved_bytes",
    "device_used_bytes",
    "non_torch_bytes",
    "retained_output_bytes",
    "peak_transient_bytes",
    "capture_s",
    "saved_vs_per_bucket_bytes",
    "saved_vs_per_bucket_pct",
    "ratio_to_floor",
]


def test_csv_headers_hold_the_contract_columns(data_dir):
    bucket_header = (data_dir / "baseline" / "buckets.csv").read_text().splitlines()[0].split(",")
    summary_header = (data_dir / "baseline" / "summary.csv").read_text().splitlines()[0].split(",")
    assert bucket_header[: len(REQUIRED_BUCKET_COLUMNS)] == REQUIRED_BUCKET_COLUMNS
    assert summary_header[: len(REQUIRED_SUMMARY_COLUMNS)] == REQUIRED_SUMMARY_COLUMNS


def test_round_trip_is_identical(tmp_path, rows):
    records = rows().all()
    # Values that are easy to lose: None, negative deltas, floats that are not short decimals.
    records[0].graph_nodes = None
    records[1].device_used_delta_bytes = -2 * 1024**2
    records[1].non_torch_delta_bytes = (
        records[1].device_used_delta_bytes - records[1].torch_reserved_delta_bytes
    )
    # a failed replay check: the capture marks the bucket error
    records[2].replay_max_abs_diff = 0.1 + 0.2
    records[2].status, records[2].detail = "error", "replay differs from eager by 0.3 (allowed 0)"
    records[3].status, records[3].detail = "oom", "CUDA out of memory, tried to allocate 2.00 GiB"
    records[4].capture_ms = 1 / 3
    run = RunInfo(model="gpt-oss-20b", extra={"k": [1, 2]}, tp=1, **BASELINE_RUN)
    ReportWriter(tmp_path / "r", run, records)

    back = read_report(tmp_path / "r")
    assert back.buckets == records
    assert back.run == run
    assert back.summary == summarize(records)
    # summary.csv on disk holds the same rows read_report computes.
    assert read_csv_records(tmp_path / "r" / "summary.csv", SummaryRecord) == back.summary
    # Writing what was read gives the same bytes.
    ReportWriter(tmp_path / "again", back.run, back.buckets)
    for name in ("buckets.csv", "summary.csv", "run.json"):
        assert (tmp_path / "again" / name).read_text() == (tmp_path / "r" / name).read_text()


def test_committed_fixture_reads_back(data_dir):
    report = read_report(data_dir / "baseline")
    assert report.modes() == ["per-bucket", "shared", "floor"]
    assert [(r.mode, r.bucket) for r in report.buckets][:3] == [
        ("per-bucket", 4096),
        ("per-bucket", 2048),
        ("per-bucket", 1024),
    ]
    assert all(isinstance(r.pool_bytes, int) for r in report.buckets)


def test_summary_savings_and_floor_ratios_use_device_used(data_dir):
    summary = {s.mode: s for s in read_report(data_dir / "baseline").summary}
    per_bucket, shared, floor = summary["per-bucket"], summary["shared"], summary["floor"]
    assert per_bucket.device_used_bytes == 314 * 1024**2
    assert shared.device_used_bytes == 290 * 1024**2
    assert floor.device_used_bytes == 280 * 1024**2
    assert shared.saved_vs_per_bucket_bytes == 24 * 1024**2
    assert shared.saved_vs_per_bucket_pct == round(100 * 24 / 314, 3)
    assert per_bucket.saved_vs_per_bucket_bytes is None and per_bucket.ratio_to_floor == round(
        314 / 280, 4
    )
    assert shared.ratio_to_floor == round(290 / 280, 4)
    assert per_bucket.pool_bytes == 300 * 1024**2  # the pool after the last bucket, not a sum


def test_summary_leaves_comparisons_empty_without_the_other_mode(rows):
    grouped = rows()
    only_shared = list(grouped["shared"].values())
    (s,) = summarize(only_shared)
    assert (
        s.saved_vs_per_bucket_bytes is None
        and s.saved_vs_per_bucket_pct is None
        and s.ratio_to_floor is None
    )


def test_writer_leaves_a_valid_report_after_every_row(tmp_path, rows):
    records = rows().all()
    writer = ReportWriter(tmp_path / "r", RunInfo(model="m", status="running", **BASELINE_RUN))
    assert read_report(tmp_path / "r").buckets == []
    for i, record in enumerate(records, start=1):
        writer.append(record)
        report = read_report(tmp_path / "r")
        assert report.buckets == records[:i]
        assert report.run.status == "running"
    writer.update_run(status="interrupted", message="interrupted during shared")
    assert read_report(tmp_path / "r").run.status == "interrupted"


def test_reopen_continues_a_report(tmp_path, rows):
    grouped = rows()
    ReportWriter(
        tmp_path / "r", RunInfo(model="m", **BASELINE_RUN), list(grouped["per-bucket"].values())
    )
    writer = ReportWriter.reopen(tmp_path / "r")
    for r in grouped["shared"].values():
        writer.append(r)
    assert read_report(tmp_path / "r").modes() == ["per-bucket", "shared"]


def test_failed_replace_keeps_the_old_file_and_no_temp_file(tmp_path, monkeypatch):
    target = tmp_path / "buckets.csv"
    atomic_write_text(target, "old\n")

    def broken_replace(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError):
        atomic_write_text(target, "new\n")
    assert target.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["buckets.csv"]


WRITER_LOOP = textwrap.dedent("""
    import sys
    sys.path.insert(0, {root!r})
    from bcgprof.report import BucketRecord, ReportWriter, RunInfo
    writer = ReportWriter({path!r}, RunInfo(model="m", config_hash="0123456789abcdef",
                                            buckets=list(range(1, 4097)), modes=["per-bucket"],
                                            order="smallest-first"))
    for i in range(1, 4097):
        writer.append(BucketRecord(mode="per-bucket", bucket=i, order=i - 1, status="ok",
                                   pool_bytes=i * 4096, pool_delta_bytes=4096, detail="x" * 200))
""")


def test_a_killed_writer_leaves_a_readable_partial_report(tmp_path):
    root = str(Path(__file__).resolve().parents[2])
    # three writers at once, each killed once its file passes its own size
    writers = {}
    for attempt in range(3):
        path = tmp_path / f"r{attempt}"
        writers[path] = subprocess.Popen(
            [sys.executable, "-c", WRITER_LOOP.format(root=root, path=str(path))]
        )
    try:
        deadline = time.monotonic() + 30
        running = dict(writers)
        while running and time.monotonic() < deadline:
            for attempt, path in enumerate(writers):
                csv = path / "buckets.csv"
                if path in running and csv.exists() and csv.stat().st_size > 20_000 * (attempt + 1):
                    running.pop(path).send_signal(signal.SIGKILL)
            time.sleep(0.01)
    finally:
        for proc in writers.values():
            proc.send_signal(signal.SIGKILL)
            proc.wait()
    for path in writers:
        report = read_report(path)  # never a half-written file
        n = len(report.buckets)
        assert n > 0
        assert [r.bucket for r in report.buckets] == list(range(1, n + 1))
        assert report.summary[0].pool_bytes == n * 4096
        assert report.run.status == "running"  # says the run did not finish


def test_missing_directory_and_files(tmp_path, report_copy):
    with pytest.raises(ReportError, match="does not exist or is not a directory"):
        read_report(tmp_path / "nowhere")
    path = report_copy("baseline")
    (path / "buckets.csv").unlink()
    with pytest.raises(ReportError, match=r"buckets\.csv is missing"):
        read_report(path)


def test_corrupt_csv_is_a_report_error(data_dir):
    with pytest.raises(
        ReportError, match=r"buckets.csv:\d+ is corrupt: \d+ values for \d+ columns"
    ):
        read_report(data_dir / "corrupt")


def test_wrong_schema_version_is_a_report_error(data_dir):
    with pytest.raises(
        ReportError,
        match=f"schema version 99; this bcgprof reads versions {SCHEMA_VERSION} and "
        f"{PHASED_SCHEMA_VERSION}:",
    ):
        read_report(data_dir / "wrong-schema")


@pytest.mark.parametrize("version", ["1.0", "true", '"1"'])
def test_a_schema_version_that_only_equals_the_number_is_refused(report_copy, version):
    path = report_copy("baseline")
    run = path / "run.json"
    text = run.read_text()
    assert f'"schema_version": {SCHEMA_VERSION},' in text
    run.write_text(
        text.replace(f'"schema_version": {SCHEMA_VERSION},', f'"schema_version": {version},', 1)
    )
    with pytest.raises(ReportError, match="this bcgprof reads version"):
        read_report(path)


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda t: t.replace("per-bucket,4096", "per-bucket,lots", 1), "'lots' is not a number"),
        (
            lambda t: t.replace(",ok,", ",melted,", 1),
            "row 2, column status: unknown value 'melted'",
        ),
        (lambda t: t.replace("mode,", "kind,", 1), "missing column(s) mode"),
        (lambda t: "", "is empty"),
    ],
)
def test_bad_values_in_buckets_csv(report_copy, mutate, message):
    path = report_copy("baseline")
    csv = path / "buckets.csv"
    csv.write_text(mutate(csv.read_text()))
    with pytest.raises(ReportError) as e:
        read_report(path)
    assert message in str(e.value)


def test_run_json_that_is_not_an_object(report_copy):
    path = report_copy("baseline")
    (path / "run.json").write_text("[1, 2]\n")
    with pytest.raises(ReportError, match="not a JSON object"):
        read_report(path)
    (path / "run.json").write_text("{not json")
    with pytest.raises(ReportError, match=r"run\.json is corrupt"):
        read_report(path)


def test_extra_columns_are_ignored(report_copy):
    path = report_copy("baseline")
    csv = path / "buckets.csv"
    lines = csv.read_text().splitlines()
    csv.write_text(
        "\n".join([lines[0] + ",my_column"] + [line + ",42" for line in lines[1:]]) + "\n"
    )
    assert len(read_report(path).buckets) == 11


def test_partial_fixture_says_so(data_dir):
    report = read_report(data_dir / "partial")
    assert report.run.status == "interrupted"
    assert report.modes() == ["per-bucket", "shared"]
    assert {s.mode: s.buckets for s in report.summary} == {"per-bucket": 5, "shared": 2}


def test_flush_writes_records_changed_in_place(tmp_path, rows):
    records = rows().all()
    writer = ReportWriter(tmp_path / "r", RunInfo(model="m", **BASELINE_RUN), records)
    writer.records[0].replay_max_abs_diff = 0.25  # a replay check fills this in after the capture
    writer.records[0].status = "error"
    assert read_report(tmp_path / "r").buckets[0].replay_max_abs_diff == 0.0
    writer.flush()
    assert read_report(tmp_path / "r").buckets[0].replay_max_abs_diff == 0.25


def test_report_frames_keep_bytes_as_integers(data_dir):
    from bcgprof.report import report_frames

    report = read_report(data_dir / "baseline")
    frames = report_frames(report)
    buckets, summary = frames["buckets"], frames["summary"]
    # every field but the phase of a report of several phases in one pool, which this is not
    one_phase = [f.name for f in dataclasses.fields(BucketRecord) if f.name != "phase"]
    assert list(buckets.columns) == one_phase
    assert (
        str(buckets["pool_bytes"].dtype) == "int64" and str(buckets["graph_nodes"].dtype) == "Int64"
    )
    assert buckets["pool_delta_bytes"].tolist() == [r.pool_delta_bytes for r in report.buckets]
    assert buckets["replay_max_abs_diff"].isna().sum() == sum(
        r.replay_max_abs_diff is None for r in report.buckets
    )
    shared = summary.set_index("mode").loc["shared"]
    assert shared["saved_vs_per_bucket_bytes"] == 24 * 1024**2
    assert summary.loc[summary["mode"] == "per-bucket", "saved_vs_per_bucket_bytes"].isna().all()


def test_a_lone_surrogate_in_run_json_is_replaced_so_every_output_can_encode_it(report_copy):
    """JSON may spell a lone UTF-16 surrogate (\\ud800); no encoder writes one, so it is read as
    U+FFFD."""
    import json

    from typer.testing import CliRunner

    from bcgprof.cli import app

    path = report_copy("baseline")
    data = json.loads((path / "run.json").read_text())
    data["model"] = data["model"] + "\ud800"
    (path / "run.json").write_text(json.dumps(data))  # ensure_ascii: written as the escape \ud800
    assert "\\ud800" in (path / "run.json").read_text()
    assert read_report(path).run.model.endswith("\ufffd")
    result = CliRunner().invoke(app, ["show", str(path), "--section", "summary"])
    assert result.exit_code == 0 and "\ufffd" in result.stdout, result.stderr
