"""Reading a report directory, every file checked: :func:`read_report`.

A value of the wrong type or out of range, a malformed file, a summary that disagrees with
the bucket rows of a complete report: each is a :class:`~bcgprof.errors.ReportError` that
names the file, the row and the column, and says what to do.
"""

from __future__ import annotations

import csv
import io
import json
import math
from dataclasses import fields
from pathlib import Path
from typing import Any

from bcgprof.errors import ReportError
from bcgprof.options import MODES, RUN_STATUSES
from bcgprof.report.codec import FIX, decode_field, encode_value, json_shown, shorten
from bcgprof.report.limits import MAX_FILE_BYTES, MAX_TP
from bcgprof.report.schema import (
    BUCKET_RULES,
    REQUIRED,
    RULES,
    SCHEMA_VERSION,
    SITES_FILE,
    SUMMARY_FROM_FILE,
    SUMMARY_RECOMPUTED,
    SUMMARY_RULES,
    BucketRecord,
    Report,
    RunInfo,
    SiteRecord,
    SummaryRecord,
)
from bcgprof.report.summaries import summarize


def read_report_text(path: Path) -> str:
    """A report file's text: UTF-8 (a leading byte-order mark is dropped), no binary bytes, a sane size."""
    path = Path(path)
    try:
        size = path.stat().st_size
        if not path.is_file():
            raise ReportError(f"{path} is not a regular file; {FIX}")
        if size > MAX_FILE_BYTES:
            raise ReportError(f"{path} is {size} bytes, larger than any report file ({MAX_FILE_BYTES}); "
                              f"is it the right file? {FIX}")
        data = path.read_bytes()
    except FileNotFoundError:
        raise ReportError(f"{path} is missing; a report directory holds run.json, buckets.csv and summary.csv: "
                          "is this a bcgprof report directory?") from None
    except OSError as e:
        raise ReportError(f"cannot read {path}: {e.strerror or e}") from None
    nul = data.find(b"\x00")
    if nul >= 0:
        raise ReportError(f"{path} holds binary data (a NUL byte at offset {nul}), not text; {FIX}")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ReportError(f"{path} is not UTF-8 text (byte 0x{data[e.start]:02x} at offset {e.start}); {FIX}") from None
    return text[1:] if text.startswith("\ufeff") else text


def _parse_csv(path: Path, text: str) -> tuple[list[str], list[tuple[int, list[str]]]]:
    """Header and (line number, fields) of every non-empty row; a malformed file is a ReportError."""
    reader = csv.reader(io.StringIO(text), strict=True)
    rows = []
    try:
        for row in reader:
            rows.append((reader.line_num, row))
    except csv.Error as e:
        line = reader.line_num
        if "unexpected end of data" in str(e):
            raise ReportError(f"{path}:{line} is corrupt: a quoted field is never closed; {FIX}") from None
        raise ReportError(f"{path}:{line} is corrupt: {e}; {FIX}") from None
    if not rows:
        raise ReportError(f"{path} is empty; {FIX}")
    (_, header), body = rows[0], rows[1:]
    header = [h.strip() for h in header]
    return header, [(line, row) for line, row in body if row]


def read_csv_records(path: Path, cls) -> list:
    """Read a CSV written from ``cls``, checking every column it knows.

    Extra columns are ignored; a missing contract column, a value of the wrong type or
    out of range, or a malformed file is a :class:`ReportError` naming file, row and column.
    """
    path = Path(path)
    return [record for _, record in _read_rows(path, cls)]


def _read_rows(path: Path, cls) -> list[tuple[int, Any]]:
    header, body = _parse_csv(path, read_report_text(path))
    rules = RULES[cls]
    seen = set()
    for name in header:
        if name in rules and name in seen:
            raise ReportError(f"{path} is corrupt: column {name} appears twice in the header; {FIX}")
        seen.add(name)
    missing = [n for n in REQUIRED[cls] if n not in header]
    if missing:
        raise ReportError(f"{path} is corrupt: missing column(s) {', '.join(missing)}; {FIX}")
    out = []
    for line, row in body:
        if len(row) != len(header):
            raise ReportError(f"{path}:{line} is corrupt: {len(row)} values for {len(header)} columns; {FIX}")
        values = {}
        for name, raw in zip(header, row, strict=True):
            if name in rules:
                values[name] = decode_field(raw, rules[name], f"{path}: row {line}, column {name}")
        out.append((line, cls(**values)))
    return out




