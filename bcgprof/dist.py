"""Tensor-parallel capture: `bcgprof capture --tp N`, one process per GPU, NCCL.

Every rank builds its shard of the model (``models.load(..., tp_rank, tp_size)``: heads
and MLP/expert intermediate split, an all-reduce after the attention output projection
and after the MLP/MoE) and runs the same :class:`~bcgprof.capture.Capturer` as a single
GPU does, measuring its own device. The all-reduces sit inside the captured segments
(NCCL collectives capture in CUDA graphs), so every rank must capture the same bucket at
the same time: the ranks go bucket by bucket in lockstep. After each bucket every rank's
record is exchanged over a gloo group on the host (no GPU memory, nothing inside the
measured window), rank 0 appends all of them to the report (one ``buckets.csv``, a
``rank`` column), and if any rank's bucket failed, every rank stops there.

Two ways to run:

* ``bcgprof capture --tp N``: the parent creates the report, then per mode starts N rank
  processes (``python -m bcgprof.dist REPORT MODE OPTIONS`` with RANK, WORLD_SIZE,
  LOCAL_RANK, MASTER_ADDR/PORT), fresh for every mode as on a single GPU. Rank 0 reports
  progress on stdout; every rank's stderr goes to ``<report>/<mode>.rank<R>.log``.
* under an existing ``torchrun --nproc-per-node N -m bcgprof capture --tp N ...``: each
  torchrun process is one rank and runs every mode in-process (recorded as
  ``in_process`` in run.json: modes then share allocator state).

NVLink multicast (NVLS) stays off, in this process and in every rank's environment:
on shared multi-GPU hosts it can take the GPUs out of service.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import gc
import json
import os
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Optional

from bcgprof.errors import BcgprofError, CaptureError, ModelConfigError, NoGPUError
from bcgprof.worker import EXIT_ERROR, EXIT_INTERRUPTED, EXIT_OK, EXIT_OOM  # one set of exit codes for every mode process

# NVLink SHARP / multicast off for NCCL, torch symmetric memory and NVSHMEM.
MULTICAST_OFF = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}
# How long a collective may wait for a peer before NCCL's watchdog aborts the rank (a rank
# that died mid-bucket would otherwise leave the others waiting forever).
COLLECTIVE_TIMEOUT = dt.timedelta(minutes=10)
# Once one rank process has exited with an error, how long the others get to finish.
PEER_GRACE_S = 60.0

Emit = Callable[[dict], None]


def tp_environment() -> dict[str, str]:
    """Environment variables every tensor-parallel process runs with (multicast off)."""
    return dict(MULTICAST_OFF)


def apply_tp_environment(env: Optional[dict] = None) -> dict:
    """Set :func:`tp_environment` in ``env`` (default ``os.environ``), before NCCL starts."""
    env = os.environ if env is None else env
    env.update(tp_environment())
    return env


def rank_environment(rank: int, world: int, port: int, base: Optional[dict] = None) -> dict[str, str]:
    """The environment of spawned rank ``rank``: ``base`` (default os.environ), the
    multicast-off variables and torch.distributed's env:// rendezvous."""
    env = dict(os.environ if base is None else base)
    env.update(tp_environment())
    env.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world), LOCAL_WORLD_SIZE=str(world),
               MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), PYTHONUNBUFFERED="1")
    env.setdefault("GLOO_SOCKET_IFNAME", "lo")  # the control group: every rank is on this host
    return env


def under_torchrun(env: Optional[dict] = None) -> bool:
    """True when this process is one rank of a torchrun (or any env:// launcher) job."""
    env = os.environ if env is None else env
    return "RANK" in env and "WORLD_SIZE" in env


