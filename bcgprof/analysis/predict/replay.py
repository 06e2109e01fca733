"""The graph pool of another bucket list, by replaying a profile's allocator traces.

A profile's report holds, per mode, the graph pool's events of every bucket's capture
(:mod:`bcgprof.report.traces`). A bucket's requests do not depend on what was captured before it
(the model code asks for the same sizes in the same order), so the pool of any list drawn
from the profiled buckets follows from replaying their events, in the list's capture order
(largest first), through the allocator model (:mod:`bcgprof.analysis.predict.allocator`): every
segment the pool opens, hence its bytes after each bucket, is the allocator's own decision.

Where each bucket's events come from (the retention rules are in the events themselves: a
kept output is an allocation the trace never frees):

* ``per-bucket``, ``shared``: the mode's own trace (each bucket keeps its output in the pool;
  shared: each capture copies into the buffer outside the pool and frees its own output);
* ``shared-largest``: the list's largest bucket keeps its own output, as the profile's
  ``per-bucket`` capture of it did; when it is the profile's largest, the mode's own trace;
  every later bucket from the mode's trace (it copies into the kept output);
* ``floor``: the list's largest bucket alone, from the floor trace, or from ``per-bucket``'s
  capture of it when it is not the profile's largest.

Frees recorded after a capture ended (in the next bucket's warm-up window) belong to the
bucket that allocated the block and are replayed at its end: no allocation of the pool
happens between captures, so their order does not matter. A free recorded inside a later
capture stays there; when that later bucket is not in the list it is applied before the next
bucket that is. New segments take the address the profile's allocator gave the recorded
block's segment when it is free, else one above every segment (addresses only break best-fit
ties; :meth:`Replayer.laid_out` puts every segment at random, as another process layout would).
Replaying the profile's own list reproduces its pool and every block address
(:meth:`Replayer.check`).

Cost: one replay step per event of the list's buckets (a bucket's events are its layers' allocations
and frees, so they grow with the layer count; fewer where repeated layers are skipped), each O(log)
in the pool's blocks and segments: ``k`` buckets of ``E`` events cost O(k E log) once. Lists
replayed are kept in a prefix tree (capture order, largest first) with the pool after each of their
buckets; the state itself is kept where a list ends and where a later list leaves an earlier one's
path (up to ``CACHE_STATES`` states, least recently used dropped), so a list that shares leading
buckets with one replayed before replays only the buckets after the shared part, and the pool after
that part is known without a replay (:meth:`Replayer.known_pool`). A bucket replayed before from a
small state of the same content (pool, live blocks) is looked up instead of replayed
(:meth:`Replayer._memo_step`): where each bucket frees what it allocates the pool comes back to the
same few free segments after every bucket, whatever the list. :meth:`Replayer.pool_within` replays
only until the pool passes a limit (a second phase replayed into the pool the first left is
:mod:`bcgprof.analysis.predict.phase_replay`'s). ``Replayer.bucket_replays``,
``events_replayed`` and ``memo_hits`` count the work done. Torch-free.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Mapping, Sequence
from pathlib import Path
from random import Random
from typing import Optional, TypeVar, Union, cast

from bcgprof.analysis.predict import kept_replays, trace_cache
from bcgprof.analysis.predict.allocator import Pool
from bcgprof.analysis.predict.bucket_ops import BucketOps
from bcgprof.analysis.predict.fold import boundaries, rename, signature
from bcgprof.analysis.predict.memo import Memo, Node, PrefixTree, State
from bcgprof.analysis.predict.pool_replay import PoolReplay
from bcgprof.analysis.predict.sources import MODE_BITS, BucketSources, ReplayError
from bcgprof.analysis.predict.trace_set import ModeTrace, TraceSet
from bcgprof.report.traces import Trace, trace_files, trace_name

__all__ = ["MODE_BITS", "PoolReplay", "ReplayError", "Replayer"]


def _span(buckets: Sequence[int]) -> str:
    """A bucket list in a few words (its length and ends)."""
    if not buckets:
        return "(none)"
    return f"{len(buckets)} bucket(s), {buckets[0]} first and {buckets[-1]} last"


def _pool_replay(mode: str, plan: tuple, kept: list) -> PoolReplay:
    """A replay as :meth:`Replayer.keep_replays` kept it: ``[pool bytes after each bucket, exact,
    mismatches, made up]`` (ValueError unless it is whole)."""
    pools, exact, mismatches, made_up = kept
    if not (
        isinstance(pools, list)
        and len(pools) == len(plan)
        and all(type(p) is int for p in pools)
        and type(exact) is bool
        and type(mismatches) is int
        and type(made_up) is int
    ):
        raise ValueError("not a kept replay")
    return PoolReplay(
        mode=mode,
        buckets=[b for b, _ in plan],
        pool_bytes=pools,
        exact=exact,
        sources=[s for _, s in plan],
        mismatches=mismatches,
        made_up=made_up,
    )


R = TypeVar("R", bound="Replayer")  # a replayer's own class, a subclass's too


class Replayer:
    """Replays the traces of one report; states after each list prefix are cached. Where each
    bucket's events come from, and the traces' checks, are
    :class:`~bcgprof.analysis.predict.sources.BucketSources`'."""

    def __init__(
        self,
        traces: Union[TraceSet, Mapping[str, Union[Trace, Path, ModeTrace]]],
        below: bool = False,
        expected: Optional[dict[str, list[tuple[int, int]]]] = None,
        layout: Optional[int] = None,
    ):
        """``traces``: a :class:`~bcgprof.analysis.predict.trace_set.TraceSet`, or mode -> its trace
        (or the path of its file, read when first needed). ``below``, ``layout`` (a seed): where
        segments go (:class:`bcgprof.analysis.predict.allocator.Pool`'s ``below``, ``shuffle``).
        ``expected``: mode -> the report's measured (bucket, pool bytes) in capture order; a mode's
        trace is used only once the replay of its own list gives them (a damaged or another
        capture's would be "exact"); the trace set remembers the verdict."""
        if not isinstance(traces, TraceSet):
            traces = TraceSet(traces, expected)
        elif expected:
            traces.expected.update(TraceSet({}, expected).expected)
        # per profile, shared by the replayers made from one another (other placement, layouts):
        # the traces as prepared for replay, which trace each bucket comes from, replays known
        self.bucket_sources = BucketSources(traces, verify_trace)
        # per replayer: where new segments go, and what it replayed
        self.below, self.layout = below, layout
        self._twin: Optional[Replayer] = None
        self.tree = PrefixTree()
        self.memo = Memo()
        # buckets replayed (one per bucket of a list, after its longest kept prefix)
        self.bucket_replays = 0
        self.events_replayed = 0  # allocator events stepped through

    @property
    def memo_hits(self) -> int:
        """Buckets not replayed because the same bucket was replayed from the same state."""
        return self.memo.hits

    @classmethod
    def load(
        cls: type[R],
        report_dir: Path,
        modes: Sequence[str],
        expected: Optional[dict[str, list[tuple[int, int]]]] = None,
    ) -> Optional[R]:
        """The report's traces of ``modes`` (those present, read when first needed); None when it
        has none.
        ``expected``: as for the constructor."""
        found: dict[str, Union[Trace, Path, ModeTrace]] = dict(trace_files(report_dir, modes))
        return cls(found, expected=expected) if found else None

    def other_placement(self: R) -> R:
        """The same traces with segments that lack a recorded address put the other way (above or
        below every segment): where the two differ, the driver's address choice decides the pool."""
        if self._twin is None:
            twin = self._sibling(not self.below, None)
            twin._twin, self._twin = self, twin
        return cast(R, self._twin)  # made by _sibling: of self's class

    def laid_out(self: R, seed: int) -> R:
        """The same traces with every segment at a random address (seeded): another process
        layout."""
        return self._sibling(self.below, seed)

    def _sibling(self: R, below: bool, layout: Optional[int]) -> R:
        """A replayer of the same profile (its traces as prepared, what they were checked against
        and the replays known, shared) with its own placement and nothing replayed yet."""
        twin = type(self).__new__(type(self))  # a subclass's sibling is one of its kind
        twin.bucket_sources = self.bucket_sources
        twin.below, twin.layout, twin._twin = below, layout, None
        twin.tree, twin.memo = PrefixTree(), Memo()
        twin.bucket_replays = twin.events_replayed = 0
        return twin

    # ------------------------------------------------------------ replay

    def replay(
        self, mode: str, buckets: Sequence[int], check: bool = False, states: bool = False
    ) -> PoolReplay:
        """The pool after each bucket of ``mode``'s list. ``check``: count allocations the model
        places elsewhere than the profile's allocator did (0 for the profile's own list: the model
        is right). ``states``: a list replayed here from its start also gives the state after each
        bucket (:attr:`PoolReplay.states`)."""
        plan = self.bucket_sources.sources(mode, buckets)
        known = (
            None
            if check
            else self.bucket_sources.known.get((mode, tuple(plan), self.below, self.layout))
        )
        if known is not None:
            return known
        stored = None if check else kept_replays.stored(self, mode, plan)
        if stored is not None and stored[1] is not None:
            return _pool_replay(mode, tuple(plan), [stored[0], *stored[1]])
        path: Optional[list[State]] = [] if states else None
        state = self._advance(mode, plan, check, None, path)
        assert state is not None  # no limit: replayed to the end
        exact = not any(self.bucket_sources.ops[s][b].unknown for b, s in plan)
        if not check:
            done = (exact, state.mismatches, state.pool.made_up)
            kept_replays.learn(self, mode, plan, list(state.reserved), done)
        return PoolReplay(
            mode=mode,
            buckets=[b for b, _ in plan],
            pool_bytes=list(state.reserved),
            exact=exact,
            sources=[s for _, s in plan],
            mismatches=state.mismatches,
            made_up=state.pool.made_up,
            states=path if path is not None and len(path) == len(plan) else [],
        )

    def recall_replays(self, mode: str, lists: Sequence[Sequence[int]]) -> bool:
        """Take the replays of ``mode``'s ``lists`` (in both placements where they differ) that an
        earlier command kept for these traces (:meth:`keep_replays`), so that they are not replayed
        again; whether all were."""
        plans, parts, near = self._book(mode, lists)
        kept = trace_cache.recall("replays", parts, near) if parts else None
        if not isinstance(kept, list):
            return False  # none kept
        try:
            found = [
                [_pool_replay(mode, plan, e) for e in entry]
                for plan, entry in zip(plans, kept, strict=True)
            ]
        except (ValueError, TypeError, KeyError, IndexError):
            return False  # not whole
        if any(
            not replays or len(replays) != (2 if replays[0].made_up else 1) for replays in found
        ):
            return False  # the other placement, where it differs, is kept too
        twin = self.other_placement()
        for plan, replays in zip(plans, found):
            for replayer, replayed in zip((self, twin), replays):
                replayer.bucket_sources.known[(mode, plan, replayer.below, replayer.layout)] = (
                    replayed
                )
        return True

    def keep_replays(self, mode: str, lists: Sequence[Sequence[int]]) -> None:
        """Keep the replays of ``mode``'s ``lists`` (replayed now if they were not) for a later
        command on the same traces (:mod:`bcgprof.analysis.predict.trace_cache`, keyed by the
        traces' content and the lists)."""
        _, parts, near = self._book(mode, lists)
        if parts:
            entries = []
            for buckets in lists:
                replays = [self.replay(mode, buckets)]
                if replays[0].made_up:
                    replays.append(self.other_placement().replay(mode, buckets))
                entries.append([[r.pool_bytes, r.exact, r.mismatches, r.made_up] for r in replays])
            trace_cache.remember("replays", parts, entries, near)

    def _book(
        self, mode: str, lists: Sequence[Sequence[int]]
    ) -> tuple[list[tuple], Optional[list], Optional[Path]]:
        """Each list's plan, the key its replays are kept under (None for traces held in memory),
        and a trace."""
        plans = [tuple(self.bucket_sources.sources(mode, buckets)) for buckets in lists]
        used = sorted({s for plan in plans for _, s in plan})
        traces = [self.bucket_sources.traces.get(s) for s in used]
        digests = [t.digest if t is not None else "" for t in traces]
        if not all(digests):
            return plans, None, None
        parts = [
            mode,
            self.below,
            self.layout,
            dict(zip(used, digests)),
            [[list(x) for x in p] for p in plans],
        ]
        return plans, parts, traces[0].path if traces and traces[0] is not None else None

    def pool_within(self, mode: str, buckets: Sequence[int], limit: int) -> tuple[bool, int]:
        """Whether ``mode``'s list's pool stays within ``limit`` bytes, replaying only until it does
        not (the pool never falls): (True, the pool) or (False, the pool where it went above). A
        later :meth:`replay` of the list goes on from where this one stopped."""
        plan = self.bucket_sources.sources(mode, buckets)
        stored = kept_replays.stored(self, mode, plan)
        if stored is not None:
            pools, done = stored
            above = next((p for p in pools if p > limit), None)
            if above is not None:
                return False, above
            if done is not None:
                return True, pools[-1]
        state = self._advance(mode, plan, False, limit)
        if state is None:
            kept_replays.learn(self, mode, plan, self.tree.reached, None)
            return False, self.tree.stopped
        exact = not any(self.bucket_sources.ops[s][b].unknown for b, s in plan)
        done = (exact, state.mismatches, state.pool.made_up)
        kept_replays.learn(self, mode, plan, list(state.reserved), done)
        return True, state.reserved[-1]

    def keep_store(self, mode: str) -> None:
        """Keep the replays of ``mode``'s lists this command made, in both placements, for the next
        command on the same traces (:mod:`bcgprof.analysis.predict.kept_replays`)."""
        for replayer in (self, self._twin):
            if replayer is not None:
                kept_replays.keep(replayer, mode)

    def _advance(
        self,
        mode: str,
        plan: list[tuple[int, str]],
        check: bool,
        limit: Optional[int],
        states: Optional[list[State]] = None,
    ) -> Optional[State]:
        """The state after ``plan``, from the deepest state kept on its path; None as soon as the
        pool is above ``limit`` (its bytes in ``_stopped``; the state there kept for a later
        call). ``states``: gets a copy of the state after each bucket replayed (the last one
        itself)."""
        root = self._root(mode, check)
        path: list[Node] = []  # the nodes of the longest prefix replayed before
        kept = -1  # depth of the deepest node there that holds a state (-1: none)
        node: Optional[Node] = root
        for key in plan:
            node = node.children.get(key) if node is not None else None
            if node is None:
                break
            path.append(node)
            if limit is not None and node.reserved > limit:  # known from an earlier replay
                self.tree.stopped = node.reserved
                self.tree.reached = [n.reserved for n in path]
                return None
            if node.state is not None:
                kept = len(path) - 1
        held = path[kept].state if kept >= 0 else None
        if held is not None:
            self.tree.touch(path[kept])
            if kept == len(plan) - 1:
                return held  # replayed already (read it, do not change it)
            state = held.clone()
        else:
            state = State(
                Pool(
                    self.bucket_sources.settings[plan[0][1]],
                    self.below,
                    None if self.layout is None else Random(self.layout),
                ),
                {},
                {},
                [],
            )
        shared = len(path)
        parent = path[-1] if path else root
        for n in range(kept + 1, len(plan)):
            bucket, source = plan[n]
            state = self._memo_step(state, bucket, source, check)
            if states is not None:
                states.append(state if n == len(plan) - 1 else state.clone())
            above = limit is not None and state.reserved[-1] > limit
            if n < shared:
                here = path[n]
                if n == shared - 1 and shared < len(plan) and not above:
                    self.tree.keep(
                        here, state.clone()
                    )  # this list leaves a replayed one's path here
            else:
                here = Node(state.reserved[-1])
                parent.children[plan[n]] = here
                parent = here
            if above:
                if here.state is None:
                    self.tree.keep(here, state)
                self.tree.stopped = state.reserved[-1]
                self.tree.reached = list(state.reserved)
                return None
        end = path[len(plan) - 1] if len(plan) <= shared else parent
        if end.state is None:
            self.tree.keep(
                end, state
            )  # the list's own end: a later list that extends it starts here
        return state

    def _root(self, mode: str, check: bool) -> Node:
        """The prefix tree of ``mode``'s lists; a new one, for a replayer that places segments as
        recorded, starts with the check of the mode's trace (the profile's own list, a kept state
        after each bucket): a list that shares leading buckets with it replays only what follows.
        The check placed no segment without its recorded address (a made-up one would have put
        blocks elsewhere than recorded), so it holds for either placement."""
        key = (mode, check)
        if key in self.tree.roots or check or self.layout is not None:
            return self.tree.root(mode, check)
        root = self.tree.root(mode, check)
        number, checked = self.bucket_sources.paths.get(mode, (None, None))
        if checked is None or number != self.bucket_sources.number(mode) or checked.made_up:
            return root
        node = root
        for key_, state in zip(zip(checked.buckets, checked.sources), checked.states):
            child = node.children[key_] = Node(state.reserved[-1])
            if self.below:  # the same state, its later made-up segments going below
                state = state.clone()
                state.pool.below = True
            self.tree.keep(child, state)
            node = child
        return root

    def known_pool(self, mode: str, buckets: Sequence[int]) -> int:
        """The pool after the longest prefix of ``mode``'s list already replayed (0 if none): at
        most the list's pool, which never shrinks. Costs no replay."""
        return self.tree.known_pool(mode, self.bucket_sources.sources(mode, buckets))

    def _memo_step(self, state: State, bucket: int, source: str, check: bool) -> State:
        """The state after ``bucket``: a bucket replayed before from a state with the same content
        (pool, live blocks, and where each trace with frees inside captures stands) gives the same
        state, so a small state is looked up before it is replayed (a pool whose buckets free all
        they allocate comes back to the same few free segments bucket after bucket, whatever list it
        is in). States found that way share the memo's copy until they change."""
        content = state.content if state.content is not None else self.memo.content(state, check)
        if content is None:
            state.own()
            self._step(state, bucket, source, check)
            return state
        crossing = tuple(
            sorted((s, n) for s, n in state.at.items() if self.bucket_sources.crossing[s])
        )
        key = (bucket, source, content, crossing)
        after = self.memo.after.get(key)
        if after is None:
            state.own()
            self._step(state, bucket, source, check)
            self.memo.remember(key, state, check)
            return state
        pool, live, content = after
        at = dict(state.at)
        at[source] = max(at.get(source, -1), self.bucket_sources.position[source][bucket])
        self.memo.hits += 1
        state.reserved.append(pool.reserved)  # the state passed in is the caller's own, done with
        return State(pool, live, at, state.reserved, state.mismatches, content, borrowed=True)

    def _step(self, state: State, bucket: int, source: str, check: bool) -> None:
        order = self.bucket_sources.order[source]
        position = self.bucket_sources.position[source][bucket]
        last = state.at.get(source, -1)
        pool, live = state.pool, state.live
        crossing = self.bucket_sources.crossing[source]
        for at in crossing[bisect_right(crossing, last) : bisect_left(crossing, position)]:
            # frees inside captures left out of the list
            for k in self.bucket_sources.ops[source][order[at]].cross:
                addr = live.pop(k, None)
                if addr is not None:
                    pool.free_at(addr)
        state.at[source] = max(last, position)
        bops = self.bucket_sources.ops[source][bucket]
        self.bucket_replays += 1
        # check: every placement is compared
        if bops.fold is None or (check and not bops.from_trace):
            ops = bops.ops
            self.events_replayed += len(ops)
            self._run(state, ops, 0, len(ops), check)
        else:
            self._run_folded(state, bops, check)
        state.reserved.append(pool.reserved)

    @staticmethod
    def _run(
        state: State,
        ops: Sequence,
        begin: int,
        end: int,
        check: bool = False,
        placed: Optional[list] = None,
    ) -> None:
        """Events ``[begin, end)`` (:meth:`~bcgprof.analysis.predict.allocator.Pool.run`);
        ``check``: count allocations placed elsewhere than recorded; ``placed``: where each
        allocation went, by its index."""
        if end > begin:
            state.mismatches += state.pool.run(ops[begin:end], state.live, check, placed, begin)

    def _run_folded(self, state: State, bops: BucketOps, check: bool = False) -> None:
        """:meth:`_run` over the whole bucket, jumping over repeated periods where the state repeats
        (:mod:`bcgprof.analysis.predict.fold`): the same result, in a fraction of the steps. The
        events skipped place each allocation where the same event a cycle earlier did, so ``check``
        compares their recorded addresses with those
        (:meth:`~bcgprof.analysis.predict.trace_set.BucketOps.mismatches`) instead of replaying."""
        ops, frees = bops.lazy(), bops.frees  # the events made into tuples only where they are run
        assert bops.fold is not None
        placed = [-1] * len(ops) if check else None
        starts, end = boundaries(bops.fold)
        at = 0
        seen: dict[tuple, int] = {}  # signature -> index of the period start where it was seen
        for j, b in enumerate(starts):
            self._run(state, ops, at, b, check, placed)
            self.events_replayed += b - at
            at = b
            now = signature(state.pool.layout(), state.live, frees, b, end)
            if now in seen:  # the state repeats every (b - that start) events: skip whole repeats
                cycle = b - starts[seen[now]]
                shift = (end - b) // cycle * cycle
                renamed = rename(ops, state.live, frees, shift, end) if shift else None
                if renamed is not None:
                    if placed is not None:
                        state.mismatches += bops.mismatches(placed[b - cycle : b], b, b + shift)
                    state.live.clear()
                    state.live.update(renamed)
                    at = b + shift
                    break
            seen[now] = j
        self.events_replayed += len(ops) - at
        self._run(state, ops, at, len(ops), check, placed)

    def check(self, mode: str) -> PoolReplay:
        """The profile's own list of ``mode``, placements checked against the recorded addresses."""
        if not self.bucket_sources.has(mode):
            raise ReplayError(f"the report has no {mode} trace")
        return self.replay(mode, self.bucket_sources.order[mode], check=True)


