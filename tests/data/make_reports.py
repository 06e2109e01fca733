"""Writes the hand-made reports under tests/data/ (run it to regenerate them: python
tests/data/make_reports.py).

The figures follow the shape of a real capture of a 2-layer gpt-oss-20b stack
(hidden 2880, bf16) over five prefill buckets, largest first:

* per-bucket: the first (largest) bucket takes the intermediates' pool plus its own
  output; each later bucket only adds its retained output (2 MiB-rounded);
* shared: the first bucket takes the intermediates' pool, and the shared output
  buffer (outside the pool) is reserved once; later buckets add nothing to the pool;
* floor: the largest bucket alone.

Every bucket also costs some driver memory per segment (graph executables), seen by
NVML and not by torch: the non-torch share.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent))

from bcgprof.report import BucketRecord, ReportWriter, RunInfo  # noqa: E402

MIB = 1024**2
HIDDEN, DTYPE_BYTES, LAYERS = 2880, 2, 2
BUCKETS = [256, 512, 1024, 2048, 4096]
SEGMENTS = LAYERS + 1  # one graph break (attention) per layer
GPT_OSS_20B_HASH = "5d1b7c0e2a9f4e61"  # fixed, so the files do not change when the preset does
QWEN3_8B_HASH = "9a04c3e1b7d25f80"


def round_up(n: int, block: int = 2 * MIB) -> int:
    return -(-n // block) * block


def output_bytes(bucket: int) -> int:
    return bucket * HIDDEN * DTYPE_BYTES


def intermediates(bucket: int) -> int:
    return round_up(11 * output_bytes(bucket) + 3 * MIB)


def graph_exec_bytes(bucket: int) -> int:
    # driver memory of the bucket's segment executables
    return 2 * MIB if bucket < 2048 else 4 * MIB


def run_info(**changes) -> RunInfo:
    run = RunInfo(
        bcgprof_version="0.1.0",
        command="bcgprof capture --num-layers 2 --buckets 256,512,1024,2048,4096 --out "
        "reports/baseline",
        model="gpt-oss-20b",
        model_source="preset",
        config_hash=GPT_OSS_20B_HASH,
        family="gpt_oss",
        layers=LAYERS,
        hidden_size=HIDDEN,
        dtype="bfloat16",
        weights="dummy",
        phase="prefill",
        buckets=list(BUCKETS),
        modes=["per-bucket", "shared", "floor"],
        gpu_name="NVIDIA H200",
        driver="580.95.05",
        torch_version="2.11.0+cu130",
        cuda_version="13.0",
        memory_source="nvml",
        tp=1,
        started_at="2026-11-20T10:00:00+00:00",
        ended_at="2026-11-20T10:03:12+00:00",
        status="complete",
        extra={"device": "cuda:0", "warmup": 2, "verify": "smallest-largest"},
    )
    return dataclasses.replace(run, **changes)


def mode_rows(mode: str, buckets=BUCKETS, *, extra_pool=None, rank: int = 0) -> list[BucketRecord]:
    """Rows of one mode in capture order (largest first). ``extra_pool`` maps bucket -> added
    pool bytes."""
    extra_pool = extra_pool or {}
    rows, pool = [], 0
    order_buckets = sorted(buckets, reverse=True)
    if mode == "floor":
        order_buckets = order_buckets[:1]
    largest = order_buckets[0]
    for order, bucket in enumerate(order_buckets):
        first = order == 0
        out = output_bytes(bucket)
        if mode in ("per-bucket", "floor"):
            pool_delta = (intermediates(bucket) if first else 0) + round_up(out)
            retained = out
            reserved = pool_delta
        else:  # shared
            pool_delta = intermediates(bucket) if first else 0
            retained = output_bytes(largest) if first else 0
            reserved = pool_delta + (round_up(output_bytes(largest)) if first else 0)
        pool_delta += extra_pool.get(bucket, 0)
        reserved += extra_pool.get(bucket, 0)
        pool += pool_delta
        non_torch = graph_exec_bytes(bucket)
        rows.append(
            BucketRecord(
                mode=mode,
                bucket=bucket,
                order=order,
                status="ok",
                segments=SEGMENTS,
                graph_nodes=SEGMENTS * 41,
                pool_bytes=pool,
                pool_delta_bytes=pool_delta,
                retained_output_bytes=retained,
                torch_allocated_delta_bytes=retained,
                torch_reserved_delta_bytes=reserved,
                device_used_delta_bytes=reserved + non_torch,
                non_torch_delta_bytes=non_torch,
                peak_transient_bytes=intermediates(bucket) + out if first else round_up(6 * out),
                warmup_ms=round(40.0 + bucket / 64, 1),
                capture_ms=round(12.0 + bucket / 256, 1),
                replay_max_abs_diff=0.0 if bucket in (min(buckets), max(buckets)) else None,
                rank=rank,
                process_used_delta_bytes=reserved + non_torch,
                device_peak_delta_bytes=reserved + non_torch + round_up(out),
                free_bytes=140 * 1024**3 - pool,
            )
        )
    return rows


def all_rows(**kwargs) -> list[BucketRecord]:
    return [r for mode in ("per-bucket", "shared", "floor") for r in mode_rows(mode, **kwargs)]


def write(name: str, run: RunInfo, rows: list[BucketRecord]) -> Path:
    path = HERE / name
    shutil.rmtree(path, ignore_errors=True)
    ReportWriter(path, run, rows)
    return path


def main() -> None:
    # A complete, realistic baseline.
    write("baseline", run_info(), all_rows())
    # The same run after a change that retains an extra 40 MiB in per-bucket mode's bucket 1024.
    write(
        "grown",
        run_info(command=run_info().command.replace("baseline", "grown")),
        [
            r
            for mode in ("per-bucket", "shared", "floor")
            for r in mode_rows(mode, extra_pool={1024: 40 * MIB} if mode == "per-bucket" else None)
        ],
    )
    # A capture interrupted during shared mode: two shared buckets done, no floor.
    partial = mode_rows("per-bucket") + mode_rows("shared")[:2]
    write(
        "partial",
        run_info(
            status="interrupted",
            ended_at="2026-11-20T10:01:40+00:00",
            message="interrupted during shared",
        ),
        partial,
    )
    # A different model (Qwen3-8B, hidden 4096), same buckets.
    write(
        "other-model",
        run_info(model="Qwen3-8B", config_hash=QWEN3_8B_HASH, family="qwen3", hidden_size=4096),
        all_rows(),
    )
    # A report from a future bcgprof whose schema this one cannot read.
    path = write("wrong-schema", run_info(), all_rows())
    data = json.loads((path / "run.json").read_text())
    data["schema_version"] = 99
    (path / "run.json").write_text(json.dumps(data, indent=2) + "\n")
    # A report whose buckets.csv was cut off in the middle of a row.
    path = write("corrupt", run_info(), all_rows())
    text = (path / "buckets.csv").read_text()
    (path / "buckets.csv").write_text(text[: len(text) * 2 // 3].rsplit(",", 3)[0] + "\n")


if __name__ == "__main__":
    main()