def check_tp_setup(spec, tp: int, device_count: int, nccl_available: bool) -> None:
    """Raise one line for a tensor-parallel set-up that cannot run; pure (no GPU touched).

    Checks, in order: tp >= 1; enough GPUs; NCCL in this torch build; the model splits
    over tp ranks (heads, KV heads, MLP and expert intermediate sizes).
    """
    if not isinstance(tp, int) or isinstance(tp, bool) or tp < 1:
        raise CaptureError(f"--tp must be a positive number of GPUs, got {tp!r}")
    if tp == 1:
        return
    if device_count < 1:
        raise NoGPUError(f"asked for --tp {tp} but no CUDA device was found; a tensor-parallel capture needs "
                         f"{tp} GPUs")
    if tp > device_count:
        raise CaptureError(f"asked for --tp {tp} but this machine has {device_count} GPU"
                           f"{'' if device_count == 1 else 's'}; pass --tp {device_count} or less")
    if not nccl_available:
        raise CaptureError("NCCL is not available in this torch build (torch.distributed.is_nccl_available() is "
                           "False); --tp needs a CUDA build of torch with NCCL")
    from bcgprof.models.common import ModelArgs, check_tensor_parallel

    try:
        check_tensor_parallel(ModelArgs.from_config(spec.config, spec.family), tp)
    except ModelConfigError as e:
        raise ModelConfigError(f"{spec.name}: {e}; pick a --tp that divides them") from None


def free_port() -> int:
    """A TCP port free on the loopback interface now (for the env:// rendezvous)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---------------------------------------------------------------- collective decisions


def lockstep(records: Iterable, world: int, group=None) -> Iterator[list]:
    """Advance every rank's record iterator one bucket at a time, in step.

    Each rank calls this with its own iterator (``Capturer.run()``); every step all ranks
    exchange their next record (``all_gather_object`` on ``group``, a gloo group) and get
    the step's records of every rank, by rank. All ranks stop together after a step in
    which any rank's record is not ``ok`` or any rank had no record left: the decision is
    taken from the same gathered records everywhere, so no rank is left waiting in a
    collective the others never enter.
    """
    import torch.distributed as dist

    it = iter(records)
    while True:
        mine = next(it, None)
        gathered: list = [None] * world
        dist.all_gather_object(gathered, mine, group=group)
        rows = [r for r in gathered if r is not None]
        if rows:
            yield rows
        if len(rows) < world or any(r.status != "ok" for r in rows):
            return


def step_event(mode: str, rows: list) -> dict:
    """The progress event of one lockstep bucket: the worst status, the largest pool."""
    worst = next((r for r in rows if r.status == "oom"), None) or next((r for r in rows if r.status != "ok"), None)
    return {"event": "bucket", "mode": mode, "bucket": rows[0].bucket,
            "status": worst.status if worst else "ok", "pool_bytes": max(r.pool_bytes for r in rows),
            "detail": f"rank {worst.rank}: {worst.detail}" if worst else "", "ranks": len(rows)}


def gather_errors(error: Optional[str], world: int, group=None) -> list[str]:
    """Every rank's error (or None) from a step all ranks take; returns 'rank R: ...' lines."""
    import torch.distributed as dist

    gathered: list = [None] * world
    dist.all_gather_object(gathered, error, group=group)
    return [f"rank {r}: {e}" for r, e in enumerate(gathered) if e]


def _error_line(e: BaseException) -> str:
    if isinstance(e, BcgprofError):
        return str(e)
    lines = str(e).strip().splitlines()
    hint = "; try --num-layers to profile part of the stack" if "out of memory" in str(e).lower() else ""
    return f"{type(e).__name__}: {lines[0] if lines else ''}{hint}"


# ---------------------------------------------------------------- one rank, one mode


@dataclass
class RankContext:
    rank: int
    world: int
    device: Any  # torch.device
    ctrl: Any  # gloo process group for host-side exchanges


def init_rank(rank: int, world: int, local_rank: int) -> RankContext:
    """Join the NCCL group (env:// rendezvous) on cuda:LOCAL_RANK, plus a gloo group for control."""
    import torch
    import torch.distributed as dist

    apply_tp_environment()
    device = torch.device("cuda", local_rank)
    torch.cuda.set_device(device)
    if not dist.is_initialized():
        dist.init_process_group("nccl", rank=rank, world_size=world, device_id=device, timeout=COLLECTIVE_TIMEOUT)
    ctrl = dist.new_group(backend="gloo")
    return RankContext(rank, world, device, ctrl)


