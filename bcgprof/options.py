"""What a capture is asked to do: the mode names, the choices of every option, and
:class:`CaptureOptions`, the one object handed from the CLI to the runner and, as
JSON, to every mode's process. Imports nothing heavy."""

from __future__ import annotations

import dataclasses
import json
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from bcgprof.vocab import (
    RENAMED,
    AddressLayout,
    BreakRepeat,
    BucketStatus,
    Executables,
    Experts,
    GraphKind,
    Mode,
    Moe,
    Order,
    Phase,
    RecordGroup,
    RunStatus,
    Source,
    Verify,
    WarmupOutput,
    WarmupRepeat,
    Weights,
    current,
    words,
)

# The words of each choice, from bcgprof.vocab (modes in the order they run and are shown).
MODES = words(Mode)
DEFAULT_MODES = MODES
# The words a recorded report's mode column holds instead (bcgprof record), and every word a report
# may hold.
RECORD_GROUPS = words(RecordGroup)
REPORT_MODES = MODES + RECORD_GROUPS
SOURCES = words(Source)
GRAPH_KINDS = words(GraphKind)
EXECUTABLES = words(Executables)
ORDERS = words(Order)
PHASES = words(Phase)
WEIGHTS = words(Weights)
EXPERTS = words(Experts)
# families whose checkpoints hold MXFP4 experts that ``--experts packed`` keeps packed (their
# DecoderModel sets packed_experts; tests check the two agree)
PACKED_EXPERT_FAMILIES = ("gpt_oss",)
MOE_BACKENDS = words(Moe)
# families whose MoE can be built as SGLang's MXFP4 MoE, ``--moe sglang-mxfp4`` (their
# DecoderModel sets sglang_mxfp4_moe; tests check the two agree)
SGLANG_MXFP4_FAMILIES = ("gpt_oss",)
VERIFY_CHOICES = words(Verify)
WARMUP_OUTPUTS = words(WarmupOutput)
WARMUP_REPEATS = words(WarmupRepeat)
BREAK_REPEATS = words(BreakRepeat)
ADDRESS_LAYOUTS = words(AddressLayout)
STATUSES = words(BucketStatus)  # of one bucket
RUN_STATUSES = words(RunStatus)  # of a whole run (run.json)

DEFAULT_MODEL = "gpt-oss-20b"

# The options the bucket loop reads (bcgprof.measure.capture): what a Python API call may change.
LOOP_OPTIONS = (
    "warmup",
    "warmup_output",
    "warmup_repeat",
    "break_repeat",
    "sample_interval_ms",
    "order",
    "graph",
    "verify",
    "snapshot",
    "executables",
)


# CaptureOptions' fields that hold a word of a vocab enum
_CHOICE_FIELDS = (
    ("weights", Weights),
    ("experts", Experts),
    ("phase", Phase),
    ("warmup_output", WarmupOutput),
    ("warmup_repeat", WarmupRepeat),
    ("break_repeat", BreakRepeat),
    ("address_layout", AddressLayout),
    ("verify", Verify),
    ("graph", GraphKind),
    ("order", Order),
    ("executables", Executables),
    ("moe", Moe),
)


def mode_index(mode: str) -> int:
    """Sort key that puts modes in :data:`REPORT_MODES` order, unknown ones last."""
    return REPORT_MODES.index(mode) if mode in REPORT_MODES else len(REPORT_MODES)


