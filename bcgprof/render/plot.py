"""`bcgprof plot`: a report's capture cost as an image (matplotlib, Agg backend, imported only
here).

Top panel: cumulative cost against the buckets in capture order (largest first),
one colour per mode; solid lines are device used (NVML), dashed lines the graph
pool. Its y axis spans the plotted figures (not from 0), so the range where the modes
differ fills the panel. The floor (largest bucket alone) is two horizontal references
drawn under the modes' lines: dash-dot for its device used, dotted for its pool.
Middle panel: each bucket's graph-pool delta, per mode, on a symmetric log scale.
Bottom panel (reports with the ledger columns): one stacked bar per mode, its device used
split into the causes :mod:`bcgprof.analysis.explain` names.

Images are .png, .svg, .pdf or .jpg (:data:`SUFFIXES`); a name without a suffix gets
.png; any other suffix is refused before the report is read.
"""

from __future__ import annotations

import os
from pathlib import Path

from bcgprof.errors import BcgprofError
from bcgprof.outputs import replace_file, resolved_output
from bcgprof.report import Report
from bcgprof.report_format import GIB, MIB
from bcgprof.vocab import ListMode, Mode, words

COLOURS: dict[str, str] = {
    Mode.PER_BUCKET: "#d62728",
    Mode.SHARED: "#1f77b4",
    Mode.SHARED_LARGEST: "#9467bd",
    Mode.FLOOR: "#2ca02c",
}
CAUSE_COLOURS = {
    "pool_output": "#d62728",
    "pool_other_live": "#ff9896",
    "pool_free": "#c7c7c7",
    "outside_pool": "#1f77b4",
    "graph_executables": "#ff7f0e",
}
SUFFIXES = (".png", ".svg", ".pdf", ".jpg", ".jpeg")
DPI_RANGE = (30, 600)  # 600 dpi: a 6600 x 4800 image


def image_path(out: str | Path) -> Path:
    """``out`` with .png added when it has no suffix; an unsupported suffix is a one-line error."""
    out = Path(out)
    if not out.name or out.name in (".", "..") or os.path.isdir(out):
        raise BcgprofError(f"-o {out} names no file; write e.g. -o cost.png")
    if out.suffix == "":
        return out.with_name(out.name + ".png")
    if out.suffix.lower() not in SUFFIXES:
        raise BcgprofError(
            f"-o {out}: cannot write {out.suffix} images; use {', '.join(SUFFIXES[:-1])} "
            "(or no suffix for .png)"
        )
    return out


def check_dpi(dpi: int) -> None:
    lo, hi = DPI_RANGE
    if not lo <= dpi <= hi:
        shown = dpi if len(str(dpi)) <= 12 else "a huge number"
        raise BcgprofError(f"--dpi {shown} is out of range; use {lo} to {hi} dots per inch")


def _rows(report: Report, mode: str, rank: int):
    return sorted(
        (r for r in report.buckets if r.mode == mode and r.rank == rank), key=lambda r: r.order
    )


def plot_report(report: Report, out: str | Path, *, rank: int = 0, dpi: int = 120) -> Path:
    """Write the figure to ``out`` (see :func:`image_path` for the suffixes); return the path
    written."""
    out = image_path(out)
    check_dpi(dpi)
    return _save(build_figure(report, rank=rank), out, dpi)


def _save(fig, out: Path, dpi: int) -> Path:
    """Draw ``fig`` into memory, then write it atomically where ``out`` really points (never into
    a report)."""
    import io

    import matplotlib.pyplot as plt

    try:
        real = resolved_output(out, "-o", create_parents=True)
        image = io.BytesIO()
        fig.savefig(image, dpi=dpi, format=out.suffix.lstrip(".").lower())
        replace_file(real, image.getvalue())
    except BcgprofError:
        raise
    except Exception as e:  # OSError, or a backend that cannot draw here (a missing tool)
        detail = (
            getattr(e, "strerror", None) or (str(e).strip().splitlines() or [type(e).__name__])[0]
        )
        raise BcgprofError(
            f"cannot write {out}: {detail[:200]}; write a .png, .svg or .pdf somewhere writable"
        ) from None
    finally:
        plt.close(fig)
    return out


