"""A later phase replayed into the pool an earlier phase's replay left: :class:`PhaseReplayer`.

Mechanism. One process that captures two phases into one graph pool (SGLang: prefill, then decode)
starts the second phase's captures from the pool the first left: its live blocks stay allocated,
and the blocks it freed serve the second phase's requests as the caching allocator's rules allow.
:meth:`PhaseReplayer.end_state` is the first profile's replay state after its list;
:meth:`PhaseReplayer.replay_onto` replays the second profile's list from a copy of it, with the
second trace's streams renamed to the first's (one process captures every phase on one stream).
Invariant: the first phase's blocks are never freed by the second's events. Cost: one replay of
each list (the first's from the memo when known). Torch-free.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Optional, cast

from bcgprof.analysis.predict.allocator import Pool
from bcgprof.analysis.predict.memo import State
from bcgprof.analysis.predict.pool_replay import PoolReplay
from bcgprof.analysis.predict.replay import Replayer
from bcgprof.analysis.predict.sources import ReplayError


class PhaseReplayer(Replayer):
    """A :class:`~bcgprof.analysis.predict.replay.Replayer` that also replays into the pool another
    profile's replay left (module docstring)."""

    def end_state(self, mode: str, buckets: Sequence[int]) -> State:
        """A copy of the state (pool, live blocks) after ``mode``'s list: what a phase captured
        after this one into the same pool starts from (:meth:`replay_onto`)."""
        state = self._advance(mode, self.bucket_sources.sources(mode, buckets), False, None)
        assert state is not None  # no limit: replayed to the end
        return state.clone()

    def streams(self, mode: str, buckets: Sequence[int]) -> list[int]:
        """The streams the graph-pool requests of ``mode``'s list name, in the order first named."""
        seen: dict[int, None] = {}
        for bucket, source in self.bucket_sources.sources(mode, buckets):
            seen.update(dict.fromkeys(self.bucket_sources.ops[source][bucket].streams()))
        return list(seen)

    def replay_onto(
        self, before: State, mode: str, buckets: Sequence[int], streams: Mapping[int, int]
    ) -> PoolReplay:
        """``mode``'s list replayed into the pool ``before`` holds (another profile's
        :meth:`end_state`), as one process captures this phase after that one into one pool: every
        block ``before`` holds stays allocated (no event of this list frees it), and the blocks it
        freed serve this list's requests as the allocator's rules allow. ``streams``: this
        trace's stream -> the stream ``before``'s requests named (one process captures every phase
        on one stream). The pool after each bucket of this list; ``exact`` as :meth:`replay`."""
        plan = self.bucket_sources.sources(mode, buckets)
        if self.bucket_sources.settings[plan[0][1]] != before.pool.settings:
            raise ReplayError(
                "the two profiles' traces were recorded under different allocator settings; "
                "capture both phases with one torch and PYTORCH_CUDA_ALLOC_CONF"
            )
        pool = cast(Pool, _Restreamed(before.pool.clone(), dict(streams)))
        state = State(pool, {}, {}, [])
        for bucket, source in plan:
            self._step(state, bucket, source, False)
        return PoolReplay(
            mode=mode,
            buckets=[b for b, _ in plan],
            pool_bytes=list(state.reserved),
            exact=not any(self.bucket_sources.ops[s][b].unknown for b, s in plan),
            sources=[s for _, s in plan],
            made_up=state.pool.made_up,
        )


class _Restreamed:
    """A pool whose requests name another process's streams, as the pool's own process named
    them; everything else is the pool's."""

    def __init__(self, pool: Pool, streams: dict[int, int]):
        self._pool, self._streams = pool, streams

    def run(
        self,
        ops: Sequence,
        live: dict,
        check: bool = False,
        placed: Optional[list] = None,
        begin: int = 0,
        streams: Optional[Mapping[int, int]] = None,
    ) -> int:
        assert streams is None  # the pool's own streams are this one's to name
        return self._pool.run(ops, live, check, placed, begin, self._streams)

    def __getattr__(self, name: str):
        return getattr(self._pool, name)
