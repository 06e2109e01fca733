"""Corrupted variants of a valid report, by class of damage (run it to write them all out:
python tests/data/corrupt_reports.py OUTDIR).

Each class in :data:`CLASSES` is a list of :class:`Variant`: a name, a mutation that
damages a copy of a valid report directory in place, and a fragment the one-line error
must contain. Every variant must be refused by every command that reads a report, with
exit code 2, one ``error:`` line and no traceback (tests/test_bad_input.py runs them all).
:data:`ACCEPTED` holds the variants that must read exactly like the original (a UTF-8
byte-order mark, as spreadsheet programs write it).
"""

from __future__ import annotations

import csv
import io
import json
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

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
        _write_rows(report / name, [row[:i] + row[i + 1:] for row in rows])
    return mutate


def set_cell(name: str, row: int, column: str, value: str):
    """Row 1 is the first data row."""
    def mutate(report: Path) -> None:
        rows = _rows(report / name)
        rows[row][rows[0].index(column)] = value
        _write_rows(report / name, rows)
    return mutate


def duplicate_row(name: str, row: int):
    def mutate(report: Path) -> None:
        rows = _rows(report / name)
        _write_rows(report / name, rows + [rows[row]])
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


def both(*mutations):
    def mutate(report: Path) -> None:
        for m in mutations:
            m(report)
    return mutate


