"""An advice given before, kept for the next `bcgprof advise` asked the same thing.

Mechanism. An advice is a function of the report's rows and run, its traces' content, the
question (mode, budget, free memory, request lengths, curve points) and bcgprof's own code and
band evidence. :func:`advice_key` names all of those: the report by a SHA-256 of its run and rows as
read, each of its traces by a SHA-256 of its file (read or not), the code by a SHA-256 of every
module of :mod:`bcgprof.analysis.predict` and its ``bands.json``. :func:`keep` keeps an advice's
figures under that key in the cache (:mod:`bcgprof.analysis.predict.trace_cache`); :func:`recall`
gives them back for the same key. The command still reads and checks the mode's trace first (the
check's verdict is itself kept): what is looked up is the search over candidate lists that follows.

Invariant: a kept advice is used only when it reads back whole (every field of its type) under a
key that names every input above; anything else is treated as absent and worked out again. Cost: a
hash of the rows and of the package's sources (once per process), one cache read or write.
Torch-free.
"""

from __future__ import annotations

import hashlib
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

import numpy as np

from bcgprof.analysis.predict import trace_cache
from bcgprof.report import Report
from bcgprof.report.traces import MAX_TRACE_BYTES

if TYPE_CHECKING:
    from bcgprof.analysis.predict.sources import BucketSources

PACKAGE = "bcgprof.analysis.predict"
FIELDS = (  # an Advice's fields kept, and the types each may hold
    ("buckets", list),
    ("predicted_bytes", int),
    ("expected_padding_pct", float),
    ("high_bytes", int),
    ("curve", list),
    ("lengths_source", str),
    ("notes", list),
    ("low_bytes", int),
    ("exact", bool),
    ("band_source", str),
    ("needs_free_bytes", (int, type(None))),
)


@lru_cache(maxsize=1)
def code_digest() -> str:
    """A SHA-256 of every module of :data:`PACKAGE` and of its band evidence (``bands.json``)."""
    h = hashlib.sha256()
    root = resources.files(PACKAGE)
    for name in sorted(p.name for p in root.iterdir() if p.name.endswith((".py", ".json"))):
        h.update(name.encode() + b"\0" + root.joinpath(name).read_bytes() + b"\0")
    return h.hexdigest()


def advice_key(
    report: Report,
    sources: BucketSources,
    question: list,
    weights: np.ndarray,
) -> Optional[list]:
    """What an advice on ``report`` is kept under (module docstring); ``question``: the mode,
    budget, free memory and curve points. None when a trace is held in memory (nothing names
    it)."""
    digests = {}
    for mode in sorted(sources.traces):
        source = sources.traces.sources[mode]
        digest = getattr(source, "digest", None) or _file_digest(source)
        if not digest:
            return None  # held in memory, or not a file this cache can name
        digests[mode] = digest
    rows = hashlib.sha256(repr((report.run, report.buckets)).encode()).hexdigest()
    return [code_digest(), rows, digests, question, trace_cache.array_key(weights)]


def _file_digest(source: object) -> Optional[str]:
    """A SHA-256 of a trace file's bytes (the name its cache entries go by), without reading it as
    a trace; None for anything else, or a file over the caps."""
    if not isinstance(source, Path):
        return None
    try:
        with open(source, "rb") as f:
            data = f.read(MAX_TRACE_BYTES + 1)
    except OSError:
        return None
    return hashlib.sha256(data).hexdigest() if len(data) <= MAX_TRACE_BYTES else None


def recall(key: Optional[list], near: Any) -> Optional[dict]:
    """The fields of the advice kept under ``key``, if they read back whole."""
    value = trace_cache.recall("advice", key, near) if key is not None else None
    if not isinstance(value, dict) or set(value) != {name for name, _ in FIELDS}:
        return None
    for name, kind in FIELDS:
        if not isinstance(value[name], kind) or (kind is int and isinstance(value[name], bool)):
            return None
    if not all(type(b) is int for b in value["buckets"]) or not all(
        isinstance(n, str) for n in value["notes"]
    ):
        return None
    curve = value["curve"]
    if not all(
        isinstance(p, list)
        and len(p) == 3
        and type(p[0]) is int
        and isinstance(p[1], float)
        and type(p[2]) is int
        for p in curve
    ):
        return None
    value["curve"] = [tuple(p) for p in curve]
    return value


def keep(key: Optional[list], advice: Any, near: Any) -> None:
    """Keep the fields of ``advice`` (an :class:`~bcgprof.analysis.predict.advise.Advice`) under
    ``key`` for the next command asked the same."""
    if key is not None:
        value = {name: getattr(advice, name) for name, _ in FIELDS}
        value["buckets"] = [int(b) for b in advice.buckets]
        value["curve"] = [[int(b), float(p), int(n)] for b, p, n in advice.curve]
        trace_cache.remember("advice", key, value, near)