@dataclass
class CaptureOptions:
    """Everything a capture is asked to do, with its one set of defaults.

    The CLI's ``capture`` options take their defaults from here; the runner hands the object to
    every mode's process as one JSON line (:meth:`to_json`); the bucket loop
    (:class:`bcgprof.measure.capture.Capturer`, and :func:`bcgprof.capture_buckets` for the
    Python API) reads the fields named in :data:`LOOP_OPTIONS`. Choice fields hold words of
    :mod:`bcgprof.vocab`. Constructing one checks nothing but the two rules of
    :meth:`__post_init__`; the CLI checks every value before a GPU is touched, the runner and
    the capturer what they use.
    """

    model: str = DEFAULT_MODEL
    weights: str = Weights.DUMMY.value  # one of WEIGHTS
    experts: str = Experts.BF16.value  # one of EXPERTS
    num_layers: Optional[int] = None  # None: all of the model's layers
    phase: str = Phase.PREFILL.value  # one of PHASES
    buckets: Optional[str] = None  # bucket spec; None: the phase's SGLang preset
    max_tokens: int = 16384
    max_bs: int = 256
    context_len: int = 4096  # decode: tokens of KV cache per sequence
    modes: list[str] = field(default_factory=lambda: list(DEFAULT_MODES))
    warmup: int = 2  # eager warm-up runs per bucket before its capture
    warmup_output: str = WarmupOutput.HELD.value  # one of WARMUP_OUTPUTS
    warmup_repeat: str = WarmupRepeat.REQUESTS.value  # one of WARMUP_REPEATS
    break_repeat: str = BreakRepeat.REQUESTS.value  # one of BREAK_REPEATS
    address_layout: str = AddressLayout.FIXED.value  # one of ADDRESS_LAYOUTS
    device: str = "cuda:0"
    # None: reports/<model>-<timestamp>; from_json gives a Path, run_capture a str
    out: Optional[Path | str] = None
    verify: str = Verify.SMALLEST_LARGEST.value  # one of VERIFY_CHOICES
    in_process: bool = False
    sample_interval_ms: float = 2.0  # the NVML peak sampler's interval
    tp: int = 1
    seed: int = 0
    graph: str = GraphKind.BREAKABLE.value  # one of GRAPH_KINDS
    order: str = Order.LARGEST_FIRST.value  # one of ORDERS
    # write each mode's allocator snapshot (memory_viz pickle) into the report
    snapshot: bool = False
    command: str = ""  # the command line, recorded in run.json
    executables: str = Executables.PER_SEGMENT.value  # one of EXECUTABLES
    moe: str = Moe.FUSED_BF16.value  # one of MOE_BACKENDS: the MoE's workspace
    # Several phases captured by each mode's one process into one pool, in this order (``phase``
    # is then the first); empty: the one phase ``phase``. ``phase_buckets``: a bucket spec per
    # phase (a phase not named: its preset), read instead of ``buckets``.
    phases: list[str] = field(default_factory=list)
    phase_buckets: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # an old word: the word now
        for name, enum in ((f, e) for f, e in _CHOICE_FIELDS if e in RENAMED):
            word = getattr(self, name)
            if isinstance(word, str) and current(enum, word) != word:
                warnings.warn(
                    f"{name}={word!r} is deprecated and will be removed in the next release; use "
                    f"{name}={current(enum, word)!r}",
                    FutureWarning,
                    stacklevel=3,
                )
                setattr(self, name, current(enum, word))
        # a run made of requests would skip the forward's collectives, which other ranks wait in
        if self.tp > 1:
            self.warmup_repeat = WarmupRepeat.EAGER.value
            # no rank records the allocator's history to repeat
            self.break_repeat = BreakRepeat.EAGER.value
        # the snapshot's stacks must name the op that allocated, never the repeater
        if self.snapshot:
            self.break_repeat = BreakRepeat.EAGER.value

    def to_json(self) -> str:
        """The options as one JSON line (how a mode's process receives them)."""
        data = {
            k: (str(v) if isinstance(v, Path) else v) for k, v in dataclasses.asdict(self).items()
        }
        return json.dumps(data)

    @classmethod
    def from_json(cls, text: str) -> CaptureOptions:
        data = json.loads(text)
        known = {f.name for f in dataclasses.fields(cls)}
        opts = cls(**{k: v for k, v in data.items() if k in known})
        if opts.out is not None:
            opts.out = Path(opts.out)
        return opts
