"""The words bcgprof writes into reports and accepts on its command line, one enum each.

Every member is a ``str`` (its value is the word itself), so a member compares equal to
the text read from a CSV or JSON file and serialises as that text. The CLI's choices,
the report reader's checks and the renderers all take their words from here.
Imports nothing but the standard library.
"""

from __future__ import annotations

import sys
from enum import Enum

if sys.version_info >= (3, 11):
    from enum import StrEnum
else:  # pragma: no cover - Python 3.10

    class StrEnum(str, Enum):
        """``enum.StrEnum`` of Python 3.11: members are their values."""

        def __str__(self) -> str:
            return str(self.value)


class Mode(StrEnum):
    """How a capture keeps each bucket's output (the order here is the order modes run and are
    shown)."""

    PER_BUCKET = "per-bucket"  # each bucket keeps its own output tensor, in the pool
    SHARED = "shared"  # one max-size output buffer outside the pool; each bucket keeps a view
    # the largest bucket's own output (in the pool) is the shared buffer
    SHARED_LARGEST = "shared-largest"
    FLOOR = "floor"  # the largest bucket alone


class RecordGroup(StrEnum):
    """What the rows of a recorded report (``bcgprof record``) stand for in place of a
    :class:`Mode`: the phase of the recorded program's graphs, as an engine adapter knows it."""

    PREFILL = "prefill"  # prefill (extend) graphs, by token count
    DECODE = "decode"  # decode graphs, by batch size
    DRAFT = "draft"  # a speculative draft model's graphs
    VERIFY = "verify"  # a speculative target model's verify graphs (SGLang's TARGET_VERIFY)
    FULL = "full"  # vLLM's FULL graphs (one graph per batch, attention inside)
    PIECEWISE = "piecewise"  # vLLM's PIECEWISE graphs (pieces between attention calls)
    ESTIMATE = "estimate"  # graphs an engine captures only to estimate capture memory, then frees
    COMPILED = "compiled"  # torch.compile's cudagraph trees
    ENCODER = "encoder"  # a multimodal encoder's graphs, by token budget (vLLM)
    GRAPHS = "graphs"  # no adapter knew the phase: one row per graph, or per --bucket call
    # graphs (or bucket calls) without a size in a group that has sized rows: one row each,
    # numbered in capture order, so that a number never merges with a bucket's size
    UNBUCKETED = "unbucketed"


class Source(StrEnum):
    """How a report was made (run.json ``source``)."""

    # bcgprof capture: bcgprof's own replica of a model, every mode in a fresh process
    CAPTURE = "capture"
    RECORD = "record"  # bcgprof record: another program's captures, seen from inside its processes


class ListMode(StrEnum):
    """The modes that capture a whole bucket list (every :class:`Mode` but the floor): what a
    server runs."""

    PER_BUCKET = Mode.PER_BUCKET.value
    SHARED = Mode.SHARED.value
    SHARED_LARGEST = Mode.SHARED_LARGEST.value


class BucketStatus(StrEnum):
    """How one bucket's capture ended."""

    OK = "ok"
    OOM = "oom"
    ERROR = "error"


class RunStatus(StrEnum):
    """How a whole capture run stands (run.json ``status``)."""

    RUNNING = "running"
    COMPLETE = "complete"
    PARTIAL = "partial"
    FAILED = "failed"
    INTERRUPTED = "interrupted"


class Phase(StrEnum):
    """What a bucket counts: tokens of a prefill, or sequences of a decode step."""

    PREFILL = "prefill"
    DECODE = "decode"


class GraphKind(StrEnum):
    """How a bucket's forward is captured."""

    BREAKABLE = "breakable"  # segments around attention, which runs eagerly
    FULL = "full"  # one CUDA graph per bucket, attention inside it


class Executables(StrEnum):
    """How many graph executables a capture instantiates."""

    PER_SEGMENT = "per-segment"  # one per segment graph
    PER_SIGNATURE = "per-signature"  # one per signature, updated to a segment's graph to run it


