"""Several phases captured in one process into one graph pool, as SGLang captures its prefill
graphs and then its decode graphs (``capture_cuda_graphs`` in
``model_runner_components/cuda_graph_setup.py``: prefill before decode, both runners allocating
from the one pool of ``runner_utils/pool.py`` ``get_or_create_global_graph_memory_pool``).

:class:`PhasedCapturer` runs the phases one after another in the phases' order, each with a
:class:`~bcgprof.measure.capture.Capturer` of its own made on the same pool handle: the phase is
made active on the shared model (:attr:`~bcgprof.measure.workload.Workload.activate`), its
Capturer is made, then its buckets are warmed up, captured and measured as a one-phase capture's
are, into the pool the phases before it left. Each phase keeps its own graphs, shared output
buffer (shared modes) and prewarm, as each engine runner does. The rows it yields carry their
phase, and their ``order`` counts the mode's captures across the phases, so the pool column is
the one pool's running total. A failed bucket ends the mode: no later bucket or phase is
captured.

It answers what :func:`bcgprof.measure.mode.run_mode` asks of a Capturer (run, verify, close, the
counters), so the mode loop is the same for one phase and several. Replay checks run after every
phase is captured, each phase made active again before its own. Cost: one Capturer per phase,
nothing else.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Optional

from bcgprof.report import BucketRecord
from bcgprof.report.phased import capture_order
from bcgprof.vocab import BucketStatus, Mode


@dataclass
class PhaseWork:
    """One phase of a mode's process: its word, its buckets, its input buffers and refill, and
    what readies the shared model for it."""

    phase: str
    buckets: list[int]
    inputs: list
    refill: Callable
    activate: Callable[[], None]


@dataclass
class PhasedResult:
    """What the mode loop reads of a capture's result: every phase's rows, in capture order (no
    pool peak by model site: sites are a one-phase floor's)."""

    records: list[BucketRecord] = field(default_factory=list)
    pool_peak: Any = None


@dataclass
class _Samples:
    samples: int


class PhasedCapturer:
    """One mode's phases, captured one after another into one pool (see the module docstring).

    ``make_capturer(fn, inputs, buckets, pool=...)`` makes one phase's Capturer (the mode loop
    binds the options, mode, device and readings); ``pool`` is the handle every phase's Capturer
    gets, made once by ``new_pool``. A phase's Capturer is made when the phase begins, so that no
    later phase's peak sampler runs while an earlier phase is measured; ``mode`` and ``order``
    give the buckets' capture order before then (:func:`~bcgprof.report.phased.capture_order`).
    """

    def __init__(
        self,
        fn: Callable,
        phases: Sequence[PhaseWork],
        make_capturer: Callable[..., Any],
        new_pool: Callable[[], Any],
        *,
        mode: str,
        order: str,
    ):
        if len(phases) < 2:
            raise ValueError("a phased capture needs two or more phases")
        self.fn = fn
        self.phases = list(phases)
        self.make_capturer = make_capturer
        self.pool = new_pool()
        self.capturers: list[Any] = []  # each phase's, once it has begun
        # every phase's buckets in capture order
        self.buckets = [b for p in phases for b in capture_order(p.buckets, mode, order)]
        self.result = PhasedResult()
        self._recorder: Any = None

    @property
    def recorder(self) -> Any:
        return self._recorder

    @recorder.setter
    def recorder(self, recorder: Any) -> None:
        """One allocator recorder for the process's one pool, given to every phase."""
        self._recorder = recorder
        for c in self.capturers:
            c.recorder = recorder

    def run(self) -> Iterator[BucketRecord]:
        """Each phase in turn: made active, its Capturer made on the one pool, then captured; its
        rows stamped with the phase and numbered on from the phases before. Stops at the first
        row that is not ok."""
        offset = 0
        for work in self.phases:
            work.activate()
            capturer = self.make_capturer(self.fn, work.inputs, work.buckets, pool=self.pool)
            capturer.recorder = self._recorder
            self.capturers.append(capturer)
            for record in capturer.run():
                record.phase = work.phase
                record.order += offset
                self.result.records.append(record)
                yield record
                if record.status != BucketStatus.OK:
                    return
            offset += len(capturer.buckets)

    def verify(self, which: Optional[str] = None, refill: Any = None, seed: int = 1) -> list:
        """Each captured phase's replay checks, with the phase made active and its own refill
        (``refill``, one phase's, is not used)."""
        checked: list = []
        for work, capturer in zip(self.phases, self.capturers):
            work.activate()
            checked += capturer.verify(which, refill=work.refill, seed=seed)
        return checked

    def close(self) -> None:
        for c in self.capturers:
            c.close()

    @property
    def prewarm_ms(self) -> float:
        return sum(c.prewarm_ms for c in self.capturers)

    @property
    def repeated_runs(self) -> int:
        return sum(c.repeated_runs for c in self.capturers)

    @property
    def breaks_run(self) -> int:
        return sum(c.breaks_run for c in self.capturers)

    @property
    def breaks_repeated(self) -> int:
        return sum(c.breaks_repeated for c in self.capturers)

    @property
    def sampler(self) -> _Samples:
        return _Samples(sum(c.sampler.samples for c in self.capturers))


def build_phased(spec: Any, opts: Any, device: Any) -> tuple[Any, list[PhaseWork]]:
    """The shared model and every phase's buffers (:func:`~bcgprof.measure.workload.
    build_phase_workloads`) for ``opts.phases``, with each phase's buckets from
    ``opts.phase_buckets``; returns a workload standing for them all in the mode's timings (the
    model's build and bytes, every phase's KV cache) and the phases' work."""
    from bcgprof.measure.workload import Workload, build_phase_workloads

    lists = phase_lists(opts)
    works = build_phase_workloads(
        spec,
        opts.phases,
        weights=opts.weights,
        experts=opts.experts,
        num_layers=opts.num_layers,
        device=device,
        max_tokens=max(lists.get("prefill", [1])),
        seed=opts.seed,
        max_bs=max(opts.max_bs, *lists.get("decode", [1])),
        context_len=opts.context_len,
        moe=opts.moe,
    )
    first = works[0]
    standing = Workload(
        fn=first.fn,
        inputs=first.inputs,
        refill=first.refill,
        build_s=first.build_s,
        parameter_bytes=first.parameter_bytes,
        kv_cache_bytes=sum(w.kv_cache_bytes for w in works),
    )
    phases = [
        PhaseWork(p, lists[p], w.inputs, w.refill, w.activate) for p, w in zip(opts.phases, works)
    ]
    return standing, phases


# ---------------------------------------------------------------- the run of several phases


def prepare_phased(opts: Any) -> tuple[Any, list[int]]:
    """The options of a capture of several phases with every phase's bucket spec filled in (its
    preset where none is given) and ``phase`` its first phase, and the distinct union of the
    phases' buckets (run.json's ``buckets``); a :class:`~bcgprof.errors.CaptureError` for what
    such a capture cannot do."""
    import dataclasses

    from bcgprof.buckets import default_bucket_spec, parse_buckets
    from bcgprof.errors import CaptureError

    if opts.tp > 1:
        raise CaptureError(
            f"--phase {','.join(opts.phases)} captures its phases into one pool on one GPU; use "
            "--tp 1, or capture one phase at a time"
        )
    specs = {p: opts.phase_buckets.get(p) or default_bucket_spec(p) for p in opts.phases}
    union: set[int] = set()
    for p in opts.phases:
        union.update(parse_buckets(specs[p], max_tokens=opts.max_tokens, max_bs=opts.max_bs))
    opts = dataclasses.replace(opts, phase=opts.phases[0], phase_buckets=specs, buckets=None)
    return opts, sorted(union)


def phase_lists(opts: Any) -> dict[str, list[int]]:
    """Each phase's bucket list, ascending."""
    from bcgprof.buckets import parse_buckets

    return {
        p: parse_buckets(opts.phase_buckets[p], max_tokens=opts.max_tokens, max_bs=opts.max_bs)
        for p in opts.phases
    }


def decode_part(opts: Any, buckets: list[int]) -> tuple[Any, list[int]]:
    """The options and buckets that size decode's KV cache: a one-phase capture's own, or the
    decode phase's of several."""
    import dataclasses

    if not opts.phases:
        return opts, buckets
    return dataclasses.replace(opts, phase="decode", phases=[]), phase_lists(opts)["decode"]


def capture_total(opts: Any, buckets: list[int]) -> int:
    """The bucket captures of a run, for its progress: every mode's, over every phase."""
    lists = phase_lists(opts).values() if opts.phases else [buckets]
    return sum(1 if m == Mode.FLOOR else len(b) for m in opts.modes for b in lists)


def phased_run_info(info: Any, opts: Any, spec: Any) -> None:
    """Make ``info`` (run.json of a capture about to start) a report of several phases: schema
    2, the phases in order, each one's bucket list and, with decode among them, its KV cache's
    figures as a decode capture records them."""
    from bcgprof.measure.runner import kv_figures
    from bcgprof.report.schema import PHASED_SCHEMA_VERSION

    info.schema_version = PHASED_SCHEMA_VERSION
    info.phases = list(opts.phases)
    info.phase_buckets = phase_lists(opts)
    if "decode" in opts.phases:
        decode_opts, decode_buckets = decode_part(opts, info.buckets)
        info.extra.update(kv_figures(decode_opts, spec, decode_buckets))
