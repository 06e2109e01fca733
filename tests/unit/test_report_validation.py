"""The report reader beyond one field: files that are not regular, too large or malformed are
refused at once and read as a stream; text from a file is made safe to print; the ``-f json``
outputs of compare and gate are strict JSON holding the CSV's figures; ``bcgprof.read_frames`` gives
typed DataFrames equal to the files. (The committed reports, each read and written again, and the
JSON of every other command: tests/regression/test_report_validation.py.)

(tests/cli/test_bad_input.py runs every corrupted variant of tests/data/corrupt_reports.py through
every command; the tests here look at what those cannot: timing, memory, output bytes, dtypes.)
"""

from __future__ import annotations

import csv
import dataclasses
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

import pytest
from typer.testing import CliRunner

from bcgprof.cli import app
from bcgprof.errors import ReportError
from bcgprof.report import (
    MAX_TEXT_CHARS,
    ReportWriter,
    SiteRecord,
    read_report,
)

from helpers import load_data_module

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"
runner = CliRunner()
# control characters that must never reach a terminal from a file: C0 but the newline, DEL, C1
UNSAFE = re.compile(r"[\x00-\x09\x0b-\x1f\x7f-\x9f]")


corrupt = load_data_module("corrupt_reports")
maker = load_data_module("make_reports")


def run(*args):
    return runner.invoke(app, [str(a) for a in args])


def strict_json(text: str):
    """json.loads that refuses NaN and infinities, as RFC 8259 parsers do."""

    def refuse(word: str):
        raise AssertionError(f"{word} is not JSON")

    return json.loads(text, parse_constant=refuse)


def csv_rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def as_number(text: str):
    """A CSV field as the schema's number: int when it is one, else float; '' is None."""
    if text == "":
        return None
    return int(text) if re.fullmatch(r"-?[0-9]+", text) else float(text)


# ---------------------------------------------------------------- files that are not what they seem


def _variant(cls: str, name: str):
    return next(v for v in corrupt.CLASSES[cls] if v.name == name)


@pytest.fixture
def no_hang():
    """A read that blocks fails the test after 10 s instead of hanging the suite."""

    def timeout(signum, frame):
        raise AssertionError("the read blocked")

    old = signal.signal(signal.SIGALRM, timeout)
    signal.alarm(10)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)


@pytest.mark.parametrize("name", [v.name for v in corrupt.CLASSES["unbounded or irregular file"]])
def test_unbounded_and_irregular_files_are_refused_at_once(name, tmp_path, no_hang):
    variant = _variant("unbounded or irregular file", name)
    bad = corrupt.make(variant, DATA / "baseline", tmp_path / "bad")
    start = time.monotonic()
    with pytest.raises(ReportError) as e:
        read_report(bad)
    assert time.monotonic() - start < 2.0
    assert variant.expect in str(e.value) and str(bad) in str(e.value) and "\n" not in str(e.value)


def _big_buckets_csv(path: Path, bad_line: str, rows: int) -> None:
    """A buckets.csv of the baseline's header, ``bad_line`` as its first row, then ``rows``
    copies of a good one."""
    lines = (DATA / "baseline" / "buckets.csv").read_text().splitlines(keepends=True)
    with open(path, "w") as f:
        f.write(lines[0] + bad_line)
        f.writelines([lines[1]] * rows)


@pytest.mark.parametrize(
    "bad_line, message",
    [
        (
            "per-bucket,4096,0,ok,3,lots" + ",0" * 16 + "\n",
            "row 2, column graph_nodes: 'lots' is not a number",
        ),
        ("per-bucket,4096\n", "buckets.csv:2 is corrupt: 2 values for 22 columns"),
        ("9" * 50_000_000, "buckets.csv:2 is a line of more than 8192 bytes"),
    ],
)
def test_a_large_malformed_file_fails_at_its_first_bad_row_without_being_loaded(
    tmp_path, bad_line, message
):
    report = shutil.copytree(DATA / "baseline", tmp_path / "r")
    _big_buckets_csv(report / "buckets.csv", bad_line, rows=0 if len(bad_line) > 1000 else 300_000)
    assert (report / "buckets.csv").stat().st_size > 45_000_000
    tracemalloc.start()
    try:
        with pytest.raises(ReportError) as e:
            read_report(report)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert message in str(e.value)
    assert peak < 16 * 2**20, peak  # a block and a chunk of rows, not the file


