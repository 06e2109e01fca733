"""Breakable CUDA graphs: a forward captured as graph segments around eager breaks.

A :class:`BreakableGraph` records one forward pass as a sequence of
``torch.cuda.CUDAGraph`` segments. Whenever the forward reaches
:func:`bcgprof.bcg.breaks.graph_break`, the segment being captured ends, the break
runs eagerly (and is remembered), and a new segment begins. :meth:`replay` runs the
segments and breaks in capture order.

Memory and lifetime rules:

* Every segment allocates from the pool given to the graph. Share one pool across
  all buckets, capture the largest first, and replay graphs of that pool one at a
  time: a later capture may reuse memory an earlier one freed.
* The tensors a break reads and writes are remembered as *non-owning* views. Once
  the capture returns, the pool gets their memory back unless the forward's caller
  still holds the tensors (the output, typically). Keeping strong references here
  would pin every intermediate that crosses a break, for every bucket.
* A break must write its results into tensors it was given and return None, so
  nothing it creates outlives it.
* Work forked with :func:`bcgprof.bcg.breaks.side_stream` inside a segment is
  joined back into the capture stream before that segment ends; a capture cannot
  end with unjoined work.

Executables: by default each segment's graph is instantiated right after its capture
(one executable per segment). Given a :class:`~bcgprof.bcg.executables.SharedExecutables`
(``share``), a segment's signature is read from its kept graph
(:mod:`bcgprof.bcg.driver`), and only a segment no earlier one of its signature can stand
for is instantiated; a replay then launches the segment through its group's executable,
updated to the segment's graph first when it last ran another. Those launches bypass
``CUDAGraph.replay``, which also advances torch's random-number offsets: a forward that draws
random numbers inside a segment needs one executable per segment.
"""

from __future__ import annotations

import contextlib
import functools
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Optional

import torch

from bcgprof.bcg.breaks import break_handler, join_side_streams
from bcgprof.bcg.executables import Member, SharedExecutables

# --------------------------------------------------------------------- views


def non_owning_view(t: torch.Tensor) -> torch.Tensor:
    """A tensor over ``t``'s memory that does not keep that memory allocated."""
    storage = torch._C._construct_storage_from_data_pointer(
        t.untyped_storage().data_ptr(), t.device, t.untyped_storage().nbytes()
    )
    view = torch.empty((0,), dtype=t.dtype, device=t.device)
    view.set_(storage, t.storage_offset(), t.size(), t.stride())
    return view


def _detach_refs(value: Any) -> Any:
    """Replace every tensor in (nested) break arguments with a non-owning view."""
    if isinstance(value, torch.Tensor):
        return non_owning_view(value) if value.is_cuda else value
    if isinstance(value, tuple):
        return tuple(_detach_refs(v) for v in value)
    if isinstance(value, list):
        return [_detach_refs(v) for v in value]
    if isinstance(value, dict):
        return {k: _detach_refs(v) for k, v in value.items()}
    return value


# ------------------------------------------------------------ the graph itself


def graph_node_count(graph: torch.cuda.CUDAGraph) -> Optional[int]:
    """Nodes of a kept graph (``keep_graph=True``), through the CUDA Python bindings when they are
    installed; None otherwise. A graph torch did not keep has no raw graph to read, and is told
    apart before the bindings are imported (their first import takes tens of milliseconds)."""
    try:
        raw = graph.raw_cuda_graph()
    except Exception:
        return None
    try:
        from cuda.bindings import runtime as cudart
    except ImportError:
        return None
    try:
        err, _, count = cudart.cudaGraphGetNodes(raw, 0)
    except Exception:
        return None
    return int(count) if int(err) == 0 else None


def _new_cuda_graph() -> tuple[torch.cuda.CUDAGraph, bool]:
    try:
        return torch.cuda.CUDAGraph(keep_graph=True), True
    except TypeError:  # torch without keep_graph: no node counts
        return torch.cuda.CUDAGraph(), False


def _call(fn: Callable[..., None], args: tuple, kwargs: dict) -> None:
    """Run a break's op as it is: inside a full graph it is captured like any other op; between
    segments it runs eagerly."""
    fn(*args, **kwargs)


@dataclass
class _Break:
    fn: Callable[..., None]
    args: tuple
    kwargs: dict


@dataclass
class _Shared:
    """A segment that runs through its group's executable (``share``)."""

    graph: torch.cuda.CUDAGraph  # kept, never instantiated unless it owns the group's executable
    member: Member


def _instantiate(graph: torch.cuda.CUDAGraph) -> int:
    """Instantiate a kept graph as torch does (its flags); return the executable's raw handle."""
    graph.instantiate()
    return int(graph.raw_cuda_graph_exec())


