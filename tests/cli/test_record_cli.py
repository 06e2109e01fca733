"""`bcgprof record` end to end on the CPU: a program run under the hook through the engines'
stand-ins (tests/data/standins), its child process and ranks, its report, and how a recording
ends."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bcgprof.report import read_report

from children import Command
from helpers import DATA

STANDINS = DATA / "standins"
PROGRAM = STANDINS / "record_program.py"
MIB = 2**20


def _record_argv(out: Path, args: tuple, program: tuple) -> list[str]:
    return [
        sys.executable,
        "-m",
        "bcgprof",
        "record",
        "--out",
        str(out),
        *args,
        "--",
        sys.executable,
        str(PROGRAM),
        *program,
    ]


def record(
    out: Path, *args: str, program: tuple = (), timeout: float = 120, **popen
) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(STANDINS))
    cmd = _record_argv(out, args, program)
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout, **popen)


def run_record(out: Path, *args: str) -> subprocess.CompletedProcess:
    """``bcgprof record --out OUT ARGS...`` in this environment (the program after ``--`` in
    ARGS), as a user types it."""
    return subprocess.run(
        [sys.executable, "-m", "bcgprof", "record", "--out", str(out), *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def recording(*args: str, program: tuple = ()):
    """A child of CHILDREN: ``record(folder / "r", *args, program=program)``."""
    return lambda folder: Command(
        _record_argv(folder / "r", args, program), env={"PYTHONPATH": str(STANDINS)}
    )


def _a_program_that_never_captures(folder: Path) -> Command:
    # a sitecustomize of the program's own, which the bootstrap must still run
    own = folder / "own"
    own.mkdir()
    (own / "sitecustomize.py").write_text("import os\nos.environ['OWN_SITECUSTOMIZE'] = 'ran'\n")
    program = (
        "import os, sys, threading\n"
        "print('before torch', 'bcgprof.record.hook' in sys.modules, "
        "os.environ.get('OWN_SITECUSTOMIZE'))\n"
        "import torch\n"
        "print('after torch', 'bcgprof.record.hook' in sys.modules, threading.active_count())\n"
    )
    argv = [
        sys.executable,
        "-m",
        "bcgprof",
        "record",
        "--out",
        str(folder / "r"),
        "--",
        sys.executable,
        "-c",
        program,
    ]
    return Command(argv, env={"PYTHONPATH": str(own)})


# The recordings whose tests read only what they left, run ahead of them (tests/children.py).
BUCKET = ("--bucket", "plainlib:capture_size:size")
CHILDREN = {
    "sglang": recording(program=("--child",)),
    "vllm": recording(program=("--engine", "vllm")),
    "bucket": recording(*BUCKET, program=("--engine", "bucket")),
    "between": recording(*BUCKET, program=("--engine", "bucket", "--between", "5")),
    "plain": recording(program=("--engine", "plain")),
    "crash": recording(program=("--crash-after", "2")),
    "never-captures": _a_program_that_never_captures,
    "trace-refused": recording("--trace", "--no-adapters", program=("--engine", "plain")),
    "trace-fails": recording("--trace", *BUCKET, program=("--engine", "bucket")),
}


@pytest.mark.prestart("sglang")
def test_sglang_runners_a_child_process_and_the_engine_line_make_one_report(prestarted):
    proc, folder = prestarted("sglang")
    assert proc.returncode == 0, proc.stderr
    # the hook loaded in the program and its child
    assert "torch.cuda.CUDAGraph patched: True" in proc.stdout
    report = read_report(folder / "r")
    run = report.run
    assert (
        run.source == "record" and run.status == "complete" and run.modes == ["prefill", "decode"]
    )
    rows = {(r.mode, r.rank, r.bucket): r for r in report.buckets}
    assert sorted(rows) == sorted(
        [("decode", 0, b) for b in (1, 2, 4, 8)]
        + [("decode", 1, b) for b in (1, 2, 4, 8)]
        + [("prefill", 0, 16), ("prefill", 0, 32)]
    )
    # two processes, two ranks
    assert len({rows[("decode", 0, 8)].pid, rows[("decode", 1, 8)].pid}) == 2
    assert run.extra["sequences"]["decode"] == [8, 4, 2, 1]  # largest first, as the runner captured
    # the stand-in's figures: S MiB of pool and reserved per capture, 2 MiB of executable on top
    decode8, prefill32 = rows[("decode", 0, 8)], rows[("prefill", 0, 32)]
    assert (decode8.pool_delta_bytes, decode8.device_used_delta_bytes, decode8.segments) == (
        8 * MIB,
        10 * MIB,
        1,
    )
    assert (prefill32.pool_delta_bytes, prefill32.device_used_delta_bytes, prefill32.segments) == (
        64 * MIB,
        68 * MIB,
        2,
    )  # the prefill runner's two segments of one size: one row
    logged = run.extra["recorded"]["engine_log"]
    assert logged and logged[0]["engine"] == "sglang" and logged[0]["bytes"] == round(0.5 * 2**30)
    assert "sglang" in run.extra["recorded"]["engines"]
    assert "sglang decode logged mem usage 0.50 GiB" in proc.stderr
    assert "decode" in proc.stdout  # the summary table, on stdout


@pytest.mark.prestart("vllm")
def test_vllm_estimate_captures_are_their_own_group(prestarted):
    """The estimate's buckets are a group of their own; a graph it captures outside its bucket
    function is numbered apart (a row of unbucketed), never merged into its bucket 1; the
    encoder's graphs are a row per token budget, its two paths' captures summed."""
    proc, folder = prestarted("vllm")
    assert proc.returncode == 0, proc.stderr
    report = read_report(folder / "r")
    assert report.run.modes == ["estimate", "unbucketed", "full", "encoder"]
    rows = {(r.mode, r.bucket): r for r in report.buckets}
    assert [r.bucket for r in report.buckets if r.mode == "estimate"] == [1, 2]
    assert rows["estimate", 1].segments == 1 and rows["estimate", 1].pool_delta_bytes == MIB
    assert rows["unbucketed", 1].segments == 1
    assert [r.bucket for r in report.buckets if r.mode == "full"] == [8, 4, 2, 1]
    # budget 256: two captures of 256 // 64 = 4 MiB each
    assert [r.bucket for r in report.buckets if r.mode == "encoder"] == [256, 128]
    assert rows["encoder", 256].segments == 2 and rows["encoder", 256].pool_delta_bytes == 8 * MIB
    logged = report.run.extra["recorded"]["engine_log"]
    assert [(e["engine"], e["what"]) for e in logged] == [("vllm", "estimate"), ("vllm", "took")]
    assert any("rows of unbucketed" in n for n in report.run.extra["recorded"]["notes"])


@pytest.mark.prestart("bucket", "plain")
def test_a_bucket_option_groups_a_programs_own_function_and_without_one_each_graph_is_a_row(
    prestarted,
):
    proc, folder = prestarted("bucket")
    assert proc.returncode == 0, proc.stderr
    assert [(r.mode, r.bucket) for r in read_report(folder / "r").buckets] == [
        ("graphs", 8),
        ("graphs", 4),
        ("graphs", 2),
    ]
    proc, folder = prestarted("plain")
    assert proc.returncode == 0, proc.stderr
    rows = read_report(folder / "r").buckets
    assert [(r.bucket, r.device_used_delta_bytes) for r in rows] == [
        (1, 10 * MIB),
        (2, 6 * MIB),
        (3, 4 * MIB),
    ]


@pytest.mark.prestart("between")
def test_what_the_program_took_between_its_buckets_is_reported_apart_from_the_rows(prestarted):
    proc, folder = prestarted("between")
    assert proc.returncode == 0, proc.stderr
    report = read_report(folder / "r")
    (span,) = report.run.extra["recorded"]["between_buckets"]
    # 5 MiB after each of the first two buckets; what follows the last is after the span
    assert span["between_bytes"] == 10 * MIB and span["buckets"] == 3
    assert span["in_rows_bytes"] == sum(r.device_used_delta_bytes for r in report.buckets)
    assert span["span_bytes"] == span["in_rows_bytes"] + span["between_bytes"]
    assert "+10.00 MiB between them" in proc.stderr


@pytest.mark.prestart("crash")
def test_a_crashed_program_leaves_a_valid_partial_report_and_its_exit_code(prestarted):
    proc, folder = prestarted("crash")
    assert proc.returncode == 1
    report = read_report(folder / "r")
    assert report.run.status == "partial" and "exited with code 1" in report.run.message
    # the prefill runner captures first (as SGLang's), two segments a size: the third capture fails
    assert [(r.bucket, r.status) for r in report.buckets] == [(32, "ok"), (16, "error")]
    assert "stand-in failure" in report.buckets[-1].detail


def _ignoring_sigint() -> None:
    """bcgprof started as a script starts a background job: with SIGINT ignored."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def test_stop_after_capture_ends_a_server_once_its_capture_phase_is_over(tmp_path):
    start = time.monotonic()
    # bcgprof itself ignores SIGINT here, yet the program it starts does not: the stop's first
    # signal, SIGINT, ends it (a KeyboardInterrupt in its sleep), not SIGTERM after a grace
    proc = record(
        tmp_path / "r",
        "--stop-after-capture",
        program=("--serve",),
        timeout=60,
        preexec_fn=_ignoring_sigint,
    )
    assert proc.returncode == 0, proc.stderr
    assert time.monotonic() - start < 40  # the program sleeps 300 s after its capture
    assert read_report(tmp_path / "r").run.status == "complete"
    assert "capture phase over" in proc.stderr
    assert "KeyboardInterrupt" in proc.stderr


