"""How long reading and the reading commands take on the largest report bcgprof accepts.

Synthesises, in a temporary directory, a complete report at the caps of bcgprof.report.limits:
4096 buckets, all four modes (the floor holds the largest bucket alone), 8 tensor-parallel
ranks: 8 x (3 x 4096 + 1) = 98,312 bucket rows. Two variants: typical figures (about 190 bytes
a row, what a capture writes) and wide figures (every byte figure 15
digits, every time 17 significant digits). Times ``read_report`` in this process and
``show``, ``show -f json``, ``compare`` and ``gate --each-bucket`` as ``python -m bcgprof``
subprocesses (start-up included), then prints a table.

    python benchmarks/read_scaling.py [--buckets 4096] [--tp 8] [--repeat 1]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bcgprof.report import BucketRecord, ReportWriter, RunInfo, read_report
from bcgprof.report.codec import records_to_csv
from bcgprof.report.schema import BUCKETS_FILE
from bcgprof.vocab import BucketStatus, Mode, RunStatus

MODES = [str(m) for m in Mode]


def rows(buckets: list[int], tp: int, wide: bool) -> list[BucketRecord]:
    """Rows in the order a tensor-parallel capture writes them: mode by mode, every rank per bucket step."""
    big = 10 ** 14 if wide else 0  # 15-digit byte figures (their sums over 4096 buckets still fit 64 bits)
    out = []
    for mode in MODES:
        sequence = sorted(buckets, reverse=True)[: 1 if mode == Mode.FLOOR else None]
        pools = [0] * tp
        for order, bucket in enumerate(sequence):
            for rank in range(tp):
                delta = big + bucket * 5760 + rank
                pools[rank] += delta if not wide else 0
                ms = 1135.2405760000013 if wide else round(40.0 + bucket / 64, 1)
                out.append(BucketRecord(
                    mode=mode, bucket=bucket, order=order, status=BucketStatus.OK, segments=25, graph_nodes=2463,
                    pool_bytes=pools[rank] + big, pool_delta_bytes=delta, retained_output_bytes=delta,
                    torch_allocated_delta_bytes=delta, torch_reserved_delta_bytes=delta,
                    device_used_delta_bytes=delta + 2097152, non_torch_delta_bytes=2097152,
                    peak_transient_bytes=3 * delta if not wide else delta, warmup_ms=ms, capture_ms=ms / 3,
                    replay_max_abs_diff=0.0 if order in (0, len(sequence) - 1) else None, rank=rank,
                    process_used_delta_bytes=delta + 2097152, device_peak_delta_bytes=delta,
                    free_bytes=big + 105643573248, pool_live_delta_bytes=delta, pool_free_delta_bytes=0,
                    outside_pool_delta_bytes=0, pool_output_bytes=delta))
    return out


def write(path: Path, buckets: list[int], tp: int, wide: bool) -> int:
    records = rows(buckets, tp, wide)
    run = RunInfo(model="gpt-oss-20b", config_hash="348b8e61e22f5315", buckets=buckets, modes=MODES, tp=tp,
                  status=RunStatus.COMPLETE, gpu_name="NVIDIA H200", layers=24, hidden_size=2880, dtype="bfloat16")
    ReportWriter(path, run, records)
    return len(records)


def timed(command: list[str], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "bcgprof", *command], capture_output=True, text=True)
        best = min(best, time.perf_counter() - start)
        if done.returncode not in (0, 1):
            raise SystemExit(f"{' '.join(command)} exited {done.returncode}: {done.stderr.strip()[:500]}")
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--buckets", type=int, default=4096)
    parser.add_argument("--tp", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=1, help="runs of each; the best is shown")
    args = parser.parse_args()
    buckets = list(range(1, args.buckets + 1))
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}")
    print(f"{'report':<16}{'rows':>8}{'MiB':>7}{'read_report':>13}{'show':>8}{'show -f json':>14}"
          f"{'compare':>9}{'gate':>8}")
    with tempfile.TemporaryDirectory() as tmp:
        for label, wide in (("typical", False), ("wide figures", True)):
            base, current = Path(tmp, f"{label}-a"), Path(tmp, f"{label}-b")
            n = write(base, buckets, args.tp, wide)
            shutil.copytree(base, current)
            size = (base / BUCKETS_FILE).stat().st_size / 2 ** 20
            start = time.perf_counter()
            report = read_report(base)
            read_s = time.perf_counter() - start
            assert len(report.buckets) == n
            assert records_to_csv(report.buckets, BucketRecord) == (base / BUCKETS_FILE).read_text()
            figures = [timed(["show", str(base)], args.repeat), timed(["show", str(base), "-f", "json"], args.repeat),
                       timed(["compare", str(base), str(current)], args.repeat),
                       timed(["gate", "--baseline", str(base), "--current", str(current), "--each-bucket"],
                             args.repeat)]
            print(f"{label:<16}{n:>8}{size:>7.1f}{read_s:>12.2f}s" + "".join(
                f"{t:>{w - 1}.2f}s" for t, w in zip(figures, (8, 14, 9, 8), strict=True)))


if __name__ == "__main__":
    main()