def plot_advice(advice, out: str | Path, *, dpi: int = 120) -> Path:
    """The advisor's trade-off curve: predicted budget against the least expected padding."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = image_path(out)
    fig, ax = plt.subplots(figsize=(8, 5), constrained_layout=True)
    xs = [b / GIB for b, _, _ in advice.curve]
    ax.plot(xs, [p for _, p, _ in advice.curve], "-o", color=COLOURS.get(advice.mode, "#1f77b4"))
    for x, (_, p, n) in zip(xs, advice.curve):
        ax.annotate(str(n), (x, p), textcoords="offset points", xytext=(4, 4), fontsize=7)
    ax.axvline(advice.budget_bytes / GIB, color="black", linestyle=":", label="budget")
    ax.plot(
        [advice.high_bytes / GIB],
        [advice.expected_padding_pct],
        "*",
        color="black",
        markersize=12,
        label=f"advised: {len(advice.buckets)} buckets",
    )
    ax.set_xlabel(
        f"predicted capture memory, {advice.mode}, top of the band (GiB; predicted, not measured)"
    )
    ax.set_ylabel("expected padding (% of tokens)")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title(
        f"least padding for a budget ({advice.lengths_source}); labels: buckets in the list"
    )
    return _save(fig, out, dpi)


def _causes_panel(ax, report: Report, rank: int) -> None:
    """One stacked bar per mode: device used split into its causes (positive up, negative down)."""
    from bcgprof.analysis.explain import CAUSES, causes_of

    modes = [m for m in report.modes() if _rows(report, m, rank)]
    for i, mode in enumerate(modes):
        totals = dict.fromkeys(CAUSES, 0)
        for r in _rows(report, mode, rank):
            for name, value in (causes_of(r) or {}).items():
                totals[name] += value
        up = down = 0.0
        for name, value in totals.items():
            v = value / MIB
            base = up if v >= 0 else down
            ax.bar(
                i,
                v,
                bottom=base,
                color=CAUSE_COLOURS[name],
                label=CAUSES[name][0] if i == 0 else None,
            )
            if v >= 0:
                up += v
            else:
                down += v
    ax.axhline(0, color="black", linewidth=0.8)
    ax.set_xticks(range(len(modes)))
    ax.set_xticklabels(modes)
    ax.set_ylabel("device used by cause (MiB)")
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=7, ncol=3, loc="upper right")


def build_figure(report: Report, *, rank: int = 0):
    """The figure of one rank of a report (a matplotlib Figure; the caller saves and closes it)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    curves = [m for m in words(ListMode) if _rows(report, m, rank)]
    floor = _rows(report, Mode.FLOOR, rank)
    extra = [m for m in report.modes() if m not in words(Mode) and _rows(report, m, rank)]
    curves += extra
    if not curves and not floor:
        ranks = sorted({r.rank for r in report.buckets})
        raise BcgprofError(
            f"{report.path} has no rows for rank {rank} to plot"
            + (f"; it has ranks {', '.join(map(str, ranks))}" if ranks else "; it is empty")
        )
    # Every mode captures the same buckets in the same order (largest first); the x axis is that
    # order.
    reference = max((_rows(report, m, rank) for m in curves), key=len, default=floor)
    labels = [r.bucket for r in reference]
    x_of = {r.bucket: i for i, r in enumerate(reference)}

    ledger = any(r.pool_live_delta_bytes is not None for r in report.buckets if r.rank == rank)
    if ledger:
        fig = plt.figure(figsize=(11, 11), constrained_layout=True)
        grid = fig.add_gridspec(3, 1, height_ratios=[3, 2, 2])
        top = fig.add_subplot(grid[0])
        bottom = fig.add_subplot(grid[1], sharex=top)
        top.tick_params(labelbottom=False)  # the bucket labels are on the pool-delta panel below
        _causes_panel(fig.add_subplot(grid[2]), report, rank)
    else:
        fig, (top, bottom) = plt.subplots(
            2,
            1,
            figsize=(11, 8),
            sharex=True,
            gridspec_kw={"height_ratios": [3, 2]},
            constrained_layout=True,
        )
    # Plot in GiB, or in MiB for captures under 1 GiB, so the axis gets round ticks.
    peak = max(
        [
            abs(sum(r.device_used_delta_bytes for r in _rows(report, m, rank)))
            for m in [*curves, Mode.FLOOR.value]
        ]
        + [abs(r.pool_bytes) for r in report.buckets if r.rank == rank]
        + [1]
    )
    unit, scale = ("GiB", GIB) if peak >= GIB else ("MiB", MIB)
    plotted: list[float] = []  # every value on the top panel, for its y range
    for mode in curves:
        rows = [r for r in _rows(report, mode, rank) if r.bucket in x_of]
        xs = [x_of[r.bucket] for r in rows]
        used, pool = [], []
        total = 0
        for r in rows:
            total += r.device_used_delta_bytes
            used.append(total)
            pool.append(r.pool_bytes)
        colour = COLOURS.get(mode)
        used = [u / scale for u in used]
        pool = [p / scale for p in pool]
        plotted += used + pool
        top.plot(
            xs,
            used,
            "-o",
            color=colour,
            markersize=3,
            linewidth=1.8,
            zorder=3,
            label=f"{mode}: device used",
        )
        top.plot(xs, pool, "--", color=colour, linewidth=1.8, zorder=3, label=f"{mode}: graph pool")
        failed = [(x, u) for x, u, r in zip(xs, used, rows) if r.status != "ok"]
        if failed:
            top.plot(
                *zip(*failed),
                "x",
                color="black",
                markersize=9,
                zorder=4,
                label=f"{mode}: failed bucket",
            )
    if floor:
        f = floor[-1]
        floor_used = sum(r.device_used_delta_bytes for r in floor) / scale
        floor_pool = f.pool_bytes / scale
        plotted += [floor_used, floor_pool]
        # Under the modes' lines (zorder 1), each in its own pattern: the shared pool
        # often ends a few MiB above the floor's and must stay visible on top of it.
        top.axhline(
            floor_used,
            color=COLOURS[Mode.FLOOR],
            linewidth=1.5,
            linestyle="-.",
            zorder=1,
            label=f"floor (bucket {f.bucket} alone): device used {floor_used:.2f} {unit}",
        )
        top.axhline(
            floor_pool,
            color=COLOURS[Mode.FLOOR],
            linewidth=2.5,
            linestyle=":",
            zorder=1,
            label=f"floor: graph pool {floor_pool:.2f} {unit}",
        )
    top.set_ylabel(f"cumulative capture cost ({unit})")
    low, high = (min(plotted), max(plotted)) if plotted else (0.0, 1.0)
    span = (high - low) or max(abs(high), 1.0) * 0.1
    top.set_ylim(low - 0.08 * span, high + 0.12 * span)
    top.grid(True, alpha=0.3)
    # the curves rise to the right; the floor lies along the bottom
    top.legend(loc="upper left", fontsize=8)
    run = report.run
    status = "" if run.status == "complete" else f" [{run.status}]"
    tp = f", rank {rank} of {run.tp}" if run.tp and run.tp > 1 else ""
    what = (
        "recorded" if run.source == "record" else f"{run.layers} layers, {run.dtype}, {run.phase}"
    )
    top.set_title(
        f"{run.model}: {what}, {len(labels)} buckets{tp} on {run.gpu_name or 'unknown GPU'}{status}"
    )

    width = 0.8 / max(len(curves), 1)
    for i, mode in enumerate(curves):
        rows = [r for r in _rows(report, mode, rank) if r.bucket in x_of]
        bar_xs = [x_of[r.bucket] + (i - (len(curves) - 1) / 2) * width for r in rows]
        bottom.bar(
            bar_xs,
            [r.pool_delta_bytes / MIB for r in rows],
            width=width,
            color=COLOURS.get(mode),
            label=mode,
        )
    bottom.set_yscale("symlog", linthresh=1.0)
    bottom.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    bottom.set_ylabel("graph-pool delta per bucket (MiB, symlog)")
    bottom.set_xlabel("bucket, in capture order (largest first)")
    bottom.grid(True, axis="y", alpha=0.3)
    if curves:  # a floor-only report draws no bars, and an empty legend is a warning on stderr
        bottom.legend(loc="upper right", fontsize=8)
    step = max(1, len(labels) // 24)  # at most ~24 tick labels
    ticks = list(range(0, len(labels), step))
    bottom.set_xticks(ticks)
    bottom.set_xticklabels([str(labels[i]) for i in ticks], rotation=60, fontsize=8)
    return fig
