from pathlib import Path

import numpy as np
import pytest

from bcgprof.errors import BcgprofError
from bcgprof.render.plot import COLOURS, plot_report
from bcgprof.report import read_report


def colour_pixels(png, hex_colour: str) -> int:
    import matplotlib.image

    image = matplotlib.image.imread(str(png))[..., :3]
    target = np.array([int(hex_colour[i : i + 2], 16) / 255 for i in (1, 3, 5)])
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
