"""Where a recorded program's buckets begin and end: the engine adapters' table.

An adapter names a method (or function) that captures one bucket, by module prefix and name, the
argument that holds the bucket's size, and the group (phase) its graphs belong to. Every method of
that name defined in a module under the prefix is wrapped when the module is imported, so one entry
covers the engine's runner classes and their subclasses. A *scope* adapter marks a function whose
captures belong to one group whatever bucket function runs inside it (vLLM's estimate captures);
a *phase* adapter marks an engine's capture phase (``--stop-after-capture``); a *factory* adapter
marks a loop over buckets that builds each bucket's forward through a factory argument (vLLM's
model runner V2): each new descriptor the factory is called with begins a bucket, which ends at the
next descriptor or when the loop returns.

Method names move between engine versions: this table is the one place they are written.
Imports nothing heavy: the session reads it to describe adapters, the hook to install them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Optional

from bcgprof.buckets import MAX_BUCKET_SIZE
from bcgprof.errors import BcgprofError
from bcgprof.vocab import RecordGroup

BUCKET, SCOPE, PHASE, FACTORY = "bucket", "scope", "phase", "factory"
# the group from the runner: its forward mode, its classes' names (Prefill, Decode)
BY_CLASS = "by-class"
# the engine of an adapter made from --bucket MODULE:QUALNAME:ARG, and its label in bucket lines
USER, USER_LABEL = "user", "--bucket"
# the words of a class (or a base class) whose graphs are a speculative draft model's
DRAFT_WORDS = ("draft", "eagle", "speculator")


@dataclass(frozen=True)
class Adapter:
    """One wrapped callable: ``module`` is a module name or a prefix ending in ``.``."""

    engine: str
    module: str
    name: str  # a function or method name (any class of the module), or Class.method
    role: str = BUCKET
    # argument name, with .attr steps; [0] takes the first tensor's leading dimension, [dynamic]
    # the first tensor cudagraph trees do not hold static; alternatives separated by |
    size: str = ""
    # a RecordGroup word, BY_CLASS, or arg:NAME(.attr) for vLLM's runtime mode
    group: str = RecordGroup.GRAPHS
    note: str = ""
    # FACTORY: the argument holding the factory, called (descriptor, ...); size and group read
    # the descriptor as `desc`
    factory: str = ""

    @property
    def label(self) -> str:
        """How a bucket line names the function that made it: ``--bucket``, else ENGINE:NAME."""
        return USER_LABEL if self.engine == USER else f"{self.engine}:{self.name}"

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
    # SGLang up to about v0.5.10 (the size argument is bs, num_tokens in the piecewise runner,
    # num_seqs in EAGLE's draft runner; two-batch overlap's plugin has a method of this name too,
    # called inside a runner's, so it never makes a row of its own)
    Adapter(
        "sglang",
        "sglang.srt.",
        "capture_one_batch_size",
        size="bs|num_tokens|num_seqs",
        group=BY_CLASS,
        note="cuda_graph_runner.CudaGraphRunner, piecewise and draft runners",
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
        note="cuda_graph_setup: a model runner's prefill and decode runners",
    ),
    Adapter(
        "sglang",
        "sglang.srt.",
        "capture_prefill_graph",
        role=PHASE,
        note="cuda_graph_setup: one prefill runner (a draft worker's too)",
    ),
    Adapter(
        "sglang",
        "sglang.srt.",
        "capture_decode_graph",
        role=PHASE,
        note="cuda_graph_setup: one decode runner (elastic recapture too)",
    ),
    Adapter(
        "sglang",
        "sglang.srt.",
        "init_device_graphs",
        role=PHASE,
        note="ModelRunner builds its runners (older layout; a free function in device_graphs)",
    ),
    Adapter(
        "sglang",
        "sglang.srt.",
        "create_device_graphs",
        role=PHASE,
        note="device_graphs: a model runner's graph runners, built and captured",
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
    # vLLM: encoder_cudagraph.py, a multimodal encoder's graphs (one per token budget and path)
    Adapter(
        "vllm",
        "vllm.v1.worker.",
        "_capture_budget_graph",
        size="token_budget",
        group=RecordGroup.ENCODER,
        note="EncoderCudaGraphManager, one token budget",
    ),
    # vLLM's model runner V2: gpu/cudagraph_utils.py
    Adapter(
        "vllm",
        "vllm.v1.worker.gpu.",
        "capture_graph",
        size="num_tokens",
        group="arg:capture_cg_mode",
        note="CudaGraphManager.capture_graph, one bucket (an earlier V2)",
    ),
    Adapter(
        "vllm",
        "vllm.v1.worker.gpu.",
        "capture",
        role=FACTORY,
        factory="create_forward_fn",
        size="desc.num_tokens",
        group="arg:desc.cg_mode",
        note="CudaGraphManager.capture: a bucket per BatchExecutionDescriptor",
    ),
    # torch.compile(mode="reduce-overhead"): cudagraph trees record one graph per function and shape
    # (its warm-up runs, in the tree's own pool, and its recording of one shape make that shape's
    # row)
    Adapter(
        "torch",
        "torch._inductor.cudagraph_trees",
        "CUDAGraphTreeManager.run_eager",
        size="new_inputs[dynamic]",
        group=RecordGroup.COMPILED,
        note="a shape's warm-up runs",
    ),
    Adapter(
        "torch",
        "torch._inductor.cudagraph_trees",
        "CUDAGraphTreeManager.record_function",
        size="new_inputs[dynamic]",
        group=RecordGroup.COMPILED,
        note="the leading dimension of the first tensor input not held static (parameters)",
    ),
)

_ARG = r"[A-Za-z_][\w.]*(?:\[0\])?"
_SPEC = re.compile(rf"([A-Za-z_][\w.]*):([A-Za-z_][\w.]*):({_ARG}(?:\|{_ARG})*)")


def parse_bucket_option(text: str) -> Adapter:
    """``--bucket MODULE:QUALNAME:ARG`` as an adapter of group ``graphs``."""
    m = _SPEC.fullmatch(text.strip())
    if not m:
        raise BcgprofError(
            f"--bucket {text!r}: give MODULE:QUALNAME:ARG, e.g. "
            "my_pkg.runner:Runner.capture_one:bs "
            "(ARG may be arg.attr, arg[0] for the first tensor's leading dimension, or "
            "alternatives a|b)"
        )
    module, name, size = m.groups()
    return Adapter(USER, module, name, size=size, note="--bucket")


def group_of(adapter: Adapter, owner: Optional[type], arguments: dict[str, Any]) -> str:
    """The group a call's graphs belong to. The runner is the call's ``self`` where it has one (a
    subclass that inherits the method counts), else the class that defines the method."""
    instance = arguments.get("self")
    runner = type(instance) if instance is not None else owner
    names = [c.__name__.lower() for c in runner.__mro__] if runner is not None else []
    if adapter.engine in ("sglang", "vllm") and (
        any(word in name for name in names for word in DRAFT_WORDS)
        or getattr(getattr(instance, "model_runner", None), "is_draft_worker", False) is True
    ):
        return RecordGroup.DRAFT
    if adapter.group == BY_CLASS:
        mode = getattr(instance, "capture_forward_mode", None)
        if str(getattr(mode, "name", "")) == "TARGET_VERIFY":
            return RecordGroup.VERIFY
        for name in names:  # the class first, then its bases
            for word, group in (
                ("prefill", RecordGroup.PREFILL),
                ("breakable", RecordGroup.PREFILL),
                ("decode", RecordGroup.DECODE),
            ):
                if word in name:
                    return group
        return RecordGroup.DECODE if adapter.engine == "sglang" else RecordGroup.GRAPHS
    if adapter.group.startswith("arg:"):
        mode = _lookup(adapter.group[4:], arguments)
        word = str(getattr(mode, "name", mode)).lower()
        return word if word in (RecordGroup.FULL, RecordGroup.PIECEWISE) else RecordGroup.GRAPHS
    return adapter.group


def _lookup(path: str, arguments: dict[str, Any]) -> Any:
    """``arg.attr.attr`` among a call's bound arguments; None where a step is missing."""
    first, *steps = path.split(".")
    value = arguments.get(first)
    for step in steps:
        value = getattr(value, step, None)
    return value


