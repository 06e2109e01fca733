"""A capture run: `bcgprof capture` from checked options to a finished report.

The runner writes the report's ``run.json``, then runs each mode in fresh processes (one
per mode, or one per rank and mode for ``--tp N``: :mod:`bcgprof.measure.mode`), relays their
progress events to the caller, and settles the report's status. It prints nothing:
whoever calls it passes ``on_event`` (the CLI draws a progress bar from the events) and
reads the report afterwards.

Fixed cost per mode is kept low by starting the next modes' processes while the current
mode works, and a list of captures (``--num-layers 2,4``) hands its next capture's first mode on
(``then``, ``prestarted``): :mod:`bcgprof.measure.launch` starts, releases and reaps them.

Events (dicts with an ``event`` key): ``begin`` (the run: out, model, layers, dtype,
buckets, modes, tp, total), ``memory_source``, ``start``, ``bucket``, ``verify``,
``error``, ``done`` (from the modes, see :mod:`bcgprof.measure.mode`).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Optional, cast

from bcgprof.errors import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    BcgprofError,
    CaptureError,
    NoGPUError,
)
from bcgprof.measure.launch import Emit, ModeLauncher, ModeProcesses
from bcgprof.measure.phases import capture_total, decode_part, phased_run_info, prepare_phased
from bcgprof.options import ADDRESS_LAYOUTS, CaptureOptions
from bcgprof.vocab import Weights

if TYPE_CHECKING:
    from bcgprof.models.layers.attention import Attention


@dataclass
class CaptureOutcome:
    out: Path  # the report directory
    status: str  # complete | partial | failed | interrupted
    exit_code: int  # 0 complete, 1 a mode failed, 130 interrupted
    message: str = ""  # which modes failed, and how
    reporter: bool = True  # False on torchrun ranks other than 0 (rank 0 holds the report)
    # the next capture's first mode (run_capture's ``then``), started and waiting: pass it to that
    # capture's run_capture as ``prestarted``, or cancel() it
    handoff: Optional[ModeProcesses] = None


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def default_out(model: str) -> Path:
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", Path(model).name or model).strip("-")
    return Path("reports") / f"{slug}-{dt.datetime.now().strftime('%Y%m%d-%H%M%S')}"


def check_gpu(device: str):
    """The torch device for ``device``; one line when there is no such CUDA device."""
    import torch

    if not torch.cuda.is_available():
        raise NoGPUError(
            "no CUDA device found: `bcgprof capture` needs a GPU; without one, use "
            "`bcgprof estimate` for the analytic output-buffer figures, or `show`, `compare` and "
            "`gate` on existing reports"
        )
    dev = torch.device(device)
    if dev.type != "cuda" or (dev.index or 0) >= torch.cuda.device_count():
        raise CaptureError(
            f"device {device!r} does not exist; this machine has "
            f"cuda:0..cuda:{torch.cuda.device_count() - 1}"
        )
    return dev


def run_info(opts: CaptureOptions, spec, buckets: list[int], dev):
    """The report's run.json for a capture about to start on ``dev``."""
    import torch

    from bcgprof import __version__
    from bcgprof.measure.device import DeviceMemory
    from bcgprof.report import RunInfo

    torch.cuda.set_device(dev)
    memory = DeviceMemory(dev)
    layers = opts.num_layers or spec.num_layers
    return RunInfo(
        bcgprof_version=__version__,
        command=opts.command,
        model=spec.name,
        model_source=spec.source,
        config_hash=spec.config_hash,
        family=spec.family,
        layers=min(layers, spec.num_layers),
        hidden_size=spec.hidden_size,
        dtype=spec.dtype,
        weights=opts.weights,
        experts=opts.experts,
        phase=opts.phase,
        buckets=buckets,
        modes=list(opts.modes),
        gpu_name=memory.gpu_name(),
        driver=memory.driver(),
        torch_version=torch.__version__,
        cuda_version=torch.version.cuda or "",
        memory_source=memory.source,
        in_process=opts.in_process,
        tp=opts.tp,
        started_at=_now(),
        graph=opts.graph,
        order=opts.order,
        executables=opts.executables,
        moe=opts.moe,
        extra={
            "device": opts.device,
            "warmup": opts.warmup,
            "warmup_output": opts.warmup_output,
            "warmup_repeat": opts.warmup_repeat,
            "break_repeat": opts.break_repeat,
            "address_layout": opts.address_layout,
            "verify": opts.verify,
            "sample_interval_ms": opts.sample_interval_ms,
            "max_tokens": opts.max_tokens,
            "seed": opts.seed,
            "snapshot": opts.snapshot,
            **kv_figures(opts, spec, buckets),
        },
    )