def unterminated_quote(name: str, row: int, column: str):
    """Open a quote in one field and never close it: the csv module would swallow the rest of the file."""
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
        Variant("buckets.csv reduced to mode,bucket,order,status",
                keep_columns("buckets.csv", ["mode", "bucket", "order", "status"]),
                "buckets.csv is corrupt: missing column(s) segments"),
        Variant("buckets.csv without pool_bytes", drop_column("buckets.csv", "pool_bytes"),
                "missing column(s) pool_bytes"),
        Variant("buckets.csv without device_used_delta_bytes", drop_column("buckets.csv", "device_used_delta_bytes"),
                "missing column(s) device_used_delta_bytes"),
        Variant("summary.csv without device_used_bytes", drop_column("summary.csv", "device_used_bytes"),
                "summary.csv is corrupt: missing column(s) device_used_bytes"),
    ],
    "missing file": [Variant(f"no {name}", remove(name), f"{name} is missing") for name in FILES],
    "garbage file": [
        Variant("summary.csv is prose", write_text("summary.csv", "hello, world\n"),
                "summary.csv is corrupt: missing column(s) mode"),
        Variant("summary.csv is empty", write_text("summary.csv", ""), "summary.csv is empty"),
        Variant("buckets.csv is empty", write_text("buckets.csv", ""), "buckets.csv is empty"),
        Variant("run.json is not JSON", write_text("run.json", "{not json"), "run.json is corrupt"),
        Variant("run.json is a list", write_text("run.json", "[1, 2]\n"), "not a JSON object"),
        Variant("run.json nested too deep", write_text("run.json", "[" * 100_000), "run.json is corrupt"),
        Variant("buckets.csv is a directory", replace_with_directory("buckets.csv"),
                "buckets.csv is not a regular file"),
        Variant("a row with a value missing", drop_last_value("buckets.csv", 3), "values for 22 columns"),
        Variant("summary.csv garbage in an interrupted report",
                both(run_field("status", "interrupted"), write_text("summary.csv", "x\n1\n")),
                "summary.csv is corrupt: missing column(s) mode"),
    ],
    "wrong types in run.json": [
        Variant('"buckets": 5', run_field("buckets", 5), "field buckets must be a list of bucket sizes"),
        Variant('"buckets": [0]', run_field("buckets", [0]), "field buckets must be"),
        Variant('"buckets": ["4"]', run_field("buckets", ["4"]), "field buckets must be"),
        Variant('"tp": "2"', run_field("tp", "2"), "field tp must be a positive integer"),
        Variant('"tp": 0', run_field("tp", 0), "field tp must be a positive integer"),
        Variant('"tp": true', run_field("tp", True), "field tp must be a positive integer"),
        Variant('"modes": null', run_field("modes", None), "field modes must be a list of modes"),
        Variant('"modes": ["fancy"]', run_field("modes", ["fancy"]), "field modes must be a list of modes"),
        Variant('"status": 3', run_field("status", 3), "field status must be one of"),
        Variant('"phase": "train"', run_field("phase", "train"), "field phase must be one of"),
        Variant('"model": null', run_field("model", None), "field model must be a string"),
        Variant('"layers": -1', run_field("layers", -1), "field layers must be a non-negative integer"),
        Variant('"extra": []', run_field("extra", []), "field extra must be a JSON object"),
        Variant("no status", run_field("status", ...), "missing field(s) status"),
        Variant('"schema_version": "1"', run_field("schema_version", "1"), 'schema version "1"'),
        Variant('"tp": NaN', run_text(lambda t: t.replace('"tp": 1', '"tp": NaN')), "NaN is not allowed"),
    ],
    "non-UTF-8": [
        Variant(f"{name} with a Latin-1 byte", insert_bytes(name, b"m", b"\xe9"), f"{name} is not UTF-8 text")
        for name in FILES
    ],
    "binary junk": [
        Variant(f"{name} is binary", write_bytes(name, BINARY), f"{name} holds binary data") for name in FILES
    ] + [Variant("a NUL byte inside buckets.csv", insert_bytes("buckets.csv", b"per-bucket", b"\x00"),
                 "buckets.csv holds binary data")],
    "huge integer": [
        Variant("a 400-digit pool_bytes", set_cell("buckets.csv", 1, "pool_bytes", HUGE), "does not fit in 64 bits"),
        Variant("2**64 in device_used_delta_bytes", set_cell("buckets.csv", 2, "device_used_delta_bytes",
                                                               str(2 ** 64)), "does not fit in 64 bits"),
        Variant("a 400-digit summary figure", set_cell("summary.csv", 1, "device_used_bytes", HUGE),
                "does not fit in 64 bits"),
        Variant("a 400-digit tp", run_text(lambda t: t.replace('"tp": 1', f'"tp": {HUGE}')),
                "field tp must be a positive integer"),
        Variant("a 5000-digit number in run.json", run_text(lambda t: t.replace('"tp": 1', '"tp": ' + "9" * 5000)),
                "run.json is corrupt"),
    ],
    "huge field": [
        Variant("a 200,000-character detail", set_cell("buckets.csv", 1, "detail", "x" * 200_000),
                "field larger than field limit"),
        Variant("a 200,000-character summary field", set_cell("summary.csv", 1, "mode", "y" * 200_000),
                "field larger than field limit"),
    ],
    "duplicate row": [
        Variant("a bucket row twice", duplicate_row("buckets.csv", 2), "repeats mode per-bucket rank 0 bucket 2048"),
        Variant("a summary row twice", duplicate_row("summary.csv", 2), "repeats mode shared rank 0"),
        Variant("an order twice", set_cell("buckets.csv", 2, "order", "0"), "has order 0 twice"),
    ],
    "unterminated quote": [
        Variant("buckets.csv", unterminated_quote("buckets.csv", 4, "status"), "a quoted field is never closed"),
        Variant("summary.csv", unterminated_quote("summary.csv", 1, "mode"), "a quoted field is never closed"),
    ],
    "impossible value": [
        Variant("negative pool_bytes", set_cell("buckets.csv", 1, "pool_bytes", "-5"), "is negative"),
        Variant("bucket 0", set_cell("buckets.csv", 1, "bucket", "0"), "column bucket"),
        Variant("a bucket over the cap", set_cell("buckets.csv", 1, "bucket", "2000000"), "out of range"),
        Variant("an absurd pool_bytes (2**55)", set_cell("buckets.csv", 1, "pool_bytes", str(2 ** 55)),
                "out of range"),
        Variant("NaN warm-up time", set_cell("buckets.csv", 1, "warmup_ms", "nan"), "is not a finite number"),
        Variant("inf capture time", set_cell("buckets.csv", 1, "capture_ms", "inf"), "is not a finite number"),
        Variant("a byte figure written as a float", set_cell("buckets.csv", 1, "pool_bytes", "1.5"),
                "'1.5' is not an integer"),
        Variant("a number that is words", set_cell("buckets.csv", 1, "segments", "lots"), "'lots' is not a number"),
        Variant("unknown mode", set_cell("buckets.csv", 1, "mode", "fancy"), "column mode: unknown value 'fancy'"),
        Variant("unknown status", set_cell("buckets.csv", 1, "status", "melted"),
                "column status: unknown value 'melted'"),
        Variant("rank beyond tp", set_cell("buckets.csv", 1, "rank", "3"), "rank 3, but run.json says tp 1"),
        Variant("summary rank that is no rank", set_cell("summary.csv", 1, "rank", "seven"),
                "is not a rank of this run"),
        Variant("NaN summary ratio", set_cell("summary.csv", 1, "ratio_to_floor", "NaN"), "is not a finite number"),
    ],
    "summary disagrees with buckets": [
        Variant("summary device_used_bytes edited", set_cell("summary.csv", 2, "device_used_bytes", "1"),
                "but buckets.csv gives"),
        Variant("a summary row missing", lambda r: _write_rows(r / "summary.csv", _rows(r / "summary.csv")[:-1]),
                "summary.csv has no row for mode floor"),
    ],
}

ACCEPTED: dict[str, list[Variant]] = {
    "byte-order mark": [Variant(f"{name} with a UTF-8 BOM", prepend_bytes(name, b"\xef\xbb\xbf"), "")
                        for name in FILES],
}


def make(variant: Variant, source: Path, dest: Path) -> Path:
    """Copy the report at ``source`` to ``dest`` and damage it; return ``dest``."""
    shutil.copytree(source, dest)
    variant.mutate(dest)
    return dest


def main(out: str) -> None:
    root = Path(out)
    for group in (CLASSES, ACCEPTED):
        for cls, variants in group.items():
            for i, v in enumerate(variants):
                name = f"{cls}-{i}".replace(" ", "-")
                make(v, HERE / "baseline", root / name)
                print(f"{root / name}: {cls}: {v.name}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "corrupt-reports")
