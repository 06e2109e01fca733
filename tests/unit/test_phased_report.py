"""Reports of several phases captured into one pool (schema 2): written, read back, checked, and
refused by the readers of one-phase reports; a one-phase report's files keep their form."""

from __future__ import annotations

import csv
import json

import pytest

from bcgprof.errors import ReportError
from bcgprof.report import (
    PHASED_SCHEMA_VERSION,
    SCHEMA_VERSION,
    phase_end_pools,
    phased_sequence,
    read_report,
)
from bcgprof.report.schema import ONE_PHASE_BUCKET_COLUMNS
from bcgprof.report.write import ReportWriter
from tests.phased_report import MIB, PAIR_POOLS, PHASES, write_phased_report


def _header(path) -> list[str]:
    with open(path, newline="") as f:
        return next(csv.reader(f))


def test_rows_of_equal_sizes_in_two_phases_round_trip_with_their_phase(tmp_path):
    path = write_phased_report(tmp_path / "pair")
    report = read_report(path, phased=True)
    assert report.run.schema_version == PHASED_SCHEMA_VERSION
    assert report.run.phases == PHASES and report.run.phased
    got = [(r.mode, r.phase, r.bucket, r.pool_bytes // MIB) for r in report.buckets]
    assert got == PAIR_POOLS
    # bucket 8 is a prefill row and a decode row of per-bucket mode, told apart by their phase
    rows = [r for r in report.buckets if r.mode == "per-bucket"]
    eights = [(r.phase, r.order) for r in rows if r.bucket == 8]
    assert eights == [("prefill", 0), ("decode", 2)]
    assert _header(path / "buckets.csv")[-1] == "phase"
    assert json.loads((path / "run.json").read_text())["phase_buckets"]["decode"] == [2, 8]
    # the summary is the pair's: the pool after the mode's last row
    per_bucket = next(s for s in report.summary if s.mode == "per-bucket")
    assert per_bucket.pool_bytes == 135 * MIB


def test_the_pool_after_each_phase_is_its_last_row(tmp_path):
    report = read_report(write_phased_report(tmp_path / "pair"), phased=True)
    rows = [r for r in report.buckets if r.mode == "per-bucket"]
    assert phase_end_pools(rows, PHASES) == {"prefill": 110 * MIB, "decode": 135 * MIB}
    assert phased_sequence(report.run, "floor") == [("prefill", 8), ("decode", 8)]


def test_a_reader_of_one_phase_reports_refuses_a_pair_in_one_line(tmp_path):
    path = write_phased_report(tmp_path / "pair")
    with pytest.raises(ReportError) as e:
        read_report(path)
    message = str(e.value)
    assert "\n" not in message
    assert "prefill and decode captured into one pool" in message
    assert "bcgprof show" in message and str(path / "phase-decode") in message


def test_a_one_phase_report_has_no_phase_column_and_no_phase_fields(tmp_path, data_dir):
    report = read_report(data_dir / "baseline")
    ReportWriter(tmp_path / "again", report.run, report.buckets)
    assert tuple(_header(tmp_path / "again" / "buckets.csv")) == ONE_PHASE_BUCKET_COLUMNS
    run = json.loads((tmp_path / "again" / "run.json").read_text())
    assert run["schema_version"] == SCHEMA_VERSION
    assert "phases" not in run and "phase_buckets" not in run


def _edit(path, name, change):
    text = (path / name).read_text()
    (path / name).write_text(change(text))


@pytest.mark.parametrize(
    "name, change, expected",
    [
        # the decode row of bucket 8 claims to be prefill: the sequence disagrees
        ("buckets.csv", lambda t: t.replace(",decode\n", ",prefill\n", 1), "capture order 2"),
        ("buckets.csv", lambda t: t.replace(",decode\n", ",\n", 1), "column phase: empty"),
        ("run.json", lambda t: t.replace('"schema_version": 2', '"schema_version": 1'), "belong"),
        (
            "run.json",
            lambda t: t.replace('"phases": [\n    "prefill",', '"phases": [\n    "decode",'),
            "the first of them",
        ),
    ],
)
def test_a_pair_that_disagrees_with_itself_is_refused(tmp_path, name, change, expected):
    path = write_phased_report(tmp_path / "pair", alone=False)
    _edit(path, name, change)
    with pytest.raises(ReportError, match=expected):
        read_report(path, phased=True)


def test_a_complete_pair_without_its_last_phase_is_refused(tmp_path):
    path = write_phased_report(tmp_path / "pair", alone=False)
    lines = (path / "buckets.csv").read_text().splitlines(keepends=True)
    # the floor's decode row is the last line
    (path / "buckets.csv").write_text("".join(lines[:-1]))
    with pytest.raises(ReportError, match="no row for floor decode bucket 8"):
        read_report(path, phased=True)


def test_a_one_phase_report_whose_rows_name_a_phase_is_refused(tmp_path, data_dir):
    import shutil

    path = tmp_path / "one"
    shutil.copytree(data_dir / "baseline", path)
    lines = (path / "buckets.csv").read_text().splitlines()
    lines = [lines[0] + ",phase"] + [line + ",decode" for line in lines[1:]]
    (path / "buckets.csv").write_text("\n".join(lines) + "\n")
    with pytest.raises(ReportError, match="column phase: decode, but run.json is schema 1"):
        read_report(path)
