"""Each profiled bucket's graph executables, read from a mode's NVML staircase.

A bucket's measured non-torch delta is not its executables' cost: NVML counts device memory in
2 MiB steps (and the driver reserves executable memory in chunks), so one bucket's delta is the
difference of two rounded running totals: a step either side of the cost. Summing the deltas of
the buckets a list keeps therefore carries the rounding phase of each, an error that grows with
the list's length. The running total over many buckets is far
finer than a step, so each later bucket's executables are read from it instead: the cumulative
non-torch bytes of the mode's later buckets, fitted (least squares, non-negative) to the
cumulative count of buckets and of their kernel nodes (an executable costs a fixed amount per
graph plus an amount per node), then scaled so the fitted bytes of all later buckets equal the
staircase's last reading. Invariant: the values are integers that sum, over the profile's later
buckets, to exactly the measured total, so the profile's own list is predicted as measured.
Torch-free.
"""

from __future__ import annotations

from collections.abc import Sequence

from bcgprof.analysis.predict.bands import QUANTUM
from bcgprof.analysis.predict.fit import least_squares
from bcgprof.report import BucketRecord


def staircase_slope(rows: Sequence[BucketRecord]) -> tuple[float, float]:
    """Bytes of executables per bucket over ``rows`` (one mode's later buckets, in capture order),
    and the standard error: the least-squares slope of their cumulative non-torch bytes against the
    bucket count. NVML counts in 2 MiB steps, so the slope of the whole staircase is far finer than
    any one step."""
    totals, run = [], 0
    for r in rows:
        run += r.non_torch_delta_bytes
        totals.append(float(run))
    n = len(totals)
    if n < 3:  # too few points for a slope with an error: the mean, known to within one step
        return (totals[-1] / n if n else 0.0), float(QUANTUM) / max(n, 1)
    line = least_squares([[1.0] * n, [float(x) for x in range(1, n + 1)]], totals)
    return line.coef[1], line.std_errors[1]


def later_executables(rows: Sequence[BucketRecord]) -> dict[int, int]:
    """bucket -> bytes of graph executables for every bucket after the first of ``rows`` (one mode's
    rows, in capture order). Without kernel-node counts on every row, each later bucket costs the
    mean."""
    later = list(rows[1:])
    if not later:
        return {}
    measured = sum(r.non_torch_delta_bytes for r in later)
    counts, nodes, totals = [], [], []
    run_nodes, run_total = 0, 0
    for k, r in enumerate(later, start=1):
        run_nodes += r.graph_nodes or 0
        run_total += r.non_torch_delta_bytes
        counts.append(float(k))
        nodes.append(float(run_nodes))
        totals.append(float(run_total))
    with_nodes = all(r.graph_nodes is not None for r in later)
    columns = [counts, nodes] if with_nodes else [counts]
    fit = least_squares(columns, totals, nonnegative=True)
    per = [fit.coef[0] + (fit.coef[1] * (r.graph_nodes or 0) if with_nodes else 0.0) for r in later]
    fitted = sum(per)
    scale = measured / fitted if fitted > 0 else 0.0
    # nothing fitted (every delta 0, or a staircase that falls): spread the total evenly
    if fitted <= 0:
        per, scale = [1.0] * len(later), measured / len(later)
    out, before, running = {}, 0, 0.0
    for r, value in zip(later, per, strict=True):
        running += value * scale
        now = round(running)
        out[r.bucket] = now - before
        before = now
    # float rounding of the running sum: the total is exact
    out[later[-1].bucket] += measured - before
    return out