def run_rank_mode(opts, mode: str, report_dir: Path, emit: Emit, ctx: RankContext) -> int:
    """One mode on one rank, in lockstep with the others; rank 0 writes every rank's rows.

    Returns the exit code of the group's outcome (the same on every rank, except a
    rank-local crash outside the collective steps).
    """
    import torch

    from bcgprof.buckets import parse_buckets
    from bcgprof.capture import Capturer
    from bcgprof.memory import DeviceMemory
    from bcgprof.models.config import resolve_model
    from bcgprof.report import ReportWriter
    from bcgprof.workload import build_workload

    started = time.perf_counter()
    rank, world, device = ctx.rank, ctx.world, ctx.device
    spec = resolve_model(opts.model)
    buckets = parse_buckets(opts.buckets, max_tokens=opts.max_tokens, max_bs=opts.max_bs)
    memory = DeviceMemory(device)
    emit({"event": "memory_source", "source": memory.source, "reason": memory.reason})

    # The build may fail on one rank only (out of memory, say): decide together.
    workload, error = None, None
    try:
        workload = build_workload(spec, weights=opts.weights, num_layers=opts.num_layers, device=device,
                                  max_tokens=max(buckets), seed=opts.seed, tp_rank=rank, tp_size=world)
    except Exception as e:
        error = _error_line(e)
    errors = gather_errors(error, world, ctx.ctrl)
    if errors:
        emit({"event": "error", "mode": mode, "message": "; ".join(errors)})
        return EXIT_OOM if any("out of memory" in e.lower() for e in errors) else EXIT_ERROR

    writer = ReportWriter.reopen(report_dir) if rank == 0 else None
    capturer = Capturer(workload.fn, workload.inputs, buckets, mode=mode, warmup=opts.warmup, device=device,
                        memory=memory, sample_interval_ms=opts.sample_interval_ms, rank=rank)
    emit({"event": "start", "mode": mode, "total": len(capturer.buckets), "build_s": workload.build_s})
    status = EXIT_OK
    timing = {"build_s": round(workload.build_s, 3), "parameter_bytes": workload.parameter_bytes}
    try:
        for rows in lockstep(capturer.run(), world, ctx.ctrl):
            if writer is not None:
                for r in rows:
                    writer.records.append(r)
                writer.flush()
            emit(step_event(mode, rows))
            if any(r.status == "oom" for r in rows):
                status = EXIT_OOM
            elif any(r.status != "ok" for r in rows):
                status = EXIT_ERROR
        if status == EXIT_OK:
            checked = capturer.verify(opts.verify, refill=workload.refill, seed=opts.seed + 1)
            mine = [(r.bucket, r.replay_max_abs_diff, r.status, r.detail) for r in checked]
            gathered: list = [None] * world
            import torch.distributed as dist

            dist.all_gather_object(gathered, mine, group=ctx.ctrl)
            results = {(r, b): (d, s, t) for r, items in enumerate(gathered) for b, d, s, t in items}
            if writer is not None and results:
                for rec in writer.records:
                    key = (rec.rank, rec.bucket)
                    if rec.mode == mode and key in results:
                        rec.replay_max_abs_diff, rec.status, rec.detail = results[key]
                writer.flush()
            if results:
                emit({"event": "verify", "mode": mode, "checked": sorted({b for _, b in results}),
                      "max_abs_diff": max(d for d, _, _ in results.values())})
            if any(s != "ok" for _, s, _ in results.values()):
                status = EXIT_ERROR
        rows = capturer.result.records
        timing.update({
            "prewarm_s": round(capturer.prewarm_ms / 1000.0, 3),
            "warmup_s": round(sum(r.warmup_ms for r in rows) / 1000.0, 3),
            "capture_s": round(sum(r.capture_ms for r in rows) / 1000.0, 3),
            "sampler_samples": capturer.sampler.samples,
            "wall_s": round(time.perf_counter() - started, 3),
        })
    except KeyboardInterrupt:
        status = EXIT_INTERRUPTED
    finally:
        capturer.close()
    if status != EXIT_INTERRUPTED:
        import torch.distributed as dist

        timings: list = [None] * world
        dist.all_gather_object(timings, timing, group=ctx.ctrl)
        if writer is not None:
            extra = dict(writer.run.extra)
            extra.setdefault("modes", {})[mode] = dict(timings[0], ranks=timings)
            writer.update_run(extra=extra, memory_source=memory.source)
    del capturer, workload
    gc.collect()
    torch.cuda.empty_cache()
    emit({"event": "done", "mode": mode, "exit": status})
    return status


def _stdout_emit(event: dict) -> None:
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()


def _quiet(event: dict) -> None:
    pass


