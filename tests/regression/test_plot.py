"""The plot of a committed report (reports/gpt-oss-20b-h200-unfused); on hand-made reports:
tests/unit/test_plot.py."""

from __future__ import annotations

from bcgprof.report import read_report

from helpers import ROOT


def test_top_panel_spans_the_figures_not_zero():
    """The committed H200 report: its modes differ between 3.35 and 4.49 GiB; that range fills
    the panel."""
    import matplotlib.pyplot as plt

    from bcgprof.render.plot import build_figure

    report = read_report(ROOT / "reports" / "gpt-oss-20b-h200-unfused")
    fig = build_figure(report)
    try:
        top = fig.axes[0]
        low, high = top.get_ylim()
        assert 3.2 < low < 3.35 and 4.49 < high < 4.7
        lines = {line.get_label(): line for line in top.get_lines()}
        floor_used = next(
            v for k, v in lines.items() if k.startswith("floor (bucket 16384 alone): device used")
        )
        floor_pool = next(v for k, v in lines.items() if k.startswith("floor: graph pool"))
        shared_pool = lines["shared: graph pool"]
        # Two patterns for the floor, both drawn under the modes' lines (the shared pool ends 2 MiB
        # above it).
        assert floor_used.get_linestyle() != floor_pool.get_linestyle()
        assert {floor_used.get_linestyle(), floor_pool.get_linestyle()}.isdisjoint(
            {shared_pool.get_linestyle()}
        )
        assert max(floor_used.get_zorder(), floor_pool.get_zorder()) < shared_pool.get_zorder()
    finally:
        plt.close(fig)
