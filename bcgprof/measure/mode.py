"""The one mode loop: build the workload, capture every bucket, write the rows, check replays.

A single GPU and the N ranks of a tensor-parallel capture run this same loop; they differ
only in their :class:`Group`. A one-GPU run has a :class:`SingleGroup` (rank 0 of 1,
whose exchanges are plain Python); a tensor-parallel rank has a
:class:`bcgprof.measure.dist.RankGroup`, whose exchanges go over a gloo group on the host, outside
every measured window. Rank 0 writes every rank's rows; every decision to stop is taken
from the same gathered records on every rank, so no rank waits in a collective that the
others never enter.

Normally each mode runs in a fresh process (``python -m bcgprof.measure.mode``), so no mode
inherits another's allocations, graphs or cached blocks. The process imports everything
it needs, then waits for a ``go`` line on stdin before it touches the GPU: the runner
starts the next mode's process while the current one works, and releases it only once
the current one has exited. Progress goes to the parent as JSON lines on stdout.

    python -m bcgprof.measure.mode REPORT_DIR MODE OPTIONS_JSON       (RANK, WORLD_SIZE set for a TP
    rank)
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Protocol

from bcgprof.errors import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_OOM,
    failure_exit_code,
    failure_line,
    is_out_of_memory,
)
from bcgprof.options import CaptureOptions
from bcgprof.vocab import AddressLayout, Mode

Emit = Callable[[dict], None]
SNAPSHOT_ENTRIES = 200_000  # allocator events kept for --snapshot (the most recent ones)
# personality(2): the kernel places this process's mappings at fixed addresses
ADDR_NO_RANDOMIZE = 0x0040000
_RELAUNCHED = "BCGPROF_ADDRESS_LAYOUT_SET"  # set before the re-exec, so a refused flag cannot loop


class Group(Protocol):
    """The ranks that capture one mode together."""

    rank: int
    world: int
    device: Any  # torch.device

    def gather(self, obj: Any) -> list:
        """Every rank's ``obj``, by rank, on every rank."""


@dataclass
class SingleGroup:
    """One GPU: rank 0 of 1."""

    device: Any
    rank: int = 0
    world: int = 1

    def gather(self, obj: Any) -> list:
        return [obj]


# ---------------------------------------------------------------- collective decisions


def lockstep(records: Iterable, group: Group) -> Iterator[list]:
    """Advance every rank's record iterator one bucket at a time, in step.

    Each step every rank contributes its next record (or None when it has none left)
    and gets the step's records of every rank. All ranks stop together after a step in
    which any record is not ``ok`` or any rank had none left.
    """
    it = iter(records)
    while True:
        rows = [r for r in group.gather(next(it, None)) if r is not None]
        if rows:
            yield rows
        if len(rows) < group.world or any(r.status != "ok" for r in rows):
            return


def step_event(mode: str, rows: list) -> dict:
    """The progress event of one bucket step: the worst status, the largest pool."""
    worst = next((r for r in rows if r.status == "oom"), None) or next(
        (r for r in rows if r.status != "ok"), None
    )
    event = {
        "event": "bucket",
        "mode": mode,
        "bucket": rows[0].bucket,
        "status": worst.status if worst else "ok",
        "pool_bytes": max(r.pool_bytes for r in rows),
        "detail": "",
        "ranks": len(rows),
    }
    if worst is not None:
        event["detail"] = f"rank {worst.rank}: {worst.detail}" if len(rows) > 1 else worst.detail
    return event


def step_status(rows: list) -> int:
    if any(r.status == "oom" for r in rows):
        return EXIT_OOM
    if any(r.status != "ok" for r in rows):
        return EXIT_FAILED
    return EXIT_OK


def _gather_failures(error: Optional[tuple[str, int]], group: Group) -> tuple[list[str], int]:
    """Every rank's failure (line, exit code) from a step all ranks take -> lines, exit code."""
    gathered = group.gather(error)
    lines = [
        (f"rank {r}: {e[0]}" if group.world > 1 else e[0]) for r, e in enumerate(gathered) if e
    ]
    codes = [e[1] for e in gathered if e]
    code = EXIT_OOM if EXIT_OOM in codes else (max(codes) if codes else EXIT_OK)
    return lines, code


# ---------------------------------------------------------------- the loop


