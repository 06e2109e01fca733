"""What was learnt from a trace file, kept under the user's cache directory for the next command.

Mechanism. Every entry is named by the SHA-256 of the trace file's bytes (so a changed trace misses)
and of the source of the modules that derive it (so another bcgprof misses), and lives in
``$BCGPROF_CACHE_DIR`` when that is set, else ``$XDG_CACHE_HOME/bcgprof`` (``~/.cache/bcgprof`` when
that is unset): never inside a report directory, which bcgprof only reads. ``BCGPROF_NO_CACHE=1``
turns it off (nothing read, nothing written). Two kinds:

* ``entries/<name>-<code>``: bytes, with their SHA-256 (a trace file's
  :class:`~bcgprof.analysis.predict.trace_set.ModeTrace`, so a later command skips inflating and
  parsing);
* ``facts/<key>.json``: a small result drawn from traces and other inputs named in its key (the
  verdict that a trace replays to its report's measured pools; the pools of a layout spread;
  advise's replays that do not depend on the budget; a phase pair's figures; an advice), the key
  repeated inside; the larger ones (advise's programmes' lists, and the replays of the lists a
  command replayed) in ``programmes/`` and ``replays/`` alike.

Invariant: an entry is written to a temporary file and renamed, so a reader sees a whole entry or
none; one that does not read back whole and consistent (damaged, cut short, another format) is
ignored, and the answer is worked out again; a cache directory that cannot be made or written is
skipped without a word. At most :data:`MAX_ENTRIES` entries and :data:`MAX_FACTS` facts (the
larger kinds in :data:`SHELVES`, each in a directory of its own, at most its own number) are
kept, the least recently used going first. Cost: hashing the sources once per process; a hit reads
and inflates one entry (O(events)). Torch-free.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import os
import tempfile
from functools import lru_cache
from pathlib import Path
from typing import Any, Optional

from bcgprof.version import __version__

CACHE_DIR = "BCGPROF_CACHE_DIR"  # where the cache lives, instead of the user's cache directory
NO_CACHE = "BCGPROF_NO_CACHE"  # set (to anything but 0): no cache, nothing read or written
FORMAT = "bcgprof-trace-cache"
VERSION = 1
MAX_ENTRIES = 32  # entries kept (a 74-bucket profile's mode takes a few MB)
MAX_FACTS = 4096  # facts kept (a few hundred bytes each)
# the larger facts, each kind in a directory of its own with its own limit: kind -> (directory,
# most kept); an advise keeps up to 12 programmes (up to about 0.5 MB each) and, per mode and
# placement, one store of replays (up to about 1.5 MB)
SHELVES = {"programme": ("programmes", 96), "replay store": ("replays", 64)}
# the modules whose code decides what an entry holds: another version of any misses every entry
DERIVED_BY = (
    "bcgprof.report.traces",
    "bcgprof.report.trace_read",
    "bcgprof.analysis.predict.trace_set",
    "bcgprof.analysis.predict.bucket_ops",
    "bcgprof.analysis.predict.trace_cache",
    "bcgprof.analysis.predict.allocator",
    "bcgprof.analysis.predict.sources",
    "bcgprof.analysis.predict.replay",
    "bcgprof.analysis.predict.memo",
    "bcgprof.analysis.predict.fold",
    "bcgprof.analysis.predict.interpolate",
    "bcgprof.analysis.predict.needs_free",
    "bcgprof.analysis.predict.layout_spread",
    "bcgprof.analysis.predict.kept_replays",
    "bcgprof.analysis.predict.padding",
    "bcgprof.analysis.predict.programme",
)


def cache_root() -> Optional[Path]:
    """``$BCGPROF_CACHE_DIR``; else ``$XDG_CACHE_HOME/bcgprof`` (an absolute XDG_CACHE_HOME only, as
    the specification says), else ``~/.cache/bcgprof``; None with ``BCGPROF_NO_CACHE`` set, or
    when there is no home to put it in."""
    if os.environ.get(NO_CACHE, "") not in ("", "0"):
        return None
    chosen = os.environ.get(CACHE_DIR, "")
    if chosen:
        return Path(os.path.abspath(chosen))
    base = os.environ.get("XDG_CACHE_HOME", "")
    try:
        root = Path(base) if os.path.isabs(base) else Path.home() / ".cache"
    except (RuntimeError, KeyError, OSError):
        return None
    return root / "bcgprof"


def writable() -> bool:
    """Whether the cache directory is there, or can be made, and can be written."""
    root = cache_root()
    if root is None:
        return False
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError:
        return False
    return os.access(root, os.W_OK | os.X_OK)


def array_key(array: Any) -> str:
    """A numpy array as a cache key names it: dtype, shape, a SHA-256 of its values in C order."""
    return f"{array.dtype.str}{array.shape}:{hashlib.sha256(array.tobytes()).hexdigest()}"


@lru_cache(maxsize=1)
def code_digest() -> str:
    """A digest of the sources of :data:`DERIVED_BY` (the package's version where a source cannot be
    read)."""
    h = hashlib.sha256(f"{FORMAT} {VERSION} {__version__}".encode())
    for name in DERIVED_BY:
        spec = importlib.util.find_spec(name)
        try:
            h.update(Path(spec.origin).read_bytes() if spec and spec.origin else name.encode())
        except OSError:
            h.update(name.encode())
    return h.hexdigest()[:16]


def _directory(kind: str, near: Optional[Path]) -> Optional[Path]:
    """The cache's ``kind`` directory, unless it would lie inside the report ``near`` (a trace file)
    is in."""
    root = cache_root()
    if root is None:
        return None
    if near is not None:
        try:
            report = Path(near).parent.resolve()
            if root.resolve() == report or report in root.resolve().parents:
                return None
        except (OSError, RuntimeError):
            return None
    return root / kind


def _write(path: Path, data: bytes, keep: int) -> None:
    """Write ``path`` atomically, then drop the least recently used entries beyond ``keep``; silent
    on failure."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        entries = [p for p in path.parent.iterdir() if not p.name.startswith(".")]
        if len(entries) > keep:
            entries.sort(key=lambda p: p.stat().st_mtime)
            for old in entries[: len(entries) - keep]:
                with contextlib.suppress(OSError):
                    old.unlink()
    except OSError:
        pass