def main(argv: list[str] | None = None) -> int:
    """A spawned rank: ``python -m bcgprof.dist REPORT_DIR MODE OPTIONS_JSON`` with RANK,
    WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT set."""
    import torch.distributed as dist

    from bcgprof.runner import CaptureOptions

    args = sys.argv[1:] if argv is None else argv
    report_dir, mode, options = Path(args[0]), args[1], json.loads(args[2])
    fields = {f.name for f in dataclasses.fields(CaptureOptions)}
    opts = CaptureOptions(**{k: v for k, v in options.items() if k in fields})
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    emit = _stdout_emit if rank == 0 else _quiet  # rank 0 speaks for the group
    try:
        ctx = init_rank(rank, world, int(os.environ.get("LOCAL_RANK", rank)))
        return run_rank_mode(opts, mode, report_dir, emit, ctx)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except Exception as e:
        import traceback

        traceback.print_exc()  # to this rank's log
        emit({"event": "error", "mode": mode, "message": f"rank {rank}: {_error_line(e)}"})
        return EXIT_OOM if "out of memory" in str(e).lower() else EXIT_ERROR
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


# ---------------------------------------------------------------- the launcher


def _watch(procs: list, done: threading.Event, grace_s: float) -> None:
    """Once one rank process has failed, give the others ``grace_s`` to finish, then kill them."""
    failed_at = None
    while not done.is_set():
        codes = [p.poll() for p in procs]
        if failed_at is None and any(c not in (None, 0) for c in codes):
            failed_at = time.monotonic()
        if failed_at is not None and time.monotonic() - failed_at > grace_s:
            for p in procs:
                if p.poll() is None:
                    p.kill()
            return
        if all(c is not None for c in codes):
            return
        done.wait(0.5)


def run_mode_ranks(opts, mode: str, out: Path, on_event: Emit, *, grace_s: float = PEER_GRACE_S) -> int:
    """Start the ranks of one mode as fresh processes; relay rank 0's events; return the exit code."""
    options = {k: (str(v) if isinstance(v, Path) else v) for k, v in dataclasses.asdict(opts).items()}
    port = free_port()
    logs, procs = [], []
    done = threading.Event()
    try:
        for rank in range(opts.tp):
            log = open(out / f"{mode}.rank{rank}.log", "w")
            logs.append(log)
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "bcgprof.dist", str(out), mode, json.dumps(options)],
                stdout=subprocess.PIPE if rank == 0 else log, stderr=log, text=True,
                env=rank_environment(rank, opts.tp, port),
            ))
        watcher = threading.Thread(target=_watch, args=(procs, done, grace_s), daemon=True)
        watcher.start()
        try:
            for line in procs[0].stdout:
                line = line.strip()
                if line.startswith("{"):
                    try:
                        on_event(json.loads(line))
                    except json.JSONDecodeError:
                        pass
            codes = [p.wait() for p in procs]
        except KeyboardInterrupt:
            for p in procs:  # the ranks got the same Ctrl-C; their finished rows are on disk
                try:
                    p.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    p.kill()
            raise
        if codes[0] != 0:
            return codes[0]
        failed = [(r, c) for r, c in enumerate(codes) if c != 0]
        if failed:
            on_event({"event": "error", "mode": mode,
                      "message": "; ".join(f"rank {r} exited with {c} (see {mode}.rank{r}.log)" for r, c in failed)})
            return failed[0][1] if failed[0][1] > 0 else EXIT_ERROR
        return 0
    finally:
        done.set()
        for p in procs:
            if p.poll() is None:
                p.kill()
        for log in logs:
            log.close()
            path = Path(log.name)
            if path.exists() and path.stat().st_size == 0:  # keep logs only when a rank said something
                path.unlink()


