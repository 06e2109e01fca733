"""The mechanisms behind the third round of hostile inputs (their commands:
tests/cli/test_bad_input_round3.py): paths looked at without an OSError, sizes and numbers read by
one rule, a real append, displayable lines, predictions that cannot print an impossible figure,
traces that cannot be dropped silently."""

from __future__ import annotations

import gzip
import os
import threading
from pathlib import Path

import pytest

import bcgprof
from bcgprof.analysis.predict.layout_spread import layout_spread
from bcgprof.analysis.predict.possible import check_possible
from bcgprof.analysis.predict.prediction import ModePrediction
from bcgprof.errors import BcgprofError, PredictionError, ReportError
from bcgprof.inputs import BROKEN_LINK, DIRECTORY, MISSING, REGULAR, SPECIAL, kind_of
from bcgprof.outputs import append_text
from bcgprof.render.model import Line
from bcgprof.report import read_report
from bcgprof.report.traces import TraceError, read_trace, trace_name
from bcgprof.report_format import parse_bytes, plain_number_text

MIB = 1 << 20


def test_kind_of_names_every_path_without_raising(tmp_path):
    (tmp_path / "f").write_text("x")
    (tmp_path / "link").symlink_to(tmp_path / "nowhere")
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    assert kind_of(tmp_path / "f") == (REGULAR, "")
    assert kind_of(tmp_path) == (DIRECTORY, "")
    assert kind_of(tmp_path / "no") == (MISSING, "")
    assert kind_of(tmp_path / "f" / "below") == (MISSING, "")
    assert kind_of(tmp_path / "link") == (BROKEN_LINK, "")
    assert kind_of(tmp_path / "a") == ("unreadable", "Too many levels of symbolic links")
    assert kind_of("x" * 5000) == ("unreadable", "File name too long")
    assert kind_of("a\0b") == ("unreadable", "the name holds a NUL byte")
    if os.path.exists("/dev/null"):
        assert kind_of("/dev/null") == (SPECIAL, "")


def test_read_report_of_a_name_too_long_raises_the_documented_error():
    with pytest.raises(ReportError, match="File name too long"):
        bcgprof.read_frames("x" * 5000)


def test_a_trace_header_nested_beyond_the_stack_is_refused_naming_the_file(tmp_path):
    path = tmp_path / trace_name("shared")
    path.write_bytes(gzip.compress(b"#" + b"[" * 200_000 + b"\n"))
    with pytest.raises(TraceError) as info:
        read_trace(path)
    assert str(path) in str(info.value)


def test_sizes_need_a_unit_and_numbers_ascii_digits():
    assert parse_bytes("16MiB") == parse_bytes("16 m") == 16 * MIB and parse_bytes("4096B") == 4096
    for bare in ("16", "0", "1.5"):
        with pytest.raises(BcgprofError, match="has no unit"):
            parse_bytes(bare)
    for foreign in ("\u0661\u0666MiB", "\uff11\uff16MiB"):  # Arabic-Indic and full-width digits
        with pytest.raises(BcgprofError, match="is not a size"):
            parse_bytes(foreign)
    assert plain_number_text("12.5") and plain_number_text("-3e2")
    assert not plain_number_text("1_0") and not plain_number_text("\u0662\u0664")
    assert int("1_0") == 10 and int("\u0662\u0664") == 24  # what the rule keeps out


def test_appends_side_by_side_each_land_whole(tmp_path):
    """Threads share one process, but each append is its own open, lock and write, as processes'
    are."""
    path = tmp_path / "s.md"
    texts = [f"## verdict {i}\n" + f"row {i}\n" * 2000 for i in range(8)]
    threads = [threading.Thread(target=append_text, args=(path, t, "--summary-md")) for t in texts]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    written = path.read_text()
    # none lost, none torn
    assert len(written) == sum(map(len, texts)) and all(t in written for t in texts)
    (tmp_path / "link.md").symlink_to(path)
    with pytest.raises(BcgprofError, match="cannot write"):
        # O_NOFOLLOW: a link put in its place
        append_text(tmp_path / "link.md", "x", "--summary-md")


def test_a_line_shows_no_control_character_but_keeps_every_other():
    line = Line("a\x1b[2Jb\tc\nd", lead="r\x1b]0;t\x07" + "y" * 500)
    assert line.text == "a\N{REPLACEMENT CHARACTER}[2Jb c d"
    assert (
        line.lead.startswith("r\N{REPLACEMENT CHARACTER}]0;t\N{REPLACEMENT CHARACTER}")
        and len(line.lead) == 507
    )


def _mode(used: int, low: int, high: int, pool: int = 0, non_torch: int = 0) -> ModePrediction:
    return ModePrediction(
        mode="shared",
        device_used_bytes=used,
        pool_bytes=pool,
        non_torch_bytes=non_torch,
        low_bytes=low,
        high_bytes=high,
    )


def test_a_prediction_never_holds_a_figure_below_zero_nor_a_band_without_its_point():
    with pytest.raises(PredictionError, match="-1.90 GiB of device used, which cannot be"):
        check_possible([_mode(-int(1.9 * 1024 * MIB), -2048 * MIB, 0)])
    with pytest.raises(PredictionError, match="of non-torch memory"):
        check_possible([_mode(10 * MIB, 0, 20 * MIB, non_torch=-MIB)])
    with pytest.raises(PredictionError, match="leaves out its own figure"):
        check_possible([_mode(10 * MIB, 11 * MIB, 20 * MIB)])
    m = _mode(10 * MIB, -5 * MIB, 20 * MIB)
    check_possible([m])
    assert m.low_bytes == 0  # memory cannot be negative: that end of the band says no more


def test_a_damaged_trace_is_refused_by_the_layer_band_and_a_missing_one_is_none(tmp_path):
    from traced_profile import write_profile

    report = write_profile(tmp_path / "p", buckets=[256, 512, 1024], modes=("per-bucket",))
    rows = sorted(report.buckets, key=lambda r: r.order)
    assert layout_spread(report, "per-bucket", rows) is not None
    trace = tmp_path / "p" / trace_name("per-bucket")
    data = trace.read_bytes()
    trace.write_bytes(data[: len(data) // 2])  # cut in half
    with pytest.raises(TraceError, match=str(trace)):
        layout_spread(read_report(tmp_path / "p"), "per-bucket", rows)
    trace.unlink()
    # named in the band's source
    assert layout_spread(read_report(tmp_path / "p"), "per-bucket", rows) is None


def test_a_hard_linked_summary_is_refused(tmp_path):
    from bcgprof.outputs import resolved_output

    path = tmp_path / "s.md"
    path.write_text("x")
    assert resolved_output(path, "--summary-md", append=True) == Path(os.path.realpath(path))
    os.link(path, tmp_path / "again.md")
    with pytest.raises(BcgprofError, match="has other names"):
        resolved_output(path, "--summary-md", append=True)
