"""Where a recorded program's buckets begin and end: the engine adapters' table.

An adapter names a method (or function) that captures one bucket, by module prefix and name, the
argument that holds the bucket's size, and the group (phase) its graphs belong to. Every method of
that name defined in a module under the prefix is wrapped when the module is imported, so one entry
covers the engine's runner classes and their subclasses. A *scope* adapter marks a function whose
captures belong to one group whatever bucket function runs inside it (vLLM's estimate captures);
a *phase* adapter marks the end of an engine's capture phase (``--stop-after-capture``).

Method names move between engine versions: this table is the one place they are written.
Imports nothing heavy: the session reads it to describe adapters, the hook to install them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Optional

from bcgprof.errors import BcgprofError
from bcgprof.vocab import RecordGroup

BUCKET, SCOPE, PHASE = "bucket", "scope", "phase"
BY_CLASS = "by-class"  # the group from the runner's class name (Draft, Prefill, Decode)


@dataclass(frozen=True)
class Adapter:
    """One wrapped callable: ``module`` is a module name or a prefix ending in ``.``."""

    engine: str
    module: str
    name: str  # a function or method name (any class of the module), or Class.method
    role: str = BUCKET
    # argument name, with .attr steps; [0] takes the first tensor's leading dimension
    size: str = ""
    # a RecordGroup word, BY_CLASS, or arg:NAME for vLLM's runtime mode
    group: str = RecordGroup.GRAPHS
    note: str = ""

    def covers(self, module: str) -> bool:
        return (
            module.startswith(self.module) if self.module.endswith(".") else module == self.module
        )


ADAPTERS: tuple[Adapter, ...] = (
    # SGLang, current layout: runner/*_cuda_graph_runner.py, capture_one_shape(size, forward, ...)
    Adapter(
        "sglang",
        "sglang.srt.",
        "capture_one_shape",
        size="size",
        group=BY_CLASS,
        note="runners of model_executor/runner (decode, prefill) and speculative draft runners",
    ),
    # SGLang up to about v0.5.10
    Adapter(
        "sglang",
        "sglang.srt.",
        "capture_one_batch_size",
        size="bs",
        group=BY_CLASS,
        note="cuda_graph_runner.CudaGraphRunner and draft runners",
    ),
    Adapter(
        "sglang",
        "sglang.srt.model_executor.breakable_cuda_graph_runner",
        "_capture_one",
        size="num_tokens",
        group=RecordGroup.PREFILL,
        note="BreakableCudaGraphRunner (prefill BCG)",
    ),
    Adapter(
        "sglang",
        "sglang.srt.",
        "capture_cuda_graphs",
        role=PHASE,
        note="cuda_graph_setup: all runners",
    ),
    Adapter(
        "sglang",
        "sglang.srt.model_executor.model_runner",
        "init_device_graphs",
        role=PHASE,
        note="older layout: ModelRunner builds its runners",
    ),
    # vLLM V1: gpu_model_runner.py
    Adapter(
        "vllm",
        "vllm.v1.worker.",
        "_warmup_and_capture",
        size="desc.num_tokens",
        group="arg:cudagraph_runtime_mode",
        note="GPUModelRunner, one bucket (BatchDescriptor)",
    ),
    Adapter(
        "vllm",
        "vllm.v1.worker.",
        "profile_cudagraph_memory",
        role=SCOPE,
        group=RecordGroup.ESTIMATE,
        note="the estimate's captures into a temporary pool",
    ),
    Adapter(
        "vllm", "vllm.v1.worker.", "capture_model", role=PHASE, note="GPUModelRunner.capture_model"
    ),
    # torch.compile(mode="reduce-overhead"): cudagraph trees record one graph per function and shape
    # (its warm-up runs, in the tree's own pool, and its recording of one shape make that shape's
    # row)
    Adapter(
        "torch",
        "torch._inductor.cudagraph_trees",
        "CUDAGraphTreeManager.run_eager",
        size="new_inputs[0]",
        group=RecordGroup.COMPILED,
        note="a shape's warm-up runs",
    ),
    Adapter(
        "torch",
        "torch._inductor.cudagraph_trees",
        "CUDAGraphTreeManager.record_function",
        size="new_inputs[0]",
        group=RecordGroup.COMPILED,
        note="the leading dimension of the first tensor input",
    ),
)

_SPEC = re.compile(r"([A-Za-z_][\w.]*):([A-Za-z_][\w.]*):([A-Za-z_][\w.]*(?:\[0\])?)")


def parse_bucket_option(text: str) -> Adapter:
    """``--bucket MODULE:QUALNAME:ARG`` as an adapter of group ``graphs``."""
    m = _SPEC.fullmatch(text.strip())
    if not m:
        raise BcgprofError(
            f"--bucket {text!r}: give MODULE:QUALNAME:ARG, e.g. "
            "my_pkg.runner:Runner.capture_one:bs "
            "(ARG may be arg.attr, or arg[0] for the first tensor's leading dimension)"
        )
    module, name, size = m.groups()
    return Adapter("user", module, name, size=size, note="--bucket")


def group_of(adapter: Adapter, owner: Optional[type], arguments: dict[str, Any]) -> str:
    """The group a call's graphs belong to."""
    if adapter.group == BY_CLASS:
        name = owner.__name__ if owner is not None else ""
        for word, group in (
            ("Draft", RecordGroup.DRAFT),
            ("Eagle", RecordGroup.DRAFT),
            ("Prefill", RecordGroup.PREFILL),
            ("Breakable", RecordGroup.PREFILL),
            ("Decode", RecordGroup.DECODE),
        ):
            if word in name:
                return group
        return RecordGroup.DECODE if adapter.engine == "sglang" else RecordGroup.GRAPHS
    if adapter.group.startswith("arg:"):
        mode = arguments.get(adapter.group[4:])
        word = str(getattr(mode, "name", mode)).lower()
        return word if word in (RecordGroup.FULL, RecordGroup.PIECEWISE) else RecordGroup.GRAPHS
    return adapter.group


def size_of(spec: str, arguments: dict[str, Any]) -> Optional[int]:
    """The bucket size ``spec`` names among a call's bound arguments; None when it is not a positive
    int."""
    first_dim = spec.endswith("[0]")
    path = (spec[:-3] if first_dim else spec).split(".")
    if path[0] not in arguments:
        return None
    value = arguments[path[0]]
    for step in path[1:]:
        value = getattr(value, step, None)
    if first_dim:
        items = value if isinstance(value, (list, tuple)) else [value]
        value = next(
            (
                len(v) if not hasattr(v, "shape") else v.shape[0]
                for v in items
                if getattr(v, "shape", None) is not None and len(v.shape) >= 1
            ),
            None,
        )
    if isinstance(value, bool) or value is None:
        return None
    try:
        size = int(value)
    except (TypeError, ValueError):
        return None
    return size if size >= 1 else None