def run_mode(opts: CaptureOptions, mode: str, report_dir: Path, emit: Emit, group: Group) -> int:
    """Capture every bucket of ``mode`` on this rank; rank 0 appends every rank's rows.

    Returns the exit code of the group's outcome (the same on every rank).
    """
    import torch

    from bcgprof.buckets import parse_buckets
    from bcgprof.measure.capture import Capturer
    from bcgprof.measure.device import DeviceMemory
    from bcgprof.measure.workload import build_workload
    from bcgprof.report import ReportWriter
    from bcgprof.spec import resolve_model

    started = time.perf_counter()
    if group.device.type == "cuda":
        torch.cuda.set_device(group.device)
    spec = resolve_model(opts.model)
    memory = DeviceMemory(group.device)
    emit({"event": "memory_source", "source": memory.source, "reason": memory.reason})

    # The build may fail on one rank only (out of memory, say): decide together.
    workload, error, phases = None, None, None
    try:
        if opts.phases:  # several phases into one pool: one model, each phase's buffers
            from bcgprof.measure.phases import build_phased

            workload, phases = build_phased(spec, opts, group.device)
        else:
            buckets = parse_buckets(opts.buckets, max_tokens=opts.max_tokens, max_bs=opts.max_bs)
            workload = build_workload(
                spec,
                weights=opts.weights,
                experts=opts.experts,
                num_layers=opts.num_layers,
                device=group.device,
                max_tokens=max(buckets),
                seed=opts.seed,
                tp_rank=group.rank,
                tp_size=group.world,
                phase=opts.phase,
                max_bs=max(opts.max_bs, max(buckets)),
                context_len=opts.context_len,
                moe=opts.moe,
            )
    except Exception as e:
        if group.world == 1:
            raise  # the caller reports it, with its traceback in the mode's log
        error = (failure_line(e), failure_exit_code(e))
    lines, code = _gather_failures(error, group)
    if lines:
        emit({"event": "error", "mode": mode, "message": "; ".join(lines)})
        return code

    assert workload is not None  # built here, or this rank returned above with every rank's failure
    writer = ReportWriter.reopen(report_dir) if group.rank == 0 else None
    capturer: Any
    if phases is not None:
        from functools import partial

        from bcgprof.measure.phases import PhasedCapturer

        made = partial(Capturer, options=opts, mode=mode, device=group.device, memory=memory)
        capturer = PhasedCapturer(
            workload.fn, phases, made, torch.cuda.graph_pool_handle, mode=mode, order=opts.order
        )
    else:
        capturer = Capturer(
            workload.fn,
            workload.inputs,
            buckets,
            options=opts,
            mode=mode,
            device=group.device,
            memory=memory,
            rank=group.rank,
            record_sites=(mode == Mode.FLOOR),
        )
    recorder = None
    # the allocator trace (single GPU), and --snapshot's history
    if group.world == 1 or opts.snapshot:
        from bcgprof.measure.tracing import AllocatorRecorder

        # no trace file for several phases: a trace's buckets would not tell the phases apart
        traced = group.world == 1 and writer is not None and phases is None
        recorder = AllocatorRecorder(
            report_dir if traced else None,
            mode,
            capturer.pool,
            device=group.device.index or 0,
            keep=SNAPSHOT_ENTRIES if opts.snapshot else 0,
        )
        capturer.recorder = recorder
    emit(
        {
            "event": "start",
            "mode": mode,
            "total": len(capturer.buckets),
            "build_s": workload.build_s,
        }
    )
    if recorder is not None:
        recorder.start()  # before the pre-warm, so --snapshot's history holds it
    status = EXIT_OK
    timing: dict = {
        "build_s": round(workload.build_s, 3),
        "parameter_bytes": workload.parameter_bytes,
        "kv_cache_bytes": workload.kv_cache_bytes,
        "address_layout": address_layout(),
    }
    try:
        captured_at = time.perf_counter()
        for rows in lockstep(capturer.run(), group):
            if writer is not None:
                writer.extend(rows)
            emit(step_event(mode, rows))
            status = max(status, step_status(rows))
            if recorder is not None and (warning := recorder.take_warning()):
                emit({"event": "warning", "mode": mode, "message": warning})
        capture_wall = time.perf_counter() - captured_at
        verify_start = time.perf_counter()
        if status == EXIT_OK:
            checked = capturer.verify(opts.verify, refill=workload.refill, seed=opts.seed + 1)
            # keyed by phase too: a bucket size may stand in two phases ("" for one phase)
            mine = [(r.phase, r.bucket, r.replay_max_abs_diff, r.status, r.detail) for r in checked]
            results = {
                (rank, p, b): (d, s, t)
                for rank, items in enumerate(group.gather(mine))
                for p, b, d, s, t in items
            }
            if writer is not None and results:
                for rec in writer.records:
                    if rec.mode == mode and (rec.rank, rec.phase, rec.bucket) in results:
                        rec.replay_max_abs_diff, rec.status, rec.detail = results[
                            (rec.rank, rec.phase, rec.bucket)
                        ]
                writer.flush()
            if results:
                emit(
                    {
                        "event": "verify",
                        "mode": mode,
                        "checked": sorted({b for _, _, b in results}),
                        "max_abs_diff": max(d for d, _, _ in results.values()),
                    }
                )
            if any(s != "ok" for _, s, _ in results.values()):
                status = EXIT_FAILED
        rows = capturer.result.records
        prewarm_s = capturer.prewarm_ms / 1000.0
        warmup_s = sum(r.warmup_ms for r in rows) / 1000.0
        capture_s = sum(r.capture_ms for r in rows) / 1000.0
        timing.update(
            {
                "prewarm_s": round(prewarm_s, 3),
                "warmup_s": round(warmup_s, 3),
                "capture_s": round(capture_s, 3),
                # the rest of the bucket loop: settling, snapshots and NVML readings
                "measure_s": round(capture_wall - prewarm_s - warmup_s - capture_s, 3),
                "verify_s": round(time.perf_counter() - verify_start, 3),
                "sampler_samples": capturer.sampler.samples,
                "warmup_runs_repeated": capturer.repeated_runs,
                "breaks_run": capturer.breaks_run,
                "breaks_repeated": capturer.breaks_repeated,
                "wall_s": round(time.perf_counter() - started, 3),
            }
        )
    except KeyboardInterrupt:
        status = EXIT_INTERRUPTED
    finally:
        capturer.close()
        if recorder is not None:
            try:
                if opts.snapshot:
                    _write_snapshot(report_dir, mode, group, recorder)
            finally:
                recorder.stop()
    if status != EXIT_INTERRUPTED:
        peaks = group.gather(capturer.result.pool_peak)
        if writer is not None:
            writer.add_sites(
                row
                for rank, peak in enumerate(peaks)
                if peak is not None
                for row in site_records(mode, rank, capturer.buckets[0], peak)
            )
    # After Ctrl-C only a single GPU can still record its timings: the ranks of a group
    # may not all reach another exchange.
    if status != EXIT_INTERRUPTED or group.world == 1:
        timings = group.gather(timing)
        if writer is not None:
            extra = dict(writer.run.extra)
            extra.setdefault("modes", {})[mode] = (
                timings[0] if group.world == 1 else dict(timings[0], ranks=timings)
            )
            writer.update_run(extra=extra, memory_source=memory.source)
    emit({"event": "done", "mode": mode, "exit": status})
    return status