def kv_figures(opts: CaptureOptions, spec, buckets: list[int]) -> dict:
    """What run.json records about the KV cache: bytes per token (how explain converts costs to
    tokens) and, for decode, the cache's shape and bytes (allocated before any capture, never
    charged to a bucket)."""
    from bcgprof import dtypes
    from bcgprof.models import build_meta
    from bcgprof.spec import kv

    meta = build_meta(spec, opts.num_layers, tp_rank=0, tp_size=opts.tp)
    attn = cast("Attention", meta.layers[0].self_attn)  # every family's decoder layer holds one
    width = dtypes.dtype_bytes(spec.dtype)
    layers = len(meta.layers)
    figures = {
        "kv_bytes_per_token": kv.kv_bytes_per_token(
            layers, attn.num_kv_heads, attn.head_dim, width
        ),
        "kv_formula": kv.kv_formula(layers, attn.num_kv_heads, attn.head_dim, width)
        + (f" (rank 0 of {opts.tp})" if opts.tp > 1 else ""),
    }
    if opts.phase == "decode":
        seqs = max(opts.max_bs, max(buckets))
        figures.update(
            context_len=opts.context_len,
            max_bs=seqs,
            kv_cache_bytes=kv.kv_cache_bytes(
                layers, attn.num_kv_heads, attn.head_dim, width, seqs=seqs, context=opts.context_len
            ),
        )
    return figures


def _check_decode_fits(opts: CaptureOptions, spec, buckets: list[int], dev) -> None:
    """Before any mode starts: the weights and the KV cache must fit in the free memory."""
    import torch

    from bcgprof import dtypes
    from bcgprof.measure.workload import check_cache_fits
    from bcgprof.models import build_meta

    meta = build_meta(
        spec, opts.num_layers, tp_rank=0, tp_size=opts.tp, experts=opts.experts, moe=opts.moe
    )
    if opts.weights == Weights.ONE_LAYER:
        from bcgprof.models.weights import share_layer_weights

        share_layer_weights(meta)  # parameters() then counts each shared tensor once
    # the meta module is not cast: floating tensors take the run's dtype
    width = dtypes.dtype_bytes(spec.dtype)
    weights = sum(
        p.numel() * (width if p.is_floating_point() else p.element_size())
        for p in meta.parameters()
    )
    need = kv_figures(opts, spec, buckets)["kv_cache_bytes"]
    free, _ = torch.cuda.mem_get_info(dev)
    check_cache_fits(
        need, max(0, int(free) - weights), max(opts.max_bs, max(buckets)), opts.context_len
    )


def _driver_loaded() -> bool:
    """Whether an NVIDIA driver is loaded (Linux), read without importing torch. Only then is the
    first mode started early: on a machine without a GPU the capture fails at once instead."""
    return Path("/proc/driver/nvidia/version").exists()


def _report_dir(opts: CaptureOptions, spec) -> Path:
    """Where the report goes: ``--out`` or a new dated directory; never over an existing report."""
    out = Path(opts.out) if opts.out else default_out(spec.name)
    if (out / "run.json").exists():
        raise CaptureError(f"{out} already holds a report; pass a new --out directory")
    return out


def _new_report(opts: CaptureOptions, spec, buckets: list[int], dev, extra: Optional[dict] = None):
    from bcgprof.report import ReportWriter

    out = _report_dir(opts, spec)
    info = run_info(opts, spec, buckets, dev)
    if opts.phases:
        phased_run_info(info, opts, spec)
    if extra:
        info.extra = dict(info.extra, **extra)
    return ReportWriter(out, info)


def _begin_event(writer, spec, buckets: list[int], opts: CaptureOptions) -> dict:
    total = capture_total(opts, buckets)
    return {
        "event": "begin",
        "out": str(writer.path),
        "model": spec.name,
        "layers": writer.run.layers,
        "dtype": spec.dtype,
        "buckets": buckets,
        "modes": list(opts.modes),
        "tp": opts.tp,
        "total": total,
    }


