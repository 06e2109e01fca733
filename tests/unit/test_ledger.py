"""A bucket's row figures from its two readings (bcgprof.report.ledger), on the CPU: each figure is
the difference it is documented to be, the four causes sum to the device-used growth, and every row
built from it is one the report reader takes."""

from __future__ import annotations

import dataclasses
import random
import subprocess
import sys
from pathlib import Path

import pytest

from bcgprof.errors import ReportError
from bcgprof.report import LEDGER_FIELDS, BucketRecord
from bcgprof.report.consistency import check_bucket_sums
from bcgprof.report.ledger import Reading, ledger

MIB = 1024**2


def reading(**changes) -> Reading:
    base = Reading(
        pool=64 * MIB,
        pool_live=40 * MIB,
        pool_free=24 * MIB,
        allocated=500 * MIB,
        reserved=600 * MIB,
        device_used=2000 * MIB,
        process_used=1900 * MIB,
        free=78000 * MIB,
    )
    return dataclasses.replace(base, **changes)


def random_reading(rng: random.Random) -> Reading:
    live, free = rng.randrange(0, 8 << 30, 512), rng.randrange(0, 1 << 30, 512)
    allocated = rng.randrange(0, 16 << 30, 512)
    reserved = allocated + live + free + rng.randrange(0, 1 << 30, 2 * MIB)
    return Reading(
        pool=live + free,
        pool_live=live,
        pool_free=free,
        allocated=allocated,
        reserved=reserved,
        device_used=reserved + rng.randrange(0, 4 << 30, 2 * MIB),
        process_used=rng.choice([None, rng.randrange(0, 64 << 30, 2 * MIB)]),
        free=rng.randrange(0, 80 << 30, 2 * MIB),
    )


def test_each_figure_is_its_documented_difference():
    before = reading()
    after = reading(
        pool=96 * MIB,
        pool_live=50 * MIB,
        pool_free=46 * MIB,
        allocated=530 * MIB,
        reserved=640 * MIB,
        device_used=2100 * MIB,
        process_used=1998 * MIB,
        free=77900 * MIB,
    )
    row = ledger(
        before, after, peak_allocated=900 * MIB, device_peak=2500 * MIB, pool_output=4 * MIB
    )
    # readings after, as they are
    assert row["pool_bytes"] == 96 * MIB and row["free_bytes"] == 77900 * MIB
    assert row["pool_delta_bytes"] == (96 - 64) * MIB
    assert (
        row["pool_live_delta_bytes"] == (50 - 40) * MIB
        and row["pool_free_delta_bytes"] == (46 - 24) * MIB
    )
    assert (
        row["torch_allocated_delta_bytes"] == 30 * MIB
        and row["torch_reserved_delta_bytes"] == 40 * MIB
    )
    assert row["device_used_delta_bytes"] == 100 * MIB
    assert row["non_torch_delta_bytes"] == (100 - 40) * MIB  # device used beyond torch reserved
    # torch reserved beyond the pool's growth
    assert row["outside_pool_delta_bytes"] == (40 - 32) * MIB
    # the allocated peak above the level before
    assert row["peak_transient_bytes"] == (900 - 500) * MIB
    assert (
        row["process_used_delta_bytes"] == 98 * MIB and row["device_peak_delta_bytes"] == 500 * MIB
    )
    assert row["pool_output_bytes"] == 4 * MIB


@pytest.mark.parametrize("seed", range(20))
def test_the_four_causes_sum_to_the_device_used_growth_exactly(seed):
    rng = random.Random(seed)
    before, after = random_reading(rng), random_reading(rng)  # growth or shrinkage, any mix
    row = ledger(
        before, after, rng.randrange(0, 32 << 30), rng.choice([None, rng.randrange(0, 96 << 30)])
    )
    causes = (
        "pool_live_delta_bytes",
        "pool_free_delta_bytes",
        "outside_pool_delta_bytes",
        "non_torch_delta_bytes",
    )
    assert sum(row[c] for c in causes) == row["device_used_delta_bytes"]
    assert row["pool_live_delta_bytes"] + row["pool_free_delta_bytes"] == row["pool_delta_bytes"]


def test_missing_readings_leave_their_figures_empty_and_a_peak_below_the_start_counts_nothing():
    row = ledger(reading(process_used=None), reading(), peak_allocated=100 * MIB, device_peak=None)
    assert row["process_used_delta_bytes"] is None and row["device_peak_delta_bytes"] is None
    # the peak was reset at a level above it: nothing transient
    assert row["peak_transient_bytes"] == 0
    assert (
        ledger(reading(), reading(process_used=None), 0, None)["process_used_delta_bytes"] is None
    )


def test_a_row_built_from_the_ledger_is_one_the_report_reader_takes():
    """The writer's figures and the reader's check of them (check_bucket_sums) are the same
    arithmetic; a row whose figures were not derived together is refused, so the check is not
    vacuous."""
    rng = random.Random(7)
    rows = []
    for bucket in (4096, 1024, 8):
        row = ledger(random_reading(rng), random_reading(rng), rng.randrange(0, 1 << 34), None)
        assert set(row) <= {f.name for f in dataclasses.fields(BucketRecord)}
        assert set(LEDGER_FIELDS) <= set(row)
        rows.append(
            BucketRecord(mode="per-bucket", bucket=bucket, order=len(rows), status="ok", **row)
        )
    check_bucket_sums(Path("buckets.csv"), rows, [2, 3, 4])
    rows[1].non_torch_delta_bytes += 2 * MIB
    with pytest.raises(ReportError, match="non_torch_delta_bytes"):
        check_bucket_sums(Path("buckets.csv"), rows, [2, 3, 4])


def test_the_ledger_imports_no_torch():
    code = "import sys, bcgprof.report.ledger; sys.exit('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0