def _reject_constant(name: str):
    raise ValueError(f"{name} is not allowed in a report")


# run.json fields: type, and whether a report must have it (the others take RunInfo's defaults)
_RUN_REQUIRED = ("schema_version", "model", "phase", "buckets", "modes", "tp", "status")


def _check_run(path: Path, data: dict) -> RunInfo:
    from bcgprof.buckets import MAX_BUCKET_SIZE, MAX_BUCKETS
    from bcgprof.options import GRAPH_KINDS, ORDERS, PHASES

    missing = [k for k in _RUN_REQUIRED if k not in data]
    if missing:
        raise ReportError(f"{path} is corrupt: missing field(s) {', '.join(missing)}; {FIX}")

    def bad(name: str, what: str) -> ReportError:
        value = data[name]
        shown = json_shown(value)
        return ReportError(f"{path}: field {name} must be {what}, got {shown}; {FIX}")

    def is_int(v) -> bool:
        return isinstance(v, int) and not isinstance(v, bool)

    choices = {"phase": PHASES, "status": RUN_STATUSES, "graph": GRAPH_KINDS, "order": ORDERS}

    values = {}
    for f in fields(RunInfo):
        name = f.name
        if name not in data:
            continue
        value = data[name]
        if name == "schema_version":
            pass  # checked by read_run_info
        elif name == "buckets":
            if not isinstance(value, list) or not all(is_int(b) and 1 <= b <= MAX_BUCKET_SIZE for b in value):
                raise bad(name, f"a list of bucket sizes (integers from 1 to {MAX_BUCKET_SIZE})")
            if len(value) > MAX_BUCKETS:
                raise bad(name, f"a list of at most {MAX_BUCKETS} buckets")
            if len(set(value)) != len(value):
                raise bad(name, "a list of distinct bucket sizes")
        elif name == "modes":
            if not isinstance(value, list) or not all(isinstance(m, str) and m in MODES for m in value):
                raise bad(name, f"a list of modes ({', '.join(MODES)})")
            if len(set(value)) != len(value):
                raise bad(name, "a list of distinct modes")
        elif name == "tp":
            if not is_int(value) or not 1 <= value <= MAX_TP:
                raise bad(name, f"a positive integer (tensor-parallel ranks, at most {MAX_TP})")
        elif name in ("layers", "hidden_size"):
            if not is_int(value) or not 0 <= value < 2 ** 31:
                raise bad(name, "a non-negative integer")
        elif name in choices:
            if value not in choices[name]:
                raise bad(name, f"one of {', '.join(choices[name])}")
        elif name == "in_process":
            if not isinstance(value, bool):
                raise bad(name, "true or false")
        elif name == "extra":
            if not isinstance(value, dict):
                raise bad(name, "a JSON object")
        elif not isinstance(value, str):
            raise bad(name, "a string")
        values[name] = value
    values["schema_version"] = data["schema_version"]
    return RunInfo(**values)


def read_run_info(path: Path) -> RunInfo:
    path = Path(path)
    text = read_report_text(path)
    try:
        data = json.loads(text, parse_constant=_reject_constant)
    except json.JSONDecodeError as e:
        raise ReportError(f"{path} is corrupt (line {e.lineno}: {e.msg}); {FIX}") from None
    except (ValueError, RecursionError) as e:
        raise ReportError(f"{path} is corrupt ({str(e).splitlines()[0][:120]}); {FIX}") from None
    if not isinstance(data, dict):
        raise ReportError(f"{path} is corrupt: not a JSON object; {FIX}")
    version = data.get("schema_version")
    if version != SCHEMA_VERSION or isinstance(version, bool):
        shown = json_shown(version) if version is not None else "none"
        raise ReportError(
            f"{path} has report schema version {shown}; this bcgprof reads version {SCHEMA_VERSION}: "
            "read it with the bcgprof that wrote it"
        )
    return _check_run(path, data)