def size_of(spec: str, arguments: dict[str, Any]) -> Optional[int]:
    """The bucket size ``spec`` names among a call's bound arguments (the first alternative that
    gives one); None when none is an int from 1 to :data:`~bcgprof.buckets.MAX_BUCKET_SIZE`."""
    for alternative in spec.split("|"):
        size = _size_of_one(alternative, arguments)
        if size is not None:
            return size
    return None


def _size_of_one(spec: str, arguments: dict[str, Any]) -> Optional[int]:
    dimension = ""
    if spec.endswith("]") and "[" in spec:
        spec, _, dimension = spec[:-1].partition("[")
    if spec.split(".")[0] not in arguments:
        return None
    value = _lookup(spec, arguments)
    if dimension:
        items = value if isinstance(value, (list, tuple)) else [value]
        static = _tree_static_inputs(arguments) if dimension == "dynamic" else set()
        value = next(
            (
                len(v) if not hasattr(v, "shape") else v.shape[0]
                for i, v in enumerate(items)
                if i not in static and getattr(v, "shape", None) is not None and len(v.shape) >= 1
            ),
            None,
        )
    if isinstance(value, bool) or value is None:
        return None
    try:
        size = int(value)
    except (TypeError, ValueError):
        return None
    # a bucket is at most MAX_BUCKET_SIZE tokens or sequences: a larger figure is not a size (an
    # argument holding bytes, an address), and its row is numbered rather than refused by the report
    return size if 1 <= size <= MAX_BUCKET_SIZE else None


def _tree_static_inputs(arguments: dict[str, Any]) -> set[int]:
    """The input positions a cudagraph tree holds static for the called function (its parameters
    and buffers, ``WrappedFunction.static_input_idxs``), so that a size is read from the batch and
    not from a weight; empty where the manager does not say."""
    manager: Any = arguments.get("self")
    function_id = arguments.get("function_id")
    try:
        return {int(i) for i in manager.ids_to_funcs[function_id].static_input_idxs}
    except Exception:
        return set()