def run_capture_tp(opts, spec, buckets: list[int]) -> int:
    """`bcgprof capture --tp N`: check the set-up, write the report's run.json, then capture
    every mode on N ranks (spawned, or this torchrun job's); return the exit code."""
    import torch

    apply_tp_environment()
    if opts.device not in ("cuda", "cuda:0"):
        raise CaptureError(f"--device {opts.device} picks the GPU of a single-GPU run; a --tp {opts.tp} run uses "
                           f"cuda:0..cuda:{opts.tp - 1} (choose them with CUDA_VISIBLE_DEVICES)")
    torchrun = under_torchrun()
    if opts.in_process and not torchrun:
        raise CaptureError(f"--in-process runs one process, but --tp {opts.tp} needs one per rank; "
                           f"to keep every mode in each rank's process, run under torchrun --nproc-per-node {opts.tp}")
    import torch.distributed as dist

    check_tp_setup(spec, opts.tp, torch.cuda.device_count(), dist.is_available() and dist.is_nccl_available())
    if torchrun:
        return _run_under_torchrun(opts, spec, buckets)

    from rich.console import Console

    from bcgprof.report import ReportWriter
    from bcgprof.runner import _check_gpu, _run_info, run_modes

    console = Console(stderr=False)
    dev = _check_gpu("cuda:0")
    out = _new_report_dir(opts, spec)
    writer = ReportWriter(out, _tp_run_info(_run_info(opts, spec, buckets, dev), "spawn"))
    _announce(console, spec, writer, buckets, opts, out)
    del writer  # rank 0 of each mode reopens the report and appends to it
    return run_modes(opts, out, buckets, console, run_mode_ranks)


def _new_report_dir(opts, spec) -> Path:
    from bcgprof.runner import _default_out

    out = Path(opts.out) if opts.out else _default_out(spec.name)
    if (out / "run.json").exists():
        raise CaptureError(f"{out} already holds a report; pass a new --out directory")
    return out


def _tp_run_info(run, launch: str):
    run.extra = dict(run.extra, tp_launch=launch, tp_environment=tp_environment())
    return run


def _announce(console, spec, writer, buckets, opts, out) -> None:
    console.print(f"bcgprof capture: {spec.name} ({writer.run.layers} layers, {spec.dtype}) on {opts.tp} "
                  f"tensor-parallel ranks, {len(buckets)} buckets {buckets[0]}..{buckets[-1]}, "
                  f"modes {', '.join(opts.modes)} -> {out}")


def _run_under_torchrun(opts, spec, buckets: list[int]) -> int:
    """This process is one rank of a torchrun job: every mode runs here, in lockstep."""
    import torch
    import torch.distributed as dist

    from bcgprof.report import ReportWriter
    from bcgprof.runner import EXIT_INTERRUPTED as INTERRUPTED
    from bcgprof.runner import _finish, _Progress, _run_info

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if world != opts.tp:
        raise CaptureError(f"--tp {opts.tp} but torchrun started {world} processes; "
                           f"run torchrun --nproc-per-node {opts.tp}")
    opts = dataclasses.replace(opts, in_process=True)
    ctx = init_rank(rank, world, int(os.environ.get("LOCAL_RANK", rank)))
    console = progress = None
    try:
        # rank 0 creates the report and tells the others where it is (or why it could not)
        made: list = [None]
        if rank == 0:
            try:
                out = _new_report_dir(opts, spec)
                writer = ReportWriter(out, _tp_run_info(_run_info(opts, spec, buckets, ctx.device), "torchrun"))
                made[0] = {"out": str(out)}
            except BcgprofError as e:
                made[0] = {"error": str(e)}
        dist.broadcast_object_list(made, src=0, group=ctx.ctrl)
        if "error" in made[0]:
            raise CaptureError(made[0]["error"])
        out = Path(made[0]["out"])
        emit: Emit = _quiet
        if rank == 0:
            from rich.console import Console

            console = Console(stderr=False)
            _announce(console, spec, writer, buckets, opts, out)
            del writer
            progress = _Progress(console, sum(1 if m == "floor" else len(buckets) for m in opts.modes))
            progress.progress.start()
            emit = progress.handle
        codes: dict[str, int] = {}
        interrupted = False
        try:
            for mode in opts.modes:
                try:
                    codes[mode] = run_rank_mode(opts, mode, out, emit, ctx)
                except KeyboardInterrupt:
                    raise
                except Exception as e:  # outside the collective steps: this rank cannot go on
                    emit({"event": "error", "mode": mode, "message": f"rank {rank}: {_error_line(e)}"})
                    codes[mode] = EXIT_ERROR
                    break
                gc.collect()
                torch.cuda.empty_cache()
                if codes[mode] == INTERRUPTED:
                    interrupted = True
                    break
        except KeyboardInterrupt:
            interrupted = True
        if progress is not None:
            progress.progress.stop()
        if rank == 0:
            return _finish(out, opts, codes, interrupted, console)
        return max(codes.values(), default=0)
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
