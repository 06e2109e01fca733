"""What a graph pool holds at its peak, by model code site, from the allocator's history.

:func:`record_sites` records the allocation history (``torch.cuda.memory._record_memory_history``
with Python stacks) around a capture, with every submodule's forward renamed in the
stacks to its place in the model (``layers.3.mlp.experts``). :func:`pool_peak` replays
the recorded events of the pool's segments, finds the moment its live bytes peak, and
attributes the blocks alive then to sites: the innermost module path (list indices
such as layer numbers folded into ``N``) and the model code line that allocated the block. What the
pool's segments hold beyond the peak's live bytes is slack: memory the allocator reserved for
the pool but never had in use at the peak. ``peak_live_bytes + slack_bytes ==
pool_bytes`` by construction.

Pure functions over the snapshot dict apart from :func:`record_sites`; nothing here
allocates GPU memory.
"""

from __future__ import annotations

import linecache
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Optional

MODULE_FRAME = "module:"  # prefix of the renamed forward frames
NO_SITE = "(no model frame: torch or library internals)"
_INDEX = re.compile(r"\.\d+(?=\.|$)")  # a ModuleList index: layers.3 -> layers.N
_ASSIGN = re.compile(r"^\s*([A-Za-z_][\w\s,]*?)\s*(?::[^=]*)?=(?!=)")


@dataclass
class SiteBytes:
    site: str
    bytes: int
    blocks: int


@dataclass
class PoolPeak:
    pool_bytes: int  # the pool's segments at the end of the recording
    peak_live_bytes: int  # live bytes at the peak moment
    slack_bytes: int  # pool_bytes - peak_live_bytes
    # largest first; they sum to peak_live_bytes
    sites: list[SiteBytes] = field(default_factory=list)
    events: int = 0  # pool events replayed


# ---------------------------------------------------------------- naming


def _site_of(frames: list[dict], model_marker: str) -> str:
    """``module path: role`` for a block allocated with these Python frames (innermost first)."""
    marked = [f["name"] for f in frames if f.get("name", "").startswith(MODULE_FRAME)]
    if len(marked) > 1 and marked[0] == MODULE_FRAME + "model":
        frames = frames[::-1]  # outermost first: the root module's frame came first
    module = next(
        (
            f["name"][len(MODULE_FRAME) :]
            for f in frames
            if f.get("name", "").startswith(MODULE_FRAME)
        ),
        None,
    )
    # the innermost model code that is not a private helper (``_empty``: its caller's line names the
    # tensor)
    code = next(
        (
            f
            for f in frames
            if model_marker in f.get("filename", "")
            and not f.get("name", "").startswith((MODULE_FRAME, "_"))
        ),
        None,
    )
    if module is None and code is None:
        return NO_SITE
    role = ""
    if code is not None:
        role = code.get("name", "")
        text = linecache.getline(code.get("filename", ""), int(code.get("line", 0) or 0))
        target = _ASSIGN.match(text or "")
        if target:
            role += f" ({' '.join(target.group(1).split())})"
    where = _INDEX.sub(".N", module) if module else "model"
    return f"{where}: {role}" if role else where


# ---------------------------------------------------------------- the replay


def _in(ranges: list[tuple[int, int]], addr: int) -> Optional[tuple[int, int]]:
    for start, size in ranges:
        if start <= addr < start + size:
            return (start, size)
    return None


def pool_peak(
    snapshot: dict, pool_id: Any, *, model_marker: str = "/bcgprof/models/", device: int = 0
) -> PoolPeak:
    """Replay ``snapshot``'s trace for the pool ``pool_id``; the peak's live blocks by site.

    ``snapshot`` is ``torch.cuda.memory._snapshot()`` taken with history recorded. A
    block counts as live from its ``alloc`` to its ``free_requested`` (or
    ``free_completed`` when no request was recorded). A pool segment counts from its
    ``segment_alloc`` on (or from the start, if its allocation was not recorded), so
    earlier use of the same addresses outside the pool is ignored.
    """
    pool_id = tuple(pool_id)
    segments = [
        s
        for s in snapshot.get("segments", [])
        if tuple(s.get("segment_pool_id", ())) == pool_id and s.get("device", device) == device
    ]
    ranges = [(int(s["address"]), int(s["total_size"])) for s in segments]
    pool_bytes = sum(size for _, size in ranges)
    traces = snapshot.get("device_traces", [])
    events = traces[device] if device < len(traces) else []
    recorded_segments = {int(e["addr"]) for e in events if e.get("action") == "segment_alloc"}
    active = {
        r for r in ranges if r[0] not in recorded_segments
    }  # existed before the recording began
    live: dict[int, tuple[int, list]] = {}  # addr -> (size, frames)
    current = peak = 0
    peak_blocks: dict[int, tuple[int, list]] = {}
    replayed = 0
    for e in events:
        action, addr = e.get("action"), int(e.get("addr", 0))
        if action == "segment_alloc":
            seg = next((r for r in ranges if r[0] == addr), None)
            if seg is not None:
                active.add(seg)
            continue
        if action in ("segment_free", "segment_unmap"):
            active = {r for r in active if r[0] != addr}
            continue
        if action == "alloc":
            if _in(list(active), addr) is None:
                continue
            replayed += 1
            live[addr] = (int(e["size"]), e.get("frames") or [])
            current += int(e["size"])
            if current > peak:
                peak, peak_blocks = current, dict(live)
        elif action in ("free_requested", "free_completed") and addr in live:
            replayed += 1
            current -= live.pop(addr)[0]
    by_site: dict[str, list[int]] = {}
    for size, frames in peak_blocks.values():
        entry = by_site.setdefault(_site_of(frames, model_marker), [0, 0])
        entry[0] += size
        entry[1] += 1
    sites = sorted(
        (SiteBytes(name, b, n) for name, (b, n) in by_site.items()),
        key=lambda s: (-s.bytes, s.site),
    )
    return PoolPeak(
        pool_bytes=pool_bytes,
        peak_live_bytes=peak,
        slack_bytes=pool_bytes - peak,
        sites=sites,
        events=replayed,
    )


# ---------------------------------------------------------------- recording


def _renamed(name: str, forward):
    def call(*args, **kwargs):
        return forward(*args, **kwargs)

    code = call.__code__.replace(co_name=name)
    if sys.version_info >= (3, 11):  # co_qualname is new in 3.11
        code = code.replace(co_qualname=name)
    call.__code__ = code
    return call


@contextmanager
def module_frames(model: Any) -> Iterator[None]:
    """While active, every submodule's forward shows up in Python stacks as ``module:<its
    path>``."""
    named = list(model.named_modules()) if hasattr(model, "named_modules") else []
    patched = []
    try:
        for path, module in named:
            if "forward" in vars(module):
                continue  # already an instance attribute: leave it alone
            module.forward = _renamed(MODULE_FRAME + (path or "model"), module.forward)
            patched.append(module)
        yield
    finally:
        for module in patched:
            del module.forward


def start_history(max_entries: int = 1_000_000) -> None:
    """Record the allocator's history with Python stacks from now on (CUDA only)."""
    import torch

    torch.cuda.memory._record_memory_history(
        enabled="all", context="all", stacks="python", max_entries=max_entries
    )


def stop_history() -> None:
    import torch

    torch.cuda.memory._record_memory_history(enabled=None)
