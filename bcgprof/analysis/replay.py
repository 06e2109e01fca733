"""The graph pool of another bucket list, by replaying a profile's allocator traces.

A profile's report holds, per mode, the graph pool's events of every bucket's capture
(:mod:`bcgprof.report.traces`). A bucket's requests do not depend on what was captured before it
(the model code asks for the same sizes in the same order), so the pool of any list drawn
from the profiled buckets follows from replaying their events, in the list's capture order
(largest first), through the allocator model (:mod:`bcgprof.analysis.allocator`): every segment the
pool opens, hence its bytes after each bucket, is the allocator's own decision.

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
Replaying the profile's own list reproduces its pool and every block address (:meth:`Replayer.check`).

Cost: one replay step per event of the list's buckets (about 3,600 for a gpt-oss-20b bucket of 24
layers, some 2 microseconds each, fewer where repeated layers are skipped), each O(log) in the pool's
blocks and segments: ``k`` buckets of ``E`` events cost O(k E log) once. Lists replayed are kept in a
prefix tree (capture order, largest first) with the pool after each of their buckets; the state itself
is kept where a list ends and where a later list leaves an earlier one's path (up to ``CACHE_STATES``
states, least recently used dropped), so a list that shares leading buckets with one replayed before
replays only the buckets after the shared part, and the pool after that part is known without a replay
(:meth:`Replayer.known_pool`). A bucket replayed before from a small state of the same content (pool,
live blocks) is looked up instead of replayed (:meth:`Replayer._memo_step`): where each bucket frees
what it allocates the pool comes back to the same few free segments after every bucket, whatever the
list. :meth:`Replayer.pool_within` replays only until the pool passes a limit.
``Replayer.bucket_replays``, ``events_replayed`` and ``memo_hits`` count the work done. Torch-free.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from random import Random
from typing import Optional

from bcgprof.analysis.allocator import AllocatorError, Pool, Settings, check_settings, round_size
from bcgprof.analysis.headroom import WarmupGrowth, prewarm_leftover, warmup_growth
from bcgprof.analysis.replay_fold import ALLOC, FREE, boundaries, find_period, free_index, rename, signature
from bcgprof.analysis.replay_interpolate import interpolate_ops, neighbours
from bcgprof.report.traces import Action, Trace, TraceError, TracePhase, TracePool, read_trace, trace_name
from bcgprof.vocab import Mode

CACHE_STATES = 256  # replay states kept (each holds a pool's blocks)
MEMO_BLOCKS = 64  # a state of at most this many blocks is looked up by its content before a bucket is replayed
MEMO_STATES = 8192  # bucket replays remembered that way
MODE_BITS = 40  # an event key is (trace number << MODE_BITS) | allocation number
FIRST_INTERPOLATED = 1 << 12  # trace numbers from here on name interpolated buckets' events
BUCKET_BITS = 21  # a bucket is at most 1048576 tokens or sequences


class ReplayError(TraceError):
    """Traces that cannot support a replay (exit 2)."""


@dataclass
class BucketOps:
    """One bucket's graph-pool events in one trace: ``(ALLOC, requested, stream, key, segment address hint,
    recorded address)`` or ``(FREE, key)``, in order; ``cross``: keys of earlier buckets' blocks its capture
    frees; ``unknown``: graph-pool frees of blocks allocated before recording began."""

    bucket: int
    source: str
    ops: list = field(default_factory=list)
    cross: list = field(default_factory=list)
    unknown: int = 0
    complete: bool = True
    frees: dict = field(default_factory=dict)  # key -> index of the op that frees it
    fold: Optional[tuple[int, int, int]] = None  # a repeating region (bcgprof.analysis.replay_fold.find_period)
    between: Optional[tuple[int, int]] = None  # interpolated: the profiled buckets below and above it


def _bucket_ops(trace: Trace, number: int) -> tuple[dict[int, BucketOps], list[int]]:
    """Every recorded bucket's replayable events, and the buckets in capture order."""
    base = number << MODE_BITS
    out: dict[int, BucketOps] = {}
    owner: dict[int, int] = {}  # allocation number -> bucket
    seg_addr: dict[int, int] = {}
    order: list[int] = []
    for r in trace.rows:
        if r.pool != TracePool.GRAPH:
            continue
        if r.action in (Action.SEGMENT_ALLOC, Action.SEGMENT_EXISTS):
            seg_addr[r.id or 0] = r.address or 0
            continue
        if r.action not in (Action.ALLOC, Action.FREE_COMPLETED):
            continue  # free_requested: the block is free only at its completion
        ops = out.get(r.bucket)
        if ops is None:
            ops = out[r.bucket] = BucketOps(r.bucket, trace.mode, complete=r.bucket not in trace.incomplete)
            order.append(r.bucket)
        if r.action == Action.ALLOC:
            assert r.id is not None and r.segment is not None and r.offset is not None  # read_trace checks
            owner[r.id] = r.bucket
            hint = seg_addr.get(r.segment, 0)
            ops.ops.append((ALLOC, r.size, r.stream, base | r.id, hint, hint + r.offset))
        elif r.id is None or r.id not in owner:
            ops.unknown += 1  # allocated before recording began
        else:
            mine = owner[r.id]
            if mine == r.bucket:
                ops.ops.append((FREE, base | r.id))
            elif r.phase == TracePhase.WARMUP:  # after the owner's capture, before this one: the owner's end
                out[mine].ops.append((FREE, base | r.id))
            else:
                ops.ops.append((FREE, base | r.id))
                ops.cross.append(base | r.id)
    for b in trace.buckets:  # buckets whose capture touched no pool block still have a (empty) entry
        if b not in out:
            out[b] = BucketOps(b, trace.mode, complete=b not in trace.incomplete)
            order.append(b)
    order.sort(key=trace.buckets.index)
    for ops in out.values():
        ops.frees = free_index(ops.ops)
        ops.fold = find_period(ops.ops, ops.frees)
    return out, order