@dataclass
class BreakableGraph:
    """One bucket's forward as graph segments and eager breaks. Build with :meth:`capture`."""

    pool: Any
    stream: torch.cuda.Stream
    steps: list = field(default_factory=list)  # CUDAGraph | _Shared | _Break, in capture order
    graph_nodes: Optional[int] = 0
    capture_ms: float = 0.0
    share: Optional[SharedExecutables] = None
    executables: int = 0  # executables this capture instantiated
    signatures: Optional[int] = None  # distinct signatures of its segments (with ``share``)

    @property
    def segments(self) -> int:
        return sum(not isinstance(s, _Break) for s in self.steps)

    @property
    def breaks(self) -> int:
        return sum(isinstance(s, _Break) for s in self.steps)

    @classmethod
    def capture(
        cls,
        fn: Callable[..., Any],
        *args: Any,
        pool: Any,
        stream: torch.cuda.Stream,
        epilogue: Optional[Callable[[Any], Any]] = None,
        breakable: bool = True,
        run_break: Optional[Callable[[Callable[..., None], tuple, dict], None]] = None,
        share: Optional[SharedExecutables] = None,
    ) -> tuple[BreakableGraph, Any]:
        """Capture ``fn(*args)``; return the graph and what ``fn`` (then ``epilogue``) returned.

        ``epilogue`` runs inside the last segment, so its kernels are part of the
        graph: shared-output modes use it to copy the output into the shared buffer.
        ``breakable=False`` captures one full graph: every break's op runs inside the
        capture (it must then be capturable itself), and there is a single segment.
        ``run_break(fn, args, kwargs)``: how a break runs during the capture (default: it is
        called); replays always call the op itself. ``share``: the executables this capture's
        segments may share with each other and with earlier captures' (default: one each).
        """
        graph = cls(pool=pool, stream=stream, share=share)
        torch.cuda.synchronize()
        start = time.perf_counter()
        handler = functools.partial(graph._on_break, run_break or _call) if breakable else _call
        with torch.cuda.stream(stream):
            graph._begin_segment()
            try:
                with break_handler(handler):
                    out = fn(*args)
                    if epilogue is not None:
                        out = epilogue(out)
                graph._end_segment()
            except BaseException:
                graph._abort_segment()
                raise
        torch.cuda.synchronize()
        graph.capture_ms = (time.perf_counter() - start) * 1000.0
        if share is not None:
            shared = [s for s in graph.steps if isinstance(s, _Shared)]
            graph.signatures = len({s.member.signature for s in shared})
        return graph, out

    def _begin_segment(self) -> None:
        g, kept = _new_cuda_graph()
        if not kept:
            if self.share is not None:
                raise RuntimeError(
                    "sharing executables needs a torch whose CUDAGraph takes keep_graph=True"
                )
            self.graph_nodes = None
        g.capture_begin(pool=self.pool, capture_error_mode="thread_local")
        self.steps.append(g)

    def _end_segment(self) -> None:
        g = self.steps[-1]
        join_side_streams()  # a capture cannot end with forked work unjoined
        g.capture_end()
        if self.share is not None:
            self._place_segment(g, self.share)
            return
        if self.graph_nodes is not None:
            nodes = graph_node_count(g)
            self.graph_nodes = None if nodes is None else self.graph_nodes + nodes
        # With keep_graph the executable is built here, not at the first replay, so
        # its device memory lands in this bucket's figures.
        if hasattr(g, "instantiate"):
            g.instantiate()
        self.executables += 1

    def _place_segment(self, g: torch.cuda.CUDAGraph, share: SharedExecutables) -> None:
        """Read the segment's signature; join its group, or instantiate it (in this bucket's
        figures)."""
        from bcgprof.bcg.driver import describe_graph
        from bcgprof.bcg.signature import graph_signature

        raw = int(g.raw_cuda_graph())
        nodes, edges = describe_graph(raw)
        if self.graph_nodes is not None:
            self.graph_nodes += len(nodes)
        signature = graph_signature(nodes, edges)
        member, made = share.add(raw, signature, lambda: _instantiate(g), keep=g)
        self.steps[-1] = _Shared(g, member)
        self.executables += made

    def _abort_segment(self) -> None:
        """End a capture that failed part-way, so the stream leaves capture mode; segments it
        placed in shared groups leave them."""
        g = self.steps[-1] if self.steps else None
        if isinstance(g, torch.cuda.CUDAGraph):
            with contextlib.suppress(Exception):
                g.capture_end()
        if self.share is not None:
            self.share.forget(s.member for s in self.steps if isinstance(s, _Shared))
        self.steps.clear()

    def _on_break(
        self,
        run_break: Callable[[Callable[..., None], tuple, dict], None],
        fn: Callable[..., None],
        args: tuple,
        kwargs: dict,
    ) -> None:
        """End the segment, run the op between segments (eagerly, on the capture stream, unless
        ``run_break`` repeats it otherwise), keep it for replays, and begin the next segment."""
        self._end_segment()
        run_break(fn, args, kwargs)
        self.steps.append(_Break(fn, _detach_refs(args), _detach_refs(kwargs)))
        self._begin_segment()

    def replay(self) -> None:
        """Run segments and breaks in capture order on the capture stream, after the work
        already queued on the current stream (whatever refilled the inputs, say)."""
        self.stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self.stream):
            for step in self.steps:
                if isinstance(step, _Break):
                    step.fn(*step.args, **step.kwargs)
                elif isinstance(step, _Shared):
                    assert self.share is not None  # a shared segment is placed only with share
                    self.share.launch(step.member, self.stream.cuda_stream)
                else:
                    step.replay()
        torch.cuda.current_stream().wait_stream(self.stream)
