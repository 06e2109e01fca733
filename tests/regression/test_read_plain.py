"""The reader's fast path (a CSV as bcgprof writes it, split at its commas) against the csv module's
path it falls back to: on every committed report and on files altered the ways a hand or another
tool alters them, the two give the same records and lines, or the same one-line error."""

from __future__ import annotations

from pathlib import Path

import pytest

import bcgprof.report.files as files
import bcgprof.report.table as table
from bcgprof.errors import ReportError
from bcgprof.report import BucketRecord, SummaryRecord
from bcgprof.report.limits import MAX_BUCKETS_BYTES
from bcgprof.report.schema import BUCKETS_FILE, SUMMARY_FILE

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "reports" / "gpt-oss-20b-h200"


def _both(path: Path, cls, monkeypatch, max_rows=None):
    """(fast path's outcome, csv path's outcome): a Table's (header, records, lines), or the
    error text."""

    def outcome(read):
        try:
            t = read()
        except ReportError as e:
            return ("error", str(e))
        return ("table", t.header, t.records, t.lines)

    fast = outcome(lambda: table.read_table(path, cls, MAX_BUCKETS_BYTES, max_rows))
    with monkeypatch.context() as m:
        m.setattr(table, "_read_plain", lambda *a: None)
        slow = outcome(lambda: table.read_table(path, cls, MAX_BUCKETS_BYTES, max_rows))
    return fast, slow


@pytest.mark.parametrize(
    "report", sorted(p.name for p in (ROOT / "reports").iterdir() if (p / BUCKETS_FILE).exists())
)
def test_every_committed_report_reads_the_same_both_ways(report, monkeypatch):
    for name, cls in ((BUCKETS_FILE, BucketRecord), (SUMMARY_FILE, SummaryRecord)):
        fast, slow = _both(ROOT / "reports" / report / name, cls, monkeypatch)
        assert fast[0] == "table" and fast == slow, (report, name)


def test_the_fast_path_reads_the_reference_itself(monkeypatch):
    """It is taken on a file as bcgprof writes it (not a fallback that happens to agree)."""
    taken = []
    plain = table._read_plain
    monkeypatch.setattr(table, "_read_plain", lambda *a: taken.append(plain(*a)) or taken[-1])
    table.read_table(REFERENCE / BUCKETS_FILE, BucketRecord, MAX_BUCKETS_BYTES)
    assert taken and taken[0] is not None and len(taken[0].records) > 200


def test_blocks_smaller_than_the_file_read_the_same(monkeypatch):
    """Lines cut across many blocks: each block ends at a line break and rows keep their line
    numbers."""
    whole = table.read_table(REFERENCE / BUCKETS_FILE, BucketRecord, MAX_BUCKETS_BYTES)
    monkeypatch.setattr(files, "BLOCK_BYTES", 997)
    cut = table._read_plain(REFERENCE / BUCKETS_FILE, BucketRecord, MAX_BUCKETS_BYTES, None)
    assert cut is not None
    assert (cut.header, cut.records, cut.lines) == (whole.header, whole.records, whole.lines)


def _altered(tmp_path: Path, change) -> Path:
    lines = (REFERENCE / BUCKETS_FILE).read_text().split("\n")
    header = lines[0].split(",")
    text = change(lines, header)
    path = tmp_path / BUCKETS_FILE
    path.write_text(text, newline="")
    return path


def _field(lines, header, row, column, value):
    cells = lines[row].split(",")
    cells[header.index(column)] = value
    lines[row] = ",".join(cells)
    return "\n".join(lines)


ALTERATIONS = {
    "crlf line ends": lambda lines, h: "\r\n".join(lines),
    "a quoted text field": lambda lines, h: _field(lines, h, 3, "mode", '"per-bucket"'),
    "a quoted field with a comma": lambda lines, h: _field(lines, h, 3, "status", '"ok,fine"'),
    "a blank line": lambda lines, h: "\n".join(lines[:5] + [""] + lines[5:]),
    "a row one field short": lambda lines, h: "\n".join(
        lines[:4] + [lines[4].rsplit(",", 1)[0]] + lines[5:]
    ),
    "a row one field long": lambda lines, h: "\n".join(lines[:4] + [lines[4] + ",7"] + lines[5:]),
    "an integer with a plus sign": lambda lines, h: _field(
        lines, h, 6, "pool_delta_bytes", "+2097152"
    ),
    "an integer with a leading zero": lambda lines, h: _field(
        lines, h, 6, "pool_delta_bytes", "02097152"
    ),
    "an integer written as a float": lambda lines, h: _field(
        lines, h, 6, "pool_delta_bytes", "2097152.0"
    ),
    "an integer past 64 bits": lambda lines, h: _field(lines, h, 6, "pool_bytes", "9" * 25),
    "a negative where none may be": lambda lines, h: _field(lines, h, 6, "segments", "-1"),
    "an empty required field": lambda lines, h: _field(lines, h, 7, "bucket", ""),
    "a space inside an integer": lambda lines, h: _field(lines, h, 7, "bucket", " 512"),
    "an unknown status": lambda lines, h: _field(lines, h, 8, "status", "fine"),
    "a float field as text": lambda lines, h: _field(lines, h, 9, "capture_ms", "fast"),
    "a duplicated column": lambda lines, h: "\n".join(
        [lines[0].replace("segments", "bucket", 1)] + lines[1:]
    ),
    "a missing contract column": lambda lines, h: "\n".join(
        [lines[0].replace("pool_bytes", "pool_bytez", 1)] + lines[1:]
    ),
    "an extra column": lambda lines, h: "\n".join(
        [lines[0] + ",note"] + [ln + ",x" if ln else ln for ln in lines[1:]]
    ),
    "no final line break": lambda lines, h: "\n".join(lines).rstrip("\n"),
    "the header alone": lambda lines, h: lines[0] + "\n",
    "a byte-order mark": lambda lines, h: "\ufeff" + "\n".join(lines),
    "a tab inside a number": lambda lines, h: _field(lines, h, 6, "pool_bytes", "1\t2"),
    "a text field with a space": lambda lines, h: _field(lines, h, 5, "detail", "out of memory"),
}


@pytest.mark.parametrize("name", sorted(ALTERATIONS))
def test_an_altered_file_reads_or_fails_the_same_both_ways(name, tmp_path, monkeypatch):
    path = _altered(tmp_path, ALTERATIONS[name])
    fast, slow = _both(path, BucketRecord, monkeypatch)
    assert fast == slow


def test_a_row_too_many_fails_the_same_both_ways(monkeypatch):
    rows = len(table.read_table(REFERENCE / BUCKETS_FILE, BucketRecord, MAX_BUCKETS_BYTES).records)
    fast, slow = _both(REFERENCE / BUCKETS_FILE, BucketRecord, monkeypatch, max_rows=rows - 1)
    assert fast[0] == "error" and fast == slow