def verify_trace(trace: ModeTrace, measured: list[tuple[int, int]]) -> PoolReplay:
    """Refuse ``trace`` unless replaying its own list gives the report's measured pool after
    every bucket (on every committed trace it does, to the byte), every block where it was
    recorded. The replay is a fresh one (placements as recorded), so the verdict depends on the
    trace and the figures alone; a trace read from a file keeps it in the cache
    (:mod:`bcgprof.analysis.predict.trace_cache`), keyed by the file's content and the figures,
    and the next command reads it there instead of replaying. Returns that replay: the own list's
    with placements as recorded, which a replayer then need not repeat (where the verdict came
    from the cache, the same replay read from the figures it matched, without the state after each
    bucket)."""
    mode, where = trace.mode, trace.path or trace_name(trace.mode)
    order = list(trace.order)
    if [b for b, _ in measured] != order:
        raise ReplayError(
            f"{where} holds buckets {_span(order)} where the report measured "
            f"{_span([b for b, _ in measured])}; the trace is damaged or another capture's: "
            "re-capture the report"
        )
    empty = [b for b in order if not trace.sizes.get(b)]
    if empty:  # every capture allocates in the graph pool (its output, its activations)
        raise ReplayError(
            f"{where} holds no graph-pool events for bucket(s) {_span(empty)}; the trace is "
            "damaged: re-capture the report"
        )
    parts = [trace.digest, mode, measured]
    kept = trace_cache.recall("verified", parts, trace.path) if trace.digest else None
    if isinstance(kept, dict) and type(kept.get("made_up")) is int and kept["made_up"] >= 0:
        return PoolReplay(
            mode=mode,
            buckets=order,
            pool_bytes=[pool for _, pool in measured],
            exact=not any(trace.unknown.get(b) for b in order),
            sources=[mode] * len(order),
            made_up=kept["made_up"],
        )
    try:
        replayed = Replayer(TraceSet({mode: trace})).replay(mode, order, check=True, states=True)
    except ReplayError as e:
        raise ReplayError(f"{where} cannot be replayed ({e}); re-capture the report") from None
    for (bucket, pool), got in zip(measured, replayed.pool_bytes, strict=True):
        if got != pool or replayed.mismatches:
            raise ReplayError(
                f"{where} does not replay to the report's own pool (bucket {bucket}: {got} "
                "bytes, "
                f"measured {pool}); the trace is damaged or another capture's: re-capture the "
                "report"
            )
    if trace.digest:
        trace_cache.remember("verified", parts, {"made_up": replayed.made_up}, trace.path)
    return replayed
