"""Every command on bad input: exit 2 (or 1 for a regression), one `error:` line, no traceback.

One test per class of bad input (issue 9), each running every variant of its class
through every command that takes it. Corrupted reports come from
tests/data/corrupt_reports.py.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from bcgprof.cli import app

from helpers import DATA, load_data_module, refused

runner = CliRunner()
corrupt = load_data_module("corrupt_reports")


def run(*args, **kwargs):
    return runner.invoke(app, [str(a) for a in args], **kwargs)


def report_commands(bad: Path, good: Path, tmp: Path) -> dict[str, tuple]:
    """Every command that reads a report, with ``bad`` in each position it can take."""
    return {
        "show": ("show", bad),
        "show markdown": ("show", bad, "-f", "markdown"),
        "show json": ("show", bad, "-f", "json"),
        "show csv": ("show", bad, "-f", "csv"),
        "show wide": ("show", bad, "--wide", "--section", "summary"),
        "compare as old": ("compare", bad, good),
        "compare as new": ("compare", good, bad, "-f", "json"),
        "gate as current": ("gate", "--baseline", good, "--current", bad, "--each-bucket"),
        "gate as baseline": ("gate", "--baseline", bad, "--current", good),
        "plot": ("plot", bad, "-o", tmp / "plot.png"),
        "explain": ("explain", bad),
        "explain json": ("explain", bad, "-f", "json"),
        "predict buckets": ("predict", "--from", bad, "--buckets", "256,4096"),
        "predict layers": ("predict", "--from", bad, "--from", good, "--num-layers", "24"),
        "advise": ("advise", "--from", bad, "--budget", "4GiB", "--mode", "shared"),
    }


@pytest.mark.parametrize("cls", sorted(corrupt.CLASSES))
def test_every_command_refuses_a_corrupted_report(cls, tmp_path):
    good = shutil.copytree(DATA / "baseline", tmp_path / "good")
    for i, variant in enumerate(corrupt.CLASSES[cls]):
        bad = corrupt.make(variant, DATA / "baseline", tmp_path / f"bad{i}")
        for what, args in report_commands(bad, good, tmp_path).items():
            line = refused(run(*args))
            assert variant.expect in line, (cls, variant.name, what, line)
            assert str(bad) in line, (cls, variant.name, what, line)  # the file is named
        assert not (tmp_path / "plot.png").exists()


@pytest.mark.parametrize("cls", sorted(corrupt.ACCEPTED))
def test_accepted_variants_read_like_the_original(cls, tmp_path):
    original = DATA / "baseline"
    good = shutil.copytree(original, tmp_path / "good")
    expected = json.loads(run("show", original, "-f", "json").stdout)
    for i, variant in enumerate(corrupt.ACCEPTED[cls]):
        path = corrupt.make(variant, original, tmp_path / f"v{i}")
        result = run("show", path, "-f", "json")
        assert result.exit_code == 0, (variant.name, result.stderr)
        data = json.loads(result.stdout)
        assert {k: v for k, v in data.items() if k != "report"} == {
            k: v for k, v in expected.items() if k != "report"
        }
        assert run("gate", "--baseline", good, "--current", path, "--each-bucket").exit_code == 0
        assert run("gate", "--baseline", path, "--current", good).exit_code == 0


# ---------------------------------------------------------------- the gate's own input


def gate(baseline, current, *extra):
    return run("gate", "--baseline", baseline, "--current", current, *extra)


@pytest.mark.parametrize(
    "args, message",
    [
        (("--rel-tol", "nan"), "--rel-tol 'nan' is not a finite number"),
        (("--rel-tol", "inf"), "--rel-tol 'inf' is not a finite number"),
        (("--rel-tol", "-inf%"), "is not a finite number"),
        (("--rel-tol", "1e400"), "is not a finite number"),
        (("--rel-tol", "-0.5"), "is negative"),
        (("--abs-tol-mib", "inf"), "--abs-tol-mib inf is not a finite number"),
        (("--abs-tol-mib", "nan"), "--abs-tol-mib nan is not a finite number"),
        (("--abs-tol-mib", "-1"), "is negative"),
        (("--abs-tol-mib", "1e300"), "is over"),
        (("--tol", "pool_bytes=inf"), "is not a finite number"),
        (("--tol", "pool_bytes=nan%"), "is not a finite number"),
        (("--tol", "pool_bytes=:" + "9" * 400 + "MiB"), "is too large"),
        (("--tol", "device_used_bytes=1%:-8MiB"), "is not a size"),
    ],
)
def test_non_finite_or_negative_tolerances_are_refused(args, message, report_copy, data_dir):
    line = refused(gate(data_dir / "baseline", report_copy("baseline"), *args))
    assert message in line


def test_the_same_report_twice_is_refused(data_dir, tmp_path):
    line = refused(gate(data_dir / "baseline", data_dir / "baseline"))
    assert "are the same report" in line
    link = tmp_path / "link"
    link.symlink_to(data_dir / "baseline")
    assert "are the same report" in refused(gate(data_dir / "baseline", link))
    assert "are the same report" in refused(
        gate(data_dir / "baseline", data_dir / "grown" / ".." / "baseline")
    )


def test_a_baseline_that_is_not_complete_is_refused(data_dir, write_report, rows):
    line = refused(gate(data_dir / "partial", data_dir / "baseline"))
    assert "baseline" in line and "is interrupted (interrupted during shared), not complete" in line
    assert "re-capture the baseline" in line
    # A baseline that says complete but lacks rows its run.json promises.
    grouped = rows()
    del grouped["shared"][512]
    lacking = write_report("lacking", grouped.all(), buckets=[256, 512, 1024, 2048, 4096])
    line = refused(gate(lacking, data_dir / "baseline"))
    assert "says it is complete but has no row for shared bucket 512" in line


def test_a_gate_cannot_pass_without_figures(write_report, rows):
    empty = [write_report(name, [], buckets=[], modes=[]) for name in ("a", "b")]
    assert "no figures in common" in refused(gate(*empty))
    # With --allow-mismatch and no bucket in common: nothing was compared, so nothing passes.
    left = write_report("left", rows(buckets=[256]).all())
    right = write_report("right", rows(buckets=[512]).all())
    assert "no figures in common" in refused(gate(left, right, "--allow-mismatch"))


def test_explain_of_a_report_without_rows_says_so_in_one_line(write_report):
    empty = write_report("empty", [], buckets=[], modes=[], status="partial", message="no graph")
    line = refused(run("explain", empty))
    assert "has no bucket rows to explain (partial: no graph)" in line


def test_a_report_reduced_to_status_columns_cannot_pass(data_dir, tmp_path):
    """Issue 9, item 1: it passed `gate --each-bucket` with 16 improvements."""
    bad = corrupt.make(
        corrupt.CLASSES["missing column"][0], data_dir / "baseline", tmp_path / "bad"
    )
    line = refused(gate(data_dir / "baseline", bad, "--each-bucket"))
    assert "missing column(s) segments" in line


def test_summary_md_is_checked_before_any_report_is_read(data_dir, report_copy, tmp_path):
    current = report_copy("grown")
    # Inside a report directory: refused, and the report is left alone.
    before = (current / "buckets.csv").read_bytes()
    for target in (
        current / "summary.md",
        current / "buckets.csv",
        data_dir / "baseline" / "notes.md",
    ):
        line = refused(gate(data_dir / "baseline", current, "--summary-md", target))
        assert "is inside a report directory" in line
    assert (current / "buckets.csv").read_bytes() == before
    assert not (current / "summary.md").exists()
    # A directory that does not exist, or a directory named as the file.
    assert "does not exist" in refused(
        gate(data_dir / "baseline", current, "--summary-md", tmp_path / "no" / "s.md")
    )
    assert "is a directory" in refused(
        gate(data_dir / "baseline", current, "--summary-md", tmp_path)
    )
    # An unusable report with an unusable --summary-md: the markdown error is found first, before
    # any reading; with a usable --summary-md, the report error is the one line, and the job summary
    # says so.
    summary = tmp_path / "s.md"
    line = refused(gate(data_dir / "baseline", data_dir / "corrupt", "--summary-md", summary))
    assert "is corrupt" in line
    assert "UNUSABLE INPUT" in summary.read_text() and "is corrupt" in summary.read_text()


def test_a_late_summary_md_failure_never_changes_the_verdict(
    data_dir, report_copy, tmp_path, monkeypatch
):
    import bcgprof.outputs

    summary = tmp_path / "s.md"

    def failing_write(fd, data):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(bcgprof.outputs, "_write_all", failing_write)
    passing = gate(data_dir / "baseline", report_copy("baseline"), "--summary-md", summary)
    assert passing.exit_code == 0 and "PASS" in passing.stdout
    assert (
        passing.stderr.startswith("warning: cannot write --summary-md")
        and "No space left" in passing.stderr
    )
    failing = gate(data_dir / "baseline", data_dir / "grown", "--summary-md", summary)
    assert failing.exit_code == 1


# ---------------------------------------------------------------- capture's input, before any work


@pytest.fixture
def captured(monkeypatch):
    import bcgprof.measure.runner

    calls = []

    def fake(opts, on_event=None, **_):
        calls.append(opts)
        return bcgprof.measure.runner.CaptureOutcome(
            out=None, status="complete", exit_code=0, reporter=False
        )

    monkeypatch.setattr(bcgprof.measure.runner, "run_capture", fake)
    return calls


@pytest.mark.parametrize(
    "args, message",
    [
        (("--buckets", ""), "--buckets is empty"),
        (("--buckets", " "), "--buckets is empty"),
        (("--buckets", "1:100000000"), "is over the largest bucket, 1048576"),
        (("--buckets", "1:1048576"), "holds 1048576 buckets; a bucket list holds at most 4096"),
        (("--buckets", "9" * 400), "is over the largest bucket"),
        (("--buckets", "sglang-decode", "--max-bs", "1048576"), "holds more than 4096 buckets"),
        (
            ("--max-tokens", "100000000000"),
            "--max-tokens 100000000000 is over the cap of 1048576 tokens",
        ),
        (("--max-tokens", str(2**64 + 1)), "--max-tokens 18446744073709551617 is over the cap"),
        (("--max-tokens", "0"), "--max-tokens must be a positive number of tokens"),
        (("--max-bs", str(10**12)), "--max-bs 1000000000000 is over the cap of 1048576 sequences"),
        (("--phase", "decode", "--max-bs", str(10**12)), "--max-bs 1000000000000 is over the cap"),
        (
            ("--phase", "decode", "--context-len", "0"),
            "--context-len must be a positive number of tokens",
        ),
        (
            ("--phase", "decode", "--context-len", str(10**9)),
            "--context-len 1000000000 is over the cap of 1048576",
        ),
        (("--sample-interval-ms", "nan"), "--sample-interval-ms nan is out of range"),
        (("--seed", str(2**70)), "--seed is out of range"),
    ],
)
def test_capture_refuses_bad_input_before_any_work(captured, args, message):
    line = refused(run("capture", *args))
    assert message in line
    assert captured == []


def test_capture_out_that_is_a_file_or_a_report(captured, tmp_path, data_dir):
    existing = tmp_path / "file"
    existing.write_text("x")
    assert "is an existing file" in refused(run("capture", "--out", existing))
    assert "already holds a report" in refused(run("capture", "--out", data_dir / "baseline"))
    assert "is a file, not a directory" in refused(run("capture", "--out", existing / "sub"))
    assert captured == []
    assert run("capture", "--out", tmp_path / "new" / "report").exit_code == 0
    # an existing directory without a report
    assert run("capture", "--out", tmp_path).exit_code == 0
    assert len(captured) == 2


# ---------------------------------------------------------------- plot's output


def test_plot_output_names_and_dpi(data_dir, tmp_path):
    result = run("plot", data_dir / "baseline", "-o", tmp_path / "x")
    assert (
        result.exit_code == 0
        and result.stderr.strip() == f"wrote {tmp_path / 'x.png'}"
        and result.stdout == ""
    )
    assert (tmp_path / "x.png").read_bytes()[:4] == b"\x89PNG"
    for name, message in (
        ("x.pgf", "cannot write .pgf images"),
        ("x.txt", "cannot write .txt images"),
    ):
        assert message in refused(run("plot", data_dir / "baseline", "-o", tmp_path / name))
    for dpi in ("100000", "0", "29", "601", str(2**70)):
        assert "out of range; use 30 to 600" in refused(
            run("plot", data_dir / "baseline", "-o", tmp_path / "d.png", "--dpi", dpi)
        )
    assert not (tmp_path / "x.pgf").exists() and not (tmp_path / "d.png").exists()


def test_output_names_the_file_system_refuses_are_one_line(data_dir, tmp_path):
    """A directory given as an image, and a name longer than the file system takes, for every
    output option."""
    assert "names no file" in refused(run("plot", data_dir / "baseline", "-o", tmp_path))
    assert not Path(f"{tmp_path}.png").exists()
    long = tmp_path / ("a" * 300)
    assert "File name too long" in refused(run("plot", data_dir / "baseline", "-o", f"{long}.png"))
    assert "File name too long" in refused(
        gate(data_dir / "baseline", data_dir / "grown", "--summary-md", f"{long}.md")
    )


def test_a_plot_of_a_floor_only_report_writes_no_warning(data_dir, tmp_path):
    floor = tmp_path / "floor"
    shutil.copytree("reports/qwen3-30b-a3b-h200-floor", floor)
    result = run("plot", floor, "-o", tmp_path / "f.png")
    assert result.exit_code == 0 and result.stderr.strip() == f"wrote {tmp_path / 'f.png'}"


def test_a_report_path_that_loops_is_one_line_for_the_gate(data_dir, tmp_path):
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    assert "Too many levels of symbolic links" in refused(
        gate(tmp_path / "a", data_dir / "baseline")
    )


def test_a_layer_directory_with_an_unreadable_report_is_refused_not_fitted_without_it(tmp_path):
    layers = tmp_path / "layers"
    shutil.copytree("reports/gpt-oss-20b-h200-layers", layers)
    shutil.copytree(layers / "layers-4", layers / "layers-\u00b2")  # not a layer count: passed over
    (layers / "layers-4" / "run.json").unlink()
    assert "layers-4/run.json is missing" in refused(run("predict", "--from", layers))


def test_a_trace_that_is_a_broken_link_is_called_damaged_not_absent(tmp_path):
    from bcgprof.report.traces import trace_name

    profile = tmp_path / "profile"
    shutil.copytree("reports/llama-3.1-8b-h200-sparse", profile)
    (profile / trace_name("shared")).unlink()
    (profile / trace_name("shared")).symlink_to(tmp_path / "nowhere")
    line = refused(run("predict", "--from", profile, "-b", "1024,8192"))
    assert trace_name("shared") in line and "re-capture" in line and "--modes including" not in line


def test_a_trace_whose_header_names_no_device_index_is_one_line(tmp_path):
    import gzip

    from bcgprof.report.traces import trace_name

    profile = tmp_path / "profile"
    shutil.copytree("reports/llama-3.1-8b-h200-sparse", profile)
    path = profile / trace_name("shared")
    head, rest = gzip.decompress(path.read_bytes()).decode().split("\n", 1)
    header = json.loads(head[1:])
    header["device"] = "x"
    path.write_bytes(gzip.compress(("#" + json.dumps(header) + "\n" + rest).encode()))
    assert "device must be a device index" in refused(
        run("predict", "--from", profile, "-b", "1024,8192")
    )


# ---------------------------------------------------------------- config.json


@pytest.mark.parametrize(
    "content, message",
    [
        (b'{"architectures": 5}', "architectures must be a list of names"),
        (b'{"architectures": [5]}', "architectures must be a list of names"),
        (b'{"architectures": "LlamaForCausalLM"}', "architectures must be a list of names"),
        (b'{"model_type": ["llama"]}', "model_type must be a name"),
        (b'{"model_type": 3}', "model_type must be a name"),
        (b'{"model_type": "ll\xe9ama"}', "is not UTF-8 text"),
        (b'{"architectures": ["\xff\xfe"]}', "is not UTF-8 text"),
        (b"\x00\x01\x02", "is not valid JSON"),
        (b'{"hidden_size": ' + b"9" * 5000 + b"}", "is not usable JSON"),
    ],
)
def test_a_bad_config_json_is_one_line(tmp_path, content, message, captured):
    config = tmp_path / "config.json"
    config.write_bytes(content)
    assert message in refused(run("estimate", "-m", config, "-b", "4"))
    assert message in refused(run("capture", "-m", tmp_path, "-b", "4"))
    assert captured == []


# ---------------------------------------------------------------- internal errors


def test_an_internal_error_is_one_line_and_exit_2(data_dir, monkeypatch):
    import bcgprof.render

    def broken(*args, **kwargs):
        raise RuntimeError("something nobody expected\nsecond line")

    monkeypatch.setattr(bcgprof.render, "show_report", broken)
    line = refused(run("show", data_dir / "baseline"))
    assert line == (
        "error: internal error: RuntimeError: something nobody expected; re-run with --debug for "
        "the "
        "traceback and report it"
    )
    for result in (
        run("--debug", "show", data_dir / "baseline"),
        run("show", data_dir / "baseline", env={"BCGPROF_DEBUG": "1"}),
    ):
        assert result.exit_code == 2
        assert "Traceback" in result.stderr and "something nobody expected" in result.stderr
    monkeypatch.setenv("BCGPROF_DEBUG", "0")
    refused(run("show", data_dir / "baseline"))


def test_a_gate_that_crashes_is_never_a_pass_or_a_regression(data_dir, report_copy, monkeypatch):
    import bcgprof.analysis.gate

    def broken(*args, **kwargs):
        raise ZeroDivisionError("division by zero")

    monkeypatch.setattr(bcgprof.analysis.gate, "gate_reports", broken)
    assert "internal error: ZeroDivisionError" in refused(
        gate(data_dir / "baseline", report_copy("baseline"))
    )


def test_a_reader_that_stops_reading_is_not_an_error(data_dir, monkeypatch):
    """`bcgprof show ... | head`: quietly 0; a gate keeps its verdict as exit code."""
    import bcgprof.render

    def closed(*args, **kwargs):
        raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(bcgprof.render, "show_report", closed)
    monkeypatch.setattr(bcgprof.render, "print_gate", closed)
    result = run("show", data_dir / "baseline")
    assert result.exit_code == 0 and not result.stderr
    assert gate(data_dir / "baseline", data_dir / "grown").exit_code == 1