def _prepare(opts: CaptureOptions):
    """Checks that need no GPU; returns the options with the bucket spec filled in, the model, the
    buckets."""
    from bcgprof.buckets import default_bucket_spec, parse_buckets
    from bcgprof.spec import resolve_model

    spec = resolve_model(opts.model)
    if opts.address_layout not in ADDRESS_LAYOUTS:
        raise CaptureError(
            f"unknown address layout {opts.address_layout!r}; use one of "
            f"{', '.join(ADDRESS_LAYOUTS)}"
        )
    if opts.num_layers is not None and not opts.num_layers >= 1:
        raise CaptureError(f"--num-layers must be at least 1, got {opts.num_layers}")
    if opts.phases:  # several phases into one pool (bcgprof.measure.phases)
        opts, buckets = prepare_phased(opts)
        return opts, spec, buckets
    opts = dataclasses.replace(opts, buckets=opts.buckets or default_bucket_spec(opts.phase))
    buckets = parse_buckets(opts.buckets, max_tokens=opts.max_tokens, max_bs=opts.max_bs)
    return opts, spec, buckets


def _handoff_options(then: Optional[CaptureOptions]) -> Optional[CaptureOptions]:
    """``then`` as its own run_capture will pass it to its mode processes, when its first mode can
    be started early: one process per mode on a GPU machine, a new --out directory named in
    advance."""
    if then is None or then.tp > 1 or then.in_process or not then.out or not _driver_loaded():
        return None
    try:
        prepared, spec, _ = _prepare(then)
        return _with_out(prepared, spec)[0]
    except BcgprofError:  # its own run refuses it, in its turn
        return None


def _with_out(opts: CaptureOptions, spec) -> tuple[CaptureOptions, Path]:
    """A single-GPU capture's options as its mode processes get them: --out fixed (a dated default
    name is fixed once), never over an existing report."""
    out = _report_dir(opts, spec)
    return dataclasses.replace(opts, out=str(out)), out


def run_capture(
    opts: CaptureOptions,
    on_event: Optional[Emit] = None,
    *,
    then: Optional[CaptureOptions] = None,
    prestarted: Optional[ModeProcesses] = None,
) -> CaptureOutcome:
    """Run every mode and write the report; :class:`BcgprofError` for input refused before any work.

    ``then``: the capture that follows this one (the next of a --num-layers list); its first mode's
    processes start while this capture's last mode works and come back as the outcome's ``handoff``.
    ``prestarted``: this capture's first mode, so started by the capture before it."""
    emit = on_event or (lambda event: None)
    try:
        opts, spec, buckets = _prepare(opts)
    except BaseException:
        if prestarted is not None:
            prestarted.cancel()
        raise
    if prestarted is not None and (opts.tp > 1 or opts.in_process):
        prestarted.cancel()  # not this capture's kind of process
        prestarted = None
    launcher: Optional[ModeLauncher]
    if opts.tp > 1:
        from bcgprof.measure import dist

        dist.apply_tp_environment()
        if opts.device not in ("cuda", "cuda:0"):
            raise CaptureError(
                f"--device {opts.device} picks the GPU of a single-GPU run; a --tp {opts.tp} run "
                f"uses cuda:0..cuda:{opts.tp - 1} (choose them with CUDA_VISIBLE_DEVICES)"
            )
        torchrun = dist.under_torchrun()
        if opts.in_process and not torchrun:
            raise CaptureError(
                f"--in-process runs one process, but --tp {opts.tp} needs one per rank; to keep "
                f"every mode in each rank's process, run under torchrun --nproc-per-node {opts.tp}"
            )
        import torch
        import torch.distributed as tdist

        dist.check_tp_setup(
            spec,
            opts.tp,
            torch.cuda.device_count(),
            tdist.is_available() and tdist.is_nccl_available(),
        )
        if torchrun:
            return _run_under_torchrun(opts, spec, buckets, emit)
        dev = check_gpu("cuda:0")
        writer = _new_report(
            opts,
            spec,
            buckets,
            dev,
            {"tp_launch": "spawn", "tp_environment": dist.tp_environment()},
        )
        launcher = ModeLauncher(opts, writer.path)
    else:
        opts, out = _with_out(opts, spec)
        launcher = None if opts.in_process else ModeLauncher(opts, out, then=_handoff_options(then))
        made = not out.exists()
        try:
            if launcher is not None and prestarted is not None:
                launcher.adopt(prestarted)
            # the first mode imports while this process checks the GPU
            elif launcher is not None and _driver_loaded():
                out.mkdir(parents=True, exist_ok=True)
                launcher.prestart()
            dev = check_gpu(opts.device)
            if "decode" in (opts.phase, *opts.phases):
                decode_opts, decode_buckets = decode_part(opts, buckets)
                _check_decode_fits(decode_opts, spec, decode_buckets, dev)
            writer = _new_report(opts, spec, buckets, dev)
        except BaseException:
            if launcher is not None:
                launcher.close()
            if made and out.is_dir() and not any(out.iterdir()):
                out.rmdir()
            raise
    out = writer.path
    emit(_begin_event(writer, spec, buckets, opts))
    del writer  # each mode's rank 0 reopens the report and appends to it

    codes: dict[str, int] = {}
    interrupted = False
    handoff = None
    if launcher is None:
        codes, interrupted = _run_modes_in_process(opts, out, emit)
    else:
        try:
            codes, interrupted = launcher.run_all(emit)
            handoff, launcher.handoff = launcher.handoff, None
        finally:
            launcher.close()
    if handoff is not None and interrupted:
        handoff.cancel()
        handoff = None
    try:
        outcome = _finish(out, opts, codes, interrupted)
    except BaseException:
        if handoff is not None:
            handoff.cancel()
        raise
    outcome.handoff = handoff
    return outcome