def test_stop_after_capture_waits_for_the_server_so_a_draft_models_graphs_are_kept(tmp_path):
    """SGLang's draft worker captures after the target's phase has ended (its draft model loads in
    between: --gap): the recording ends at the line that says the server serves, with the target's
    prefill, its verify graphs and the draft's graphs, not at the target's phase end."""
    start = time.monotonic()
    proc = record(
        tmp_path / "r",
        "--stop-after-capture",
        "--idle",
        "60",
        program=("--engine", "sglang-spec", "--gap", "2", "--serve"),
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert time.monotonic() - start < 40  # the server line, not --idle, ended it
    assert "capture phase over (sglang serves)" in proc.stderr
    report = read_report(tmp_path / "r")
    assert report.run.modes == ["prefill", "verify", "draft"]
    rows = [(r.mode, r.bucket) for r in report.buckets]
    assert [b for g, b in rows if g == "draft"] == [64, 2, 1]  # the draft's prefill, then EAGLE's
    assert [b for g, b in rows if g == "verify"] == [8, 4, 2, 1]


def test_vllm_v2_buckets_are_its_descriptors_and_its_estimate_does_not_end_the_capture(tmp_path):
    """vLLM's model runner V2 captures every size in one loop (a bucket per descriptor) and its
    estimate runs the whole capture_model: the recording goes on to the real capture and the
    speculator's graphs, and ends when the server serves."""
    proc = record(
        tmp_path / "r",
        "--stop-after-capture",
        "--idle",
        "60",
        program=("--engine", "vllm-v2", "--gap", "2", "--serve"),
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert "capture phase over (vllm serves)" in proc.stderr
    report = read_report(tmp_path / "r")
    assert report.run.modes == ["estimate", "piecewise", "full", "draft"]
    by_group: dict[str, list[int]] = {}
    for r in report.buckets:
        by_group.setdefault(r.mode, []).append(r.bucket)
    assert by_group == {
        "estimate": [64, 8, 4, 2, 1],
        "piecewise": [64],
        "full": [8, 4, 2, 1],
        "draft": [4, 2],
    }
    assert all(r.segments == 1 for r in report.buckets)  # the warm-ups captured nothing
    assert report.run.extra["recorded"]["engine_log"][0]["engine"] == "vllm"


def test_stop_after_capture_ends_a_server_that_captured_nothing_once_it_serves(tmp_path):
    """Engines capture before they serve: a server with its CUDA graphs disabled is over when it
    says it serves, with an empty partial report, rather than recorded until Ctrl-C."""
    start = time.monotonic()
    proc = record(
        tmp_path / "r",
        "--stop-after-capture",
        program=("--engine", "sglang-off", "--serve"),
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert time.monotonic() - start < 40  # the program sleeps 300 s once it serves
    assert "capture phase over (sglang serves)" in proc.stderr
    run = read_report(tmp_path / "r").run
    assert run.status == "partial" and run.message == "no graph was captured"


@pytest.mark.parametrize(
    "spec, warning",
    [
        ("plainlib:capture_sizes:size", "no call of it enclosed a capture, so the 3 graph(s)"),
        ("plainlib:capture_size:bs", "3 call(s) of --bucket's function gave no positive int (at"),
    ],
)
def test_a_bucket_option_that_groups_nothing_is_warned_of(tmp_path, spec, warning):
    """A misspelt function (its graphs a row each) or size argument (rows numbered): the rows are
    valid but not what was asked, so stderr and run.json say why."""
    proc = record(tmp_path / "r", "--bucket", spec, program=("--engine", "bucket"), timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert f"warning: {warning}" in proc.stderr or f"warning: --bucket {spec}: {warning}" in (
        proc.stderr
    )
    report = read_report(tmp_path / "r")
    assert [r.bucket for r in report.buckets] == [1, 2, 3]  # numbered, not sized
    assert any(warning in note for note in report.run.extra["recorded"]["notes"])


def test_a_bucket_option_that_groups_every_capture_is_not_warned_of(tmp_path):
    proc = record(tmp_path / "r", *BUCKET, program=("--engine", "bucket"), timeout=60)
    assert proc.returncode == 0 and "warning" not in proc.stderr, proc.stderr
    assert [r.bucket for r in read_report(tmp_path / "r").buckets] == [8, 4, 2]


def test_stop_after_capture_ends_a_program_no_adapter_knows_after_idle_seconds(tmp_path):
    proc = record(
        tmp_path / "r",
        "--stop-after-capture",
        "--idle",
        "1",
        *BUCKET,
        program=("--engine", "bucket", "--serve"),
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert "capture phase over (1 s with no capture)" in proc.stderr
    assert [r.bucket for r in read_report(tmp_path / "r").buckets] == [8, 4, 2]


def _interruptible() -> None:
    """SIGINT as a terminal's Ctrl-C delivers it, whatever this test process left its children:
    a child inherits an ignored SIGINT and a blocked signal mask (seen once in a whole-suite run,
    where even the recorded program then needed SIGTERM)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGINT])


def test_ctrl_c_leaves_an_interrupted_valid_report(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(STANDINS))
    cmd = [
        sys.executable,
        "-m",
        "bcgprof",
        "record",
        "--out",
        str(tmp_path / "r"),
        "--",
        sys.executable,
        str(PROGRAM),
        "--serve",
    ]
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, preexec_fn=_interruptible
    )
    deadline = time.monotonic() + 240  # a loaded machine starts torch slowly
    while time.monotonic() < deadline:
        time.sleep(0.5)
        try:
            if len(read_report(tmp_path / "r").buckets) == 6:
                break
        except Exception:
            continue
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=60)
    report = read_report(tmp_path / "r")
    assert report.run.status == "interrupted" and len(report.buckets) == 6


@pytest.mark.parametrize(
    "args, expect",
    [
        ([], "missing argument '-- COMMAND"),
        (["--bucket", "nonsense", "--", "python", "-c", "pass"], "MODULE:QUALNAME:ARG"),
        (["--", "/nonexistent/program"], "cannot start"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path, args, expect):
    proc = run_record(tmp_path / "r", *args)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and expect in proc.stderr
    assert not (tmp_path / "r").exists()  # nothing ran, so no report claims to be running


@pytest.mark.parametrize("given_empty", [False, True])
def test_a_program_that_cannot_start_leaves_out_as_it_was(tmp_path, given_empty):
    out = tmp_path / "r"
    if given_empty:
        out.mkdir()
    proc = run_record(out, "--", str(tmp_path / "no"))
    assert proc.returncode == 2 and "cannot start" in proc.stderr
    assert (out.is_dir() and not any(out.iterdir())) if given_empty else not out.exists()


def test_a_python_started_with_minus_i_is_warned_of_and_its_empty_report_says_why(tmp_path):
    program = [sys.executable, "-I", "-c", "import torch"]  # the hook would load with torch
    proc = run_record(tmp_path / "r", "--", *program)
    assert proc.returncode == 0, proc.stderr
    assert "warning: -I keeps Python from loading the hook" in proc.stderr
    run = read_report(tmp_path / "r").run
    assert run.status == "partial" and "python -I did not load the hook" in run.message


def test_a_launcher_that_resets_pythonpath_is_told_apart_from_a_program_that_captured_nothing(
    tmp_path,
):
    """A shell script that sets PYTHONPATH afresh hides the hook from every Python it starts, and
    record cannot see the flag or the variable in the command: the report says no process loaded
    the hook, not only that nothing was captured."""
    script = tmp_path / "serve.sh"
    script.write_text(f'PYTHONPATH={tmp_path} exec "{sys.executable}" -c "import torch"\n')
    proc = run_record(tmp_path / "r", "--", "sh", str(script))
    assert proc.returncode == 0, proc.stderr
    assert "warning: no Python process of the program loaded the hook" in proc.stderr
    run = read_report(tmp_path / "r").run
    assert run.status == "partial"
    assert run.message.startswith("no graph was captured: no Python process of the program loaded")


def test_a_parent_whose_torch_child_is_started_without_the_hook_is_told_apart(tmp_path):
    """The parent loads the hook but never imports torch; the child that does is started with
    PYTHONPATH reset (as a launcher of engine workers may do): the report says no process with the
    hook imported torch, not only that nothing was captured."""
    child = [sys.executable, "-c", "import torch"]
    parent = (
        "import os, subprocess\n"
        f"env = dict(os.environ, PYTHONPATH={str(tmp_path)!r})\n"
        f"subprocess.run({child!r}, env=env, check=True)\n"
    )
    proc = run_record(tmp_path / "r", "--", sys.executable, "-c", parent)
    assert proc.returncode == 0, proc.stderr
    assert "warning: no process that loaded the hook imported torch" in proc.stderr
    assert "no Python process of the program loaded the hook" not in proc.stderr
    run = read_report(tmp_path / "r").run
    assert run.status == "partial"
    assert run.message.startswith("no graph was captured: no process that loaded the hook imported")


def test_an_out_folder_that_cannot_be_created_is_one_line(tmp_path):
    (tmp_path / "afile").write_text("")
    out, program = tmp_path / "afile" / "r", [sys.executable, "-c", "1"]
    proc = run_record(out, "--", *program)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert "cannot be created" in proc.stderr and "Traceback" not in proc.stderr


def test_an_out_folder_that_is_not_empty_is_refused_before_the_program_runs(tmp_path):
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "keep.txt").write_text("mine")
    marker = tmp_path / "ran"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "bcgprof",
            "record",
            "--out",
            str(tmp_path / "r"),
            "--",
            sys.executable,
            "-c",
            f"open({str(marker)!r}, 'w')",
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2 and "not an empty folder" in proc.stderr and not marker.exists()


@pytest.mark.prestart("never-captures")
def test_the_hook_loads_with_torch_and_starts_nothing_in_a_process_that_never_captures(prestarted):
    proc, folder = prestarted("never-captures")  # with a sitecustomize.py of its own
    assert proc.returncode == 0, proc.stderr
    assert "before torch False ran" in proc.stdout
    # patched, yet no thread of the hook's until a capture
    assert "after torch True 1" in proc.stdout
    run = read_report(folder / "r").run
    # the hook loaded and nothing was captured: no hint of a hook that did not load
    assert run.status == "partial" and run.message == "no graph was captured"
    assert "loaded the hook" not in proc.stderr


@pytest.mark.prestart("trace-refused")
def test_trace_is_documented_and_refused_without_a_bucket_function(prestarted):
    from typer.testing import CliRunner

    from bcgprof.cli import app

    help_text = CliRunner().invoke(app, ["record", "--help"]).output
    assert "--trace" in help_text
    proc, folder = prestarted("trace-refused")
    assert proc.returncode == 2 and "--trace records the groups of bucket functions" in proc.stderr
    assert "Traceback" not in proc.stderr and not (folder / "r").exists()


@pytest.mark.prestart("trace-fails")
def test_a_trace_that_fails_inside_the_program_leaves_no_file_a_note_and_the_rows(prestarted):
    # the stand-in program runs on CPU torch: the allocator's history cannot be read, so the group
    # gets no trace and says why, and the recording goes on as without --trace
    proc, folder = prestarted("trace-fails")
    assert proc.returncode == 0, proc.stderr
    report = read_report(folder / "r")
    traced = report.run.extra["recorded"]["traces"]
    assert list(traced) == ["graphs"] and not traced["graphs"]["written"]
    assert traced["graphs"]["note"].startswith("no trace of graphs: recording it failed")
    assert not list((folder / "r").glob("traces-*"))
    assert [r.bucket for r in report.buckets] == [8, 4, 2]
    assert "bcgprof record: no trace of graphs" in proc.stderr
