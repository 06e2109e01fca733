"""Capture one mode over a bucket list and measure what each bucket costs: the Python API.

Mechanism: :func:`capture_buckets` takes any callable whose eager-only ops go through
:func:`bcgprof.bcg.breaks.graph_break`, static input buffers sized for the largest bucket (bucket
dimension first), and a bucket list. It runs one :class:`~bcgprof.measure.capturer.Capturer` (the
bucket loop, which ``bcgprof capture``'s mode process imports from here too) over them: every
bucket captured as a :class:`~bcgprof.bcg.graph.BreakableGraph` into one shared pool, largest
first, then the replay checks. It returns a :class:`~bcgprof.measure.capture_result.CaptureResult`:
one :class:`~bcgprof.report.BucketRecord` per bucket, and the graphs, to replay.

Modes:

* ``per-bucket``: each bucket keeps the output its capture produced, in the pool.
* ``shared``: one output buffer for the largest bucket, allocated once outside the
  pool; each capture ends by copying its output into the leading rows (the copy is
  the last kernel of the graph) and keeps a view of them.
* ``shared-largest``: the largest bucket's own output, allocated by its capture inside
  the pool and kept, is the shared buffer; every smaller bucket's graph ends by
  copying its output into its leading rows and keeps a view.
* ``floor``: only the largest bucket; the least any bucket set containing it costs.

Options come as one :class:`~bcgprof.options.CaptureOptions`, the object ``bcgprof capture``
builds, with its defaults; the loop reads ``order`` (``largest-first`` or ``smallest-first``),
``graph`` (``breakable``, or ``full``: one CUDA graph per bucket with the breaks' ops captured
inside it), the warm-up's ``warmup``, ``warmup_output`` and ``warmup_repeat``, ``break_repeat``,
``sample_interval_ms``, ``verify``, ``snapshot`` and ``executables`` (``per-segment``, or
``per-signature``: the mode's segments of one signature share one graph executable,
:mod:`bcgprof.bcg.executables`).

Invariant: a keyword of :func:`capture_buckets` changes one field of the options, and only a field
of :data:`~bcgprof.options.LOOP_OPTIONS`. Python's garbage is collected before the loop starts,
as ``torch.cuda.graph`` does: a ``CUDAGraph`` left in a reference cycle (by an earlier capture, a
test, the caller) and freed by the collector in the middle of a capture destroys its graph on the
capturing thread, which CUDA refuses ("operation not permitted when stream is capturing") and
which ends that capture with "operation failed due to a previous error during capture".
``bcgprof capture`` collects between its modes for the same reason. Cost: one full collection
(milliseconds, more with a large heap), then the bucket loop's (:mod:`bcgprof.measure.capturer`);
with ``trace``, the allocator's history during the capture.
"""

from __future__ import annotations

import dataclasses
import gc
from collections.abc import Callable, Sequence
from typing import Any, Optional

import torch

from bcgprof.measure.capture_result import CaptureResult, default_refill
from bcgprof.measure.capturer import Capturer
from bcgprof.measure.tracing import AllocatorRecorder
from bcgprof.options import LOOP_OPTIONS, CaptureOptions
from bcgprof.report import BucketRecord
from bcgprof.vocab import Mode


def capture_buckets(
    fn: Callable[..., torch.Tensor],
    inputs: Sequence[torch.Tensor],
    buckets: Sequence[int],
    options: Optional[CaptureOptions] = None,
    *,
    mode: str = Mode.PER_BUCKET.value,
    refill: Callable[[Sequence[torch.Tensor], torch.Generator], None] = default_refill,
    shared_output: Optional[torch.Tensor] = None,
    on_record: Optional[Callable[[BucketRecord], None]] = None,
    trace: bool = False,
    **changes: Any,
) -> CaptureResult:
    """Capture ``fn`` as breakable CUDA graphs for every bucket, measuring each.

    ``inputs`` are static buffers sized for the largest bucket; bucket ``b`` runs on
    ``[x[:b] for x in inputs]``. ``fn`` must return one tensor whose first
    dimension grows with the bucket. ``options`` is a :class:`~bcgprof.options.CaptureOptions`
    (its defaults are ``bcgprof capture``'s); keywords named in
    :data:`~bcgprof.options.LOOP_OPTIONS` change single fields of it (``verify="all"``,
    ``order="smallest-first"``, ``graph="full"``, ``warmup_output="freed"``, ...). Graphs share one
    pool and are captured largest first unless ``order`` says otherwise. ``on_record`` sees each
    record as soon as its bucket is measured.

    ``trace``: record the allocator's history during the capture, as ``bcgprof capture`` does, and
    return it as ``result.trace``. Repeating warm-up runs and graph breaks by their allocator
    requests (``warmup_repeat``, ``break_repeat``) reads that history, so without ``trace`` every
    run and break runs eagerly whatever those options say; with it, any history the caller was
    recording is switched off when the capture ends.
    """
    unknown = sorted(set(changes) - set(LOOP_OPTIONS))
    if unknown:
        raise TypeError(
            f"capture_buckets() got unexpected keyword argument(s) {', '.join(unknown)}; the "
            f"capture options it reads are {', '.join(LOOP_OPTIONS)}"
        )
    opts = dataclasses.replace(options if options is not None else CaptureOptions(), **changes)
    gc.collect()  # no graph of a cycle left to the collector to free during a capture (above)
    capturer = Capturer(fn, inputs, buckets, opts, mode=mode, shared_output=shared_output)
    recorder = None
    if trace:
        recorder = AllocatorRecorder(None, mode, capturer.pool, device=capturer.device.index or 0)
        capturer.recorder = recorder
    try:
        for record in capturer.run():
            if on_record is not None:
                on_record(record)
        if capturer.result.ok:
            capturer.verify(refill=refill)
    finally:
        capturer.close()
        if recorder is not None:
            recorder.stop()
            capturer.result.trace = recorder.trace
    return capturer.result