def _check_buckets(path: Path, run: RunInfo, rows: list[tuple[int, BucketRecord]]) -> None:
    where = path / "buckets.csv"
    seen: dict[tuple, int] = {}
    orders: dict[tuple, int] = {}
    for line, r in rows:
        if r.rank >= run.tp:
            raise ReportError(f"{where}: row {line}, column rank: rank {r.rank}, but run.json says tp {run.tp}; {FIX}")
        key = (r.mode, r.rank, r.bucket)
        if key in seen:
            raise ReportError(f"{where}: row {line} repeats mode {r.mode} rank {r.rank} bucket {r.bucket} "
                              f"(first at row {seen[key]}); each bucket is captured once per mode: {FIX}")
        seen[key] = line
        okey = (r.mode, r.rank, r.order)
        if okey in orders:
            raise ReportError(f"{where}: row {line}, column order: mode {r.mode} rank {r.rank} has order {r.order} "
                              f"twice (first at row {orders[okey]}); {FIX}")
        orders[okey] = line


def _check_summary(path: Path, run: RunInfo, rows: list[tuple[int, SummaryRecord]], header: list[str],
                   computed: list[SummaryRecord]) -> None:
    """summary.csv is well formed; in a complete report it must say what buckets.csv gives."""
    where = path / "summary.csv"
    seen: dict[tuple, int] = {}
    for line, s in rows:
        if not (s.rank.isdigit() and len(s.rank) <= 6 and int(s.rank) < run.tp) and s.rank not in ("max", "sum"):
            raise ReportError(f"{where}: row {line}, column rank: {shorten(s.rank)} is not a rank of this run "
                              f"(0 to {run.tp - 1}, max or sum); {FIX}")
        if s.rank.isdigit():
            s.rank = str(int(s.rank))
        key = (s.mode, s.rank)
        if key in seen:
            raise ReportError(f"{where}: row {line} repeats mode {s.mode} rank {s.rank} (first at row {seen[key]}); "
                              f"{FIX}")
        seen[key] = line
    if run.status != "complete":
        return
    fix = ("summary.csv and buckets.csv of a complete report must agree: restore both from the capture, "
           "or re-run it")
    mine = {(s.mode, s.rank): (line, s) for line, s in rows}
    for s in computed:
        if (s.mode, s.rank) not in mine:
            raise ReportError(f"{where} has no row for mode {s.mode} rank {s.rank}, which buckets.csv has; {fix}")
    wanted = {(s.mode, s.rank): s for s in computed}
    names = [f.name for f in fields(SummaryRecord) if f.name in header]
    for line, s in rows:
        other = wanted.get((s.mode, s.rank))
        if other is None:
            raise ReportError(f"{where}: row {line} (mode {s.mode} rank {s.rank}) has no rows in buckets.csv; {fix}")
        for name in names:
            a, b = getattr(s, name), getattr(other, name)
            same = a == b or (isinstance(a, float) and isinstance(b, float)
                              and math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9))
            if not same:
                raise ReportError(f"{where}: row {line}, column {name}: {encode_value(a) or 'empty'}, but buckets.csv "
                                  f"gives {encode_value(b) or 'empty'}; {fix}")


def read_report(path: str | Path) -> Report:
    """Read and check a report directory (all three files are required).

    Every column and field the views, compare and the gate use is checked. summary.csv must be
    well formed; in a complete report its rows must agree with buckets.csv (else a
    ReportError naming the first disagreement). In a report that did not complete, whose
    writer may have stopped between files, the summary is recomputed from buckets.csv and
    :attr:`Report.summary_source` says so.
    """
    path = Path(path)
    if not path.is_dir():
        raise ReportError(f"report {path} does not exist or is not a directory")
    run = read_run_info(path / "run.json")
    bucket_header, _ = _parse_csv(path / "buckets.csv", read_report_text(path / "buckets.csv"))
    bucket_rows = _read_rows(path / "buckets.csv", BucketRecord)
    _check_buckets(path, run, bucket_rows)
    summary_header, _ = _parse_csv(path / "summary.csv", read_report_text(path / "summary.csv"))
    summary_rows = _read_rows(path / "summary.csv", SummaryRecord)
    buckets = [r for _, r in bucket_rows]
    computed = summarize(buckets)
    _check_summary(path, run, summary_rows, summary_header, computed)
    source = SUMMARY_FROM_FILE if run.status == "complete" else SUMMARY_RECOMPUTED
    sites = read_csv_records(path / SITES_FILE, SiteRecord) if (path / SITES_FILE).exists() else []
    columns = {"buckets": [c for c in bucket_header if c in BUCKET_RULES],
               "summary": [c for c in summary_header if c in SUMMARY_RULES]}
    return Report(path, run, buckets, computed, summary_source=source, sites=sites, columns=columns)