def site_records(mode: str, rank: int, bucket: int, peak) -> Iterator:
    """sites.csv rows of one pool peak: its sites, then the slack; they sum to the pool's bytes."""
    from bcgprof.report import SiteRecord

    for site in peak.sites:
        yield SiteRecord(
            mode=mode,
            rank=rank,
            bucket=bucket,
            kind="site",
            site=site.site,
            bytes=site.bytes,
            blocks=site.blocks,
        )
    yield SiteRecord(
        mode=mode,
        rank=rank,
        bucket=bucket,
        kind="slack",
        site="pool bytes not live at the peak (allocator slack)",
        bytes=peak.slack_bytes,
    )


def _write_snapshot(report_dir: Path, mode: str, group: Group, recorder) -> None:
    """This rank's allocator snapshot, with the history recorded since the mode began, for
    memory_viz."""
    import pickle

    from bcgprof.report import atomic_write_bytes

    name = (
        f"{mode}.snapshot.pickle"
        if group.world == 1
        else f"{mode}.rank{group.rank}.snapshot.pickle"
    )
    atomic_write_bytes(report_dir / name, pickle.dumps(recorder.viewer_snapshot()))


def run_mode_reporting_errors(
    opts: CaptureOptions, mode: str, report_dir: Path, emit: Emit, group: Group
) -> int:
    """:func:`run_mode`, with a failure outside any bucket (a model that does not fit, say)
    turned into one error event and an exit code; the traceback goes to stderr (the mode's log)."""
    try:
        return run_mode(opts, mode, report_dir, emit, group)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except Exception as e:
        from bcgprof.errors import BcgprofError

        if not isinstance(e, BcgprofError):
            import traceback

            traceback.print_exc()
        prefix = f"rank {group.rank}: " if group.world > 1 else ""
        emit({"event": "error", "mode": mode, "message": prefix + failure_line(e)})
        return failure_exit_code(e)


# ---------------------------------------------------------------- the process


def stdout_emit(event: dict) -> None:
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()


def quiet(event: dict) -> None:
    pass


