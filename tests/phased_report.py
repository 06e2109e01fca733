"""A small report of two phases captured into one pool (schema 2), as `bcgprof capture --phase
prefill,decode` writes it: the pair in the directory, each phase captured alone in
``phase-<phase>`` under it. Bucket 8 stands in both phases (8 tokens, 8 sequences), so the rows'
phase is what tells them apart. Figures are made up and in MiB; the expected figures of the
tests are derived from them here, once."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from bcgprof.report import BucketRecord, RunInfo
from bcgprof.report.phased import phase_report_name
from bcgprof.report.write import ReportWriter

MIB = 2**20
PHASES = ["prefill", "decode"]
PHASE_BUCKETS = {"prefill": [4, 8], "decode": [2, 8]}
MODES = ["per-bucket", "floor"]
# the pool after each row of the pair, in capture order: (mode, phase, bucket, pool MiB)
PAIR_POOLS = [
    ("per-bucket", "prefill", 8, 100),
    ("per-bucket", "prefill", 4, 110),
    ("per-bucket", "decode", 8, 130),
    ("per-bucket", "decode", 2, 135),
    ("floor", "prefill", 8, 90),
    ("floor", "decode", 8, 100),
]
# each phase captured alone: the pool after its rows
ALONE_POOLS = {
    "prefill": [("per-bucket", 8, 100), ("per-bucket", 4, 110), ("floor", 8, 90)],
    "decode": [("per-bucket", 8, 30), ("per-bucket", 2, 40), ("floor", 8, 30)],
}


def _run(**fields) -> RunInfo:
    return RunInfo(model="gpt-oss-20b", config_hash="5d1b7c0e2a9f4e61", status="complete", **fields)


def _rows(pools: list, phase: Optional[str]) -> list[BucketRecord]:
    """Rows whose figures agree as a capture writes them, the order counting per mode."""
    rows: list[BucketRecord] = []
    last: dict[str, int] = {}
    for entry in pools:
        mode, row_phase, bucket, mib = entry if phase is None else (entry[0], phase, *entry[1:])
        order = sum(1 for r in rows if r.mode == mode)
        delta = mib * MIB - last.get(mode, 0)
        last[mode] = mib * MIB
        rows.append(
            BucketRecord(
                mode=mode,
                bucket=bucket,
                order=order,
                status="ok",
                pool_bytes=mib * MIB,
                pool_delta_bytes=delta,
                torch_reserved_delta_bytes=delta,
                device_used_delta_bytes=delta,
                phase=row_phase if phase is None else "",
            )
        )
    return rows


def write_phased_report(path: Path, *, alone: bool = True) -> Path:
    """The pair's report at ``path`` and, with ``alone``, each phase's alone under it."""
    union = sorted({b for seq in PHASE_BUCKETS.values() for b in seq})
    run = _run(
        schema_version=2,
        phase=PHASES[0],
        phases=list(PHASES),
        phase_buckets={p: list(b) for p, b in PHASE_BUCKETS.items()},
        buckets=union,
        modes=list(MODES),
    )
    ReportWriter(path, run, _rows(PAIR_POOLS, None))
    if alone:
        for phase in PHASES:
            one = _run(phase=phase, buckets=list(PHASE_BUCKETS[phase]), modes=list(MODES))
            ReportWriter(path / phase_report_name(phase), one, _rows(ALONE_POOLS[phase], phase))
    return path


def pair_total(mode: str) -> int:
    return [mib for m, _, _, mib in PAIR_POOLS if m == mode][-1] * MIB


def alone_total(mode: str, phase: str) -> int:
    return [mib for m, _, mib in ALONE_POOLS[phase] if m == mode][-1] * MIB