def _read(path: Path) -> Optional[bytes]:
    """The entry's bytes (None when there is none or it cannot be read), marked as recently used
    where the directory lets it."""
    try:
        data = path.read_bytes()
    except OSError:
        return None
    with contextlib.suppress(OSError):
        os.utime(path)
    return data


# ---------------------------------------------------------------- entries


def load_entry(name: str, near: Optional[Path] = None) -> Optional[bytes]:
    """The bytes kept under ``name`` (a content digest and what they are), if they read back
    whole."""
    folder = _directory("entries", near)
    data = _read(folder / f"{name}-{code_digest()}") if folder is not None and name else None
    magic = FORMAT.encode() + b"\n"
    if data is None or not data.startswith(magic):
        return None
    digest, payload = data[len(magic) : len(magic) + 32], data[len(magic) + 32 :]
    return payload if hashlib.sha256(payload).digest() == digest else None


def store_entry(name: str, payload: bytes, near: Optional[Path] = None) -> None:
    """Keep ``payload`` under ``name`` for the next command."""
    folder = _directory("entries", near)
    if folder is not None and name:
        data = FORMAT.encode() + b"\n" + hashlib.sha256(payload).digest() + payload
        _write(folder / f"{name}-{code_digest()}", data, MAX_ENTRIES)


# ---------------------------------------------------------------- facts


def _fact_path(kind: str, parts: Any, near: Optional[Path]) -> tuple[Optional[Path], str]:
    key = hashlib.sha256(
        json.dumps([kind, code_digest(), parts], sort_keys=True).encode()
    ).hexdigest()
    folder = _directory(SHELVES.get(kind, ("facts", MAX_FACTS))[0], near)
    return (folder / f"{key}.json" if folder is not None else None), key


def recall(kind: str, parts: Any, near: Optional[Path] = None) -> Any:
    """The value kept for ``kind`` and ``parts`` (JSON: the inputs it was drawn from, trace digests
    among them); None when there is none or it does not read back whole."""
    path, key = _fact_path(kind, parts, near)
    data = _read(path) if path is not None else None
    if data is None:
        return None
    try:
        entry = json.loads(data)
    except (ValueError, RecursionError):
        return None
    return entry.get("value") if isinstance(entry, dict) and entry.get("key") == key else None


def remember(kind: str, parts: Any, value: Any, near: Optional[Path] = None) -> None:
    """Keep ``value`` (JSON) for ``kind`` and ``parts``."""
    path, key = _fact_path(kind, parts, near)
    if path is not None:
        _write(
            path,
            json.dumps({"key": key, "value": value}).encode(),
            SHELVES.get(kind, ("facts", MAX_FACTS))[1],
        )
