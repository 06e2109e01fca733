"""Two phases captured into one pool, predicted from each phase's own traced profile:
``bcgprof predict --from SECOND --after FIRST``.

Mechanism. Each profile is a one-phase report with allocator traces (the phases alone that
``capture --phase prefill,decode`` writes under its report, or any two one-phase captures of one
model). Per mode both have, the first profile's own list is replayed
(:class:`~bcgprof.analysis.predict.replay.Replayer`, checked against its measured pools as every
replay is), and the second profile's own list is replayed into the pool that replay left
(:mod:`bcgprof.analysis.predict.phase_replay`): the first phase's live blocks stay
allocated, its free blocks serve the second phase's requests by the allocator's rules, and the
second trace's stream is taken for the first's (one process captures both on one stream). The
pool after the last bucket is the pair's predicted pool; each phase alone is its own replay, which
equals what it measured. Where segments had to be placed without a recorded address, the pair is
replayed with them placed the other way too, and given where it differs.

Invariant: a figure here is labelled predicted; a phase alone is the replay of what was measured.
Blocks the first phase frees after its last capture ended are in no trace (no later window records
them), so the prediction keeps them allocated where the process had freed them before the second
phase began: the pair's second phase has that much less room to reuse here.

Cost: one replay of each profile's list, then the second list again onto the first's end (twice
where a placement was made up); each mode's figures are kept under the cache
(:mod:`bcgprof.analysis.predict.trace_cache`, keyed by both traces' content and both lists), so a
later command on the same pair checks both traces (:meth:`~bcgprof.analysis.predict.sources.
BucketSources.has`, itself kept) and looks the figures up instead of replaying.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from bcgprof.analysis.predict import trace_cache
from bcgprof.analysis.predict.phase_replay import PhaseReplayer
from bcgprof.analysis.predict.prediction import check_usable, report_rows
from bcgprof.analysis.predict.replay import ReplayError
from bcgprof.analysis.predict.side_by_side import check_traces
from bcgprof.errors import PredictionError
from bcgprof.report import Report

PREDICTED = "predicted"


@dataclass
class PairMode:
    """One mode's pool, in bytes: each phase alone (replayed from its profile) and the pair
    (predicted)."""

    mode: str
    first_alone_bytes: int
    second_alone_bytes: int
    pair_bytes: int  # predicted
    exact: bool  # every event of both lists replayed
    made_up: int  # segments placed without a recorded address (see Replayer)
    # the pair with those segments placed the other way (above or below every segment), where
    # that changes it: the driver's address choice then decides the pool
    other_placement_pair_bytes: Optional[int] = None

    @property
    def larger_alone_bytes(self) -> int:
        return max(self.first_alone_bytes, self.second_alone_bytes)

    @property
    def beyond_larger_bytes(self) -> int:
        return self.pair_bytes - self.larger_alone_bytes

    @property
    def saved_vs_pools_per_phase_bytes(self) -> int:
        return self.first_alone_bytes + self.second_alone_bytes - self.pair_bytes

    def to_json(self) -> dict:
        return {
            "mode": self.mode,
            "kind": PREDICTED,
            "first_alone_bytes": self.first_alone_bytes,
            "second_alone_bytes": self.second_alone_bytes,
            "pair_bytes": self.pair_bytes,
            "larger_alone_bytes": self.larger_alone_bytes,
            "beyond_larger_bytes": self.beyond_larger_bytes,
            "saved_vs_pools_per_phase_bytes": self.saved_vs_pools_per_phase_bytes,
            "exact": self.exact,
            "made_up_segments": self.made_up,
            "other_placement_pair_bytes": self.other_placement_pair_bytes,
        }


@dataclass
class PairPrediction:
    """The pool of ``phases`` (first, second) in one pool, per mode the two profiles share."""

    first: Path
    second: Path
    phases: tuple[str, str]
    model: str
    modes: list[PairMode] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        return {
            "kind": "pair",
            "label": "predicted, not measured",
            "first": str(self.first),
            "second": str(self.second),
            "phases": list(self.phases),
            "model": self.model,
            "modes": [m.to_json() for m in self.modes],
            "notes": list(self.notes),
        }


def _replayer(report: Report) -> tuple[PhaseReplayer, dict[str, list[int]]]:
    """The report's replayer (its traces checked against its measured pools) and each mode's list
    in capture order."""
    check_usable(report)
    lists = {m: [r.bucket for r in report_rows(report, m)] for m in report.modes()}
    measured = {m: [(r.bucket, r.pool_bytes) for r in report_rows(report, m)] for m in lists}
    replayer = PhaseReplayer.load(report.path, list(lists), expected=measured)
    if replayer is None:
        raise PredictionError(
            f"{report.path} has no allocator traces; predict a pair from two traced one-phase "
            "captures (capture --phase prefill,decode writes them under its report)"
        )
    return replayer, lists


def _check_pair(first: Report, second: Report) -> None:
    a, b = first.run, second.run
    if a.config_hash != b.config_hash or a.layers != b.layers:
        raise PredictionError(
            f"{first.path} and {second.path} are captures of different models or depths "
            f"({a.model}, {a.layers} layers; {b.model}, {b.layers} layers); a pair shares one model"
        )
    if a.phase == b.phase:
        raise PredictionError(
            f"{first.path} and {second.path} both capture {a.phase}; --after names the phase "
            "captured before --from's (SGLang: prefill before decode)"
        )


def predict_pair(first: Report, second: Report) -> PairPrediction:
    """Per mode both profiles captured and traced: ``second``'s list replayed into the pool
    ``first``'s left (see the module docstring)."""
    _check_pair(first, second)
    before, first_lists = _replayer(first)
    after, second_lists = _replayer(second)
    out = PairPrediction(
        first.path, second.path, (first.run.phase, second.run.phase), first.run.model
    )
    shared = [m for m in first_lists if m in second_lists]
    if not shared:
        raise PredictionError(
            f"{first.path} and {second.path} share no mode with traces; capture both with the "
            "same --modes"
        )
    # the four traces read and checked side by side: the loop below finds them done
    check_traces([(r.bucket_sources, m) for m in shared for r in (before, after)])
    for mode in shared:
        a, b = first_lists[mode], second_lists[mode]
        try:
            parts, kept = None, None
            # both traces checked against their reports (or their kept verdicts) before any use
            if before.bucket_sources.has(mode) and after.bucket_sources.has(mode):
                parts = _kept_parts(before, after, mode, a, b)
            if parts is not None:
                kept = _kept(trace_cache.recall("pair", parts, _near(before, mode)), mode)
            if kept is not None:
                found, notes = kept
            else:
                found, notes = _replayed(before, after, mode, a, b)
                if parts is not None:
                    value = [*_figures(found), notes]
                    trace_cache.remember("pair", parts, value, _near(before, mode))
        except ReplayError as e:
            raise PredictionError(f"{mode}: {e}") from None
        out.notes += notes
        out.modes.append(found)
    return out


