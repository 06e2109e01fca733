"""One mode of `bcgprof capture`, normally in a process of its own.

A fresh process per mode means no mode inherits another's allocations, graphs or
cached blocks. The worker appends its rows to the report directory the parent
created and tells the parent about its progress as JSON lines on stdout.

    python -m bcgprof.worker REPORT_DIR MODE OPTIONS_JSON
"""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from pathlib import Path
from typing import Callable

EXIT_OK, EXIT_ERROR, EXIT_OOM, EXIT_INTERRUPTED = 0, 1, 3, 130

Emit = Callable[[dict], None]


def _stdout_emit(event: dict) -> None:
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()


def run_mode(opts, mode: str, report_dir: Path, emit: Emit) -> int:
    """Build the workload, capture every bucket of ``mode``, append rows; return an exit code."""
    import torch

    from bcgprof.buckets import parse_buckets
    from bcgprof.capture import Capturer
    from bcgprof.memory import DeviceMemory
    from bcgprof.models.config import resolve_model
    from bcgprof.report import ReportWriter
    from bcgprof.workload import build_workload

    started = time.perf_counter()
    device = torch.device(opts.device)
    torch.cuda.set_device(device)
    spec = resolve_model(opts.model)
    buckets = parse_buckets(opts.buckets, max_tokens=opts.max_tokens, max_bs=opts.max_bs)
    memory = DeviceMemory(device)
    emit({"event": "memory_source", "source": memory.source, "reason": memory.reason})
    workload = build_workload(spec, weights=opts.weights, num_layers=opts.num_layers, device=device,
                              max_tokens=max(buckets), seed=opts.seed)
    writer = ReportWriter.reopen(report_dir)
    capturer = Capturer(workload.fn, workload.inputs, buckets, mode=mode, warmup=opts.warmup, device=device,
                        memory=memory, sample_interval_ms=opts.sample_interval_ms, rank=0)
    emit({"event": "start", "mode": mode, "total": len(capturer.buckets), "build_s": workload.build_s})
    status = EXIT_OK
    timing = {"build_s": round(workload.build_s, 3), "parameter_bytes": workload.parameter_bytes}
    try:
        captured_at = time.perf_counter()
        for record in capturer.run():
            writer.append(record)
            emit({"event": "bucket", "mode": mode, "bucket": record.bucket, "status": record.status,
                  "pool_bytes": record.pool_bytes, "detail": record.detail})
            if record.status == "oom":
                status = EXIT_OOM
            elif record.status != "ok":
                status = EXIT_ERROR
        capture_wall = time.perf_counter() - captured_at
        verify_start = time.perf_counter()
        if status == EXIT_OK:
            checked = capturer.verify(opts.verify, refill=workload.refill, seed=opts.seed + 1)
            if checked:
                writer.flush()
                emit({"event": "verify", "mode": mode, "checked": [r.bucket for r in checked],
                      "max_abs_diff": max(r.replay_max_abs_diff for r in checked)})
            if any(r.status != "ok" for r in checked):
                status = EXIT_ERROR
        rows = capturer.result.records
        warmup_s = sum(r.warmup_ms for r in rows) / 1000.0
        capture_s = sum(r.capture_ms for r in rows) / 1000.0
        timing.update({
            "prewarm_s": round(capturer.prewarm_ms / 1000.0, 3),
            "warmup_s": round(warmup_s, 3),
            "capture_s": round(capture_s, 3),
            # the rest of the bucket loop: settling, snapshots and NVML readings
            "measure_s": round(capture_wall - capturer.prewarm_ms / 1000.0 - warmup_s - capture_s, 3),
            "verify_s": round(time.perf_counter() - verify_start, 3),
            "sampler_samples": capturer.sampler.samples,
            "wall_s": round(time.perf_counter() - started, 3),
        })
    except KeyboardInterrupt:
        status = EXIT_INTERRUPTED
    finally:
        capturer.close()
        extra = dict(writer.run.extra)
        extra.setdefault("modes", {})[mode] = timing
        writer.update_run(extra=extra, memory_source=memory.source)
    emit({"event": "done", "mode": mode, "exit": status})
    return status


def main(argv: list[str] | None = None) -> int:
    from bcgprof.runner import CaptureOptions

    args = sys.argv[1:] if argv is None else argv
    report_dir, mode, options = Path(args[0]), args[1], json.loads(args[2])
    fields = {f.name for f in dataclasses.fields(CaptureOptions)}
    opts = CaptureOptions(**{k: v for k, v in options.items() if k in fields})
    return run_mode_reporting_errors(opts, mode, report_dir, _stdout_emit)


def run_mode_reporting_errors(opts, mode: str, report_dir: Path, emit: Emit) -> int:
    """run_mode, with failures outside any bucket (a model that does not fit, say) turned
    into one error event and an exit code instead of a traceback."""
    from bcgprof.errors import BcgprofError

    try:
        return run_mode(opts, mode, report_dir, emit)
    except BcgprofError as e:
        emit({"event": "error", "mode": mode, "message": str(e)})
        return e.exit_code
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except Exception as e:  # e.g. out of memory while building the model
        import traceback

        traceback.print_exc()  # the full story goes to the mode's log file
        lines = str(e).strip().splitlines()
        oom = "out of memory" in str(e).lower()
        hint = "; try --num-layers to profile part of the stack" if oom else ""
        emit({"event": "error", "mode": mode, "message": f"{type(e).__name__}: {lines[0] if lines else ''}{hint}"})
        return EXIT_OOM if oom else EXIT_ERROR


if __name__ == "__main__":
    sys.exit(main())
