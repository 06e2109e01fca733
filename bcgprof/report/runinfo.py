"""run.json, read and checked: :func:`read_run_info`.

Every field is checked for its type and range (lists of distinct buckets and modes within
their caps, tp within :data:`~bcgprof.report.limits.MAX_TP`, choice fields from
:mod:`bcgprof.vocab`, an old word renamed there read as its word now, a ``config_hash`` (a token
of at most 64 letters, digits, ``.``, ``_`` or ``-``: capture writes 16
hexadecimal digits), a model name); every string,
``extra``'s included, is cleaned (:func:`~bcgprof.report.codec.clean_text`). Nesting deeper
than :data:`~bcgprof.report.limits.MAX_JSON_DEPTH` is refused before the JSON is parsed.
"""

from __future__ import annotations

import json
import re
from dataclasses import fields
from pathlib import Path
from typing import Any

from bcgprof.buckets import MAX_BUCKET_SIZE, MAX_BUCKETS
from bcgprof.errors import ReportError
from bcgprof.options import (
    EXECUTABLES,
    EXPERTS,
    GRAPH_KINDS,
    MOE_BACKENDS,
    ORDERS,
    PHASES,
    REPORT_MODES,
    RUN_STATUSES,
    SOURCES,
    WEIGHTS,
)
from bcgprof.report.codec import FIX, clean_json, clean_text, json_shown
from bcgprof.report.files import read_small_text
from bcgprof.report.limits import MAX_JSON_DEPTH, MAX_RUN_BYTES, MAX_TP
from bcgprof.report.schema import (
    PHASED_RUN_FIELDS,
    PHASED_SCHEMA_VERSION,
    SCHEMA_VERSIONS,
    RunInfo,
)
from bcgprof.vocab import Source, Weights, current

# run.json fields a report must have (the others take RunInfo's defaults)
RUN_REQUIRED = ("schema_version", "model", "phase", "buckets", "modes", "tp", "status")
# bcgprof.spec.config_hash writes 16 hexadecimal digits; any short token without spaces is taken
CONFIG_HASH = re.compile(r"[0-9A-Za-z._-]{1,64}")
_CHOICES = {
    "phase": PHASES,
    "status": RUN_STATUSES,
    "graph": GRAPH_KINDS,
    "order": ORDERS,
    "weights": WEIGHTS,
    "experts": EXPERTS,
    "source": SOURCES,
    "executables": EXECUTABLES,
    "moe": MOE_BACKENDS,
}
_STRINGS = re.compile(r'"(?:[^"\\]|\\.)*"')
_BRACKETS = re.compile(r"[\[\]{}]")


def _reject_constant(name: str) -> None:
    raise ValueError(f"{name} is not allowed in a report")


def check_depth(path: Path, text: str, limit: int = MAX_JSON_DEPTH) -> None:
    """Refuse JSON nested deeper than ``limit`` (counted outside strings), before it is parsed."""
    depth = 0
    for m in _BRACKETS.finditer(_STRINGS.sub('""', text)):
        depth += 1 if m.group() in "[{" else -1
        if depth > limit:
            raise ReportError(
                f"{path} is corrupt: nested more than {limit} deep (run.json is 3 deep); {FIX}"
            )


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def check_run(path: Path, data: dict) -> RunInfo:
    """The :class:`RunInfo` of run.json's parsed ``data``, every field checked."""
    missing = [k for k in RUN_REQUIRED if k not in data]
    if missing:
        raise ReportError(f"{path} is corrupt: missing field(s) {', '.join(missing)}; {FIX}")

    def bad(name: str, what: str) -> ReportError:
        return ReportError(
            f"{path}: field {name} must be {what}, got {json_shown(data[name])}; {FIX}"
        )

    values: dict[str, Any] = {}
    for f in fields(RunInfo):
        name = f.name
        if name not in data:
            continue
        value = data[name]
        if name == "schema_version":
            pass  # checked by read_run_info
        elif name == "buckets":
            if not isinstance(value, list) or not all(
                _is_int(b) and 1 <= b <= MAX_BUCKET_SIZE for b in value
            ):
                raise bad(name, f"a list of bucket sizes (integers from 1 to {MAX_BUCKET_SIZE})")
            if len(value) > MAX_BUCKETS:
                raise bad(name, f"a list of at most {MAX_BUCKETS} buckets")
            if len(set(value)) != len(value):
                raise bad(name, "a list of distinct bucket sizes")
        elif name == "modes":
            if not isinstance(value, list) or not all(
                isinstance(m, str) and m in REPORT_MODES for m in value
            ):
                raise bad(name, f"a list of modes ({', '.join(REPORT_MODES)})")
            if len(set(value)) != len(value):
                raise bad(name, "a list of distinct modes")
        elif name == "tp":
            if not _is_int(value) or not 1 <= value <= MAX_TP:
                raise bad(name, f"a positive integer (tensor-parallel ranks, at most {MAX_TP})")
        elif name in ("layers", "hidden_size"):
            if not _is_int(value) or not 0 <= value < 2**31:
                raise bad(name, "a non-negative integer")
        elif name in _CHOICES:
            if name == "weights" and isinstance(value, str):
                value = current(Weights, value)  # an old report's word for the same weights
            if value not in _CHOICES[name]:
                raise bad(name, f"one of {', '.join(_CHOICES[name])}")
        elif name in PHASED_RUN_FIELDS:
            pass  # checked whole by check_phases
        elif name == "in_process":
            if not isinstance(value, bool):
                raise bad(name, "true or false")
        elif name == "extra":
            if not isinstance(value, dict):
                raise bad(name, "a JSON object")
            value = clean_json(value)  # nesting bounded by check_depth
        elif not isinstance(value, str):
            raise bad(name, "a string")
        else:
            value = clean_text(value)
        values[name] = value
    if not values["model"].strip():
        raise bad("model", "the name of the model captured (not empty)")
    if not CONFIG_HASH.fullmatch(values.get("config_hash", "")):
        data.setdefault("config_hash", "")
        raise bad(
            "config_hash",
            "the model config's hash (16 hexadecimal digits, as `bcgprof capture` records it; "
            "compare and gate tell models apart by it)",
        )
    values["schema_version"] = data["schema_version"]
    values.update(check_phases(path, data))
    if values.get("source") == Source.RECORD:
        _check_recorded_sequences(path, values)
    return RunInfo(**values)