def _preload(opts: CaptureOptions) -> None:
    """Import what a mode needs before it is released, so the wait hides the import time: torch,
    the capture and report code, the model's family file, NVML's binding, what materialising the
    model imports and, for a CUDA device, Triton and the fused kernels.

    Nothing here touches the GPU: no import creates a CUDA context, and none may, since the mode
    before this one is still being measured (``tests/unit/test_runner_cpu.py`` holds it to that).
    Anything that fails here fails again, with its real message, once the mode runs.
    """
    import contextlib
    import importlib

    import torch

    wanted = [
        "bcgprof.buckets",
        "bcgprof.measure.capture",
        "bcgprof.measure.memory",
        "bcgprof.measure.tracing",
        "bcgprof.measure.workload",
        "bcgprof.models.weights",
        "bcgprof.report",
        "pynvml",
        # materialising the meta-built model (``to_empty``) imports these, sympy among them:
        # seconds a process where site-packages keeps no bytecode (docs/h200.md, Time)
        "torch._refs",
        "torch.fx.experimental.symbolic_shapes",
    ]
    if opts.device.startswith("cuda"):
        from bcgprof.models.kernels import triton_available

        if triton_available():
            wanted += [
                "bcgprof.models.kernels._triton_activation",
                "bcgprof.models.kernels._triton_moe",
            ]
    for name in wanted:
        with contextlib.suppress(ImportError):
            importlib.import_module(name)
    # a bad model is reported by the mode itself, with its own line
    with contextlib.suppress(Exception):
        from bcgprof.models import model_class
        from bcgprof.spec import resolve_model

        model_class(resolve_model(opts.model).family)
    if torch.cuda.is_initialized():  # it would sit in the running mode's device figures
        raise RuntimeError("a module imported before the mode's turn created a CUDA context")


def _personality() -> Optional[Callable[[int], int]]:
    """Linux's personality(2), or None where there is none to call."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    try:
        return ctypes.CDLL(None, use_errno=True).personality
    except (OSError, AttributeError):
        return None


def address_layout() -> AddressLayout:
    """The address layout this process runs with, read from its own flags (for run.json): FIXED
    where the kernel's randomisation is off for it, whoever turned it off; RANDOM otherwise."""
    personality = _personality()
    # reads the flags without changing them
    flags = personality(0xFFFFFFFF) if personality is not None else -1
    return (
        AddressLayout.FIXED if flags != -1 and flags & ADDR_NO_RANDOMIZE else AddressLayout.RANDOM
    )


def fix_address_layout() -> bool:
    """Whether this process runs with the kernel's address randomisation off; if it does not yet,
    turn it off and re-run the process (the flag applies from the next exec), before any import.

    The CUDA driver maps device memory into the process's own virtual address space (unified
    addressing), so where a segment lands follows the host's layout, which Linux randomises per
    process. The caching allocator picks between equal free blocks by address, so a run whose
    segments lie in another order can place a block elsewhere and grow the pool differently, so
    for some models two runs give two pools (docs/h200.md, Addresses); without randomisation a run
    gets the same addresses every time. False where the flag cannot be set (not Linux, or refused,
    as a container's seccomp profile may): the layout is then random.
    """
    personality = _personality()
    if personality is None:
        return False
    current = personality(0xFFFFFFFF)  # reads the flags without changing them
    if current == -1:
        return False
    if current & ADDR_NO_RANDOMIZE:
        return True
    if os.environ.get(_RELAUNCHED) or personality(current | ADDR_NO_RANDOMIZE) == -1:
        return False
    os.environ[_RELAUNCHED] = "1"
    try:
        os.execv(sys.executable, [sys.executable, *sys.orig_argv[1:]])
    except OSError:
        return False
    return True  # not reached: execv replaced the process


def main(argv: Optional[list[str]] = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    report_dir, mode, opts = Path(args[0]), args[1], CaptureOptions.from_json(args[2])
    if opts.address_layout == AddressLayout.FIXED:
        fix_address_layout()  # run.json records the layout the process got (address_layout())
    try:
        _preload(opts)
        if sys.stdin.readline().strip() != "go":  # the runner let this process go unused
            return EXIT_OK
    except KeyboardInterrupt:  # interrupted before its turn: nothing to report
        return EXIT_INTERRUPTED
    rank, world = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    emit = stdout_emit if rank == 0 else quiet  # rank 0 speaks for the group
    if world == 1:
        import torch

        return run_mode_reporting_errors(
            opts, mode, report_dir, emit, SingleGroup(torch.device(opts.device))
        )
    from bcgprof.measure import dist

    group = None
    try:
        group = dist.init_rank(rank, world, int(os.environ.get("LOCAL_RANK", rank)))
        return run_mode_reporting_errors(opts, mode, report_dir, emit, group)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except Exception as e:  # joining the group failed
        import traceback

        traceback.print_exc()
        emit({"event": "error", "mode": mode, "message": f"rank {rank}: {failure_line(e)}"})
        return EXIT_OOM if is_out_of_memory(e) else EXIT_FAILED
    finally:
        dist.close(group)


def exit_now(code: int) -> None:
    """End the process without the interpreter's teardown of torch, which the next mode would wait
    for (``benchmarks/capture_timeline.py`` times it). Every report file is already written and
    closed; the driver frees the process's device memory as it ends, either way."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    exit_now(main())
