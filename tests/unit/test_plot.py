from pathlib import Path

import numpy as np
import pytest

from bcgprof.errors import BcgprofError
from bcgprof.render.plot import COLOURS, plot_report
from bcgprof.report import read_report


def colour_pixels(png, hex_colour: str) -> int:
    import matplotlib.image

    image = matplotlib.image.imread(str(png))[..., :3]
    target = np.array([int(hex_colour[i:i + 2], 16) / 255 for i in (1, 3, 5)])
    return int((np.abs(image - target).max(axis=-1) < 0.02).sum())


def test_plot_writes_a_png_with_every_mode(tmp_path, data_dir):
    out = plot_report(read_report(data_dir / "baseline"), tmp_path / "plots" / "baseline.png")
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(data) > 20_000
    for mode in ("per-bucket", "shared", "floor"):
        assert colour_pixels(out, COLOURS[mode]) > 200, mode


def test_plot_of_a_partial_report(tmp_path, data_dir):
    out = plot_report(read_report(data_dir / "partial"), tmp_path / "partial.png")
    assert colour_pixels(out, COLOURS["shared"]) > 200
    assert colour_pixels(out, COLOURS["floor"]) == 0  # no floor rows, no floor line


def test_plot_of_a_rank_that_is_not_there(tmp_path, data_dir):
    with pytest.raises(BcgprofError, match="no rows for rank 3 to plot; it has ranks 0"):
        plot_report(read_report(data_dir / "baseline"), tmp_path / "x.png", rank=3)


def test_plot_to_an_unwritable_place(tmp_path, data_dir):
    (tmp_path / "file").write_text("")
    with pytest.raises(BcgprofError, match="cannot write"):
        plot_report(read_report(data_dir / "baseline"), tmp_path / "file" / "x.png")


def test_top_panel_spans_the_figures_not_zero():
    """The committed H200 report: its modes differ between 3.35 and 4.49 GiB; that range fills the panel."""
    import matplotlib.pyplot as plt

    from bcgprof.render.plot import build_figure

    report = read_report(Path(__file__).resolve().parents[2] / "reports" / "gpt-oss-20b-h200-unfused")
    fig = build_figure(report)
    try:
        top = fig.axes[0]
        low, high = top.get_ylim()
        assert 3.2 < low < 3.35 and 4.49 < high < 4.7
        lines = {line.get_label(): line for line in top.get_lines()}
        floor_used = next(v for k, v in lines.items() if k.startswith("floor (bucket 16384 alone): device used"))
        floor_pool = next(v for k, v in lines.items() if k.startswith("floor: graph pool"))
        shared_pool = lines["shared: graph pool"]
        # Two patterns for the floor, both drawn under the modes' lines (the shared pool ends 2 MiB above it).
        assert floor_used.get_linestyle() != floor_pool.get_linestyle()
        assert {floor_used.get_linestyle(), floor_pool.get_linestyle()}.isdisjoint({shared_pool.get_linestyle()})
        assert max(floor_used.get_zorder(), floor_pool.get_zorder()) < shared_pool.get_zorder()
    finally:
        plt.close(fig)


def test_output_names(tmp_path, data_dir):
    from bcgprof.render.plot import image_path

    assert image_path(tmp_path / "x") == tmp_path / "x.png"
    assert image_path("cost.SVG") == Path("cost.SVG")
    for bad in ("x.pgf", "x.tar.gz", "x.csv"):
        with pytest.raises(BcgprofError, match="cannot write"):
            image_path(bad)
    with pytest.raises(BcgprofError, match="--dpi 5 is out of range"):
        plot_report(read_report(data_dir / "baseline"), tmp_path / "x.png", dpi=5)
    assert not (tmp_path / "x.png").exists()
