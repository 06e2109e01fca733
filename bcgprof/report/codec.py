"""One CSV field to and from its value, by the column's :class:`~bcgprof.report.schema.Rule`.

Integers stay integers (bytes never pass through a float); a float is written with ``repr`` so
it reads back to the same value; an empty field is ``None``. Text is cleaned both ways by
:func:`clean_text` (control characters replaced, cut to :data:`MAX_TEXT_CHARS`), so what is
written reads back unchanged and nothing read can drive a terminal.

:func:`decode_field` checks one field and names it in its error; :func:`decode_column`
decodes a whole column at C speed and answers ``None`` when any field needs that closer look,
so the reader checks a column at once and a row only when something is wrong with it.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import fields
from operator import attrgetter
from typing import Any, Optional

from bcgprof.errors import ReportError
from bcgprof.report.limits import INT64, MAX_TEXT_CHARS
from bcgprof.report.schema import Rule
from bcgprof.text import CONTROL, printable

FIX = "restore the file or re-run the capture that wrote it"


def clean_text(text: str) -> str:
    """``text`` without control characters, at most :data:`MAX_TEXT_CHARS` long (an ellipsis marks a
    cut).

    Tabs and newlines become spaces, other control characters U+FFFD (see
    :func:`bcgprof.text.printable`, the sanitiser for any text read from a file).
    """
    if len(text) <= MAX_TEXT_CHARS and not CONTROL.search(text):
        return text
    return printable(text, MAX_TEXT_CHARS)


def clean_json(value: Any) -> Any:
    """A JSON value with every string (keys too) passed through :func:`clean_text`, and NaN and
    infinities, which no strict JSON parser reads, as None (null)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, list):
        return [clean_json(v) for v in value]
    if isinstance(value, dict):
        return {clean_text(str(k)): clean_json(v) for k, v in value.items()}
    return value


def shorten(raw: str, limit: int = 40) -> str:
    """``raw`` quoted for a message (``repr``: control characters escaped), cut to ``limit``
    characters."""
    text = repr(raw[: 4 * limit])
    return text if len(text) <= limit else f"{text[: limit - 4]}...' ({len(raw)} characters)"


def json_shown(value: Any, limit: int = 40) -> str:
    """A JSON value for a message (non-ASCII and control characters escaped), cut to ``limit``
    characters."""
    text = json.dumps(value)
    return text if len(text) <= limit else f"{text[: limit - 3]}... ({len(text)} characters)"


def encode_value(value: Any) -> str:
    """A field's CSV text: empty for None, ``repr`` for floats (exact round trip), text cleaned,
    else ``str``."""
    if value is None:
        return ""
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, str):
        return clean_text(str(value))
    return str(value)


_INT_TEXT = re.compile(r"[+-]?[0-9]+")
_FLOAT_TEXT = re.compile(
    r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|[+-]?inf(?:inity)?|[+-]?nan",
    re.IGNORECASE,
)


def format_number(x: Any) -> str:
    return str(int(x)) if isinstance(x, (int, float)) and float(x).is_integer() else str(x)


def decode_field(raw: str, rule: Rule, where: str) -> Any:
    """One CSV field -> its value, or a ReportError naming ``where`` (file, row and column)."""
    if rule.kind is str:
        if rule.choices and raw not in rule.choices:
            raise ReportError(
                f"{where}: unknown value {shorten(raw)}; expected one of "
                f"{', '.join(rule.choices)}; "
                f"{FIX}"
            )
        return clean_text(raw)
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
        span = (
            f"{format_number(rule.lo)} to {format_number(rule.hi)}"
            if rule.hi is not None
            else f"at least {format_number(rule.lo)}"
        )
        raise ReportError(f"{where}: {shorten(raw)} is out of range (expected {span}); {FIX}")
    return value


# A whole column's non-empty fields joined by commas (no field of a number column can hold one):
# plain integers of at most 19 digits, plain decimal floats of at most 63 characters.
_INT = r"[+-]?[0-9]{1,19}"
_FLOAT = r"[+-]?(?:[0-9]{1,28}\.?[0-9]{0,28}|\.[0-9]{1,28})(?:[eE][+-]?[0-9]{1,3})?"
_COLUMN = {
    (int, False): re.compile(f"{_INT}(?:,{_INT})*"),
    (float, False): re.compile(f"{_FLOAT}(?:,{_FLOAT})*"),
    (float, True): re.compile(
        f"(?:{_FLOAT}|inf)(?:,(?:{_FLOAT}|inf))*"
    ),  # inf: a replay that gave NaN
}


