"""One mode's bucket loop: warm-up, capture and measurement of each bucket, then replay checks.

Mechanism: :class:`Capturer` captures every bucket as a :class:`~bcgprof.bcg.graph.BreakableGraph`
(or, with ``graph`` full, one CUDA graph per bucket) into one shared pool, in the mode's order, on
the process's capture stream (:mod:`bcgprof.measure.streams`). A bucket is read
(:func:`~bcgprof.measure.memory.read`) before its eager warm-up and after its capture, and its
record's figures come from the two readings (:func:`~bcgprof.report.ledger.ledger`). What each mode
keeps of a bucket's output is told in :mod:`bcgprof.measure.capture`.

Invariant: a bucket's ledger of its device-used growth (the pool's live and free bytes, torch
memory outside the pool, what NVML sees beyond torch) sums exactly; a bucket that fails ends the
mode, recorded ``oom`` or ``error`` and measured with what it held when it failed.

Cost: per bucket, its warm-up runs, one capture, two readings (each after a synchronise and an
``empty_cache``) and the peak sampler's polling; per bucket verified, one replay and one eager
forward.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Optional

import torch

from bcgprof.bcg.breaks import break_handler
from bcgprof.bcg.executables import SharedExecutables
from bcgprof.bcg.graph import BreakableGraph
from bcgprof.errors import CaptureError, NoGPUError, failure_status, one_line
from bcgprof.measure import sites
from bcgprof.measure.break_repeat import BreakRepeater
from bcgprof.measure.capture_result import BucketCapture, CaptureResult, default_refill
from bcgprof.measure.device import DeviceMemory, PeakSampler
from bcgprof.measure.memory import read, settle, storage_in_pool
from bcgprof.measure.streams import capture_stream
from bcgprof.measure.tracing import AllocatorRecorder
from bcgprof.measure.warmup_repeat import RepeatPlan, plan_repeat, repeat_run
from bcgprof.options import (
    BREAK_REPEATS,
    EXECUTABLES,
    GRAPH_KINDS,
    MODES,
    ORDERS,
    VERIFY_CHOICES,
    WARMUP_OUTPUTS,
    WARMUP_REPEATS,
    CaptureOptions,
)
from bcgprof.report import BucketRecord
from bcgprof.report.ledger import Reading, ledger
from bcgprof.report.traces import TracePhase
from bcgprof.vocab import (
    BreakRepeat,
    BucketStatus,
    Executables,
    GraphKind,
    Mode,
    Order,
    Verify,
    WarmupOutput,
    WarmupRepeat,
)

# the last kernel of a bucket's graph: its output into the buffer
Epilogue = Callable[[torch.Tensor], torch.Tensor]


@dataclass
class _Held:
    """What one bucket holds while it is warmed up and captured. It lives until the bucket's second
    reading, so a bucket that fails is measured with what it held when it failed."""

    warm: Optional[torch.Tensor] = None  # the last warm-up run's output, dropped before the capture
    graph: Optional[BreakableGraph] = None
    out: Optional[torch.Tensor] = None  # the captured graph's output
    # the allocator's history of the floor's first capture, for its sites
    history: Optional[dict] = None


def _allocations(device: torch.device) -> int:
    """Allocations the caching allocator has made on ``device`` so far (a counter no reset of peaks
    clears)."""
    return int(torch.cuda.memory_stats(device).get("allocation.all.allocated", 0))


class Capturer:
    """Runs one mode: warm-up, capture and measurement of each bucket, then replay checks."""

    def __init__(
        self,
        fn: Callable[..., torch.Tensor],
        inputs: Sequence[torch.Tensor],
        buckets: Sequence[int],
        options: Optional[CaptureOptions] = None,
        *,
        mode: str = Mode.PER_BUCKET.value,
        device: Optional[torch.device] = None,
        memory: Optional[DeviceMemory] = None,
        shared_output: Optional[torch.Tensor] = None,
        rank: int = 0,
        prewarm: bool = True,
        record_sites: bool = False,
        recorder: Optional[AllocatorRecorder] = None,
        pool: Any = None,
    ):
        """``options``: the capture's options (default :class:`CaptureOptions`'s), of which the loop
        reads :data:`~bcgprof.options.LOOP_OPTIONS`; the keywords are what one mode's process knows
        beyond them (its mode, device, rank, readings and trace). ``pool``: a graph pool handle
        another capture of the process uses too (another phase's, :mod:`bcgprof.measure.phases`);
        None: a pool of its own."""
        opts = options if options is not None else CaptureOptions()
        order, graph = opts.order, opts.graph
        warmup_output, warmup_repeat, break_repeat = (
            opts.warmup_output,
            opts.warmup_repeat,
            opts.break_repeat,
        )
        if mode not in MODES:
            raise CaptureError(f"unknown mode {mode!r}; use one of {', '.join(MODES)}")
        if order not in ORDERS:
            raise CaptureError(f"unknown order {order!r}; use one of {', '.join(ORDERS)}")
        if graph not in GRAPH_KINDS:
            raise CaptureError(f"unknown graph kind {graph!r}; use one of {', '.join(GRAPH_KINDS)}")
        if mode == Mode.SHARED_LARGEST and order != Order.LARGEST_FIRST:
            raise CaptureError(
                "shared-largest keeps the largest bucket's own output as the shared buffer, so the "
                "largest bucket must be captured first; use --order largest-first"
            )
        if warmup_output not in WARMUP_OUTPUTS:
            raise CaptureError(
                f"unknown warm-up output {warmup_output!r}; use one of {', '.join(WARMUP_OUTPUTS)}"
            )
        if warmup_repeat not in WARMUP_REPEATS:
            raise CaptureError(
                f"unknown warm-up repeat {warmup_repeat!r}; use one of {', '.join(WARMUP_REPEATS)}"
            )
        if break_repeat not in BREAK_REPEATS:
            raise CaptureError(
                f"unknown break repeat {break_repeat!r}; use one of {', '.join(BREAK_REPEATS)}"
            )
        if opts.executables not in EXECUTABLES:
            raise CaptureError(
                f"unknown executables choice {opts.executables!r}; use one of "
                f"{', '.join(EXECUTABLES)}"
            )
        if not torch.cuda.is_available():
            raise NoGPUError("no CUDA device: capture needs a GPU")
        if not buckets:
            raise CaptureError("no buckets to capture")
        rows = min(int(x.shape[0]) for x in inputs)
        largest_first = sorted(set(int(b) for b in buckets), reverse=True)
        if largest_first[0] > rows:
            raise CaptureError(
                f"bucket {largest_first[0]} exceeds the input buffers' {rows} rows; "
                "size them for the largest bucket"
            )
        self.fn = fn
        self.inputs = list(inputs)
        if mode == Mode.FLOOR:
            self.buckets = largest_first[:1]
        else:
            self.buckets = largest_first if order == Order.LARGEST_FIRST else largest_first[::-1]
        self.largest = largest_first[0]
        self.mode = mode
        self.order = order
        self.breakable = graph == GraphKind.BREAKABLE
        self.options = opts
        self.warmup = opts.warmup
        self.free_warmup_output = warmup_output == WarmupOutput.FREED
        self.repeat_warmup = warmup_repeat == WarmupRepeat.REQUESTS
        # warm-up runs made by their allocator requests alone (see warmup_repeat)
        self.repeated_runs = 0
        self.repeat_breaks = break_repeat == BreakRepeat.REQUESTS
        self._breaks: Optional[BreakRepeater] = None  # made on first use: it needs the recorder
        self.device = torch.device(device) if device is not None else self.inputs[0].device
        self.memory = memory or DeviceMemory(self.device)
        self.sampler = PeakSampler(self.memory, opts.sample_interval_ms)
        self.stream = capture_stream(self.device)
        # where inputs are refilled and outputs read
        self.home_stream = torch.cuda.current_stream(self.device)
        self.pool = pool if pool is not None else torch.cuda.graph_pool_handle()
        self.rank = rank
        self.prewarm = prewarm
        self.record_sites = record_sites
        self.history_on = opts.snapshot  # the allocator's history is kept for --snapshot already
        # the allocator trace (traces-<mode>.csv.gz); it owns the history when set
        self.recorder = recorder
        self.result = CaptureResult(
            mode=mode,
            pool=self.pool,
            shared_output=shared_output,
            executables=_shared_executables(opts.executables),
        )
        self.prewarm_ms = 0.0

    def _sliced(self, bucket: int) -> list[torch.Tensor]:
        return [x[:bucket] for x in self.inputs]

    def _eager(self, bucket: int, breaks: Optional[BreakRepeater] = None) -> torch.Tensor:
        """One eager forward on the capture stream; ``breaks`` runs its graph breaks (default:
        called)."""
        # inputs refilled on the current stream first
        self.stream.wait_stream(torch.cuda.current_stream())
        with (
            torch.cuda.stream(self.stream),
            break_handler(breaks) if breaks is not None else contextlib.nullcontext(),
        ):
            out = self.fn(*self._sliced(bucket))
        torch.cuda.current_stream().wait_stream(self.stream)
        return out

    def _streams(self) -> list[int]:
        """The raw handles of the streams a request of a run may name."""
        return sorted({self.stream.cuda_stream, self.home_stream.cuda_stream})

    def _allocate(self, size: int, stream: int) -> torch.Tensor:
        """A block of ``size`` bytes requested on ``stream``: the capture stream, which is current
        wherever a run or a break is repeated, or the home one."""
        if stream == self.stream.cuda_stream:
            return torch.empty(size, dtype=torch.uint8, device=self.device)
        with torch.cuda.stream(self.home_stream):
            return torch.empty(size, dtype=torch.uint8, device=self.device)

    @property
    def breaks_run(self) -> int:
        """Graph-break calls of the bucket loop that ran the op (0 without a break repeater)."""
        return self._breaks.run if self._breaks is not None else 0

    @property
    def breaks_repeated(self) -> int:
        """Graph-break calls of the bucket loop made by their allocator requests alone."""
        return self._breaks.repeated if self._breaks is not None else 0

    def _break_repeater(self) -> Optional[BreakRepeater]:
        """The bucket loop's break handler (see break_repeat): with a recorder that owns the history
        and no ``--snapshot`` (whose stacks would name the repeater instead of the op)."""
        if (
            self._breaks is None
            and self.repeat_breaks
            and self.recorder is not None
            and not self.history_on
        ):
            self._breaks = BreakRepeater(
                lambda: _allocations(self.device), self.recorder.peek, self._streams, self._allocate
            )
        return self._breaks

    def _plan_repeat(self, out: torch.Tensor, allocations: int) -> Optional[RepeatPlan]:
        """The requests of the eager run that just made ``out``, from the trace recorder's history
        (None without a recorder, or when the run cannot be repeated by its requests: see
        warmup_repeat)."""
        if self.recorder is None:
            return None
        storage = out.untyped_storage()
        return plan_repeat(
            self.recorder.peek(), allocations, storage.data_ptr(), storage.nbytes(), self._streams()
        )

    def _repeat(
        self, plan: RepeatPlan, dtype: torch.dtype, shape, stride, offset: int
    ) -> torch.Tensor:
        """One more warm-up run made by ``plan``'s requests alone; returns its output block with the
        eager output's dtype, shape and strides, so what follows sees an output like an eager
        run's."""
        with torch.cuda.stream(self.stream):
            block = repeat_run(plan, self._allocate)
        return torch.empty(0, dtype=dtype, device=self.device).set_(
            block.untyped_storage(), offset, shape, stride
        )

    def _prewarm(self) -> None:
        """Eager runs at the largest and smallest sizes before anything is measured.

        They load kernels, create library handles on the capture stream (a matmul in
        the very first capture otherwise fails) and size workspaces, as an engine's
        warm-up would; none of it belongs to one bucket's cost.
        """
        start = time.perf_counter()
        for b in {self.buckets[0], self.buckets[-1]}:
            out = self._eager(b)
            del out
        settle(self.device)
        self.prewarm_ms = (time.perf_counter() - start) * 1000.0

    def _try_prewarm(self) -> Optional[BucketRecord]:
        """Pre-warm; if it fails, the largest bucket (which it runs) is the failing one."""
        try:
            self._prewarm()
            return None
        except Exception as e:
            status = failure_status(e)
            del e  # drop the traceback's frames, and with them the warm-up's tensors
            settle(self.device)
            after = read(self.memory, self.pool)
            return BucketRecord(
                mode=self.mode,
                bucket=self.buckets[0],
                order=0,
                status=status,
                rank=self.rank,
                pool_bytes=after.pool,
                free_bytes=after.free,
                detail=f"{status} in the eager warm-up before capture ({after.free} bytes free)",
            )

    def _shared_epilogue(self, bucket: int, template: torch.Tensor) -> Epilogue:
        shared = self.result.shared_output
        if shared is None:  # sized for the largest bucket: from its output when it comes first
            if template.shape[0] == self.largest:
                shared = torch.empty_like(template)
            else:
                shared = template.new_empty((self.largest, *template.shape[1:]))
            self.result.shared_output = shared
        if (
            template.dim() != shared.dim()
            or template.shape[1:] != shared.shape[1:]
            or template.shape[0] > shared.shape[0]
        ):
            raise CaptureError(
                f"bucket {bucket}'s output {tuple(template.shape)} does not fit the shared output "
                f"buffer {tuple(shared.shape)}; the shared buffer must be sized for the largest "
                "bucket"
            )
        return lambda out: shared[: out.shape[0]].copy_(out)

    def run(self) -> Iterator[BucketRecord]:
        """Capture bucket after bucket, largest first; yield each record as it is finished.

        After an out-of-memory error or any other failure the failing bucket is
        yielded with status ``oom`` or ``error`` and the mode stops there.
        """
        if self.recorder is not None and not self.recorder.started:
            self.recorder.start()
        if self.prewarm:
            failed = self._try_prewarm()
            if failed is not None:
                self.result.records.append(failed)
                yield failed
                return
        for order, bucket in enumerate(self.buckets):
            record = self._capture_one(order, bucket)
            self.result.records.append(record)
            yield record
            if record.status != BucketStatus.OK:
                return

    def _capture_one(self, order: int, bucket: int) -> BucketRecord:
        """One bucket: a reading, its warm-up, its capture, a second reading, and the row's figures
        from the two. A failure in the warm-up or the capture ends the bucket ``oom`` or ``error``,
        measured with what it held when it failed."""
        record = BucketRecord(
            mode=self.mode, bucket=bucket, order=order, status=BucketStatus.OK.value, rank=self.rank
        )
        before = read(self.memory, self.pool)
        torch.cuda.reset_peak_memory_stats(self.device)
        self.sampler.start_window(before.device_used)
        held = _Held()
        try:
            start = time.perf_counter()
            breaks = self._break_repeater()
            self._warm_up(bucket, held, breaks)
            torch.cuda.synchronize(self.device)
            record.warmup_ms = (time.perf_counter() - start) * 1000.0
            epilogue = self._epilogue(order, bucket, held.warm)
            held.warm = None
            self._capture(order, bucket, held, epilogue, breaks)
            assert held.graph is not None  # captured, or the capture raised
            record.capture_ms = held.graph.capture_ms
        except Exception as e:  # a CaptureError (bucket refused) is an error, its message as it is
            record.status = failure_status(e)
            record.detail = one_line(e)
        self._measure(record, before, order, held)
        return record

    def _warm_up(self, bucket: int, held: _Held, breaks: Optional[BreakRepeater]) -> None:
        """The bucket's eager warm-up runs, leaving the last one's output in ``held.warm`` (one run
        even with no warm-up asked for: the capture needs the output's shape). With
        ``warmup_repeat`` by requests, every run after the first makes the first one's allocator
        requests again."""
        plan: Optional[RepeatPlan] = None
        layout: tuple = ()
        repeat = self.repeat_warmup and self.warmup > 1
        for run in range(self.warmup):
            if self.free_warmup_output:
                # the previous run's output goes before this run allocates, as in SGLang's warm-up
                held.warm = None
            if plan is not None:
                held.warm = self._repeat(plan, *layout)
                self.repeated_runs += 1
                continue
            planning = run == 0 and repeat  # the first run is the one later runs repeat
            counted = _allocations(self.device) if planning else 0
            held.warm = self._eager(bucket, breaks)
            if planning:
                warm = held.warm
                plan = self._plan_repeat(warm, _allocations(self.device) - counted)
                layout = (warm.dtype, warm.shape, warm.stride(), warm.storage_offset())
                del warm
        if held.warm is None:  # no warm-up asked for: the shape still has to be known
            held.warm = self._eager(bucket, breaks)

    def _epilogue(
        self, order: int, bucket: int, warm: Optional[torch.Tensor]
    ) -> Optional[Epilogue]:
        """The copy into the shared buffer that ends this bucket's graph, in the modes that share
        one."""
        if self.mode == Mode.SHARED or (self.mode == Mode.SHARED_LARGEST and order > 0):
            assert warm is not None  # the warm-up's output, whose shape the buffer must fit
            return self._shared_epilogue(bucket, warm)
        return None

    def _capture(
        self,
        order: int,
        bucket: int,
        held: _Held,
        epilogue: Optional[Epilogue],
        breaks: Optional[BreakRepeater],
    ) -> None:
        """The bucket's graph into ``held``, captured into the pool within the trace's capture
        window (the floor's first bucket with the Python stacks its sites need, kept in
        ``held.history``)."""
        recording = self.record_sites and order == 0
        recorder = self.recorder
        if recorder is not None:  # the warm-up window; the capture window starts here
            recorder.take(bucket, TracePhase.WARMUP)
            recorder.stacks(recording)
        elif recording and not self.history_on:
            sites.start_history()
        try:
            with sites.module_frames(self.fn) if recording else contextlib.nullcontext():
                held.graph, held.out = BreakableGraph.capture(
                    self.fn,
                    *self._sliced(bucket),
                    pool=self.pool,
                    stream=self.stream,
                    epilogue=epilogue,
                    breakable=self.breakable,
                    # a site's stack must name the op itself
                    run_break=None if recording else breaks,
                    share=self.result.executables,
                )
            if recorder is not None:
                snap = recorder.capture_done(bucket)
                recorder = None  # taken
                held.history = snap if recording else None
            else:
                held.history = torch.cuda.memory._snapshot() if recording else None
        finally:
            if recorder is not None:  # the capture failed: its window still belongs to the trace
                recorder.capture_done(bucket)
            if self.recorder is not None:
                self.recorder.stacks(False)
            elif recording and not self.history_on:
                sites.stop_history()
        if self.mode == Mode.SHARED_LARGEST and order == 0:
            self.result.shared_output = held.out  # the largest bucket's output is the shared buffer

    def _measure(self, record: BucketRecord, before: Reading, order: int, held: _Held) -> None:
        """The second reading, and the row's figures from the two
        (:func:`~bcgprof.report.ledger.ledger`); a captured bucket's graph and output join the
        result."""
        peak_allocated = torch.cuda.max_memory_allocated(self.device)
        after = read(self.memory, self.pool)
        device_peak = self.sampler.window_peak(after.device_used)
        captured = held.graph is not None and record.status == BucketStatus.OK
        retained, in_pool = (
            self._retained(order, held.out) if captured and held.out is not None else (0, False)
        )
        for name, value in ledger(
            before, after, peak_allocated, device_peak, retained if in_pool else 0
        ).items():
            setattr(record, name, value)
        if captured:
            assert held.graph is not None and held.out is not None  # captured together
            record.segments = held.graph.segments
            record.graph_nodes = held.graph.graph_nodes
            record.executables = held.graph.executables
            record.signatures = held.graph.signatures
            record.retained_output_bytes = retained
            self.result.captures[record.bucket] = BucketCapture(
                record.bucket, held.graph, held.out, record
            )
        if held.history is not None:
            self.result.pool_peak = sites.pool_peak(
                held.history, self.pool, device=self.device.index or 0
            )

    def _retained(self, order: int, out: torch.Tensor) -> tuple[int, bool]:
        """Bytes of output this bucket keeps, and whether they lie in the pool."""
        # the shared buffer, counted once, on the bucket that made it
        if self.mode in (Mode.SHARED, Mode.SHARED_LARGEST):
            shared = self.result.shared_output
            if order > 0:
                return 0, False
            assert shared is not None  # made by the first bucket's capture (or passed in)
            return shared.untyped_storage().nbytes(), storage_in_pool(shared, self.pool)
        in_pool = storage_in_pool(out, self.pool)
        return (out.untyped_storage().nbytes() if in_pool else 0), in_pool

    def verify(
        self,
        which: Optional[str] = None,
        refill: Callable[[Sequence[torch.Tensor], torch.Generator], None] = default_refill,
        seed: int = 1234,
        atol: float = 0.0,
    ) -> list[BucketRecord]:
        """Replay buckets on fresh inputs and compare with an eager forward of the same inputs.

        ``which``: the options' ``verify`` unless given. Sets ``replay_max_abs_diff`` on the checked
        records; a difference above ``atol`` marks the bucket ``error``. Returns the records it
        checked.
        """
        which = self.options.verify if which is None else which
        if which == Verify.NONE or not self.result.captures:
            return []
        if which not in VERIFY_CHOICES:
            raise CaptureError(
                f"unknown verify choice {which!r}; use one of {', '.join(VERIFY_CHOICES)}"
            )
        captured = sorted(self.result.captures)
        targets = captured if which == Verify.ALL else sorted({captured[0], captured[-1]})
        generator = torch.Generator(device=self.device)
        generator.manual_seed(seed)
        checked = []
        for bucket in targets:
            cap = self.result.captures[bucket]
            refill(self.inputs, generator)
            replayed = self.result.replay(bucket).clone()
            eager = self._eager(bucket)
            diff = (
                (replayed.float() - eager.float()).abs().max().item() if replayed.numel() else 0.0
            )
            if diff != diff:  # NaN never passes
                diff = float("inf")
            cap.record.replay_max_abs_diff = diff
            if diff > atol:
                cap.record.status = BucketStatus.ERROR.value
                cap.record.detail = f"replay differs from eager by {diff:g} (allowed {atol:g})"
            checked.append(cap.record)
            del replayed, eager
        settle(self.device)
        return checked

    def close(self) -> None:
        self.sampler.close()


def _shared_executables(choice: str) -> Optional[SharedExecutables]:
    """The mode's shared executables when ``choice`` is per-signature (None: one per segment)."""
    if choice != Executables.PER_SIGNATURE:
        return None
    from bcgprof.bcg.driver import DriverOps, missing_bindings

    missing = missing_bindings()
    if missing:
        raise CaptureError(
            f"--executables per-signature reads each segment's graph through the "
            f"CUDA driver, but {missing}; install them or use --executables "
            "per-segment"
        )
    return SharedExecutables(DriverOps())