def test_a_row_spanning_lines_is_named_by_its_own_line(tmp_path, write_report, rows):
    """A quoted field may hold a newline (reports written before text was cleaned): the rows after
    it are still named by their line in the file."""
    grouped = rows()
    records = grouped.all()
    path = write_report("r", records, status="interrupted")
    text = (path / "buckets.csv").read_text().splitlines(keepends=True)
    fields = next(csv.reader([text[1]]))
    fields[next(csv.reader([text[0]])).index("detail")] = "first line\nsecond line"
    out = [
        text[0],
        records_to_csv_line(fields),
        text[2],
        text[3].replace(",ok,", ",melted,", 1),
        *text[4:],
    ]
    (path / "buckets.csv").write_text("".join(out))
    with pytest.raises(
        ReportError, match=r"buckets\.csv: row 5, column status: unknown value 'melted'"
    ):
        read_report(path)
    (path / "buckets.csv").write_text("".join(out).replace(",melted,", ",ok,"))
    assert read_report(path).buckets[0].detail == "first line second line"  # cleaned when read


def records_to_csv_line(fields: list[str]) -> str:
    import io

    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerow(fields)
    return buf.getvalue()


# ---------------------------------------------------------------- rows against run.json


def test_tensor_parallel_rows_read_in_the_capture_order_and_rank_by_rank(write_report, rows):
    """A capture writes each bucket step of every rank together; rank-major files read too."""
    per_rank = []
    for rank in (0, 1):
        grouped = rows()
        for r in grouped.all():
            r.rank = rank
        per_rank.append(grouped.all())
    stepped = [r for pair in zip(*per_rank, strict=True) for r in pair]
    for name, records in (("stepped", stepped), ("rank-major", per_rank[0] + per_rank[1])):
        report = read_report(write_report(name, records, tp=2))
        assert len(report.buckets) == 22 and {s.rank for s in report.summary} == {
            "0",
            "1",
            "max",
            "sum",
        }


def test_a_failed_replay_reads_as_the_capture_wrote_it_and_prints_null(write_report, rows):
    grouped = rows()
    failed = grouped["shared"][256]
    failed.status, failed.replay_max_abs_diff = "error", float("inf")
    failed.detail = "replay differs from eager by inf (allowed 0)"
    path = write_report("r", grouped.all(), status="partial", extra={"ratio": float("nan")})
    report = read_report(path)
    assert [r.replay_max_abs_diff for r in report.buckets if r.status == "error"] == [float("inf")]
    assert report.run.extra == {"ratio": None}  # written as null: a strict reader reads it
    data = strict_json(run("show", path, "-f", "json").stdout)
    assert [b["replay_max_abs_diff"] for b in data["buckets"] if b["status"] == "error"] == [None]


# ---------------------------------------------------------------- text from files


