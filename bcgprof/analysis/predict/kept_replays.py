"""The replays of lists a replayer made, kept for the next command on the same traces.

Mechanism. Every list a :class:`~bcgprof.analysis.predict.replay.Replayer` replays (without
``check``), to its end or until its pool passed a limit, is noted by its plan (bucket and trace
of each, :func:`plan_key`): the digests of the traces it was replayed from, the pool after each
bucket replayed, and for a whole replay whether it is exact, its mismatches and its made-up
segments. :func:`keep` puts the notes of one mode and placement under the cache
(:mod:`bcgprof.analysis.predict.trace_cache`, keyed by the mode, the placement and the digest of the
mode's trace) after those kept before, the most recent :data:`STORED_REPLAYS`; a later replayer
reads them once (:func:`stored`) and answers a list it finds there, from traces of the same digests,
without replaying it. A replay is a function of the traces and the plan alone, so the answers are
the replays' own, whatever budget or command asked first.

Invariant: a note is used only when it reads back whole (pools, one a bucket replayed, all integers;
a whole replay's three figures) and every trace it names has the digest it was noted with; anything
else is treated as absent. Cost: one cache read per mode and placement, then O(list length) a
lookup; :func:`keep` writes one entry of at most :data:`STORED_REPLAYS` lists. Torch-free.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Optional, Protocol

from bcgprof.analysis.predict import trace_cache
from bcgprof.analysis.predict.sources import BucketSources


class Replayer(Protocol):
    """What this module reads of a :class:`~bcgprof.analysis.predict.replay.Replayer`: its
    prepared traces and its placement (which replays a kept one stands for)."""

    bucket_sources: BucketSources
    below: bool
    layout: Optional[int]


STORED_REPLAYS = 1024  # replays of one mode's lists kept across commands, a placement


def plan_key(plan: Sequence[tuple[int, str]]) -> str:
    """A plan (bucket, trace) by bucket, as the notes name it."""
    return ",".join(f"{b}:{s}" for b, s in plan)


def read_entry(entry: object, length: int) -> Optional[tuple[dict, list, Optional[tuple]]]:
    """A note of a plan of ``length`` buckets as (digests, pools, done), if it reads back whole."""
    if not (isinstance(entry, list) and len(entry) == 3):
        return None
    digests, pools, done = entry
    if not (
        isinstance(digests, dict)
        and all(isinstance(d, str) for d in digests.values())
        and isinstance(pools, list)
        and 0 < len(pools) <= length
        and all(type(p) is int for p in pools)
    ):
        return None
    if done is None:
        return digests, pools, None
    if not (isinstance(done, list) and len(done) == 3 and len(pools) == length):
        return None
    exact, mismatches, made_up = done
    if type(exact) is not bool or type(mismatches) is not int or type(made_up) is not int:
        return None
    return digests, pools, (exact, mismatches, made_up)


def notes(replayer: Replayer, mode: str) -> tuple[dict, dict]:
    """The notes of ``mode``'s lists in ``replayer``'s placement: those earlier commands kept (read
    from the cache on the first call, checked when looked up) and those made by this one."""
    stores = replayer.bucket_sources.stores
    key = (mode, replayer.below, replayer.layout)
    if key not in stores:
        stores[key] = ({}, {})
        trace = replayer.bucket_sources.traces.get(mode)
        if trace is not None and trace.digest:
            kept = trace_cache.recall(
                "replay store", [mode, replayer.below, replayer.layout, trace.digest], trace.path
            )
            stores[key] = (kept if isinstance(kept, dict) else {}, {})
    return stores[key]


def stored(
    replayer: Replayer, mode: str, plan: Sequence[tuple[int, str]]
) -> Optional[tuple[list, Optional[tuple]]]:
    """A replay of ``plan`` from these traces, made or kept before: (pools, done), or None."""
    kept, made = notes(replayer, mode)
    name = plan_key(plan)
    entry = read_entry(made.get(name) or kept.get(name), len(plan))
    if entry is None:
        return None
    digests, pools, done = entry
    if sorted(digests) != sorted({s for _, s in plan}):
        return None
    traces = replayer.bucket_sources.traces
    for source, digest in digests.items():
        trace = traces.get(source)
        if trace is None or trace.digest != digest:
            return None
    return pools, done


def learn(
    replayer: Replayer,
    mode: str,
    plan: Sequence[tuple[int, str]],
    pools: list[int],
    done: Optional[tuple],
) -> None:
    """Note a replay of ``plan``: the pools after its buckets replayed, and for a whole replay
    (exact, mismatches, made up), else None."""
    traces = replayer.bucket_sources.traces
    digests = {}
    for source in sorted({s for _, s in plan}):
        trace = traces.get(source)
        if trace is None or not trace.digest:
            return  # a trace held in memory: nothing to key it by
        digests[source] = trace.digest
    entry = [digests, list(pools), list(done) if done is not None else None]
    notes(replayer, mode)[1][plan_key(plan)] = entry


def keep(replayer: Replayer, mode: str) -> None:
    """Keep the notes of ``mode``'s lists this command made in ``replayer``'s placement, after
    those kept before (the most recent :data:`STORED_REPLAYS`)."""
    found = replayer.bucket_sources.stores.get((mode, replayer.below, replayer.layout))
    trace = replayer.bucket_sources.traces.get(mode)
    if not found or not found[1] or trace is None or not trace.digest:
        return
    kept, made = found
    merged = {k: v for k, v in kept.items() if k not in made}
    merged.update(made)
    trace_cache.remember(
        "replay store",
        [mode, replayer.below, replayer.layout, trace.digest],
        dict(list(merged.items())[-STORED_REPLAYS:]),
        trace.path,
    )