def _kept_bytes(ops: dict[int, BucketOps]) -> dict[int, int]:
    """bucket -> rounded bytes of its allocations that no event of the trace frees."""
    freed = {op[1] for bops in ops.values() for op in bops.ops if op[0] == FREE}
    return {b: sum(round_size(op[1]) for op in bops.ops if op[0] == ALLOC and op[3] not in freed)
            for b, bops in ops.items()}


@dataclass
class _State:
    pool: Pool
    live: dict  # event key -> block address
    at: dict  # trace mode -> position of its last replayed bucket
    reserved: list  # pool bytes after each bucket so far
    mismatches: int = 0
    content: Optional[int] = None  # the number of its content in Replayer's memo, when known and small
    borrowed: bool = False  # pool and live belong to the memo: copy them before changing them

    def clone(self) -> _State:
        return _State(self.pool.clone(), dict(self.live), dict(self.at), list(self.reserved), self.mismatches,
                      self.content)

    def own(self) -> None:
        """Copy what the memo lent, before a change."""
        if self.borrowed:
            self.pool, self.live, self.borrowed = self.pool.clone(), dict(self.live), False
        self.content = None


class _Node:
    """A prefix of the lists replayed: the pool after its last bucket, and the state there when kept."""

    __slots__ = ("children", "reserved", "state")

    def __init__(self, reserved: int = 0):
        self.children: dict = {}
        self.reserved = reserved
        self.state: Optional[_State] = None


def _span(buckets: Sequence[int]) -> str:
    """A bucket list in a few words (its length and ends)."""
    if not buckets:
        return "(none)"
    return f"{len(buckets)} bucket(s), {buckets[0]} first and {buckets[-1]} last"


@dataclass
class PoolReplay:
    """The replayed pool of one mode's list: bytes after each bucket (capture order) and what it rests on."""

    mode: str
    buckets: list[int]
    pool_bytes: list[int]
    exact: bool  # every graph-pool event of every bucket replayed (incomplete traces are refused)
    sources: list[str]  # the trace each bucket's events came from
    mismatches: int = 0  # with check: allocations placed elsewhere than recorded
    made_up: int = 0  # segments placed without a usable recorded address (0: the other placement is the same)


