"""`bcgprof capture`: the one command that needs a GPU (and the only one that imports torch).

Every option and input is checked here, before torch is imported or a GPU touched, so a
mistake is named as such and never reported as "no CUDA device".
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

import typer

from bcgprof.cli.common import BUCKETS_HELP, bucket_list
from bcgprof.cli.output import flush_stdout, note, stderr_console, stdout_console
from bcgprof.cli.params import TUNING, renamed
from bcgprof.cli.phase_options import PHASE_HELP, parse_phases, phase_bucket_specs, phase_runs
from bcgprof.cli.root import app, command
from bcgprof.errors import EXIT_INTERRUPTED, BcgprofError, CaptureError
from bcgprof.options import MODES, CaptureOptions
from bcgprof.vocab import (
    RENAMED,
    AddressLayout,
    BreakRepeat,
    Executables,
    Experts,
    GraphKind,
    Mode,
    Moe,
    Order,
    Verify,
    WarmupOutput,
    WarmupRepeat,
    Weights,
)

if TYPE_CHECKING:
    from bcgprof.spec import ModelSpec
# The model spec and the bucket caps are imported where a capture is checked, so that registering
# this command costs the read commands nothing.

D = CaptureOptions()  # every option's default, defined once there


def _parse_modes(text: str) -> list[str]:
    modes = [m.strip() for m in text.split(",")]
    for m in modes:
        if m not in MODES:
            raise BcgprofError(
                f"--modes {text!r}: unknown mode {m!r}; use a comma list of {', '.join(MODES)}"
            )
    if len(set(modes)) != len(modes):
        raise BcgprofError(f"--modes {text!r} names a mode twice; list each once")
    return modes


def _check_out(out: Optional[Path]) -> None:
    """``capture --out``: a new or empty directory somewhere writable; never a file or an
    existing report."""
    if out is None:
        return
    from bcgprof.outputs import holds_report

    if out.exists() and not out.is_dir():
        raise CaptureError(f"--out {out} is an existing file; pass a new directory for the report")
    if holds_report(out):
        raise CaptureError(f"--out {out} already holds a report; pass a new --out directory")
    parent = out
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise CaptureError(f"--out {out} cannot be created: {parent} is a file, not a directory")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise CaptureError(f"--out {out} cannot be created: {parent} is not writable")


@app.command(
    cls=renamed(
        choices={
            "--weights": RENAMED[Weights],
            "--warmup-repeat": RENAMED[WarmupRepeat],
            "--break-repeat": RENAMED[BreakRepeat],
        }
    )
)
@command
def capture(
    model: str = typer.Option(
        D.model,
        "--model",
        "-m",
        help="Model preset name, path to a config.json, or a checkpoint directory holding one.",
    ),
    weights: Weights = typer.Option(
        Weights(D.weights),
        help="dummy: random weights of the right shapes (no download); "
        "one-layer: dummy weights, one layer's set used by "
        "every layer, so that any depth fits the GPU (the capture "
        "figures are those of distinct weights; only the "
        "parameter bytes shrink); safetensors: load the "
        "checkpoint directory's weights.",
    ),
    experts: Experts = typer.Option(
        Experts(D.experts),
        "--experts",
        help="bf16: MoE expert weights in the model's "
        "dtype (MXFP4 checkpoints dequantised); packed: gpt-oss's MXFP4 experts kept as "
        "the checkpoint stores them (uint8 blocks and scales), decoded inside the fused "
        "MoE's GEMMs, so no bf16 copy of them exists.",
    ),
    moe: Moe = typer.Option(
        Moe(D.moe),
        "--moe",
        help="The MoE's workspace, as which engine "
        "kernel allocates it. fused-bf16: SGLang's Triton fused_experts (a "
        "[T*k, 2I] and a [T*k, I] cache, the output written over the input); "
        "sglang-mxfp4: SGLang's MXFP4 MoE for gpt-oss on Hopper "
        "(triton_kernels' matmul_ogs: the SwiGLU fused into the first GEMM, a "
        "[T*k, I] and a [T*k, H] tensor, a new output), gpt-oss only. Recorded "
        "in run.json.",
    ),
    num_layers: Optional[str] = typer.Option(
        None,
        "--num-layers",
        help="Decoder layers to build, or a comma list "
        "(2,4): one report per count, in <out>/layers-N. Default: all of the "
        "model's layers.",
    ),
    phase: str = typer.Option(D.phase, "--phase", help=PHASE_HELP),
    buckets: Optional[str] = typer.Option(None, "--buckets", "-b", help=BUCKETS_HELP),
    max_tokens: int = typer.Option(
        D.max_tokens,
        help="Cap, in tokens, of the sglang-prefill preset "
        "(SGLang's chunked prefill size); 1 to 1048576.",
    ),
    max_bs: int = typer.Option(
        D.max_bs,
        help="Cap, in sequences, of the sglang-decode preset, and the sequences decode's "
        "KV cache is sized for; 1 to 1048576.",
    ),
    context_len: int = typer.Option(
        D.context_len,
        "--context-len",
        help="Decode: tokens of KV cache per sequence, allocated "
        "once before any capture and never charged to a bucket; 1 to 1048576.",
    ),
    modes: str = typer.Option(
        ",".join(D.modes),
        help="Comma list of modes to run, each in a fresh process: per-bucket "
        "(each bucket keeps its own output), shared (one max-size output "
        "buffer outside the pool), shared-largest (the largest bucket's "
        "own output, in the pool, is the shared buffer), floor (the "
        "largest bucket alone).",
    ),
    warmup: int = typer.Option(
        D.warmup, min=0, help="Eager warm-up runs per bucket before its capture."
    ),
    warmup_output: WarmupOutput = typer.Option(
        WarmupOutput(D.warmup_output),
        "--warmup-output",
        rich_help_panel=TUNING,
        help="held: each warm-up run's output stays alive while the next run "
        "executes (the committed reports); freed: it is dropped first, as "
        "SGLang's warm-up discards each run's result. Changes the peak "
        "figures (peak transient, device peak) and what the warm-up "
        "leaves cached.",
    ),
    warmup_repeat: WarmupRepeat = typer.Option(
        WarmupRepeat(D.warmup_repeat),
        "--warmup-repeat",
        rich_help_panel=TUNING,
        help="How a bucket's warm-up runs after the first are made. eager: "
        "full forwards; requests: the first run's allocator requests "
        "(sizes, order, streams) are made again without launching a "
        "kernel, which leaves the allocator, and so every memory figure, "
        "as an eager run would, in less time. A run the history cannot "
        "repeat exactly runs eagerly, as do tensor-parallel ranks.",
    ),
    break_repeat: BreakRepeat = typer.Option(
        BreakRepeat(D.break_repeat),
        "--break-repeat",
        rich_help_panel=TUNING,
        help="How the graph breaks (the attention) of a bucket's warm-up and "
        "capture run after the first call of the same shapes. eager: "
        "every call runs; requests: later calls make the first one's "
        "allocator requests again without launching a kernel (every "
        "layer of a kind calls it alike), which leaves every memory "
        "figure as it was, in less time. Graph replays and the replay "
        "check always run it; --snapshot and tensor-parallel runs "
        "run every call.",
    ),
    device: str = typer.Option(D.device, help="CUDA device, cuda:K."),
    out: Optional[Path] = typer.Option(
        None,
        "--out",
        "-o",
        help="Report directory to create. Default: reports/<model>-<timestamp>.",
    ),
    verify: Verify = typer.Option(
        Verify(D.verify),
        help="Replay buckets with fresh inputs and compare "
        "with an eager forward: the smallest and largest, "
        "all, or none.",
    ),
    in_process: bool = typer.Option(
        D.in_process,
        "--in-process",
        rich_help_panel=TUNING,
        help="Run all modes in this process (debugging; "
        "modes then share allocator state); recorded in "
        "run.json.",
    ),
    sample_interval_ms: float = typer.Option(
        D.sample_interval_ms,
        rich_help_panel=TUNING,
        help="NVML peak-sampler interval, in milliseconds (0.1 to 60000).",
    ),
    tp: int = typer.Option(
        D.tp, min=1, help="Tensor-parallel ranks (GPUs), one process each; 1 to 8."
    ),
    seed: int = typer.Option(D.seed, help="Random seed for dummy weights and inputs."),
    graph: GraphKind = typer.Option(
        GraphKind(D.graph),
        "--graph",
        help="breakable: each bucket's graph is split "
        "into segments around attention, which runs eagerly; full: one CUDA graph per "
        "bucket with attention captured inside it.",
    ),
    order: Order = typer.Option(
        Order(D.order),
        "--order",
        help="Capture order of the buckets: largest-first "
        "(smaller buckets reuse pool memory the larger ones freed) or smallest-first.",
    ),
    snapshot: bool = typer.Option(
        D.snapshot,
        "--snapshot",
        help="Record the allocator's history in each mode and write "
        "<mode>.snapshot.pickle into the report (open it at https://pytorch.org/memory_viz).",
    ),
    address_layout: AddressLayout = typer.Option(
        AddressLayout(D.address_layout),
        "--address-layout",
        rich_help_panel=TUNING,
        help="fixed: each mode process runs with Linux's address "
        "randomisation off, so its device memory lands at the same "
        "addresses every run and the allocator, which picks between "
        "equal free blocks by address, does the same (some models' "
        "pools otherwise differ from run to run); random: as an "
        "engine's process runs. Recorded per mode in run.json.",
    ),
    executables: Executables = typer.Option(
        Executables(D.executables),
        "--executables",
        help="per-segment: each graph segment is instantiated as its own executable; "
        "per-signature: segments whose graphs differ only in addresses (same kernels, "
        "launch shapes and topology) share one executable, updated to a segment's graph "
        "before its launch (SGLang's SGLANG_ENABLE_CUDA_GRAPH_DEDUP). Needs the CUDA Python "
        "bindings. Recorded in run.json.",
    ),
) -> None:
    """Capture a model in each mode and write a report (needs a CUDA GPU).

    Each mode captures the model over the buckets, in a fresh process unless --in-process. With no
    options: gpt-oss-20b, the sglang-prefill buckets up to 16384 tokens, every mode (per-bucket,
    shared, shared-largest, floor).
    Exit codes: 0 every mode completed, 1 a mode failed (the report is partial or failed), 2 refused
    before any work (bad option, model or --out, no GPU), 130 interrupted.
    """
    # Every input check first, so a typo fails before a GPU is touched.
    mode_list = _parse_modes(modes)
    if Mode.SHARED_LARGEST in mode_list and order is not Order.LARGEST_FIRST:
        raise CaptureError(
            "--modes shared-largest keeps the largest bucket's own output as the shared buffer, so "
            "the largest bucket must be captured first: use --order largest-first, or leave "
            "shared-largest out of --modes"
        )
    if not re.fullmatch(r"cuda(:[0-9]{1,4})?", device):
        raise BcgprofError(f"--device {device!r} is not a CUDA device; write cuda:0, cuda:1, ...")
    if not (math.isfinite(sample_interval_ms) and 0.1 <= sample_interval_ms <= 60_000):
        raise BcgprofError(
            f"--sample-interval-ms {sample_interval_ms} is out of range; use 0.1 to 60000"
        )
    from bcgprof.report.limits import MAX_TP

    # before torch: a report holds ranks 0 to MAX_TP - 1, whatever GPUs this machine has
    if tp > MAX_TP:
        raise CaptureError(
            f"--tp {tp} is over {MAX_TP}, the most ranks a report holds; use 1 to {MAX_TP}"
        )
    if not -(2**63) <= seed < 2**64:
        raise BcgprofError("--seed is out of range; use an integer that fits in 64 bits")
    phase_list = parse_phases(phase)
    several = len(phase_list) > 1
    phase_specs = phase_bucket_specs(buckets, phase_list, max_tokens, max_bs) if several else {}
    if not several:
        bucket_list(buckets, phase_list[0], max_tokens, max_bs)
    elif tp > 1:
        raise CaptureError(
            f"--phase {phase} captures its phases into one pool on one GPU; use --tp 1, or "
            "capture one phase at a time"
        )
    if context_len < 1:
        raise BcgprofError(f"--context-len must be a positive number of tokens, got {context_len}")
    from bcgprof.buckets import MAX_BUCKET_SIZE
    from bcgprof.spec import resolve_model

    if context_len > MAX_BUCKET_SIZE:
        raise BcgprofError(
            f"--context-len {context_len} is over the cap of {MAX_BUCKET_SIZE} tokens"
        )
    spec = resolve_model(model)
    if experts is Experts.PACKED:
        _check_packed_experts(spec, tp)
    if moe is Moe.SGLANG_MXFP4:
        _check_sglang_mxfp4(spec)
    if weights is Weights.SAFETENSORS:
        _check_checkpoint(spec)
    layer_counts = _layer_counts(num_layers, spec.num_layers)
    if several and len(layer_counts) > 1:
        raise BcgprofError(
            f"--phase {phase} with --num-layers {num_layers}: capture several phases at one layer "
            "count at a time"
        )
    _check_out(out)
    if executables is Executables.PER_SIGNATURE:
        _check_driver_bindings()

    opts = CaptureOptions(
        model=model,
        weights=weights.value,
        experts=experts.value,
        num_layers=layer_counts[0],
        phase=phase_list[0],
        buckets=None if several else buckets,
        phases=phase_list if several else [],
        phase_buckets=phase_specs,
        max_tokens=max_tokens,
        max_bs=max_bs,
        context_len=context_len,
        modes=mode_list,
        warmup=warmup,
        warmup_output=warmup_output.value,
        warmup_repeat=warmup_repeat.value,
        break_repeat=break_repeat.value,
        device=device,
        out=out,
        verify=verify.value,
        in_process=in_process,
        sample_interval_ms=sample_interval_ms,
        tp=tp,
        seed=seed,
        graph=graph.value,
        order=order.value,
        snapshot=snapshot,
        address_layout=address_layout.value,
        command=shlex.join(["bcgprof", *sys.argv[1:]]),
        executables=executables.value,
        moe=moe.value,
    )
    if len(layer_counts) == 1 and not several:
        raise typer.Exit(_run_capture(opts)[0])
    from bcgprof.measure.runner import default_out
    from bcgprof.report.schema import layer_report_name

    parent = Path(out) if out is not None else default_out(spec.name)
    if several:  # the pair into --out, then each phase alone under it
        runs = phase_runs(opts, parent)
    else:  # one report per layer count, each in its own directory under --out
        runs = [
            dataclasses.replace(opts, num_layers=n, out=parent / layer_report_name(n))
            for n in layer_counts
            if n is not None
        ]  # a list of several counts holds numbers only
    codes = []
    handoff = None  # the next depth's first mode, started while this depth's last mode works
    try:
        for run, then in zip(runs, [*runs[1:], None]):
            code, handoff = _run_capture(run, then=then, prestarted=handoff)
            codes.append(code)
            if code == EXIT_INTERRUPTED:
                break
    finally:
        if handoff is not None:
            handoff.cancel()
    raise typer.Exit(max(codes))


def _layer_counts(text: Optional[str], depth: int) -> list[Optional[int]]:
    """``--num-layers``: None (every layer), one count, or a comma list of distinct counts."""
    if text is None:
        return [None]
    counts: list[Optional[int]] = []
    for entry in text.split(","):
        entry = entry.strip()
        if not (entry.isascii() and entry.isdigit()) or not 1 <= int(entry) <= depth:
            raise BcgprofError(
                f"--num-layers {text!r}: {entry!r} is not a layer count from 1 to {depth} (the "
                "model's depth); write one count or a comma list such as 2,4"
            )
        if int(entry) in counts:
            raise BcgprofError(f"--num-layers {text!r} names {entry} twice; list each count once")
        counts.append(int(entry))
    return counts


def _run_capture(opts, *, then=None, prestarted=None) -> tuple[int, Any]:
    """Run the capture under a progress bar, then show the report; return the exit code and the
    handoff to the next capture (``then``; see runner.run_capture)."""
    from bcgprof.measure import runner
    from bcgprof.render import print_capture_result
    from bcgprof.render.progress import CaptureProgress
    from bcgprof.report import read_report

    with CaptureProgress(stderr_console()) as progress:
        outcome = runner.run_capture(opts, progress.handle, then=then, prestarted=prestarted)
    if not outcome.reporter:  # a torchrun rank other than 0: rank 0 shows the report
        return outcome.exit_code, outcome.handoff
    try:
        from bcgprof.analysis.phases import pools_of

        shown = read_report(outcome.out, phased=True)
        # a pair's phases alone ran before it (phase_runs): it is set against them
        print_capture_result(shown, stdout_console(), pools_of(shown))
        flush_stdout()
    except BaseException:
        if outcome.handoff is not None:
            outcome.handoff.cancel()
        raise
    if outcome.exit_code:
        note(
            f"capture {outcome.status} ({outcome.message or 'interrupted'}); the finished rows "
            f"are in {outcome.out}"
        )
    return outcome.exit_code, outcome.handoff


def _check_packed_experts(spec: ModelSpec, tp: int) -> None:
    """--experts packed: a family whose checkpoints hold MXFP4 experts, whose sizes split into
    whole groups."""
    from bcgprof.options import PACKED_EXPERT_FAMILIES

    if spec.family not in PACKED_EXPERT_FAMILIES:
        raise CaptureError(
            f"--experts packed: {spec.name} ({spec.family}) has no MXFP4 experts to keep packed; "
            f"only {', '.join(PACKED_EXPERT_FAMILIES)} models do. Use --experts bf16"
        )
    hidden, inter = spec.config.get("hidden_size"), spec.config.get("intermediate_size")
    if isinstance(hidden, int) and isinstance(inter, int) and (hidden % 32 or inter % (32 * tp)):
        raise CaptureError(
            f"--experts packed: {spec.name}'s hidden size {hidden} and expert intermediate size "
            f"{inter} / --tp {tp} must be multiples of the 32-value MXFP4 group; use --experts "
            "bf16 "
            "or another --tp"
        )


def _check_driver_bindings() -> None:
    """--executables per-signature reads segment graphs through the CUDA Python bindings: they must
    be there (looked up, not imported)."""
    import importlib.util

    try:
        found = importlib.util.find_spec("cuda.bindings") is not None
    except (ImportError, ValueError):  # no ``cuda`` package at all
        found = False
    if not found:
        raise CaptureError(
            "--executables per-signature needs the CUDA Python bindings "
            "(cuda.bindings), which are not installed; pip install cuda-python, "
            "or use --executables per-segment"
        )


def _check_sglang_mxfp4(spec: ModelSpec) -> None:
    """--moe sglang-mxfp4: a family whose MoE SGLang runs through its MXFP4 path (gpt-oss)."""
    from bcgprof.options import SGLANG_MXFP4_FAMILIES

    if spec.family not in SGLANG_MXFP4_FAMILIES:
        raise CaptureError(
            f"--moe sglang-mxfp4: {spec.name} ({spec.family}) is not a model SGLang "
            "runs through its MXFP4 MoE; only "
            f"{', '.join(SGLANG_MXFP4_FAMILIES)} models are. Use --moe fused-bf16"
        )


def _check_checkpoint(spec: ModelSpec) -> None:
    """--weights safetensors: a checkpoint directory that holds safetensors files, not a preset."""
    if spec.checkpoint_dir is None:
        raise CaptureError(
            f"--weights safetensors needs a checkpoint: {spec.name} is a "
            f"{'preset' if spec.source == 'preset' else 'config.json alone'} with no weights; pass "
            "--model CHECKPOINT_DIR (holding config.json and *.safetensors) or use --weights dummy"
        )
    if not any(spec.checkpoint_dir.glob("*.safetensors")):
        raise CaptureError(
            f"--weights safetensors: {spec.checkpoint_dir} holds no *.safetensors files; download "
            "the checkpoint's weights there or use --weights dummy"
        )