class Order(StrEnum):
    """The order the buckets are captured in."""

    LARGEST_FIRST = "largest-first"
    SMALLEST_FIRST = "smallest-first"


class Weights(StrEnum):
    """Where a capture's weights come from."""

    DUMMY = "dummy"
    # dummy values, one layer's set used by every layer: any depth fits one GPU
    ONE_LAYER = "one-layer"
    SAFETENSORS = "safetensors"


class Experts(StrEnum):
    """How a capture's MoE expert weights are held."""

    BF16 = "bf16"  # in the activations' dtype (gpt-oss's MXFP4 checkpoints dequantised)
    # gpt-oss's MXFP4 blocks and scales as stored, decoded inside the fused MoE's GEMMs
    PACKED = "packed"


class Moe(StrEnum):
    """Which engine's MoE a layer stack allocates as: the workspace alive at the MoE's peak."""

    FUSED_BF16 = "fused-bf16"  # SGLang's Triton fused_experts: [T*k, 2I] and [T*k, I], in place
    SGLANG_MXFP4 = "sglang-mxfp4"  # SGLang's MXFP4 MoE on Hopper: [T*k, I], [T*k, H], a new [T, H]


class WarmupOutput(StrEnum):
    """What happens to an eager warm-up run's output while the next run executes."""

    HELD = "held"  # kept until the next run returns (the committed reports were measured so)
    FREED = "freed"  # dropped before the next run, as SGLang's warm-up discards each run's result


class WarmupRepeat(StrEnum):
    """How a bucket's warm-up runs after the first are made."""

    EAGER = "eager"  # each one a full eager forward
    REQUESTS = "requests"  # the first run's allocator requests made again, no kernel launched


class BreakRepeat(StrEnum):
    """How a graph break (the attention) runs in a bucket's warm-up and capture after its first call
    of the same shapes."""

    EAGER = "eager"  # every call runs the op
    REQUESTS = "requests"  # the first call's allocator requests made again, no kernel launched


class AddressLayout(StrEnum):
    """Where a mode process's memory lands in its virtual address space."""

    FIXED = "fixed"  # the kernel's address randomisation off: every run gets the same addresses
    RANDOM = "random"  # randomised, as in an engine's process


class Verify(StrEnum):
    """Which buckets a capture replays against an eager forward."""

    SMALLEST_LARGEST = "smallest-largest"
    ALL = "all"
    NONE = "none"


class Format(StrEnum):
    """How a command prints its result on stdout."""

    TABLE = "table"  # rich tables in MiB/GiB, fitted to the terminal
    MARKDOWN = "markdown"  # the same tables as GitHub markdown
    JSON = "json"  # strict JSON, bytes as integers: the documented contract
    CSV = "csv"  # raw values, one block per table


class Section(StrEnum):
    """Which part of a report `show` and `compare` print."""

    ALL = "all"
    BUCKETS = "buckets"
    SUMMARY = "summary"


def words(enum: type[Enum]) -> tuple[str, ...]:
    """The enum's words, in declaration order."""
    return tuple(str(member.value) for member in enum)


# Words renamed so that each word has one meaning, by the enum they belong to: old word -> word now.
# An old word still reads from a report and still parses on the command line (with a warning) for
# one release; nothing writes it.
RENAMED: dict[type[Enum], dict[str, str]] = {
    Weights: {
        "shared": Weights.ONE_LAYER.value
    },  # not the shared mode: every layer shares one layer's set
    WarmupRepeat: {
        "replayed": WarmupRepeat.REQUESTS.value
    },  # a replay is a graph's: nothing is replayed
    BreakRepeat: {"replayed": BreakRepeat.REQUESTS.value},
}


def current(enum: type[Enum], word: str) -> str:
    """``word`` as ``enum`` spells it now (an old spelling renamed, any other word as it is)."""
    return RENAMED.get(enum, {}).get(word, word)