_JSON_SPACE = (" ", "\t", "\n", "\r")


def _bounded(rule: Rule) -> bool:
    """Whether a column's range keeps its integers within 64 bits (so within 19 digits)."""
    return rule.lo is not None and rule.hi is not None and rule.lo >= -INT64 and rule.hi < INT64


def _json_ints(joined: str, n: int) -> Optional[list]:
    """The ``n`` comma-separated fields of ``joined`` as integers, when each is a JSON integer (an
    optional minus and digits without leading zeros: a subset of what :data:`_INT` and ``int`` read,
    to the same values), parsed by the json module's C scanner; None when any is not (the caller
    then reads them with the regular expression and ``int``). Text holding no JSON whitespace whose
    parse is a flat list of ``n`` ints is exactly ``n`` integer tokens separated by commas."""
    if any(c in joined for c in _JSON_SPACE):
        return None
    try:
        values = json.loads(f"[{joined}]")
    except (ValueError, RecursionError):
        # a sign, a leading zero, deep brackets: what JSON does not read
        return None
    if len(values) != n or not _INT_TYPE.issuperset(map(type, values)):
        return None
    return values


_INT_TYPE = frozenset((int,))


def decode_column(raw: Sequence[str], rule: Rule) -> Optional[list]:
    """Every field of a column, decoded as :func:`decode_field` would; None when any field needs
    :func:`decode_field` to say what is wrong with it (or to decide: this never accepts more)."""
    if not raw:
        return []
    if rule.kind is str:
        if rule.choices:
            return list(raw) if set(raw) <= set(rule.choices) else None
        if max(map(len, raw)) <= MAX_TEXT_CHARS and not CONTROL.search("".join(raw)):
            return list(raw)
        return [clean_text(s) for s in raw]
    # an empty field of a required column fails below
    filled = list(filter(None, raw)) if rule.optional else raw
    if not filled:
        return [None] * len(raw)
    joined = ",".join(filled)
    present: Optional[list] = (
        _json_ints(joined, len(filled)) if rule.kind is int and _bounded(rule) else None
    )
    if present is None:
        if not _COLUMN[(rule.kind, rule.inf)].fullmatch(joined):
            return None
        present = list(map(int if rule.kind is int else float, filled))
    low, high = min(present), max(present)
    if (rule.lo is not None and low < rule.lo) or (rule.hi is not None and high > rule.hi):
        return None
    if rule.kind is float and not rule.inf and (math.isinf(low) or math.isinf(high)):
        return None  # 1e400 reads as inf
    if len(filled) == len(raw):
        return present
    values = iter(present)
    return [next(values) if s else None for s in raw]


def records_to_csv(
    records: Iterable[Any], cls: Any, columns: Optional[Sequence[str]] = None
) -> str:
    """CSV text of ``records``: every field of ``cls`` as a column, or only ``columns``.

    Each field as :func:`encode_value` writes it; the csv module's own conversion gives the same
    text (None empty, a float its ``repr``, an int its digits), so only text columns are looked at.
    """
    records = list(records)
    names = [f.name for f in fields(cls) if columns is None or f.name in columns]
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(names)
    if not names:
        writer.writerows([] for _ in records)
        return buf.getvalue()
    texts = [
        i for i, f in enumerate(f for f in fields(cls) if f.name in names) if f.type in (str, "str")
    ]
    get = attrgetter(*names)
    rows: Iterable[Any] = map(get, records) if len(names) > 1 else ((get(r),) for r in records)
    if texts and not _clean_already(records, [names[i] for i in texts]):
        rows = ([encode_value(v) for v in row] for row in rows)
    writer.writerows(rows)
    return buf.getvalue()


def _clean_already(records: list, names: list[str]) -> bool:
    """Whether every value of these text fields is a str that :func:`clean_text` leaves as it is."""
    for name in names:
        values = [getattr(r, name) for r in records]
        if not all(isinstance(v, str) for v in values):
            return False
        if values and (max(map(len, values)) > MAX_TEXT_CHARS or CONTROL.search("".join(values))):
            return False
    return True
