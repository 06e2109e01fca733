"""The CLI's streams and endings: usage errors as one line, results on stdout and notes on
stderr, a gate verdict that survives a closed or full stdout, outputs that never land in a
report (through a link or not), terminal escapes neutralised, and capture's checks before
the GPU's."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from bcgprof.cli import app
from bcgprof.text import printable

from children import Command
from helpers import refused

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "tests" / "data"
runner = CliRunner()


def run(*args, **kwargs):
    return runner.invoke(app, [str(a) for a in args], **kwargs)


def bcgprof(*args, stdout=subprocess.PIPE, env=None, cwd=None):
    """The real console entry point in a fresh interpreter (for what CliRunner cannot fake: fds)."""
    return subprocess.run(
        [sys.executable, "-m", "bcgprof", *map(str, args)],
        stdout=stdout,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=cwd or REPO,
        timeout=120,
    )


# ---------------------------------------------------------------- usage errors


@pytest.mark.parametrize(
    "args, says",
    [
        (
            ("gate", "--baseline", DATA / "baseline"),
            "missing option '--current'; see 'bcgprof gate --help'",
        ),
        (("shw",), "no such command 'shw' (did you mean 'show'?); see 'bcgprof --help'"),
        (("show", DATA / "baseline", "--colour"), "no such option: --colour"),
        (("show", DATA / "baseline", "-f", "xml"), "'xml' is not one of"),
        (("plot", DATA / "baseline", "--dpi", "many"), "'--dpi'"),
        (("show",), "missing argument"),
    ],
)
def test_usage_errors_are_one_line_and_exit_2(args, says):
    line = refused(run(*args))
    assert says in line
    assert "╭" not in line and "Usage:" not in line


def test_help_has_no_boxes_and_no_bool_metavars():
    for command in ("capture", "gate", "show", "predict", "advise"):
        text = run(command, "--help").stdout
        assert "<bool>" not in text and "╭" not in text and "BOOLEAN" not in text, command
        assert max(len(line) for line in text.splitlines()) <= 100, command


# ---------------------------------------------------------------- stdout and stderr


def test_results_on_stdout_notes_on_stderr(tmp_path):
    shown = run("show", DATA / "baseline", "-f", "json")
    assert shown.exit_code == 0 and shown.stderr == ""
    json.loads(shown.stdout)
    plotted = run("plot", DATA / "baseline", "-o", tmp_path / "p.png")
    assert plotted.exit_code == 0 and plotted.stdout == "" and plotted.stderr.startswith("wrote ")


def test_capture_progress_goes_to_stderr(monkeypatch):
    import bcgprof.measure.runner
    from bcgprof.measure.runner import CaptureOutcome

    def fake_run_capture(opts, on_event=None, **_):
        on_event(
            {
                "event": "begin",
                "model": "m",
                "layers": 2,
                "dtype": "bfloat16",
                "buckets": [4, 2],
                "modes": ["floor"],
                "out": "r",
                "total": 1,
            }
        )
        on_event(
            {
                "event": "bucket",
                "mode": "floor",
                "bucket": 4,
                "pool_bytes": 1 << 20,
                "status": "oom",
                "detail": "out of memory [at 4]",
            }
        )
        on_event({"event": "warning", "mode": "floor", "message": "traces-floor.csv.gz: too big"})
        return CaptureOutcome(out=None, status="complete", exit_code=0, reporter=False)

    monkeypatch.setattr(bcgprof.measure.runner, "run_capture", fake_run_capture)
    result = run("capture")
    assert result.exit_code == 0
    assert result.stdout == ""
    assert (
        "bcgprof capture: m (2 layers" in result.stderr
        and "floor bucket 4: oom: out of memory [at 4]" in result.stderr
        and "floor: traces-floor.csv.gz: too big" in result.stderr
    )


def test_gate_has_strict_json_with_verdict_and_tolerances():
    result = run(
        "gate",
        "--baseline",
        DATA / "baseline",
        "--current",
        DATA / "grown",
        "-f",
        "json",
        "--rel-tol",
        "2%",
    )

    def no_constants(name):
        raise AssertionError(f"non-standard JSON constant {name}")

    data = json.loads(result.stdout, parse_constant=no_constants)
    assert result.exit_code == 1
    assert data["verdict"] == "fail" and data["exit_code"] == 1 and data["regressions"] >= 1
    assert data["tolerance"]["default"]["rel"] == 0.02
    regression = next(c for c in data["checks"] if c["verdict"] == "regression")
    assert (
        isinstance(regression["baseline"], int)
        and regression["delta"] == regression["current"] - regression["baseline"]
    )


def _closed_stdout_run(*args):
    """Run with file descriptor 1 closed, as `bcgprof ... >&-` does."""
    code = (
        "import os, sys; os.close(1); sys.stdout = None; sys.argv = ['bcgprof', *sys.argv[1:]]; "
        "from bcgprof.cli import main; main()"
    )
    return subprocess.run(
        [sys.executable, "-c", code, *map(str, args)],
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
        timeout=120,
    )


def test_a_closed_stdout_never_changes_the_gate_verdict(tmp_path):
    same = tmp_path / "same"
    shutil.copytree(DATA / "baseline", same)
    passing = _closed_stdout_run("gate", "--baseline", DATA / "baseline", "--current", same)
    assert passing.returncode == 0, passing.stderr
    regression = _closed_stdout_run(
        "gate", "--baseline", DATA / "baseline", "--current", DATA / "grown"
    )
    assert regression.returncode == 1, regression.stderr
    for result in (passing, regression):
        assert (
            "Traceback" not in result.stderr
            and "warning: standard output is closed" in result.stderr
        )


def test_a_closed_stdout_is_an_error_for_show_not_an_internal_error():
    result = _closed_stdout_run("show", DATA / "baseline")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "error: standard output is closed; run the command with stdout open (a terminal, a file "
        "or a pipe)"
    ]


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
def test_a_full_stdout(tmp_path):
    with open("/dev/full", "w") as full:
        shown = bcgprof("show", DATA / "baseline", stdout=full)
        regression = bcgprof(
            "gate", "--baseline", DATA / "baseline", "--current", DATA / "grown", stdout=full
        )
        same = tmp_path / "same"
        shutil.copytree(DATA / "baseline", same)
        passing = bcgprof("gate", "--baseline", DATA / "baseline", "--current", same, stdout=full)
    assert shown.returncode == 2 and "No space left on device" in shown.stderr
    assert len(shown.stderr.strip().splitlines()) == 1 and "Traceback" not in shown.stderr
    assert regression.returncode == 1 and "Traceback" not in regression.stderr
    assert passing.returncode == 0 and "warning: cannot write to standard output" in passing.stderr


def test_a_reader_that_stops_reading_is_not_an_error():
    proc = subprocess.Popen(
        [sys.executable, "-m", "bcgprof", "show", str(DATA / "baseline"), "-f", "csv"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=REPO,
    )
    proc.stdout.read(10)
    proc.stdout.close()
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0 and b"Traceback" not in err


# ---------------------------------------------------------------- outputs never land in a report


@pytest.fixture
def report(tmp_path) -> Path:
    copy = tmp_path / "report"
    shutil.copytree(DATA / "baseline", copy)
    return copy


def _contents(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


def test_summary_md_through_a_link_into_a_report_is_refused(report, tmp_path):
    before = _contents(report)
    link = tmp_path / "summary.md"
    link.symlink_to(report / "buckets.csv")
    line = refused(
        run("gate", "--baseline", DATA / "baseline", "--current", report, "--summary-md", link)
    )
    assert "inside a report directory (through the link to" in line
    assert _contents(report) == before


def test_plot_through_a_link_into_a_report_is_refused(report, tmp_path):
    before = _contents(report)
    for target in ("run.json", "cost.png"):
        link = tmp_path / f"link-{target}.png"
        link.symlink_to(report / target)
        line = refused(run("plot", DATA / "baseline", "-o", link))
        assert "inside a report directory" in line
    assert _contents(report) == before


def test_outputs_through_a_link_elsewhere_replace_the_target_atomically(tmp_path):
    target = tmp_path / "real.png"
    target.write_bytes(b"old")
    link = tmp_path / "link.png"
    link.symlink_to(target)
    assert run("plot", DATA / "baseline", "-o", link).exit_code == 0
    assert link.is_symlink() and target.read_bytes()[:4] == b"\x89PNG"
    assert [
        p.name for p in tmp_path.iterdir() if p.name.startswith(".")
    ] == []  # no temporary file left


def test_an_unusable_summary_md_and_a_bad_report_give_one_line_naming_the_summary(tmp_path):
    """--summary-md is checked before any report is read: unusable, it is the one line (README,
    ci-gate.md)."""
    unwritable = tmp_path / "no-such-dir" / "s.md"
    result = run(
        "gate",
        "--baseline",
        DATA / "baseline",
        "--current",
        DATA / "corrupt",
        "--summary-md",
        unwritable,
    )
    line = refused(result)
    assert "--summary-md" in line and "does not exist" in line and "corrupt" not in line


# ---------------------------------------------------------------- strings from files


def test_printable_neutralises_escapes_and_caps_length():
    assert printable("a\x1b]0;owned\x07b\x1b[2J") == "a\ufffd]0;owned\ufffdb\ufffd[2J"
    assert printable("x\u009bq") == "x\ufffdq"  # C1 CSI
    assert printable("line\nnext\ttab") == "line next tab"
    long = printable("m" * 20_000_000, limit=300)
    assert len(long) == 300 and long.endswith("\u2026")


def test_error_lines_quote_files_safely(tmp_path):
    config = tmp_path / "config.json"
    config.write_text(
        json.dumps({"architectures": ["Evil\x1b]0;title\x07ForCausalLM"], "hidden_size": 8})
    )
    line = refused(run("estimate", "--model", config))
    assert "\x1b" not in line and "\x07" not in line


# ------------------------------------------------------------ capture: every check before the GPU's


@pytest.mark.parametrize(
    "args, says",
    [
        (("--modes", "shared-largest", "--order", "smallest-first"), "use --order largest-first"),
        (
            ("--weights", "safetensors"),
            "--weights safetensors needs a checkpoint: gpt-oss-20b is a preset",
        ),
        (("--modes", "shared,sharde"), "unknown mode 'sharde'"),
    ],
)
def test_capture_names_the_real_problem_before_looking_for_a_gpu(args, says):
    line = refused(run("capture", *args))
    assert says in line and "CUDA" not in line


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write anywhere")
def test_capture_refuses_an_unwritable_out(tmp_path):  # pragma: no cover - CI runs as root
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    assert "is not writable" in refused(run("capture", "--out", locked / "r"))


def test_capture_refuses_an_out_under_a_file(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    line = refused(run("capture", "--out", blocker / "r"))
    assert "is a file, not a directory" in line and "CUDA" not in line


def test_safetensors_checkpoint_without_weights(tmp_path):
    checkpoint = tmp_path / "ckpt"
    checkpoint.mkdir()
    shutil.copy(REPO / "configs" / "models" / "Qwen3-8B.json", checkpoint / "config.json")
    line = refused(run("capture", "--model", checkpoint, "--weights", "safetensors"))
    assert "holds no *.safetensors files" in line


# ---------------------------------------------------------------- quiet nonsense, refused


def test_a_budget_needs_a_unit():
    line = refused(run("advise", "--from", DATA / "baseline", "--budget", "2.5"))
    assert "has no unit; write e.g. 2.5GiB" in line


def test_a_size_without_a_unit_is_answered_with_a_size_the_option_takes():
    line = refused(run("advise", "--from", DATA / "baseline", "--budget", "1073741824"))
    assert "has no unit; write e.g. 2.5GiB or 512MiB" in line and "1073741824GiB" not in line
    line = refused(run("advise", "--from", DATA / "baseline", "--budget", "abc"))
    assert "is not a size" in line and "byte count" not in line  # --budget takes no bare byte count


def test_buckets_from_a_layer_directory_names_its_reports():
    line = refused(run("predict", "--from", "reports/gpt-oss-20b-h200-layers", "-b", "512"))
    assert "holds 2 layer reports: name one of them" in line


def test_predict_refuses_an_absurd_layer_count():
    line = refused(run("predict", "--from", DATA / "baseline", "--num-layers", "1000000000"))
    assert "--num-layers" in line and "4096" in line


@pytest.mark.parametrize("layers", ["0", "3"])
def test_predict_refuses_a_depth_below_where_the_pool_settles_as_its_help_says(layers):
    from bcgprof.analysis.predict.layers import STEADY_LAYERS
    from bcgprof.cli.whatif import MIN_PREDICT_LAYERS

    assert MIN_PREDICT_LAYERS == STEADY_LAYERS
    line = refused(run("predict", "--from", DATA / "baseline", "--num-layers", layers))
    assert "--num-layers" in line and f"range {STEADY_LAYERS}<=x<=4096" in line


def test_advise_refuses_the_floor_mode():
    line = refused(
        run("advise", "--from", DATA / "baseline", "--budget", "2GiB", "--mode", "floor")
    )
    assert "'floor' is not one of 'per-bucket', 'shared', 'shared-largest'" in line


def test_only_rank_0_prints_errors_under_torchrun():
    env = {**os.environ, "RANK": "1", "WORLD_SIZE": "4"}
    quiet = bcgprof("show", DATA / "no-such-report", env=env)
    assert quiet.returncode == 2 and quiet.stderr == ""
    loud = bcgprof("show", DATA / "no-such-report", env={**env, "RANK": "0"})
    assert loud.returncode == 2 and loud.stderr.startswith("error: ")


# run ahead of its test (tests/children.py)
CHILDREN = {
    "benchmark": lambda folder: Command(
        [sys.executable, "-m", "bcgprof.measure.benchmark", "--no-sampler-check"],
        cwd=REPO,
        timeout=300,
    )
}


@pytest.mark.prestart("benchmark")
def test_the_benchmark_without_a_gpu_is_one_line(prestarted):
    result, _ = prestarted("benchmark")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and result.stderr.startswith("error: ")
