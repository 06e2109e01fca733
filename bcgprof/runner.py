"""Runs `bcgprof capture`: one process per mode, rows merged into one report."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from bcgprof.errors import CaptureError, NoGPUError

EXIT_INTERRUPTED = 130


@dataclass
class CaptureOptions:
    model: str = "gpt-oss-20b"
    weights: str = "dummy"  # dummy | safetensors
    num_layers: Optional[int] = None
    phase: str = "prefill"  # prefill | decode
    buckets: Optional[str] = None  # bucket spec; None = the phase's SGLang preset
    max_tokens: int = 16384
    max_bs: int = 256
    modes: list[str] = field(default_factory=lambda: ["per-bucket", "shared", "floor"])
    warmup: int = 2
    device: str = "cuda:0"
    out: Optional[Path] = None  # None = reports/<model>-<timestamp>
    verify: str = "smallest-largest"  # smallest-largest | all | none
    in_process: bool = False
    sample_interval_ms: float = 2.0
    tp: int = 1
    seed: int = 0
    command: str = ""  # the command line, recorded in run.json


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def _default_out(model: str) -> Path:
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", Path(model).name or model).strip("-")
    return Path("reports") / f"{slug}-{dt.datetime.now().strftime('%Y%m%d-%H%M%S')}"


def _check_gpu(device: str):
    import torch

    if not torch.cuda.is_available():
        raise NoGPUError(
            "no CUDA device found: `bcgprof capture` needs a GPU; without one, use `bcgprof estimate` "
            "for the analytic output-buffer figures, or `show`, `compare` and `gate` on existing reports"
        )
    dev = torch.device(device)
    if dev.type != "cuda" or (dev.index or 0) >= torch.cuda.device_count():
        raise CaptureError(f"device {device!r} does not exist; this machine has cuda:0..cuda:{torch.cuda.device_count() - 1}")
    return dev


def _run_info(opts: CaptureOptions, spec, buckets: list[int], dev):
    import torch

    from bcgprof import __version__
    from bcgprof.memory import DeviceMemory
    from bcgprof.report import RunInfo

    torch.cuda.set_device(dev)
    memory = DeviceMemory(dev)
    layers = opts.num_layers or spec.num_layers
    return RunInfo(
        bcgprof_version=__version__, command=opts.command, model=spec.name, model_source=spec.source,
        config_hash=spec.config_hash, family=spec.family, layers=min(layers, spec.num_layers),
        hidden_size=spec.hidden_size, dtype=spec.dtype, weights=opts.weights, phase=opts.phase,
        buckets=buckets, modes=list(opts.modes), gpu_name=memory.gpu_name(), driver=memory.driver(),
        torch_version=torch.__version__, cuda_version=torch.version.cuda or "",
        memory_source=memory.source, in_process=opts.in_process, tp=opts.tp, started_at=_now(),
        extra={"device": opts.device, "warmup": opts.warmup, "verify": opts.verify,
               "sample_interval_ms": opts.sample_interval_ms, "max_tokens": opts.max_tokens,
               "seed": opts.seed},
    )


class _Progress:
    """The live bar: mode, bucket, done/total, pool so far, elapsed."""

    def __init__(self, console, total_buckets: int):
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.console = console
        self.progress = Progress(
            TextColumn("[bold]{task.fields[mode]:>10}"), TextColumn("bucket {task.fields[bucket]:>6}"),
            BarColumn(), MofNCompleteColumn(), TextColumn("pool {task.fields[pool]:>10}"),
            TimeElapsedColumn(), console=console, transient=False,
        )
        self.task = self.progress.add_task("capture", total=total_buckets, mode="", bucket="-", pool="-")
        self.warned_source = False

    def handle(self, event: dict) -> None:
        from bcgprof.report_format import fmt_bytes

        kind = event.get("event")
        if kind == "memory_source" and event["source"] != "nvml" and not self.warned_source:
            self.warned_source = True
            self.console.print(f"[yellow]NVML unavailable ({event.get('reason') or 'no reason given'}); "
                               "device memory is read with torch.cuda.mem_get_info and no peak sampling[/]")
        elif kind == "start":
            self.progress.update(self.task, mode=event["mode"], bucket="build")
        elif kind == "bucket":
            self.progress.update(self.task, advance=1, bucket=str(event["bucket"]),
                                 pool=fmt_bytes(event["pool_bytes"]))
            if event["status"] != "ok":
                self.console.print(f"[red]{event['mode']} bucket {event['bucket']}: {event['status']}: {event['detail']}[/]")
        elif kind == "verify":
            self.progress.update(self.task, bucket="verify")
        elif kind == "error":
            self.console.print(f"[red]{event['mode']}: {event['message']}[/]")


def _run_mode_subprocess(opts: CaptureOptions, mode: str, out: Path, on_event) -> int:
    """Run one mode in a fresh Python process; its stderr goes to <report>/<mode>.log."""
    options = {k: (str(v) if isinstance(v, Path) else v) for k, v in dataclasses.asdict(opts).items()}
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    log = open(out / f"{mode}.log", "w")
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "bcgprof.worker", str(out), mode, json.dumps(options)],
            stdout=subprocess.PIPE, stderr=log, text=True, env=env,
        )
        try:
            for line in proc.stdout:
                line = line.strip()
                if line.startswith("{"):
                    try:
                        on_event(json.loads(line))
                    except json.JSONDecodeError:
                        pass
            return proc.wait()
        except KeyboardInterrupt:
            # The worker got the same Ctrl-C; its finished rows are already on disk.
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
            raise
    finally:
        log.close()
        if (out / f"{mode}.log").stat().st_size == 0:  # keep logs only when a mode said something
            (out / f"{mode}.log").unlink()


def _run_mode_in_process(opts: CaptureOptions, mode: str, out: Path, on_event) -> int:
    import gc

    import torch

    from bcgprof.worker import run_mode_reporting_errors

    try:
        return run_mode_reporting_errors(opts, mode, out, on_event)
    finally:
        gc.collect()
        torch.cuda.empty_cache()


def run_capture(opts: CaptureOptions) -> int:
    """Run every mode, write the report, print the tables and verdict; return the exit code."""
    from rich.console import Console

    from bcgprof.buckets import default_bucket_spec, parse_buckets
    from bcgprof.models.config import resolve_model
    from bcgprof.report import ReportWriter

    console = Console()
    if not console.is_terminal:  # a log file, not a screen: keep the tables' columns whole
        console = Console(width=200)
    if opts.phase != "prefill":
        raise CaptureError(f"phase {opts.phase!r} cannot be captured yet: the layer stacks have no KV cache; use --phase prefill")
    spec = resolve_model(opts.model)
    if opts.num_layers is not None and not 1 <= opts.num_layers:
        raise CaptureError(f"--num-layers must be at least 1, got {opts.num_layers}")
    opts = dataclasses.replace(opts, buckets=opts.buckets or default_bucket_spec(opts.phase))
    buckets = parse_buckets(opts.buckets, max_tokens=opts.max_tokens, max_bs=opts.max_bs)
    if opts.tp > 1:
        from bcgprof.dist import run_capture_tp

        return run_capture_tp(opts, spec, buckets)
    dev = _check_gpu(opts.device)
    out = Path(opts.out) if opts.out else _default_out(spec.name)
    if (out / "run.json").exists():
        raise CaptureError(f"{out} already holds a report; pass a new --out directory")
    writer = ReportWriter(out, _run_info(opts, spec, buckets, dev))
    console.print(f"bcgprof capture: {spec.name} ({writer.run.layers} layers, {spec.dtype}), "
                  f"{len(buckets)} buckets {buckets[0]}..{buckets[-1]}, modes {', '.join(opts.modes)} -> {out}")
    del writer  # each mode's process reopens the report and appends to it

    run_one = _run_mode_in_process if opts.in_process else _run_mode_subprocess
    return run_modes(opts, out, buckets, console, run_one)


def run_modes(opts: CaptureOptions, out: Path, buckets: list[int], console, run_one) -> int:
    """Run each mode through ``run_one(opts, mode, out, on_event)`` under one progress bar,
    then settle the report's status and print the results."""
    total = sum(1 if m == "floor" else len(buckets) for m in opts.modes)
    progress = _Progress(console, total)
    codes: dict[str, int] = {}
    interrupted = False
    with progress.progress:
        try:
            for mode in opts.modes:
                codes[mode] = run_one(opts, mode, out, progress.handle)
                if codes[mode] == EXIT_INTERRUPTED:
                    interrupted = True
                    break
        except KeyboardInterrupt:
            interrupted = True
    return _finish(out, opts, codes, interrupted, console)


def _finish(out: Path, opts: CaptureOptions, codes: dict[str, int], interrupted: bool, console) -> int:
    from bcgprof.report import ReportWriter

    writer = ReportWriter.reopen(out)
    failed = {m: c for m, c in codes.items() if c != 0}
    if interrupted:
        status, code = "interrupted", EXIT_INTERRUPTED
    elif not failed and len(codes) == len(opts.modes):
        status, code = "complete", 0
    else:
        status, code = ("partial" if writer.records else "failed"), 1
    message = "; ".join(f"{m}: exit {c}" for m, c in failed.items())
    writer.update_run(status=status, ended_at=_now(), message=message)
    _print_results(out, console)
    if code:
        console.print(f"[red]capture {status}[/] ({message or 'interrupted'}); the finished rows are in {out}")
    return code


def _print_results(out: Path, console) -> None:
    from bcgprof.render import print_report, verdict_line
    from bcgprof.report import read_report

    report = read_report(out)
    print_report(report, console)
    line = verdict_line(report)
    if line:
        console.print(line)
    console.print(f"report: {out}")
