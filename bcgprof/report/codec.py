"""One CSV field to and from its value, by the column's :class:`~bcgprof.report.schema.Rule`.

Integers stay integers (bytes never pass through a float); a float is written with ``repr`` so
it reads back to the same value; an empty field is ``None``.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import fields
from typing import Any, Optional

from bcgprof.errors import ReportError
from bcgprof.report.limits import INT64
from bcgprof.report.schema import Rule

FIX = "restore the file or re-run the capture that wrote it"


def shorten(raw: str, limit: int = 40) -> str:
    """``raw`` quoted for a message, cut to ``limit`` characters."""
    text = repr(raw)
    return text if len(text) <= limit else f"{text[:limit - 4]}...' ({len(raw)} characters)"


def json_shown(value: Any, limit: int = 40) -> str:
    """A JSON value for a message, cut to ``limit`` characters."""
    text = json.dumps(value)
    return text if len(text) <= limit else f"{text[:limit - 3]}... ({len(text)} characters)"


def encode_value(value: Any) -> str:
    """A field's CSV text: empty for None, ``repr`` for floats (exact round trip), else ``str``."""
    if value is None:
        return ""
    if isinstance(value, float):
        return repr(value)
    return str(value)


_INT_TEXT = re.compile(r"[+-]?[0-9]+")
_FLOAT_TEXT = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|[+-]?inf(?:inity)?|[+-]?nan",
                         re.IGNORECASE)


def format_number(x: Any) -> str:
    return str(int(x)) if isinstance(x, (int, float)) and float(x).is_integer() else str(x)


def decode_field(raw: str, rule: Rule, where: str) -> Any:
    """One CSV field -> its value, or a ReportError naming ``where`` (file, row and column)."""
    if rule.kind is str:
        if rule.choices and raw not in rule.choices:
            raise ReportError(f"{where}: unknown value {shorten(raw)}; expected one of {', '.join(rule.choices)}; "
                              f"{FIX}")
        return raw
    if raw == "":
        if rule.optional:
            return None
        raise ReportError(f"{where}: empty value where a number is required; {FIX}")
    value: Any
    if rule.kind is int:
        if not _INT_TEXT.fullmatch(raw):
            what = "an integer" if len(raw) <= 64 and _FLOAT_TEXT.fullmatch(raw) else "a number"
            raise ReportError(f"{where}: {shorten(raw)} is not {what}; {FIX}")
        digits = raw.lstrip("+-").lstrip("0")
        if len(digits) > 19 or not -INT64 <= int(raw) < INT64:
            raise ReportError(f"{where}: {shorten(raw)} does not fit in 64 bits; {FIX}")
        value = int(raw)
    else:
        if len(raw) > 64 or not _FLOAT_TEXT.fullmatch(raw):
            raise ReportError(f"{where}: {shorten(raw)} is not a number; {FIX}")
        value = float(raw)
        if math.isnan(value) or (math.isinf(value) and not rule.inf):
            raise ReportError(f"{where}: {raw!r} is not a finite number; {FIX}")
    if (rule.lo is not None and value < rule.lo) or (rule.hi is not None and value > rule.hi):
        if rule.lo is not None and rule.lo >= 0 and value < 0:
            raise ReportError(f"{where}: {raw} is negative, which this column cannot be; {FIX}")
        span = (f"{format_number(rule.lo)} to {format_number(rule.hi)}" if rule.hi is not None
                else f"at least {format_number(rule.lo)}")
        raise ReportError(f"{where}: {shorten(raw)} is out of range (expected {span}); {FIX}")
    return value


def records_to_csv(records: Iterable[Any], cls: type, columns: Optional[Sequence[str]] = None) -> str:
    """CSV text of ``records``: every field of ``cls`` as a column, or only ``columns``."""
    names = [f.name for f in fields(cls) if columns is None or f.name in columns]
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(names)
    for r in records:
        writer.writerow([encode_value(getattr(r, n)) for n in names])
    return buf.getvalue()