def _run_modes_in_process(
    opts: CaptureOptions, out: Path, emit: Emit
) -> tuple[dict[str, int], bool]:
    import gc

    import torch

    from bcgprof.measure.mode import SingleGroup, run_mode_reporting_errors

    codes: dict[str, int] = {}
    for mode in opts.modes:
        try:
            codes[mode] = run_mode_reporting_errors(
                opts, mode, out, emit, SingleGroup(torch.device(opts.device))
            )
        finally:
            gc.collect()
            torch.cuda.empty_cache()
        if codes[mode] == EXIT_INTERRUPTED:
            return codes, True
    return codes, False


def _finish(
    out: Path, opts: CaptureOptions, codes: dict[str, int], interrupted: bool
) -> CaptureOutcome:
    """Settle the report's status from the modes' exit codes."""
    from bcgprof.report import ReportWriter

    writer = ReportWriter.reopen(out)
    failed = {m: c for m, c in codes.items() if c != EXIT_OK}
    if interrupted:
        status, code = "interrupted", EXIT_INTERRUPTED
    elif not failed and len(codes) == len(opts.modes):
        status, code = "complete", EXIT_OK
    else:
        status, code = ("partial" if writer.records else "failed"), EXIT_FAILED
    message = "; ".join(f"{m}: exit {c}" for m, c in failed.items())
    writer.update_run(status=status, ended_at=_now(), message=message)
    return CaptureOutcome(out, status, code, message)


# ---------------------------------------------------------------- under torchrun


def _run_under_torchrun(
    opts: CaptureOptions, spec, buckets: list[int], emit: Emit
) -> CaptureOutcome:
    """This process is one rank of a torchrun job: every mode runs here, in lockstep.

    Rank 0 creates the report and emits the events; the others run quietly.
    """
    import gc
    import os

    import torch

    from bcgprof.measure import dist
    from bcgprof.measure.mode import run_mode_reporting_errors

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if world != opts.tp:
        raise CaptureError(
            f"--tp {opts.tp} but torchrun started {world} processes; "
            f"run torchrun --nproc-per-node {opts.tp}"
        )
    opts = dataclasses.replace(opts, in_process=True)
    group = dist.init_rank(rank, world, int(os.environ.get("LOCAL_RANK", rank)))
    try:
        made = None
        # rank 0 creates the report and tells the others where it is (or why it could not)
        if rank == 0:
            try:
                writer = _new_report(
                    opts,
                    spec,
                    buckets,
                    group.device,
                    {"tp_launch": "torchrun", "tp_environment": dist.tp_environment()},
                )
                made = {"out": str(writer.path)}
                emit(_begin_event(writer, spec, buckets, opts))
            except BcgprofError as e:
                made = {"error": str(e)}
        made = group.broadcast(made)
        if "error" in made:
            raise CaptureError(made["error"])
        out = Path(made["out"])
        if rank != 0:
            emit = lambda event: None  # noqa: E731 (rank 0 speaks for the group)
        codes: dict[str, int] = {}
        interrupted = False
        try:
            for mode in opts.modes:
                codes[mode] = run_mode_reporting_errors(opts, mode, out, emit, group)
                gc.collect()
                torch.cuda.empty_cache()
                if codes[mode] == EXIT_INTERRUPTED:
                    interrupted = True
                    break
        except KeyboardInterrupt:
            interrupted = True
        if rank == 0:
            return _finish(out, opts, codes, interrupted)
        worst = max(codes.values(), default=EXIT_OK)
        return CaptureOutcome(out, "", EXIT_INTERRUPTED if interrupted else worst, reporter=False)
    finally:
        dist.close(group)
