"""Hostile inputs, third round: every command answers with one `error:` line and exit 2 (or a
correct exit 0), never a traceback, an impossible figure or a silent drop. One test per class of
input; each is synthetic, small and quick (oversized files are sparse, so a refusal that reads them
would be slow). The mechanisms themselves are tested in tests/unit/test_hostile_round3.py."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from bcgprof.cli import app
from bcgprof.report import BucketRecord, ReportWriter, RunInfo

from helpers import DATA, refused

runner = CliRunner()
MIB = 1 << 20
BASELINE, GROWN = DATA / "baseline", DATA / "grown"


def run(*args):
    return runner.invoke(app, [str(a) for a in args])


def sparse(path: Path, size: int) -> Path:
    with open(path, "wb") as f:
        f.truncate(size)
    return path


# ----------------------------------------------------------- B: caps stated, checked before reading


def test_a_lengths_file_or_model_config_over_its_cap_is_refused_before_it_is_read(tmp_path):
    # 2 GiB of NULs: reading any of it would be slow
    big = sparse(tmp_path / "lengths.csv", 2 << 30)
    line = refused(run("advise", "--from", BASELINE, "--budget", "4GiB", "--lengths", big))
    assert "over the cap of" in line and "(16 MiB)" in line
    many = tmp_path / "many.csv"
    many.write_text("tokens\n" + "7\n" * 1_000_001)  # 2 MB, within the byte cap, one count too many
    assert "may hold at most 1000000 token counts" in refused(
        run("advise", "--from", BASELINE, "--budget", "4GiB", "--lengths", many)
    )
    config = sparse(tmp_path / "config.json", 100 * MIB)
    for command in ("estimate", "capture"):
        line = refused(run(command, "--model", config))
        assert "over the cap of 1 MiB for a model config" in line, command


# ---------------------------------------------------------------- D: never a silent wrong answer


def _layer_report(path: Path, layers: int, per_graph: int) -> Path:
    """A complete report whose every later bucket adds ``per_graph`` bytes of executables per
    graph."""
    buckets, rows = [4096, 2048, 1024, 512, 256], []
    for mode in ("per-bucket", "shared", "floor"):
        pool = 0
        for order, b in enumerate(buckets if mode != "floor" else buckets[:1]):
            non_torch, out = per_graph * (layers + 1) + (4 * MIB if order == 0 else 0), b * 2880 * 2
            pool_delta = 300 * MIB if order == 0 else 0
            outside = out if (mode == "shared" and order == 0) else 0
            pool += pool_delta
            rows.append(
                BucketRecord(
                    mode=mode,
                    bucket=b,
                    order=order,
                    status="ok",
                    segments=layers + 1,
                    graph_nodes=90 * layers,
                    pool_bytes=pool,
                    pool_delta_bytes=pool_delta,
                    torch_reserved_delta_bytes=pool_delta + outside,
                    retained_output_bytes=out if (mode != "shared" or order == 0) else 0,
                    device_used_delta_bytes=pool_delta + outside + non_torch,
                    non_torch_delta_bytes=non_torch,
                    peak_transient_bytes=b * 70000,
                    device_peak_delta_bytes=pool_delta + outside + non_torch,
                )
            )
    run_info = RunInfo(
        model="gpt-oss-20b",
        layers=layers,
        buckets=sorted(buckets),
        gpu_name="NVIDIA H200",
        modes=["per-bucket", "shared", "floor"],
        config_hash="h",
        status="complete",
        hidden_size=2880,
        dtype="bfloat16",
    )
    ReportWriter(path, run_info, rows)
    return path


def test_a_layer_prediction_never_prints_an_impossible_figure_nor_fits_a_misnamed_report(tmp_path):
    layers = tmp_path / "layers"
    _layer_report(layers / "layers-2", 2, 8 * MIB)
    # executables shrink with depth: below zero at 24 layers
    _layer_report(layers / "layers-4", 4, 2 * MIB)
    line = refused(run("predict", "--from", layers, "--num-layers", "24"))
    assert "shrink as layers are added" in line and "below zero" in line
    # Two reports for one depth, and a name that says another depth than run.json: refused, not
    # dropped or fitted.
    good = tmp_path / "good"
    _layer_report(good / "layers-2", 2, 2 * MIB)
    _layer_report(good / "layers-4", 4, 3 * MIB)
    assert run("predict", "--from", good, "--num-layers", "24").exit_code == 0
    shutil.copytree(good / "layers-4", good / "layers-04")
    assert "two reports for 4 layers, layers-04 and layers-4" in refused(
        run("predict", "--from", good)
    )
    shutil.rmtree(good / "layers-04")
    (good / "layers-4").rename(good / "layers-8")
    assert "is named for 8 layers but its run.json records 4" in refused(
        run("predict", "--from", good)
    )


def test_a_size_without_a_unit_is_refused_by_every_option_that_takes_one():
    units = "(units: B, KiB, MiB, GiB, TiB or K, M, G, T, all binary)"
    for args in (
        ("gate", "--baseline", BASELINE, "--current", GROWN, "--tol", "device_used_bytes=0:16"),
        ("advise", "--from", BASELINE, "--budget", "16"),
        ("advise", "--from", BASELINE, "--budget", "4GiB", "--free", "16"),
        ("predict", "--from", BASELINE, "--free", "16"),
    ):
        line = refused(run(*args))
        assert "'16' has no unit" in line and units in line, args
    # the spellings that carried their unit keep working
    assert (
        run("gate", "--baseline", BASELINE, "--current", GROWN, "--abs-tol-mib", "16").exit_code
        == 1
    )
    assert (
        run(
            "gate", "--baseline", BASELINE, "--current", GROWN, "--tol", "device_used_bytes=0:16MiB"
        ).exit_code
        == 1
    )


# ---------------------------------------------------------------- E: names the system refuses


def test_a_report_path_too_long_is_one_line_naming_it_in_every_reader(tmp_path):
    long = tmp_path / ("x" * 300) / "report"
    for args in (
        ("show", long),
        ("explain", long),
        ("compare", long, BASELINE),
        ("gate", "--baseline", BASELINE, "--current", long),
        ("plot", long, "-o", tmp_path / "p.png"),
        ("advise", "--from", long, "--budget", "4GiB"),
        ("predict", "--from", long, "--buckets", "256"),
    ):
        line = refused(run(*args))
        assert "File name too long" in line and "internal error" not in line, args


# ---------------------------------------------------------------- F: appending side by side


def test_eight_gates_appending_to_one_summary_keep_eight_verdicts_and_the_file(tmp_path):
    summary = tmp_path / "summary.md"
    summary.write_text("# job\n")
    inode = summary.stat().st_ino
    same = shutil.copytree(BASELINE, tmp_path / "same")  # passes against the baseline
    gate = [
        sys.executable,
        "-m",
        "bcgprof",
        "gate",
        "--baseline",
        str(BASELINE),
        "--summary-md",
        str(summary),
    ]
    procs = [
        subprocess.Popen(
            [*gate, "--current", str(GROWN if i % 2 else same)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for i in range(8)
    ]
    assert sorted(p.wait(timeout=120) for p in procs) == [0] * 4 + [1] * 4
    text = summary.read_text()
    # appended to, never replaced
    assert text.startswith("# job\n") and summary.stat().st_ino == inode
    assert text.count("## bcgprof gate: PASS") == 4 and text.count("## bcgprof gate: FAIL") == 4
    os.link(summary, tmp_path / "other-name.md")  # another name could be inside a report
    assert "has other names (hard links)" in refused(run(*gate[3:], "--current", GROWN))


# ---------------------------------------------------------------- G, H: the order of the checks


def test_capture_refuses_too_many_ranks_with_the_other_options_before_torch():
    line = refused(run("capture", "--tp", "9"))
    assert "--tp 9 is over 8, the most ranks a report holds" in line and "CUDA" not in line


def test_an_unusable_summary_md_beside_an_unusable_report_is_the_one_line(tmp_path):
    line = refused(
        run(
            "gate",
            "--baseline",
            BASELINE,
            "--current",
            DATA / "corrupt",
            "--summary-md",
            tmp_path / "missing-dir" / "s.md",
        )
    )
    assert "--summary-md" in line and "corrupt" not in line


# ---------------------------------------------------------------- I: escapes in a directory name


def test_a_report_path_with_terminal_escapes_is_printed_clean(tmp_path):
    escaped = shutil.copytree(BASELINE, tmp_path / "r\x1b]0;title\x07\x1b[2Jx")
    summary = tmp_path / "s.md"
    for args in (
        ("show", escaped),
        ("show", escaped, "-f", "markdown"),
        ("explain", escaped),
        ("compare", escaped, GROWN),
        ("gate", "--baseline", escaped, "--current", GROWN, "--summary-md", summary),
        ("predict", "--from", escaped, "--free", "64GiB"),
    ):
        result = run(*args)
        assert result.exit_code in (0, 1), (args, result.stderr)
        assert "\x1b" not in result.stdout and "\x07" not in result.stdout, args
        # the path is still named
        assert "r\N{REPLACEMENT CHARACTER}]0;title" in result.stdout, args
    assert "\x1b" not in summary.read_text()


# ---------------------------------------------------------------- numbers, --tol, --model


@pytest.mark.parametrize(
    "args",
    [
        ("predict", "--from", BASELINE, "--buckets", "\u0662\u0665\u0666"),
        ("predict", "--from", BASELINE, "--num-layers", "\u0662\u0664"),
        ("gate", "--baseline", BASELINE, "--current", GROWN, "--rel-tol", "\u0661%"),
        ("gate", "--baseline", BASELINE, "--current", GROWN, "--rel-tol", "1_0%"),
        ("gate", "--baseline", BASELINE, "--current", GROWN, "--abs-tol-mib", "1_6"),
        ("advise", "--from", BASELINE, "--budget", "\u0664GiB"),
        ("predict", "--from", BASELINE, "--free", "\u0664GiB"),
    ],
)
def test_a_number_is_ascii_digits_without_underscores_in_every_option(args):
    line = refused(run(*args))
    assert "ASCII" in line or "not an integer" in line or "not a size" in line, line


def test_a_metric_tolerance_given_twice_and_a_model_that_is_a_device_are_named(tmp_path):
    line = refused(
        run(
            "gate",
            "--baseline",
            BASELINE,
            "--current",
            GROWN,
            "--tol",
            "pool_bytes=1%",
            "--tol",
            "pool_bytes=2%",
        )
    )
    assert "--tol sets pool_bytes twice ('pool_bytes=1%' and 'pool_bytes=2%')" in line
    if os.path.exists("/dev/zero"):
        line = refused(run("estimate", "--model", "/dev/zero"))
        assert (
            "is a device, FIFO or socket, not a regular file" in line
            and "existing path" not in line
        )
    lengths = tmp_path / "l.csv"
    lengths.write_text("tokens\n\u0665\u0660\u0660\n")
    assert "is not a token count" in refused(
        run("advise", "--from", BASELINE, "--budget", "4GiB", "--lengths", lengths)
    )