def check_phases(path: Path, data: dict) -> dict[str, Any]:
    """run.json's ``phases`` and ``phase_buckets`` (schema 2), checked against its version, its
    ``phase`` and its ``buckets``: two or more distinct phases, the first of them ``phase``, each
    with a list of distinct buckets whose union is ``buckets``. A version-1 run.json has
    neither."""
    version = data["schema_version"]
    if version != PHASED_SCHEMA_VERSION:
        if any(name in data for name in PHASED_RUN_FIELDS):
            raise ReportError(
                f"{path}: fields phases and phase_buckets belong to schema version "
                f"{PHASED_SCHEMA_VERSION}, but run.json says version {json_shown(version)}; {FIX}"
            )
        return {}
    phases = data.get("phases")
    per_phase = data.get("phase_buckets")
    if (
        not isinstance(phases, list)
        or len(phases) < 2
        or not all(isinstance(p, str) and p in PHASES for p in phases)
        or len(set(phases)) != len(phases)
        or phases[0] != data.get("phase")
    ):
        raise ReportError(
            f"{path}: schema version {PHASED_SCHEMA_VERSION} needs phases, two or more distinct "
            f"phases ({', '.join(PHASES)}) in capture order, the first of them run.json's phase; "
            f"{FIX}"
        )
    if not isinstance(per_phase, dict) or set(per_phase) != set(phases):
        raise ReportError(
            f"{path}: phase_buckets must give each of phases ({', '.join(phases)}) its bucket "
            f"list; {FIX}"
        )
    union: set[int] = set()
    for phase in phases:
        seq = per_phase[phase]
        if (
            not isinstance(seq, list)
            or not seq
            or not all(_is_int(b) and 1 <= b <= MAX_BUCKET_SIZE for b in seq)
            or len(set(seq)) != len(seq)
            or len(seq) > MAX_BUCKETS
        ):
            raise ReportError(
                f"{path}: phase_buckets of {phase} must be a list of distinct bucket sizes "
                f"(integers from 1 to {MAX_BUCKET_SIZE}, at most {MAX_BUCKETS}); {FIX}"
            )
        union.update(seq)
    if set(data.get("buckets", ())) != union:
        raise ReportError(
            f"{path}: buckets must be the union of phase_buckets' lists in a report of several "
            f"phases; {FIX}"
        )
    return {"phases": list(phases), "phase_buckets": {p: list(per_phase[p]) for p in phases}}


def _check_recorded_sequences(path: Path, values: dict[str, Any]) -> None:
    """A recording's capture order, ``extra.sequences``: each mode's buckets in the order its
    program captured them (the order column's meaning), distinct buckets of the run's list."""
    sequences = values.get("extra", {}).get("sequences")
    listed = set(values.get("buckets", ()))
    modes = values.get("modes", ())
    if not isinstance(sequences, dict) or set(sequences) != set(modes):
        raise ReportError(
            f"{path}: a recorded report's extra.sequences must give every mode of its modes "
            f"({', '.join(modes) or 'none'}) its buckets in capture order; {FIX}"
        )
    for mode, seq in sequences.items():
        if (
            not isinstance(seq, list)
            or not all(_is_int(b) and b in listed for b in seq)
            or len(set(seq)) != len(seq)
        ):
            raise ReportError(
                f"{path}: extra.sequences of {mode} must be distinct buckets of run.json's bucket "
                f"list; {FIX}"
            )


def parse_run_json(path: Path, text: str) -> RunInfo:
    """:func:`read_run_info` for text already read."""
    check_depth(path, text)
    try:
        data = json.loads(text, parse_constant=_reject_constant)
    except json.JSONDecodeError as e:
        raise ReportError(f"{path} is corrupt (line {e.lineno}: {e.msg}); {FIX}") from None
    except (ValueError, RecursionError) as e:
        raise ReportError(f"{path} is corrupt ({str(e).splitlines()[0][:120]}); {FIX}") from None
    if not isinstance(data, dict):
        raise ReportError(f"{path} is corrupt: not a JSON object; {FIX}")
    version = data.get("schema_version")
    # not 1.0 or true
    if version not in SCHEMA_VERSIONS or not isinstance(version, int) or isinstance(version, bool):
        shown = json_shown(version) if version is not None else "none"
        raise ReportError(
            f"{path} has report schema version {shown}; this bcgprof reads versions "
            f"{' and '.join(map(str, SCHEMA_VERSIONS))}: "
            "read it with the bcgprof that wrote it"
        )
    return check_run(path, data)


def read_run_info(path: Path) -> RunInfo:
    """run.json of a report (at most :data:`~bcgprof.report.limits.MAX_RUN_BYTES`), checked."""
    path = Path(path)
    return parse_run_json(path, read_small_text(path, MAX_RUN_BYTES))
