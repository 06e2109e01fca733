"""Views as JSON: the view's raw data, bytes as integers, strict JSON.

Every document parses under a strict parser (RFC 8259): NaN and infinities, which JSON has no
word for, are written as ``null`` (a replay diff of ``inf``, a ratio without a floor); integers
stay integers, so byte figures equal those of the CSV files exactly.

Layout: objects and lists indented by two spaces, except that an object or list holding no
object or list (a bucket row, a bucket list) takes one line; a report of 100,000 rows is
then 100,000 lines, written by the json module's C encoder.
"""

from __future__ import annotations

import json
import math
from typing import Any

from bcgprof.render.model import View

# no indent: the C encoder; ensure_ascii: control characters escaped, never sent raw to a terminal
_ENCODER = json.JSONEncoder(allow_nan=False, separators=(", ", ": "), ensure_ascii=True)


def strict_json(value: Any) -> Any:
    """``value`` with every non-finite float (nested in dicts, lists and tuples) replaced by
    None."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: strict_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [strict_json(v) for v in value]
    return value


def _scalar(value: Any) -> str:
    try:
        return _ENCODER.encode(value)
    except ValueError:  # NaN or an infinity somewhere in it
        return _ENCODER.encode(strict_json(value))


_SCALAR_TYPES = frozenset((str, int, float, bool, type(None)))


def _flat(items: Any) -> bool:
    """Whether no item is a dict, list or tuple (``items``: a list or a dict's values, read twice
    at most)."""
    if _SCALAR_TYPES.issuperset(map(type, items)):  # the common case, at C speed (a row of 100,000)
        return True
    return not any(isinstance(v, (dict, list, tuple)) for v in items)


def _dump(value: Any, depth: int) -> str:
    if isinstance(value, dict) and value and not _flat(value.values()):
        pad = "  " * (depth + 1)
        inner = ",\n".join(
            f"{pad}{_ENCODER.encode(str(k))}: {_dump(v, depth + 1)}" for k, v in value.items()
        )
        return "{\n" + inner + "\n" + "  " * depth + "}"
    if isinstance(value, (list, tuple)) and value and not _flat(value):
        pad = "  " * (depth + 1)
        return (
            "[\n" + ",\n".join(pad + _dump(v, depth + 1) for v in value) + "\n" + "  " * depth + "]"
        )
    return _scalar(value)


def render_json(view: View) -> str:
    return _dump(view.json_data(), 0) + "\n"