class Replayer:
    """Replays the traces of one report; states after each list prefix are cached."""

    def __init__(self, traces: dict[str, Trace | Path], below: bool = False,
                 expected: Optional[dict[str, list[tuple[int, int]]]] = None, layout: Optional[int] = None):
        """``traces``: mode -> its trace, or the path of its file (read when first needed). ``below``, ``layout``
        (a seed): where segments go (:class:`bcgprof.analysis.allocator.Pool`'s ``below``, ``shuffle``).
        ``expected``: mode -> the report's measured (bucket, pool bytes) in capture order; a mode's trace is
        used only once the replay of its own list gives them (a damaged or another capture's would be "exact")."""
        self.traces, self.below, self.layout = dict(traces), below, layout
        self._twin: Optional[Replayer] = None
        self.settings: dict[str, Settings] = {}
        self.ops: dict[str, dict[int, BucketOps]] = {}
        self.order: dict[str, list[int]] = {}
        self.profiled: dict[str, list[int]] = {}  # mode -> its trace's own buckets, ascending
        self.expected = dict(expected or {})
        self._refused: dict[str, str] = {}  # mode -> why its trace failed that check (asked again: refused again)
        self.warmup: dict[str, dict[int, WarmupGrowth]] = {}  # mode -> bucket -> its eager warm-up's growth
        self.leftover: dict[str, int] = {}  # mode -> what its pre-warm left for later warm-ups
        self.position: dict[str, dict[int, float]] = {}  # mode -> bucket -> its place in the capture order (an interpolated bucket: between its neighbours)
        self.crossing: dict[str, list[int]] = {}  # mode -> places of buckets whose capture frees earlier blocks
        self.kept: dict[str, dict[int, int]] = {}  # mode -> bucket -> rounded bytes it allocates that are never freed
        self._numbers = {mode: n + 1 for n, mode in enumerate(sorted(self.traces))}
        self._roots: dict[tuple[str, bool], _Node] = {}  # (mode, check) -> the prefix tree of lists replayed
        self._states: OrderedDict = OrderedDict()  # nodes holding a state, least recently used first
        self._stopped = 0  # the pool where the last replay with a limit went above it
        self._memo: dict = {}  # (bucket, source, small state's content, ...) -> (pool, live, content) after it
        self._contents: dict = {}  # small state's content -> its number
        self._numbered = 0  # numbers given so far
        self.memo_hits = 0  # buckets not replayed because the same bucket was replayed from the same state
        self.bucket_replays = 0  # buckets replayed (one per bucket of a list, after its longest kept prefix)
        self.events_replayed = 0  # allocator events stepped through

    @classmethod
    def load(cls, report_dir: Path, modes: Sequence[str],
             expected: Optional[dict[str, list[tuple[int, int]]]] = None) -> Optional[Replayer]:
        """The report's traces of ``modes`` (those present, read when first needed); None when it has none.
        ``expected``: as for the constructor."""
        found: dict[str, Trace | Path] = {}
        for mode in modes:
            path = Path(report_dir) / trace_name(mode)
            if path.exists() or path.is_symlink():  # a broken link is a damaged trace, which reading it says
                found[mode] = path
        return cls(found, expected=expected) if found else None

    def other_placement(self) -> Replayer:
        """The same traces with segments that lack a recorded address put the other way (above or below every
        segment): where the two differ, the driver's address choice decides the pool."""
        if self._twin is None:
            twin = self._sibling(not self.below, None)
            twin._twin, self._twin = self, twin
        return self._twin

    def laid_out(self, seed: int) -> Replayer:
        """The same traces with every segment at a random address (seeded): another process layout."""
        return self._sibling(self.below, seed)

    def _sibling(self, below: bool, layout: Optional[int]) -> Replayer:
        twin = Replayer(self.traces, below, layout=layout)  # shares what this one has read and interpolated
        for name in ("settings", "ops", "order", "profiled", "warmup", "leftover", "position", "crossing", "kept",
                     "_numbers", "expected", "_refused"):
            setattr(twin, name, getattr(self, name))  # the same dicts: a trace read by either serves both
        return twin

    def has(self, mode: str) -> bool:
        """Whether ``mode``'s trace is there (read and prepared on the first call)."""
        if mode in self._refused:
            raise ReplayError(self._refused[mode])
        if mode in self.ops:
            return True
        trace = self.traces.get(mode)
        if trace is None:
            return False
        if not isinstance(trace, Trace):
            path = trace
            trace = read_trace(path)
            if trace.mode != mode:
                raise ReplayError(f"{path} holds the trace of mode {trace.mode}; restore the report's own file")
        try:
            self.settings[mode] = check_settings(trace.settings)
        except AllocatorError as e:
            raise ReplayError(f"{trace.path}: {e}; re-capture with the default PYTORCH_CUDA_ALLOC_CONF") from None
        self.ops[mode], self.order[mode] = _bucket_ops(trace, self._numbers[mode])
        self.position[mode] = {b: i for i, b in enumerate(self.order[mode])}
        self.profiled[mode] = sorted(self.ops[mode])  # before any bucket is interpolated into ops
        self.crossing[mode] = [i for i, b in enumerate(self.order[mode]) if self.ops[mode][b].cross]
        self.kept[mode] = _kept_bytes(self.ops[mode])
        self.warmup[mode] = warmup_growth(trace)
        self.leftover[mode] = prewarm_leftover(trace)
        if mode in self.expected:
            try:
                self._verify(mode, trace.path)
            except ReplayError as e:
                self._refused[mode] = str(e)
                raise
        return True

    def _verify(self, mode: str, path: Optional[Path]) -> None:
        """Refuse ``mode``'s trace unless replaying its own list gives the report's measured pool after every
        bucket (on every committed trace it does, to the byte)."""
        where = path or trace_name(mode)
        measured = self.expected[mode]
        if [b for b, _ in measured] != self.order[mode]:
            raise ReplayError(f"{where} holds buckets {_span(self.order[mode])} where the report measured "
                              f"{_span([b for b, _ in measured])}; the trace is damaged or another capture's: "
                              "re-capture the report")
        empty = [b for b in self.order[mode] if not self.ops[mode][b].ops]
        if empty:  # every capture allocates in the graph pool (its output, its activations)
            raise ReplayError(f"{where} holds no graph-pool events for bucket(s) {_span(empty)}; the trace is "
                              "damaged: re-capture the report")
        try:
            replayed = self.replay(mode, self.order[mode], check=True)
        except ReplayError as e:
            raise ReplayError(f"{where} cannot be replayed ({e}); re-capture the report") from None
        for (bucket, pool), got in zip(measured, replayed.pool_bytes, strict=True):
            if got != pool or replayed.mismatches:
                raise ReplayError(f"{where} does not replay to the report's own pool (bucket {bucket}: {got} bytes, "
                                  f"measured {pool}); the trace is damaged or another capture's: re-capture the report")

    # ------------------------------------------------------------ sources

    def sources(self, mode: str, buckets: Sequence[int]) -> list[tuple[int, str]]:
        """(bucket, trace mode) for each bucket of ``mode``'s list, in capture order (largest first)."""
        chosen = sorted(set(buckets), reverse=True)
        if mode == Mode.FLOOR:
            chosen = chosen[:1]
        out = []
        for i, b in enumerate(chosen):
            source = mode
            if i == 0 and mode in (Mode.SHARED_LARGEST, Mode.FLOOR) and not self._first_of(mode, b):
                source = Mode.PER_BUCKET  # the list's largest keeps its own output, as per-bucket's capture did
            if not self.has(source):
                raise ReplayError(f"the report has no {source} trace to replay {mode}'s bucket {b} from; "
                                  f"capture with --modes including {source}")
            if b not in self.ops[source]:
                self._interpolate(source, b)
            if not self.ops[source][b].complete:
                raise ReplayError(f"the {source} trace of bucket {b} is incomplete (events were lost while "
                                  "recording); re-capture the report")
            out.append((b, source))
        return out

    def _interpolate(self, source: str, bucket: int) -> BucketOps:
        """Events for ``bucket``, which ``source``'s trace lacks, from the profiled buckets around it
        (:mod:`bcgprof.analysis.replay_interpolate`); refused outside the profiled range or where they differ."""
        ops = self.ops[source]
        profiled = self.profiled[source]
        around = neighbours(profiled, bucket)
        if around is None:
            raise ReplayError(f"bucket {bucket} lies outside the profiled buckets ({min(profiled)} to "
                              f"{max(profiled)}); profile a range that includes it")
        lower, upper = around
        low, high = ops[lower], ops[upper]
        for b, o in ((lower, low), (upper, high)):
            if not o.complete:
                raise ReplayError(f"the {source} trace of bucket {b} is incomplete (events were lost while "
                                  f"recording), so bucket {bucket} cannot be drawn from it; re-capture the report")
            if o.cross or o.unknown:
                raise ReplayError(f"bucket {bucket} cannot be interpolated: the {source} capture of {b} frees blocks "
                                  "of another bucket; profile it")
        # a key of its own for every (trace, bucket): trace numbers from FIRST_INTERPOLATED on, the bucket below
        number = ((FIRST_INTERPOLATED | self._numbers[source]) << BUCKET_BITS) | bucket
        events, why = interpolate_ops(bucket, lower, low.ops, upper, high.ops, number << MODE_BITS)
        if why and source == Mode.SHARED_LARGEST and upper == self.order[source][0] and self.has(Mode.SHARED):
            # shared-largest's first bucket keeps its own output; a later bucket's capture is what shared's capture
            # of that bucket does (copy the output out, free it)
            alike = self.ops[Mode.SHARED].get(upper)
            if alike is not None and alike.complete and not alike.cross and not alike.unknown:
                events, why = interpolate_ops(bucket, lower, low.ops, upper, alike.ops, number << MODE_BITS)
        if why:
            raise ReplayError(f"bucket {bucket} cannot be interpolated: {why}; profile it")
        made = ops[bucket] = BucketOps(bucket, source, events, between=(lower, upper))
        made.frees = free_index(events)
        made.fold = find_period(events, made.frees)
        # captured right after the larger neighbour (largest first): frees inside captures of buckets left out
        # of a list are applied by place, and this one sits between its neighbours
        self.position[source][bucket] = self.position[source][upper] + 0.5
        self.kept[source][bucket] = _kept_bytes({bucket: made})[bucket]
        growth = self.warmup.get(source, {})
        if lower in growth and upper in growth:  # the larger of the neighbours' warm-ups (see predict's notes)
            near = (growth[lower], growth[upper])
            peaks = [g.allocated_peak_bytes for g in near]
            growth[bucket] = WarmupGrowth(max(g.reserved_bytes for g in near),
                                          None if None in peaks else max(p or 0 for p in peaks))
        return made

    def interpolated(self, source: str, bucket: int) -> Optional[tuple[int, int]]:
        """The profiled buckets ``bucket``'s events in ``source`` were drawn from; None when it was profiled."""
        ops = self.ops.get(source, {}).get(bucket)
        return ops.between if ops is not None else None

    def _first_of(self, mode: str, bucket: int) -> bool:
        order = self.order.get(mode) if self.has(mode) else None
        order = order or []
        return bool(order) and order[0] == bucket

    # ------------------------------------------------------------ replay

    def replay(self, mode: str, buckets: Sequence[int], check: bool = False) -> PoolReplay:
        """The pool after each bucket of ``mode``'s list. ``check``: count allocations the model places
        elsewhere than the profile's allocator did (0 for the profile's own list: the model is right)."""
        plan = self.sources(mode, buckets)
        state = self._advance(mode, plan, check, None)
        assert state is not None  # no limit: replayed to the end
        exact = not any(self.ops[s][b].unknown for b, s in plan)
        return PoolReplay(mode=mode, buckets=[b for b, _ in plan], pool_bytes=list(state.reserved), exact=exact,
                          sources=[s for _, s in plan], mismatches=state.mismatches, made_up=state.pool.made_up)

    def pool_within(self, mode: str, buckets: Sequence[int], limit: int) -> tuple[bool, int]:
        """Whether ``mode``'s list's pool stays within ``limit`` bytes, replaying only until it does not (the
        pool never falls): (True, the pool) or (False, the pool where it went above). A later :meth:`replay`
        of the list goes on from where this one stopped."""
        state = self._advance(mode, self.sources(mode, buckets), False, limit)
        if state is None:
            return False, self._stopped
        return True, state.reserved[-1]

    def _advance(self, mode: str, plan: list[tuple[int, str]], check: bool, limit: Optional[int]
                 ) -> Optional[_State]:
        """The state after ``plan``, from the deepest state kept on its path; None as soon as the pool is
        above ``limit`` (its bytes in ``_stopped``; the state there kept for a later call)."""
        root = self._roots.setdefault((mode, check), _Node())
        path: list[_Node] = []  # the nodes of the longest prefix replayed before
        kept = -1  # depth of the deepest node there that holds a state (-1: none)
        node: Optional[_Node] = root
        for key in plan:
            node = node.children.get(key) if node is not None else None
            if node is None:
                break
            path.append(node)
            if limit is not None and node.reserved > limit:  # known from an earlier replay
                self._stopped = node.reserved
                return None
            if node.state is not None:
                kept = len(path) - 1
        held = path[kept].state if kept >= 0 else None
        if held is not None:
            self._states.move_to_end(path[kept])
            if kept == len(plan) - 1:
                return held  # replayed already (read it, do not change it)
            state = held.clone()
        else:
            state = _State(Pool(self.settings[plan[0][1]], self.below,
                                None if self.layout is None else Random(self.layout)), {}, {}, [])
        shared = len(path)
        parent = path[-1] if path else root
        for n in range(kept + 1, len(plan)):
            bucket, source = plan[n]
            state = self._memo_step(state, bucket, source, check)
            above = limit is not None and state.reserved[-1] > limit
            if n < shared:
                here = path[n]
                if n == shared - 1 and shared < len(plan) and not above:
                    self._keep(here, state.clone())  # this list leaves a replayed one's path here
            else:
                here = _Node(state.reserved[-1])
                parent.children[plan[n]] = here
                parent = here
            if above:
                if here.state is None:
                    self._keep(here, state)
                self._stopped = state.reserved[-1]
                return None
        end = path[len(plan) - 1] if len(plan) <= shared else parent
        if end.state is None:
            self._keep(end, state)  # the list's own end: a later list that extends it starts here
        return state

    def _keep(self, node: _Node, state: _State) -> None:
        node.state = state
        self._states[node] = None
        self._states.move_to_end(node)
        while len(self._states) > CACHE_STATES:
            old, _ = self._states.popitem(last=False)
            old.state = None

    def known_pool(self, mode: str, buckets: Sequence[int]) -> int:
        """The pool after the longest prefix of ``mode``'s list already replayed (0 if none): at most the
        list's pool, which never shrinks. Costs no replay."""
        plan = self.sources(mode, buckets)
        node, reserved = self._roots.get((mode, False)), 0
        for key in plan:
            node = node.children.get(key) if node is not None else None
            if node is None:
                break
            reserved = node.reserved
        return reserved

    def kept_bytes(self, mode: str, buckets: Sequence[int]) -> int:
        """Bytes that ``mode``'s list allocates and never frees (each request rounded as the allocator rounds
        it): they are all live after its last bucket, so the list's pool is at least this. Costs no replay."""
        return sum(self.kept[source][b] for b, source in self.sources(mode, buckets))

    def _memo_step(self, state: _State, bucket: int, source: str, check: bool) -> _State:
        """The state after ``bucket``: a bucket replayed before from a state with the same content (pool, live
        blocks, and where each trace with frees inside captures stands) gives the same state, so a small state is
        looked up before it is replayed (a pool whose buckets free all they allocate comes back to the same
        few free segments bucket after bucket, whatever list it is in). States found that way share the memo's
        copy until they change."""
        content = state.content if state.content is not None else self._content(state, check)
        if content is None:
            state.own()
            self._step(state, bucket, source, check)
            return state
        crossing = tuple(sorted((s, n) for s, n in state.at.items() if self.crossing[s]))
        key = (bucket, source, content, crossing)
        after = self._memo.get(key)
        if after is None:
            state.own()
            self._step(state, bucket, source, check)
            if len(self._memo) >= MEMO_STATES:
                self._memo.clear()
            state.content = self._content(state, check)
            self._memo[key] = (state.pool.clone(), dict(state.live), state.content)
            return state
        pool, live, content = after
        at = dict(state.at)
        at[source] = max(at.get(source, -1), self.position[source][bucket])
        self.memo_hits += 1
        state.reserved.append(pool.reserved)  # the state passed in is the caller's own, done with
        return _State(pool, live, at, state.reserved, state.mismatches, content, borrowed=True)

    def _content(self, state: _State, check: bool) -> Optional[int]:
        """A number for the state's content (its pool's fingerprint and live blocks), if it is small enough
        to be worth looking up; None otherwise."""
        if check or len(state.pool._blocks) > MEMO_BLOCKS:
            return None
        key = (state.pool.fingerprint(), tuple(sorted(state.live.items())))
        number = self._contents.get(key)
        if number is None:
            if len(self._contents) >= MEMO_STATES:
                self._contents.clear()  # numbers are never reused: states holding old ones stay right
                self._memo.clear()
            number = self._contents[key] = self._numbered
            self._numbered += 1
        return number

    def _step(self, state: _State, bucket: int, source: str, check: bool) -> None:
        order = self.order[source]
        position = self.position[source][bucket]
        last = state.at.get(source, -1)
        pool, live = state.pool, state.live
        crossing = self.crossing[source]
        for at in crossing[bisect_right(crossing, last): bisect_left(crossing, position)]:
            for k in self.ops[source][order[at]].cross:  # frees inside captures left out of the list
                addr = live.pop(k, None)
                if addr is not None:
                    pool.free_at(addr)
        state.at[source] = max(last, position)
        bops = self.ops[source][bucket]
        ops = bops.ops
        self.bucket_replays += 1
        if check or bops.fold is None:  # check: every placement is compared, so nothing is skipped
            self.events_replayed += len(ops)
            self._run(state, ops, 0, len(ops), check)
        else:
            self._run_folded(state, bops)
        state.reserved.append(pool.reserved)

    @staticmethod
    def _run(state: _State, ops: list, begin: int, end: int, check: bool = False) -> None:
        pool, live = state.pool, state.live
        malloc, free_at = pool.malloc, pool.free_at
        for op in ops[begin:end]:
            if op[0] == ALLOC:
                block, _ = malloc(op[1], op[2], op[4])
                live[op[3]] = block.addr
                if check and block.addr != op[5]:
                    state.mismatches += 1
            else:
                addr = live.pop(op[1], None)
                if addr is not None:  # None: its allocation belongs to a bucket not in the list
                    free_at(addr)

    def _run_folded(self, state: _State, bops: BucketOps) -> None:
        """:meth:`_run` over the whole bucket, jumping over repeated periods where the state repeats
        (:mod:`bcgprof.analysis.replay_fold`): the same result, in a fraction of the steps."""
        ops, frees = bops.ops, bops.frees
        assert bops.fold is not None
        starts, end = boundaries(bops.fold)
        at = 0
        seen: dict[tuple, int] = {}  # signature -> index of the period start where it was seen
        for j, b in enumerate(starts):
            self._run(state, ops, at, b)
            self.events_replayed += b - at
            at = b
            now = signature(state.pool.layout(), state.live, frees, b, end)
            if now in seen:  # the state repeats every (b - that start) events: skip whole repeats
                cycle = b - starts[seen[now]]
                shift = (end - b) // cycle * cycle
                renamed = rename(ops, state.live, frees, shift, end) if shift else None
                if renamed is not None:
                    state.live.clear()
                    state.live.update(renamed)
                    at = b + shift
                    break
            seen[now] = j
        self.events_replayed += len(ops) - at
        self._run(state, ops, at, len(ops))

    def check(self, mode: str) -> PoolReplay:
        """The profile's own list of ``mode``, placements checked against the recorded addresses."""
        if not self.has(mode):
            raise ReplayError(f"the report has no {mode} trace")
        return self.replay(mode, self.order[mode], check=True)
