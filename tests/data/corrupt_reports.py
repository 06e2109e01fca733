"""Corrupted variants of a valid report, by class of damage (run it to write them all out:
python tests/data/corrupt_reports.py OUTDIR).

Each class in :data:`CLASSES` is a list of :class:`Variant`: a name, a mutation that
damages a copy of a valid report directory in place, and a fragment the one-line error
must contain. Every variant must be refused by every command that reads a report, with
exit code 2, one ``error:`` line and no traceback (tests/cli/test_bad_input.py runs them all).
:data:`ACCEPTED` holds the variants that must read exactly like the original (a UTF-8
byte-order mark, as spreadsheet programs write it); :data:`SANITISED` those that must be read with
their text made safe to print (tests/unit/test_report_validation.py runs them). Every variant is
quick to make and to refuse: oversized files are sparse, nothing is written that the reader would
read whole.
"""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
FILES = ("run.json", "buckets.csv", "summary.csv")


@dataclass(frozen=True)
class Variant:
    name: str
    mutate: Callable[[Path], None]
    expect: str  # a fragment of the error line (empty for ACCEPTED variants)


# ---------------------------------------------------------------- mutations


def _rows(path: Path) -> list[list[str]]:
    return list(csv.reader(io.StringIO(path.read_text())))


def _write_rows(path: Path, rows: list[list[str]]) -> None:
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows(rows)
    path.write_text(buf.getvalue())


def keep_columns(name: str, columns: list[str]):
    def mutate(report: Path) -> None:
        rows = _rows(report / name)
        index = [rows[0].index(c) for c in columns]
        _write_rows(report / name, [[row[i] for i in index] for row in rows])

    return mutate


def drop_column(name: str, column: str):
    def mutate(report: Path) -> None:
        rows = _rows(report / name)
        i = rows[0].index(column)
        _write_rows(report / name, [row[:i] + row[i + 1 :] for row in rows])

    return mutate


def set_cell(name: str, row: int, column: str, value: str):
    """Row 1 is the first data row."""

    def mutate(report: Path) -> None:
        rows = _rows(report / name)
        rows[row][rows[0].index(column)] = value
        _write_rows(report / name, rows)

    return mutate


def duplicate_row(name: str, row: int):
    """Row ``row`` twice, the copy right after it."""

    def mutate(report: Path) -> None:
        rows = _rows(report / name)
        _write_rows(report / name, rows[: row + 1] + rows[row:])

    return mutate


def append_rows(name: str, row: int, times: int):
    """``times`` copies of row ``row`` at the end."""

    def mutate(report: Path) -> None:
        rows = _rows(report / name)
        _write_rows(report / name, rows + [rows[row]] * times)

    return mutate


def drop_row(name: str, mode: str, bucket: int):
    def mutate(report: Path) -> None:
        rows = _rows(report / name)
        m, b = rows[0].index("mode"), rows[0].index("bucket")
        _write_rows(report / name, [r for r in rows if not (r[m] == mode and r[b] == str(bucket))])

    return mutate


def swap_cells(name: str, row_a: int, row_b: int, column: str):
    def mutate(report: Path) -> None:
        rows = _rows(report / name)
        i = rows[0].index(column)
        rows[row_a][i], rows[row_b][i] = rows[row_b][i], rows[row_a][i]
        _write_rows(report / name, rows)

    return mutate


def drop_last_value(name: str, row: int):
    def mutate(report: Path) -> None:
        rows = _rows(report / name)
        rows[row] = rows[row][:-1]
        _write_rows(report / name, rows)

    return mutate


def remove(name: str):
    def mutate(report: Path) -> None:
        (report / name).unlink()

    return mutate


def replace_with_directory(name: str):
    def mutate(report: Path) -> None:
        (report / name).unlink()
        (report / name).mkdir()

    return mutate


def write_text(name: str, text: str):
    def mutate(report: Path) -> None:
        (report / name).write_text(text)

    return mutate


def write_bytes(name: str, data: bytes):
    def mutate(report: Path) -> None:
        (report / name).write_bytes(data)

    return mutate


def insert_bytes(name: str, marker: bytes, junk: bytes):
    """Put ``junk`` right after the first ``marker`` of the file."""

    def mutate(report: Path) -> None:
        data = (report / name).read_bytes()
        i = data.index(marker) + len(marker)
        (report / name).write_bytes(data[:i] + junk + data[i:])

    return mutate


