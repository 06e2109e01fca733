"""Repeating eager work by its allocator requests alone: a warm-up run, or a graph break.

An engine warms a bucket up with two eager forwards before capturing it (SGLang does). What the
second run leaves for the capture (cached blocks, segments) and the peaks it adds are the caching
allocator's doing, and the allocator sees only requests: the same sizes, in the same order, on the
same streams, against the same state, give the same blocks, segments and peaks
(``c10/cuda/CUDACachingAllocator.cpp``, ``DeviceCachingAllocator::malloc`` and ``free``: placement
depends on the request's size and stream and on the pool's blocks, never on what kernels do with
them). So once the first run has been recorded (the allocator history the trace recorder keeps),
each later run can be repeated by allocating and freeing blocks of the recorded sizes in the
recorded order, without launching a kernel. The same holds for one call of a graph break (the
attention core): every layer of a kind calls it with the same shapes, so its later calls can be
made by the first one's requests (:mod:`bcgprof.measure.break_repeat`).

:func:`plan_repeat` reads the first run's history and returns ``None`` (the caller then runs the
model again) when the record does not describe a run that can be repeated this way: a request on
a stream the caller cannot name, a free that did not complete at once (a block used on another
stream), a free of a block the run did not allocate, an out-of-memory event, or anything besides
the run's output (a break: anything at all) left allocated at its end (a cache the first run filled
would not be allocated again by a second). The planning is torch-free; :func:`repeat_run` carries a
plan out.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, Optional

ALLOC, FREE = "alloc", "free"


class Request(NamedTuple):  # a tuple: a run makes thousands of them, between the capture's steps
    op: str  # ALLOC or FREE
    key: int  # the block, numbered by its allocation in the run
    size: int = 0  # requested bytes (ALLOC)
    stream: int = 0  # the raw stream handle the block was requested on (ALLOC)


@dataclass(frozen=True)
class RepeatPlan:
    requests: tuple[Request, ...]
    output: Optional[
        int
    ]  # key of the block that holds the run's output when it returns; None: nothing is left
    output_bytes: int


NOTHING = RepeatPlan((), None, 0)  # a call that allocates nothing: repeating it is doing nothing


def plan_repeat(
    entries: Sequence[dict],
    allocations: int,
    output_addr: Optional[int],
    output_bytes: int,
    streams: Sequence[int],
) -> Optional[RepeatPlan]:
    """The requests of one eager run, from the allocator history that ends with it.

    ``entries`` are ``torch.cuda.memory._snapshot()["device_traces"][device]`` entries (torch
    2.11's fields: ``action``, ``addr``, ``size``, ``stream``, Python ints as torch gives them)
    since some point before the run began; ``allocations`` is how many allocations the run made (the
    difference of ``memory_stats()["allocation.all.allocated"]`` across it), so the run begins at
    that allocation counted back from the end. ``output_addr`` and ``output_bytes`` are the run's
    output storage's address and size.
    """
    first, counted = -1, 0
    for i in range(len(entries) - 1, -1, -1):  # the run is at the end: count its allocations back
        if entries[i].get("action") == "alloc":
            counted += 1
            if counted == allocations:
                first = i
                break
    if allocations < 1 or first < 0:
        return None  # the history does not hold the whole run
    known = {int(s) for s in streams}
    live: dict[int, int] = {}  # address -> key
    requests: list[Request] = []
    sizes: list[int] = []
    last = len(entries) - 1
    for i in range(first, last + 1):
        e = entries[i]
        action, addr = e.get("action"), e.get("addr", 0)
        if action == "alloc":
            stream = e.get("stream") or 0
            if stream not in known or addr in live:
                return None
            key = live[addr] = len(sizes)
            size = e.get("size", 0)
            sizes.append(size)
            requests.append(Request(ALLOC, key, size, stream))
        elif action == "free_requested":
            follows = entries[i + 1] if i < last else None
            if (
                follows is None
                or follows.get("action") != "free_completed"
                or follows.get("addr", -1) != addr
            ):
                return None  # completion deferred: the block was in use on another stream
        elif action == "free_completed":
            key = live.pop(addr, -1)
            if key < 0:
                return None  # a block from before the run: a second run would not free it
            requests.append(Request(FREE, key))
        elif action == "oom":
            return None
        # segment_alloc / segment_free and snapshot entries are the allocator's answers, not
        # requests
    if output_addr is None:
        return RepeatPlan(tuple(requests), None, 0) if not live else None
    if set(live) != {int(output_addr)} or sizes[live[int(output_addr)]] != int(output_bytes):
        return None
    return RepeatPlan(tuple(requests), live[int(output_addr)], int(output_bytes))


def repeat_run(plan: RepeatPlan, allocate: Callable[[int, int], Any]) -> Any:
    """Make ``plan``'s requests in order: ``allocate(size, stream)`` returns a block, dropping it
    frees it. Returns the output's block, still allocated (None for a plan without an output)."""
    live: dict[int, Any] = {}
    for r in plan.requests:
        if r.op == ALLOC:
            live[r.key] = allocate(r.size, r.stream)
        else:
            del live[r.key]
    return None if plan.output is None else live.pop(plan.output)
