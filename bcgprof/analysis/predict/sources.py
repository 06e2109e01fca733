"""Where each bucket of a list gets its allocator events from, checked before any is replayed.

Mechanism. :class:`BucketSources` prepares each mode's trace once (from its
:class:`~bcgprof.analysis.predict.trace_set.TraceSet`: loaded, checked against the report's measured
pools by the ``verify`` the replayer gives it, :func:`bcgprof.analysis.predict.replay.verify_trace`)
and says, for a list, which trace each bucket's events come from (:meth:`BucketSources.sources`, the
rules in
:mod:`bcgprof.analysis.predict.replay`): the mode's own, or per-bucket's for a list's largest bucket
that keeps its own output where the mode's trace has it free its output. A bucket the profile did
not capture is drawn from the profiled buckets around it
(:mod:`bcgprof.analysis.predict.interpolate`):
whether it can be is decided once per pair of neighbours, and its events are made only when a replay
asks for them, so a list of thousands of buckets is checked in time linear in its length and refused
(:meth:`BucketSources.check_lists`) before any replay when its buckets not profiled hold more than
:data:`MAX_DRAWN_EVENTS` events.

Invariant: the keys of events are unique across traces and buckets (trace number, then allocation
number; an interpolated bucket's own range above :data:`FIRST_INTERPOLATED`), and a trace's number
is its mode's (:func:`trace_number`), whatever other traces the set holds: the check of a trace,
which replays it alone, names its events as every replayer of its report does, so the states it
passes through serve them (:attr:`BucketSources.paths`). Cost: per list, O(its
length) lookups; per pair of neighbours drawn from, O(their events) once. Torch-free.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Optional

from bcgprof.analysis.predict.allocator import AllocatorError, Settings, check_settings, round_size
from bcgprof.analysis.predict.bucket_ops import BucketOps, Drawn
from bcgprof.analysis.predict.fold import ALLOC, FREE
from bcgprof.analysis.predict.interpolate import Pattern, neighbours, pair_pattern
from bcgprof.analysis.predict.needs_free import WarmupGrowth
from bcgprof.analysis.predict.pool_replay import PoolReplay
from bcgprof.analysis.predict.trace_set import ModeTrace, TraceSet, TraceSetError
from bcgprof.report.trace_read import TRACE_MODES
from bcgprof.report.traces import TraceError
from bcgprof.vocab import Mode

MODE_BITS = 40  # an event key is (trace number << MODE_BITS) | allocation number
FIRST_INTERPOLATED = 1 << 12  # trace numbers from here on name interpolated buckets' events
BUCKET_BITS = 21  # a bucket is at most 1048576 tokens or sequences
MAX_DRAWN_EVENTS = (
    1_000_000  # events of buckets not profiled that one prediction may replay, over its modes
)


class ReplayError(TraceError):
    """Traces that cannot support a replay (exit 2)."""


def trace_numbers(modes: Sequence[str]) -> dict[str, int]:
    """Each trace's number in event keys: its mode's place among :data:`TRACE_MODES` (a name outside
    them, which only a trace held in memory can have, after those, in sorted order)."""
    known = {m: n + 1 for n, m in enumerate(TRACE_MODES)}
    others = sorted(set(modes) - set(known))
    return {**known, **{m: len(known) + n + 1 for n, m in enumerate(others)}}


class BucketSources:
    """Each mode's prepared trace, and which trace each bucket of a list is replayed from (module
    docstring): what one profile's replayers share (:attr:`Replayer.bucket_sources
    <bcgprof.analysis.predict.replay.Replayer>`), filled as each trace is first used."""

    def __init__(
        self,
        traces: TraceSet,
        verify: Callable[[ModeTrace, list[tuple[int, int]]], PoolReplay],
    ):
        """``verify``: refuses a trace (a :class:`ReplayError`) unless its own list replays to the
        report's measured pools; called once per trace, before it is first used. The replay it
        returns (placements as recorded) is known from then on (:attr:`known`), so a replayer
        asked for that list does not replay it again."""
        self.traces = traces
        self.verify = verify
        self.settings: dict[str, Settings] = {}
        self.ops: dict[str, dict[int, BucketOps]] = {}
        self.order: dict[str, list[int]] = {}
        self.profiled: dict[str, list[int]] = {}  # mode -> its trace's own buckets, ascending
        self.warmup: dict[
            str, dict[int, WarmupGrowth]
        ] = {}  # mode -> bucket -> its eager warm-up's growth
        self.leftover: dict[str, int] = {}  # mode -> what its pre-warm left for later warm-ups
        # mode -> bucket -> its place in the capture order (an interpolated bucket: between its
        # neighbours)
        self.position: dict[str, dict[int, float]] = {}
        self.crossing: dict[
            str, list[int]
        ] = {}  # mode -> places of buckets whose capture frees earlier blocks
        self.kept: dict[
            str, dict[int, int]
        ] = {}  # mode -> bucket -> rounded bytes it allocates that are never freed
        self._pairs: dict = {}  # (source, lower, upper) -> (their common pattern, or None; why not)
        self._drawn: dict[str, Drawn] = {}  # source -> its interpolated buckets' events
        self._numbers = trace_numbers(list(self.traces))
        # (mode, plan, below, layout) -> its replay, kept by an earlier command (trace_cache)
        self.known: dict = {}
        # (mode, below, layout) -> (replays kept by earlier commands, replays made by this one)
        self.stores: dict = {}
        # mode -> the check of its trace, when it replayed here: (trace number, the own list's
        # replay with the state after each bucket), where a replayer's lists may start from
        self.paths: dict[str, tuple[int, PoolReplay]] = {}

    @property
    def expected(self) -> dict[str, list[tuple[int, int]]]:
        return self.traces.expected

    def has(self, mode: str) -> bool:
        """Whether ``mode``'s trace is there (loaded, checked against the report's pools and
        prepared on the first call; a trace refused once is refused again)."""
        if mode in self.ops:
            return True
        traces = self.traces
        if mode in traces.refused:
            raise ReplayError(traces.refused[mode])
        try:
            trace = traces.get(mode)
        except TraceSetError as e:
            raise ReplayError(str(e)) from None
        if trace is None:
            return False
        try:
            settings = check_settings(trace.settings)
        except AllocatorError as e:
            raise ReplayError(
                f"{trace.path}: {e}; re-capture with the default PYTORCH_CUDA_ALLOC_CONF"
            ) from None
        replayed = None
        if mode in traces.expected and mode not in traces.verified:
            try:
                replayed = self.verify(trace, traces.expected[mode])
            except ReplayError as e:
                traces.refused[mode] = str(e)
                raise
            traces.verified.add(mode)
        if replayed is not None:  # the own list, with new segments placed above (not laid out)
            plan = tuple(zip(replayed.buckets, replayed.sources))
            self.known.setdefault((mode, plan, False, None), replayed)
            if replayed.states:
                self.paths[mode] = (trace_numbers([mode])[mode], replayed)
        base = self._numbers[mode] << MODE_BITS
        self.settings[mode] = settings
        self.ops[mode] = {b: trace.bucket_ops(b, base) for b in trace.order}
        self.order[mode] = list(trace.order)
        self.position[mode] = {b: i for i, b in enumerate(trace.order)}
        self.profiled[mode] = sorted(trace.order)  # before any bucket is interpolated into ops
        self.crossing[mode] = [i for i, b in enumerate(trace.order) if trace.cross.get(b)]
        self.kept[mode] = dict(trace.kept)
        self.warmup[mode] = dict(trace.warmup)
        self.leftover[mode] = trace.leftover
        return True

    # ------------------------------------------------------------ sources

    def sources(self, mode: str, buckets: Sequence[int]) -> list[tuple[int, str]]:
        """(bucket, trace mode) for each bucket of ``mode``'s list, in capture order (largest
        first). Every bucket is checked (a bucket not profiled: that it can be drawn from its
        neighbours) before any is replayed, and no event is made here: a list of thousands of
        buckets costs its length, and one pattern check per pair of profiled neighbours."""
        chosen = sorted(set(buckets), reverse=True)
        if mode == Mode.FLOOR:
            chosen = chosen[:1]
        out = []
        for i, b in enumerate(chosen):
            source = mode
            if i == 0 and mode in (Mode.SHARED_LARGEST, Mode.FLOOR) and not self._first_of(mode, b):
                source = (
                    Mode.PER_BUCKET
                )  # the list's largest keeps its own output, as per-bucket's capture did
            if not self.has(source):
                raise ReplayError(
                    f"the report has no {source} trace to replay {mode}'s bucket {b} from; "
                    f"capture with --modes including {source}"
                )
            if b not in self.ops[source]:
                self._interpolate(source, b)
            if not self.ops[source][b].complete:
                raise ReplayError(
                    f"the {source} trace of bucket {b} is incomplete (events were lost while "
                    "recording); re-capture the report"
                )
            out.append((b, source))
        return out

    def events(self, plan: Sequence[tuple[int, str]]) -> int:
        """The allocator events a replay of ``plan`` (from :meth:`sources`) steps through, before
        any fold or memo saves some: its buckets' events, counted without making them."""
        return sum(self.ops[source][b].size for b, source in plan)

    def check_lists(self, modes: Sequence[str], buckets: Sequence[int]) -> None:
        """Every mode's list checked (:meth:`sources`) before any is replayed, and refused when its
        buckets not profiled hold more than :data:`MAX_DRAWN_EVENTS` events over the modes: a
        prediction's work is then bounded by the traces' caps and this."""
        drawn = sum(
            self.ops[s][b].size
            for mode in modes
            for b, s in self.sources(mode, buckets)
            if self.ops[s][b].between
        )
        if drawn > MAX_DRAWN_EVENTS:
            count = len(
                {
                    b
                    for b in buckets
                    if all(b not in self.ops[m] or self.ops[m][b].between for m in modes)
                }
            )
            raise ReplayError(
                f"the list's {count} bucket(s) not profiled hold {drawn:,} allocator events to "
                f"replay over its modes, more than the {MAX_DRAWN_EVENTS:,} one prediction "
                "replays; predict fewer buckets between the profiled ones, or profile the buckets "
                "you need"
            )

    def _interpolate(self, source: str, bucket: int) -> BucketOps:
        """Events for ``bucket``, which ``source``'s trace lacks, from the profiled buckets around
        it (:mod:`bcgprof.analysis.predict.interpolate`; made when a replay first asks); refused
        outside the profiled range or where they differ."""
        ops = self.ops[source]
        profiled = self.profiled[source]
        around = neighbours(profiled, bucket)
        if around is None:
            raise ReplayError(
                f"bucket {bucket} lies outside the profiled buckets ({min(profiled)} to "
                f"{max(profiled)}); profile a range that includes it"
            )
        lower, upper = around
        for b in around:
            o = ops[b]
            if not o.complete:
                raise ReplayError(
                    f"the {source} trace of bucket {b} is incomplete (events were lost while "
                    f"recording), so bucket {bucket} cannot be drawn from it; re-capture the report"
                )
            if o.cross or o.unknown:
                raise ReplayError(
                    f"bucket {bucket} cannot be interpolated: the {source} capture of {b} frees "
                    "blocks of another bucket; profile it"
                )
        pattern, why = self._pattern(source, lower, upper)
        if pattern is None:
            raise ReplayError(f"bucket {bucket} cannot be interpolated: {why}; profile it")
        # a key of its own for every (trace, bucket): trace numbers from FIRST_INTERPOLATED on,
        # the bucket below
        base = (((FIRST_INTERPOLATED | self._numbers[source]) << BUCKET_BITS) | bucket) << MODE_BITS
        drawn = self._drawn.setdefault(source, Drawn())
        drawn.add(bucket, pattern)
        made = ops[bucket] = BucketOps(
            bucket, source, between=around, count=pattern.events, columns=(drawn, bucket, base)
        )
        # captured right after the larger neighbour (largest first): frees inside captures of
        # buckets left out
        # of a list are applied by place, and this one sits between its neighbours
        self.position[source][bucket] = self.position[source][upper] + 0.5
        growth = self.warmup.get(source, {})
        if (
            lower in growth and upper in growth
        ):  # the larger of the neighbours' warm-ups (see predict's notes)
            near = (growth[lower], growth[upper])
            peaks = [g.allocated_peak_bytes for g in near]
            growth[bucket] = WarmupGrowth(
                max(g.reserved_bytes for g in near),
                None if None in peaks else max(p or 0 for p in peaks),
            )
        return made

    def _pattern(self, source: str, lower: int, upper: int) -> tuple[Optional[Pattern], str]:
        """The events ``lower`` and ``upper`` share but for their sizes, or None and why not (once
        per pair)."""
        key = (source, lower, upper)
        if key not in self._pairs:
            ops = self.ops[source]
            found, why = pair_pattern(lower, ops[lower].shape(), upper, ops[upper].shape())
            if (
                why
                and source == Mode.SHARED_LARGEST
                and upper == self.order[source][0]
                and self.has(Mode.SHARED)
            ):
                # shared-largest's first bucket keeps its own output; a later bucket's capture is
                # what shared's capture of that bucket does (copy the output out, free it)
                alike = self.ops[Mode.SHARED].get(upper)
                if alike is not None and alike.complete and not alike.cross and not alike.unknown:
                    found, why = pair_pattern(lower, ops[lower].shape(), upper, alike.shape())
            self._pairs[key] = (found, why)
        return self._pairs[key]

    def number(self, mode: str) -> int:
        """``mode``'s trace number in event keys (:func:`trace_numbers`)."""
        return self._numbers[mode]

    def interpolated(self, source: str, bucket: int) -> Optional[tuple[int, int]]:
        """The profiled buckets ``bucket``'s events in ``source`` were drawn from; None when it was
        profiled."""
        ops = self.ops.get(source, {}).get(bucket)
        return ops.between if ops is not None else None

    def _first_of(self, mode: str, bucket: int) -> bool:
        order = self.order.get(mode) if self.has(mode) else None
        order = order or []
        return bool(order) and order[0] == bucket

    def kept_bytes(self, mode: str, buckets: Sequence[int]) -> int:
        """Bytes that ``mode``'s list allocates and never frees (each request rounded as the
        allocator rounds it): they are all live after its last bucket, so the list's pool is at
        least this. Costs no replay."""
        kept = 0
        for b, source in self.sources(mode, buckets):
            if b not in self.kept[source]:  # an interpolated bucket: from its events
                ops = self.ops[source][b].ops
                freed = {op[1] for op in ops if op[0] == FREE}
                self.kept[source][b] = sum(
                    round_size(op[1]) for op in ops if op[0] == ALLOC and op[3] not in freed
                )
            kept += self.kept[source][b]
        return kept