def prepend_bytes(name: str, prefix: bytes):
    def mutate(report: Path) -> None:
        (report / name).write_bytes(prefix + (report / name).read_bytes())

    return mutate


def run_field(field: str, value):
    """Set (or, with value ``...``, delete) one field of run.json."""

    def mutate(report: Path) -> None:
        data = json.loads((report / "run.json").read_text())
        if value is ...:
            del data[field]
        else:
            data[field] = value
        (report / "run.json").write_text(json.dumps(data, indent=2) + "\n")

    return mutate


def run_text(transform: Callable[[str], str]):
    def mutate(report: Path) -> None:
        (report / "run.json").write_text(transform((report / "run.json").read_text()))

    return mutate


def fifo(name: str):
    """``name`` a named pipe: opening it for reading would wait for a writer forever."""

    def mutate(report: Path) -> None:
        (report / name).unlink()
        os.mkfifo(report / name)

    return mutate


def link_to(name: str, target: str):
    """``name`` a symbolic link to ``target`` (``/dev/zero``: endless)."""

    def mutate(report: Path) -> None:
        (report / name).unlink()
        (report / name).symlink_to(target)

    return mutate


def grow_sparse(name: str, size: int):
    """``name`` extended to ``size`` bytes without writing them (a sparse file: instant, no disk
    used)."""

    def mutate(report: Path) -> None:
        with open(report / name, "r+b") as f:
            f.truncate(size)

    return mutate


def append_text(name: str, text: str):
    def mutate(report: Path) -> None:
        with open(report / name, "a", encoding="utf-8", newline="") as f:
            f.write(text)

    return mutate


def nested(depth: int):
    value: object = 1
    for _ in range(depth):
        value = [value]
    return value


def both(*mutations):
    def mutate(report: Path) -> None:
        for m in mutations:
            m(report)

    return mutate


def unterminated_quote(name: str, row: int, column: str):
    """Open a quote in one field and never close it: the csv module would swallow the rest of the
    file."""

    def mutate(report: Path) -> None:
        lines = (report / name).read_text().splitlines(keepends=True)
        header = lines[0].rstrip("\n").split(",")
        fields = lines[row].rstrip("\n").split(",")
        i = header.index(column)
        fields[i] = '"' + fields[i]
        lines[row] = ",".join(fields) + "\n"
        (report / name).write_text("".join(lines))

    return mutate


HUGE = "9" * 400
BINARY = bytes(range(256)) * 8  # NUL bytes and everything else

# ---------------------------------------------------------------- the classes