def _strings(value):
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield k
            yield from _strings(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _strings(v)


@pytest.mark.parametrize("name", [v.name for vs in corrupt.SANITISED.values() for v in vs])
def test_text_from_a_report_is_cleaned_and_cut_before_anything_prints_it(name, tmp_path):
    variant = next(v for vs in corrupt.SANITISED.values() for v in vs if v.name == name)
    good = shutil.copytree(DATA / "baseline", tmp_path / "good")
    bad = corrupt.make(variant, DATA / "baseline", tmp_path / "bad")
    report = read_report(bad)
    texts = list(_strings(dataclasses.asdict(report.run))) + [r.detail for r in report.buckets]
    assert all(not UNSAFE.search(t) and len(t) <= MAX_TEXT_CHARS for t in texts)
    for args in (
        ("show", bad),
        ("show", bad, "-f", "markdown"),
        ("show", bad, "-f", "json"),
        ("show", bad, "-f", "csv"),
        ("show", bad, "--wide"),
        ("compare", good, bad),
        ("explain", bad),
        ("gate", "--baseline", good, "--current", bad, "--allow-mismatch"),
    ):
        result = run(*args)
        assert result.exit_code in (0, 1), (args, result.stderr)
        out = result.stdout + result.stderr
        assert not UNSAFE.search(out), (args, UNSAFE.search(out))
        assert len(out) < 200_000, (args, len(out))


def test_the_writer_cleans_text_so_a_reopened_report_keeps_it(tmp_path, rows):
    grouped = rows()
    records = grouped.all()
    records[-1].status, records[-1].detail = "oom", "out of memory\x1b[2J\r\n" + "x" * 5000
    run_info = maker.run_info(status="partial", message="stopped\x07", gpu_name="H200\x9b31m")
    ReportWriter(tmp_path / "r", run_info, records)
    before = {
        n: (tmp_path / "r" / n).read_bytes() for n in ("run.json", "buckets.csv", "summary.csv")
    }
    assert b"\x1b" not in before["buckets.csv"] and "\\u0007" not in before["run.json"].decode()
    report = read_report(tmp_path / "r")
    assert (
        report.buckets[-1].detail.startswith("out of memory\ufffd[2J ")
        and len(report.buckets[-1].detail) == 1000
    )
    assert report.run.message == "stopped\ufffd" and report.run.gpu_name == "H200\ufffd31m"
    # what a mode's process does: rewrites every file from what it read
    ReportWriter.reopen(tmp_path / "r")
    assert {n: (tmp_path / "r" / n).read_bytes() for n in before} == before


# ---------------------------------------------------------------- strict JSON, the CSV's figures


def _numbers_match(item: dict, row: dict[str, str]) -> None:
    for key, text in row.items():
        if key in item and key not in ("mode", "status", "detail", "rank"):
            assert item[key] == as_number(text) and type(item[key]) is type(as_number(text)), (
                key,
                item[key],
                text,
            )


def test_compare_and_gate_json_are_strict_and_hold_the_csv_figures():
    old, new = DATA / "baseline", DATA / "grown"
    figures = {
        side: {(r["mode"], int(r["bucket"])): r for r in csv_rows(path / "buckets.csv")}
        for side, path in (("old", old), ("new", new))
    }
    data = strict_json(run("compare", old, new, "-f", "json").stdout)
    assert data["buckets"]
    for item in data["buckets"]:
        for metric in ("pool_delta_bytes", "device_used_delta_bytes", "peak_transient_bytes"):
            for side in ("old", "new"):
                assert item[metric][side] == int(
                    figures[side][(item["mode"], item["bucket"])][metric]
                )
    result = run("gate", "--baseline", old, "--current", new, "--each-bucket", "-f", "json")
    assert result.exit_code == 1  # grown grew
    gate = strict_json(result.stdout)
    totals = {
        side: {r["mode"]: r for r in csv_rows(path / "summary.csv")}
        for side, path in (("baseline", old), ("current", new))
    }
    checked = [
        c
        for c in gate["checks"]
        if c["bucket"] is None and c["metric"] in ("pool_bytes", "device_used_bytes")
    ]
    assert checked
    for c in checked:
        for side in ("baseline", "current"):
            assert c[side] == int(totals[side][c["mode"]][c["metric"]]), c


def _bytes_are_integers(value, where="") -> int:
    """Every ``*_bytes`` value is an int (or null); returns how many there were."""
    n = 0
    if isinstance(value, dict):
        for k, v in value.items():
            # a fit's rms is a float
            if k.endswith("_bytes") and "rms" not in k and not isinstance(v, (dict, list)):
                assert v is None or type(v) is int, (where + k, v)
                n += 1
            else:
                n += _bytes_are_integers(v, f"{where}{k}.")
    elif isinstance(value, list):
        n += sum(_bytes_are_integers(v, where) for v in value)
    return n


# ---------------------------------------------------------------- pandas


def test_read_frames_gives_typed_frames_equal_to_the_files(tmp_path, rows):
    import bcgprof

    grouped = rows()
    big = grouped["per-bucket"][4096]
    big.segments, big.graph_nodes = (
        2**62 + 1,
        2**62 + 3,
    )  # exact only as integers, never through a float
    grouped["shared"][512].graph_nodes = None
    path = tmp_path / "r"
    ReportWriter(path, maker.run_info(), grouped.all())
    tables = bcgprof.read_frames(path)
    b, s = tables.buckets, tables.summary
    assert tables.run == read_report(path).run and tables.summary_source == "summary.csv"
    expected = {
        "bucket": "int64",
        "pool_bytes": "int64",
        "segments": "int64",
        "graph_nodes": "Int64",
        "free_bytes": "Int64",
        "warmup_ms": "float64",
        "replay_max_abs_diff": "Float64",
        "mode": "string",
        "detail": "string",
    }
    assert {k: str(b[k].dtype) for k in expected} == expected
    assert (
        str(s["device_used_bytes"].dtype) == "int64"
        and str(s["saved_vs_per_bucket_bytes"].dtype) == "Int64"
    )
    assert str(s["ratio_to_floor"].dtype) == "Float64" and str(s["rank"].dtype) == "string"
    for frame, name in ((b, "buckets.csv"), (s, "summary.csv")):
        rows_ = csv_rows(path / name)
        assert list(frame.columns)[: len(rows_[0])] == list(rows_[0])
        for i, row in enumerate(rows_):
            for key, text in row.items():
                value = frame[key].iloc[i]
                if text == "":
                    assert value is None or str(value) in ("<NA>", ""), (name, key, value)
                elif frame[key].dtype.kind in "iuf" or str(frame[key].dtype) in (
                    "Int64",
                    "Float64",
                ):
                    assert value == as_number(text), (name, i, key, value, text)
                else:
                    assert value == text
    assert b.loc[b["bucket"] == 4096, "graph_nodes"].tolist()[0] == 2**62 + 3
    assert tables.sites.empty and list(tables.sites.columns) == [
        f.name for f in dataclasses.fields(SiteRecord)
    ]


def test_reading_a_report_loads_no_pandas_numpy_or_torch():
    code = (
        "import sys, bcgprof, bcgprof.report\n"
        "bcgprof.read_frames, bcgprof.read_report  # the names alone load nothing\n"
        "bcgprof.report.read_report('tests/data/baseline')\n"
        "print(sorted(m for m in ('pandas', 'numpy', 'torch', 'bcgprof.models') if m in "
        "sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