def _replayed(
    before: PhaseReplayer, after: PhaseReplayer, mode: str, a: list[int], b: list[int]
) -> tuple[PairMode, list[str]]:
    """``mode``'s pair, replayed, and its notes."""
    notes: list[str] = []
    alone_a, alone_b = before.replay(mode, a), after.replay(mode, b)
    streams = _stream_map(after.streams(mode, b), before.streams(mode, a), notes, mode)
    pair = after.replay_onto(before.end_state(mode, a), mode, b, streams)
    other = None
    if pair.made_up:
        twin_before, twin_after = before.other_placement(), after.other_placement()
        state = twin_before.end_state(mode, a)
        other = twin_after.replay_onto(state, mode, b, streams).pool_bytes[-1]
    found = PairMode(
        mode=mode,
        first_alone_bytes=alone_a.pool_bytes[-1],
        second_alone_bytes=alone_b.pool_bytes[-1],
        pair_bytes=pair.pool_bytes[-1],
        exact=alone_a.exact and alone_b.exact and pair.exact,
        made_up=pair.made_up,
        other_placement_pair_bytes=other if other != pair.pool_bytes[-1] else None,
    )
    return found, notes


def _kept_parts(
    before: PhaseReplayer, after: PhaseReplayer, mode: str, a: list[int], b: list[int]
) -> Optional[list]:
    """What a mode's pair is kept under: both traces' digests and both lists (None for a trace
    held in memory)."""
    first, second = before.bucket_sources.traces.get(mode), after.bucket_sources.traces.get(mode)
    if first is None or second is None or not first.digest or not second.digest:
        return None
    return [mode, first.digest, second.digest, list(a), list(b)]


def _near(replayer: PhaseReplayer, mode: str) -> Optional[Path]:
    trace = replayer.bucket_sources.traces.get(mode)
    return trace.path if trace is not None else None


def _figures(found: PairMode) -> list:
    return [
        found.first_alone_bytes,
        found.second_alone_bytes,
        found.pair_bytes,
        found.exact,
        found.made_up,
        found.other_placement_pair_bytes,
    ]


def _kept(value: object, mode: str) -> Optional[tuple[PairMode, list[str]]]:
    """A kept pair (:func:`_figures` and its notes), if it reads back whole."""
    if not (isinstance(value, list) and len(value) == 7):
        return None
    first, second, pair, exact, made_up, other, notes = value
    if not (
        all(type(v) is int for v in (first, second, pair, made_up))
        and type(exact) is bool
        and (other is None or type(other) is int)
        and isinstance(notes, list)
        and all(isinstance(n, str) for n in notes)
    ):
        return None
    return PairMode(mode, first, second, pair, exact, made_up, other), notes


def _stream_map(second: list[int], first: list[int], notes: list[str], mode: str) -> dict[int, int]:
    """The second trace's streams -> the first's, in the order each first names them (one process
    captures every phase on its capture stream)."""
    if len(second) != len(first):
        notes.append(
            f"{mode}: the two traces name {len(first)} and {len(second)} streams; the first "
            f"{min(len(first), len(second))} are taken for one another"
        )
    return dict(zip(second, first))