CLASSES: dict[str, list[Variant]] = {
    "missing column": [
        Variant(
            "buckets.csv reduced to mode,bucket,order,status",
            keep_columns("buckets.csv", ["mode", "bucket", "order", "status"]),
            "buckets.csv is corrupt: missing column(s) segments",
        ),
        Variant(
            "buckets.csv without pool_bytes",
            drop_column("buckets.csv", "pool_bytes"),
            "missing column(s) pool_bytes",
        ),
        Variant(
            "buckets.csv without device_used_delta_bytes",
            drop_column("buckets.csv", "device_used_delta_bytes"),
            "missing column(s) device_used_delta_bytes",
        ),
        Variant(
            "summary.csv without device_used_bytes",
            drop_column("summary.csv", "device_used_bytes"),
            "summary.csv is corrupt: missing column(s) device_used_bytes",
        ),
    ],
    "missing file": [Variant(f"no {name}", remove(name), f"{name} is missing") for name in FILES],
    "garbage file": [
        Variant(
            "summary.csv is prose",
            write_text("summary.csv", "hello, world\n"),
            "summary.csv is corrupt: missing column(s) mode",
        ),
        Variant("summary.csv is empty", write_text("summary.csv", ""), "summary.csv is empty"),
        Variant("buckets.csv is empty", write_text("buckets.csv", ""), "buckets.csv is empty"),
        Variant("run.json is not JSON", write_text("run.json", "{not json"), "run.json is corrupt"),
        Variant("run.json is a list", write_text("run.json", "[1, 2]\n"), "not a JSON object"),
        Variant(
            "run.json nested too deep", write_text("run.json", "[" * 100_000), "run.json is corrupt"
        ),
        Variant(
            "buckets.csv is a directory",
            replace_with_directory("buckets.csv"),
            "buckets.csv is not a regular file (a directory)",
        ),
        Variant(
            "a row with a value missing", drop_last_value("buckets.csv", 3), "values for 22 columns"
        ),
        Variant(
            "summary.csv garbage in an interrupted report",
            both(run_field("status", "interrupted"), write_text("summary.csv", "x\n1\n")),
            "summary.csv is corrupt: missing column(s) mode",
        ),
    ],
    "wrong types in run.json": [
        Variant(
            '"buckets": 5', run_field("buckets", 5), "field buckets must be a list of bucket sizes"
        ),
        Variant('"buckets": [0]', run_field("buckets", [0]), "field buckets must be"),
        Variant('"buckets": ["4"]', run_field("buckets", ["4"]), "field buckets must be"),
        Variant('"tp": "2"', run_field("tp", "2"), "field tp must be a positive integer"),
        Variant('"tp": 0', run_field("tp", 0), "field tp must be a positive integer"),
        Variant('"tp": true', run_field("tp", True), "field tp must be a positive integer"),
        Variant('"modes": null', run_field("modes", None), "field modes must be a list of modes"),
        Variant(
            '"modes": ["fancy"]',
            run_field("modes", ["fancy"]),
            "field modes must be a list of modes",
        ),
        Variant('"status": 3', run_field("status", 3), "field status must be one of"),
        Variant('"phase": "train"', run_field("phase", "train"), "field phase must be one of"),
        Variant('"model": null', run_field("model", None), "field model must be a string"),
        Variant(
            '"layers": -1', run_field("layers", -1), "field layers must be a non-negative integer"
        ),
        Variant('"extra": []', run_field("extra", []), "field extra must be a JSON object"),
        Variant("no status", run_field("status", ...), "missing field(s) status"),
        Variant('"schema_version": "1"', run_field("schema_version", "1"), 'schema version "1"'),
        Variant(
            '"tp": NaN', run_text(lambda t: t.replace('"tp": 1', '"tp": NaN')), "NaN is not allowed"
        ),
    ],
    "non-UTF-8": [
        Variant(
            f"{name} with a Latin-1 byte",
            insert_bytes(name, b"m", b"\xe9"),
            f"{name} is not UTF-8 text",
        )
        for name in FILES
    ],
    "binary junk": [
        Variant(f"{name} is binary", write_bytes(name, BINARY), f"{name} holds binary data")
        for name in FILES
    ]
    + [
        Variant(
            "a NUL byte inside buckets.csv",
            insert_bytes("buckets.csv", b"per-bucket", b"\x00"),
            "buckets.csv holds binary data",
        )
    ],
    "huge integer": [
        Variant(
            "a 400-digit pool_bytes",
            set_cell("buckets.csv", 1, "pool_bytes", HUGE),
            "does not fit in 64 bits",
        ),
        Variant(
            "2**64 in device_used_delta_bytes",
            set_cell("buckets.csv", 2, "device_used_delta_bytes", str(2**64)),
            "does not fit in 64 bits",
        ),
        Variant(
            "a 400-digit summary figure",
            set_cell("summary.csv", 1, "device_used_bytes", HUGE),
            "does not fit in 64 bits",
        ),
        Variant(
            "a 400-digit tp",
            run_text(lambda t: t.replace('"tp": 1', f'"tp": {HUGE}')),
            "field tp must be a positive integer",
        ),
        Variant(
            "a 5000-digit number in run.json",
            run_text(lambda t: t.replace('"tp": 1', '"tp": ' + "9" * 5000)),
            "run.json is corrupt",
        ),
        # deeper than the JSON parser's stack, in a cell that a fast path might hand to it
        Variant(
            "a pool_bytes of 5000 nested brackets",
            set_cell("buckets.csv", 1, "pool_bytes", "[" * 5000),
            "is not a number",
        ),
    ],
    "huge field": [
        Variant(
            "a 200,000-character detail",
            set_cell("buckets.csv", 1, "detail", "x" * 200_000),
            "buckets.csv:2 is a line of more than 8192 bytes",
        ),
        Variant(
            "a 200,000-character summary field",
            set_cell("summary.csv", 1, "mode", "y" * 200_000),
            "summary.csv:2 is a line of more than 8192 bytes",
        ),
        Variant(
            "a 20 MB detail",
            set_cell("buckets.csv", 1, "detail", "z" * 20_000_000),
            "buckets.csv:2 is a line of more than 8192 bytes",
        ),
        Variant(
            "a 20 MB message in run.json",
            run_field("message", "\x1b[2J" + "m" * 20_000_000),
            "run.json is 2000",
        ),
    ],
    "duplicate row": [
        Variant(
            "a bucket row twice",
            duplicate_row("buckets.csv", 2),
            "repeats mode per-bucket rank 0 bucket 2048",
        ),
        Variant(
            "a summary row twice", duplicate_row("summary.csv", 2), "repeats mode shared rank 0"
        ),
        Variant(
            "a bucket twice in a report that did not complete",
            both(run_field("status", "interrupted"), duplicate_row("buckets.csv", 7)),
            "repeats mode shared rank 0 bucket 2048",
        ),
    ],
    "unterminated quote": [
        Variant(
            "buckets.csv",
            unterminated_quote("buckets.csv", 4, "status"),
            "a quoted field is never closed",
        ),
        Variant(
            "summary.csv",
            unterminated_quote("summary.csv", 1, "mode"),
            "a quoted field is never closed",
        ),
        Variant(
            "a bare carriage return in a field",
            set_cell("buckets.csv", 5, "detail", "a\rb"),
            "buckets.csv:6 is corrupt: a carriage return inside a field that is not quoted",
        ),
    ],
    "impossible value": [
        Variant(
            "negative pool_bytes", set_cell("buckets.csv", 1, "pool_bytes", "-5"), "is negative"
        ),
        Variant("bucket 0", set_cell("buckets.csv", 1, "bucket", "0"), "column bucket"),
        Variant(
            "a bucket over the cap", set_cell("buckets.csv", 1, "bucket", "2000000"), "out of range"
        ),
        Variant(
            "an absurd pool_bytes (2**55)",
            set_cell("buckets.csv", 1, "pool_bytes", str(2**55)),
            "out of range",
        ),
        Variant(
            "NaN warm-up time",
            set_cell("buckets.csv", 1, "warmup_ms", "nan"),
            "is not a finite number",
        ),
        Variant(
            "inf capture time",
            set_cell("buckets.csv", 1, "capture_ms", "inf"),
            "is not a finite number",
        ),
        Variant(
            "a byte figure written as a float",
            set_cell("buckets.csv", 1, "pool_bytes", "1.5"),
            "'1.5' is not an integer",
        ),
        Variant(
            "a number that is words",
            set_cell("buckets.csv", 1, "segments", "lots"),
            "'lots' is not a number",
        ),
        Variant(
            "unknown mode",
            set_cell("buckets.csv", 1, "mode", "fancy"),
            "column mode: unknown value 'fancy'",
        ),
        Variant(
            "unknown status",
            set_cell("buckets.csv", 1, "status", "melted"),
            "column status: unknown value 'melted'",
        ),
        Variant(
            "rank beyond tp",
            set_cell("buckets.csv", 1, "rank", "3"),
            "rank 3, but run.json says tp 1",
        ),
        Variant(
            "summary rank that is no rank",
            set_cell("summary.csv", 1, "rank", "seven"),
            "is not a rank of this run",
        ),
        Variant(
            "NaN summary ratio",
            set_cell("summary.csv", 1, "ratio_to_floor", "NaN"),
            "is not a finite number",
        ),
    ],
    "summary disagrees with buckets": [
        Variant(
            "summary device_used_bytes edited",
            set_cell("summary.csv", 2, "device_used_bytes", "1"),
            "but buckets.csv gives",
        ),
        Variant(
            "a summary row missing",
            lambda r: _write_rows(r / "summary.csv", _rows(r / "summary.csv")[:-1]),
            "summary.csv has no row for mode floor",
        ),
    ],
    "rows disagree with run.json": [
        Variant(
            "a bucket run.json does not list",
            set_cell("buckets.csv", 5, "bucket", "300"),
            "row 6, column bucket: bucket 300 is not in run.json's bucket list",
        ),
        Variant(
            "a bucket missing from a complete run",
            drop_row("buckets.csv", "shared", 512),
            "run.json says it is complete but has no row for shared bucket 512",
        ),
        Variant(
            "a bucket missing in the middle of a run that did not complete",
            both(run_field("status", "interrupted"), drop_row("buckets.csv", "per-bucket", 2048)),
            "per-bucket has no row for bucket 2048, which its capture order puts before",
        ),
        Variant(
            "a mode run.json does not list",
            run_field("modes", ["per-bucket", "shared"]),
            "row 12, column mode: mode floor, which run.json's modes (per-bucket, shared) do not "
            "list",
        ),
        Variant(
            "modes in another order than run.json's",
            run_field("modes", ["shared", "per-bucket", "floor"]),
            "row 7, column mode: a shared row after the per-bucket rows",
        ),
        Variant(
            "two orders swapped",
            swap_cells("buckets.csv", 1, 2, "order"),
            "row 2, column order: order 1 for per-bucket bucket 4096, but run.json's buckets "
            "captured "
            "largest-first put it at 0",
        ),
        Variant(
            "run.json says smallest-first, the rows largest-first",
            run_field("order", "smallest-first"),
            "row 2, column order: order 0 for per-bucket bucket 4096, but run.json's buckets "
            "captured "
            "smallest-first put it at 4",
        ),
        Variant(
            "the floor on a bucket other than the largest",
            set_cell("buckets.csv", 11, "bucket", "256"),
            "the floor mode captures the largest bucket alone (4096), not bucket 256",
        ),
        Variant(
            "a status in capitals",
            set_cell("buckets.csv", 1, "status", "OK"),
            "column status: unknown value 'OK'; expected one of ok, oom, error",
        ),
        Variant(
            "an inf replay diff on an ok bucket",
            set_cell("buckets.csv", 1, "replay_max_abs_diff", "inf"),
            "row 2, column replay_max_abs_diff: inf (the replay gave NaN), above the replay "
            "tolerance of 0",
        ),
        Variant(
            "a replay diff over the tolerance on an ok bucket",
            set_cell("buckets.csv", 5, "replay_max_abs_diff", "0.5"),
            "row 6, column replay_max_abs_diff: 0.5, above the replay tolerance of 0, on a bucket "
            "whose status "
            "is ok",
        ),
        Variant(
            "a negative infinite replay diff",
            set_cell("buckets.csv", 1, "replay_max_abs_diff", "-inf"),
            "column replay_max_abs_diff: -inf is negative",
        ),
        Variant(
            "a NaN replay diff",
            set_cell("buckets.csv", 1, "replay_max_abs_diff", "nan"),
            "column replay_max_abs_diff: 'nan' is not a finite number",
        ),
        Variant("a blank config_hash", run_field("config_hash", ""), "field config_hash must be"),
        Variant(
            "a config_hash with spaces",
            run_field("config_hash", "5d1b 7c0e"),
            "field config_hash must be",
        ),
        Variant("no config_hash", run_field("config_hash", ...), "field config_hash must be"),
        Variant("a blank model name", run_field("model", " "), "field model must be"),
        Variant("more ranks than the cap", run_field("tp", 9), "tensor-parallel ranks, at most 8"),
        Variant(
            "a summary row of a mode run.json does not list",
            set_cell("summary.csv", 1, "mode", "shared-largest"),
            "summary.csv: row 2, column mode: mode shared-largest, which run.json's modes",
        ),
        Variant(
            "sites.csv naming a bucket run.json does not list",
            write_text(
                "sites.csv",
                "mode,rank,bucket,kind,site,bytes,blocks\nfloor,0,300,slack,slack,0,0\n",
            ),
            "sites.csv: row 2, column bucket: bucket 300 is not in run.json's bucket list",
        ),
        Variant(
            "sites.csv naming a rank beyond tp",
            write_text(
                "sites.csv",
                "mode,rank,bucket,kind,site,bytes,blocks\nfloor,1,4096,slack,slack,0,0\n",
            ),
            "sites.csv: row 2, column rank: rank 1, but run.json says tp 1",
        ),
    ],
    "unbounded or irregular file": [
        Variant(
            "buckets.csv is a FIFO",
            fifo("buckets.csv"),
            "buckets.csv is not a regular file (a device, FIFO",
        ),
        Variant(
            "run.json is a FIFO", fifo("run.json"), "run.json is not a regular file (a device, FIFO"
        ),
        Variant(
            "buckets.csv links to /dev/zero",
            link_to("buckets.csv", "/dev/zero"),
            "buckets.csv is not a regular file (a device, FIFO",
        ),
        Variant(
            "summary.csv links to /dev/zero",
            link_to("summary.csv", "/dev/zero"),
            "summary.csv is not a regular file (a device, FIFO",
        ),
        Variant(
            "run.json links to /dev/urandom",
            link_to("run.json", "/dev/urandom"),
            "run.json is not a regular file (a device, FIFO",
        ),
        Variant(
            "a 175 MB buckets.csv",
            grow_sparse("buckets.csv", 175_000_000),
            "buckets.csv is 175000000 bytes, over the cap of 64 MiB",
        ),
        Variant(
            "buckets.csv one byte over its cap",
            grow_sparse("buckets.csv", 64 * 2**20 + 1),
            "over the cap of 64 MiB",
        ),
        Variant(
            "a 2 MiB run.json",
            grow_sparse("run.json", 2 * 2**20),
            "run.json is 2097152 bytes, over the cap of 1 MiB",
        ),
        Variant(
            "a 2 MiB summary.csv", grow_sparse("summary.csv", 2 * 2**20), "over the cap of 1 MiB"
        ),
        Variant(
            "a 100,000-byte line without a newline",
            append_text("buckets.csv", "9" * 100_000),
            "buckets.csv:13 is a line of more than 8192 bytes",
        ),
        Variant(
            "more bucket rows than run.json allows",
            append_rows("buckets.csv", 2, 10),
            "row 22 is one row more than 4 modes x run.json's 1 rank(s) x 5 bucket(s) allow (20 "
            "rows)",
        ),
        Variant(
            "run.json nested 40 deep inside extra",
            run_field("extra", {"deep": nested(40)}),
            "run.json is corrupt: nested more than 16 deep",
        ),
        Variant(
            "run.json nested 100,000 deep",
            write_text("run.json", "{" + '"a":[' * 100_000),
            "run.json is corrupt: nested more than 16 deep",
        ),
    ],
}

# Variants that must be read, their text made safe: every control character (ESC, BEL, CR, C1 ...)
# of a text field replaced, and a text field cut to 1000 characters
# (bcgprof.report.limits.MAX_TEXT_CHARS).
ESCAPES = "\x1b]0;owned\x07\x1b[2J\x1b[31m\r\x9b1m\x7f"
# a bare CR in an unquoted CSV field is malformed CSV (refused: CLASSES)
CSV_ESCAPES = ESCAPES.replace("\r", "")
SANITISED: dict[str, list[Variant]] = {
    "escape sequences and long text": [
        Variant("escapes in the model name", run_field("model", f"gpt{ESCAPES}-oss"), ""),
        Variant(
            "escapes in the message of an interrupted run",
            both(run_field("status", "interrupted"), run_field("message", f"stopped{ESCAPES}")),
            "",
        ),
        Variant(
            "escapes in the GPU name and extra",
            both(
                run_field("gpu_name", f"H200{ESCAPES}"),
                run_field("extra", {f"k{ESCAPES}": [f"v{ESCAPES}"]}),
            ),
            "",
        ),
        Variant(
            "escapes in a failed bucket's detail",
            both(
                run_field("status", "partial"),
                set_cell("buckets.csv", 5, "status", "oom"),
                set_cell("buckets.csv", 5, "detail", f"out of memory{CSV_ESCAPES}"),
            ),
            "",
        ),
        Variant(
            "a 900,000-character message",
            both(run_field("status", "failed"), run_field("message", "m" * 900_000)),
            "",
        ),
        Variant(
            "a 5,000-character detail",
            both(
                run_field("status", "partial"),
                set_cell("buckets.csv", 5, "status", "error"),
                set_cell("buckets.csv", 5, "detail", "d" * 5000),
            ),
            "",
        ),
    ],
}

ACCEPTED: dict[str, list[Variant]] = {
    "byte-order mark": [
        Variant(f"{name} with a UTF-8 BOM", prepend_bytes(name, b"\xef\xbb\xbf"), "")
        for name in FILES
    ],
}


def make(variant: Variant, source: Path, dest: Path) -> Path:
    """Copy the report at ``source`` to ``dest`` and damage it; return ``dest``."""
    shutil.copytree(source, dest)
    variant.mutate(dest)
    return dest


def main(out: str) -> None:
    root = Path(out)
    for group in (CLASSES, SANITISED, ACCEPTED):
        for cls, variants in group.items():
            for i, v in enumerate(variants):
                name = f"{cls}-{i}".replace(" ", "-")
                make(v, HERE / "baseline", root / name)
                print(f"{root / name}: {cls}: {v.name}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "corrupt-reports")
