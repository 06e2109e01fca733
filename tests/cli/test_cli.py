"""The command line through Typer's test runner: exit codes, one-line errors, formats."""

import csv
import dataclasses
import io
import json
import subprocess
import sys

import pytest
import typer
from typer.testing import CliRunner

from bcgprof import __version__
from bcgprof.cli import app
from bcgprof.errors import NoGPUError

from helpers import refused
from unit.test_plain_text import plain_rows

MIB = 1024**2
runner = CliRunner()


def run(*args):
    return runner.invoke(app, [str(a) for a in args])


# ---------------------------------------------------------------- surface


def test_version():
    result = run("--version")
    assert result.exit_code == 0 and result.stdout.strip() == f"bcgprof {__version__}"


def test_python_dash_m_works():
    proc = subprocess.run(
        [sys.executable, "-m", "bcgprof", "--version"], capture_output=True, text=True
    )
    assert proc.returncode == 0 and proc.stdout.strip() == f"bcgprof {__version__}"


def test_the_command_table_names_every_command_of_the_app_in_the_help_order():
    # main() loads only the running command's module from this table: a command missing from it
    # would still work (the table falls back to loading all) but would pay every module's start-up
    from bcgprof.cli import COMMAND_MODULES

    names = [c.name or c.callback.__name__ for c in app.registered_commands]
    assert names == list(COMMAND_MODULES)
    for name, module in COMMAND_MODULES.items():
        registered = next(
            c for c in app.registered_commands if (c.name or c.callback.__name__) == name
        )
        assert registered.callback.__module__ == f"bcgprof.cli.{module}"


_LOADED = (
    "import sys; from bcgprof.cli import main; sys.argv = ['bcgprof', *sys.argv[1:]]\n"
    "try: main()\nexcept SystemExit: pass\n"
    "print(sorted(m for m in sys.modules if m.startswith('bcgprof.cli.')), file=sys.stderr)"
)


@pytest.mark.parametrize(
    "argv, loaded",
    [
        (
            ["--debug", "estimate", "-f", "json"],
            [
                "bcgprof.cli.common",
                "bcgprof.cli.output",
                "bcgprof.cli.params",
                "bcgprof.cli.root",
                "bcgprof.cli.whatif",
            ],
        ),
        (
            ["--help"],
            [
                "bcgprof.cli.audit",
                "bcgprof.cli.capture",
                "bcgprof.cli.common",
                "bcgprof.cli.gate",
                "bcgprof.cli.output",
                "bcgprof.cli.params",
                "bcgprof.cli.phase_options",  # capture's --phase list
                "bcgprof.cli.record",
                "bcgprof.cli.reports",
                "bcgprof.cli.root",
                "bcgprof.cli.whatif",
            ],
        ),
    ],
)
def test_a_command_loads_only_its_own_module_and_help_loads_all(argv, loaded):
    proc = subprocess.run([sys.executable, "-c", _LOADED, *argv], capture_output=True, text=True)
    assert proc.stderr.strip().splitlines()[-1] == repr(loaded)


def test_a_mistyped_command_is_still_matched_against_every_command():
    proc = subprocess.run([sys.executable, "-c", _LOADED, "advize"], capture_output=True, text=True)
    assert "did you mean 'advise'" in proc.stderr


def test_every_option_of_every_command_is_described():
    root = typer.main.get_command(app)
    assert set(root.commands) == {
        "capture",
        "record",
        "show",
        "compare",
        "gate",
        "plot",
        "estimate",
        "explain",
        "predict",
        "advise",
        "audit",
    }
    for name, command in root.commands.items():
        assert command.help, name
        for param in command.params:
            if param.param_type_name == "option":
                assert param.help and len(param.help) > 10, (name, param.name)
        result = run(name, "--help")
        assert result.exit_code == 0 and "Usage: bcgprof " + name in result.stdout


def test_capture_options_are_exactly_the_capture_option_fields():
    from bcgprof.options import CaptureOptions

    command = typer.main.get_command(app).commands["capture"]
    options = {p.name for p in command.params if p.param_type_name == "option"}
    # --phase with several phases fills phases, --buckets then phase_buckets
    derived = {"command", "phases", "phase_buckets"}
    assert options == {f.name for f in dataclasses.fields(CaptureOptions)} - derived


def test_unknown_option_is_a_usage_error():
    result = run("show", "--colour", "red")
    assert result.exit_code == 2


def test_the_command_list_shows_every_summary_whole_at_100_columns():
    result = runner.invoke(app, ["--help"], terminal_width=100)
    assert result.exit_code == 0
    description, commands = result.stdout.split("Commands:")
    root = typer.main.get_command(app)
    for name, command in root.commands.items():
        first = command.help.split("\n\n")[0].strip()
        assert len(first) <= 75, (name, first)  # whole in the list down to about 90 columns
        assert f"  {name}  " in commands and first in " ".join(commands.split()), name
        assert name in description, f"the app's description does not name {name}"
    assert "..." not in commands


def test_help_placeholders_name_what_to_give_not_python_types():
    for name in typer.main.get_command(app).commands:
        out = run(name, "--help").stdout
        assert "list[" not in out and "List[" not in out, name
    assert "--from REPORT " in run("predict", "--help").stdout
    assert "--tol METRIC=REL:ABS " in run("gate", "--help").stdout


def test_capture_help_lists_the_tuning_options_under_their_own_heading_after_the_others():
    out = run("capture", "--help").stdout
    assert "\nOptions:\n" in out and "\nTuning options:\n" in out
    options, tuning = out.split("\nTuning options:\n")
    tuned = (
        "--warmup-repeat",
        "--break-repeat",
        "--warmup-output",
        "--address-layout",
        "--in-process",
        "--sample-interval-ms",
    )
    for name in tuned:
        assert name in tuning and f"  {name} " not in options, name
    for name in (
        "--model",
        "--buckets",
        "--modes",
        "--out",
        "--tp",
    ):  # what a user needs stays first
        assert name in options and name not in tuning, name


def test_a_bad_choice_is_named_with_the_choices_and_no_validator_words(data_dir):
    line = refused(run("show", data_dir / "baseline", "-f", "xml"))
    assert line == (
        "error: invalid value for '--format' / '-f': 'xml' is not one of 'table', 'markdown', "
        "'json', "
        "'csv'; see 'bcgprof show --help'"
    )


# ---------------------------------------------------------------- show


def test_show_table(data_dir):
    result = run("show", data_dir / "baseline")
    assert result.exit_code == 0, result.stderr
    out = result.stdout
    for text in (
        "per-bucket (capture order)",
        "shared (capture order)",
        "floor (capture order)",
        "summary",
        "24.00 MiB",
        "7.64%",
        "1.121x",
        "the shared buffer saves 24.00 MiB (7.64%)",
        "on this bucket list shared is cheapest",
    ):
        assert text in out, text


def test_show_markdown(data_dir):
    out = run("show", data_dir / "baseline", "--format", "markdown").stdout
    assert "### summary (savings and floor ratios on device used)" in out
    assert "| shared | 5 | 0 | 15 | 252.0 MiB |" in out


def test_show_json_keeps_integers(data_dir):
    data = json.loads(run("show", data_dir / "baseline", "-f", "json").stdout)
    assert data["run"]["model"] == "gpt-oss-20b"
    shared = next(s for s in data["summary"] if s["mode"] == "shared")
    assert shared["saved_vs_per_bucket_bytes"] == 24 * MIB
    assert len(data["buckets"]) == 11 and data["buckets"][0]["pool_bytes"] == 276 * MIB


def test_show_csv(data_dir):
    out = run("show", data_dir / "baseline", "-f", "csv").stdout
    blocks = out.split("\n\n")
    assert [b.splitlines()[0] for b in blocks] == ["# buckets", "# summary"]
    bucket_rows = list(csv.DictReader(io.StringIO(blocks[0].split("\n", 1)[1])))
    assert len(bucket_rows) == 11
    assert bucket_rows[0]["mode"] == "per-bucket" and bucket_rows[0]["pool_delta_bytes"] == str(
        276 * MIB
    )
    summary_only = run("show", data_dir / "baseline", "-f", "csv", "--section", "summary").stdout
    rows = list(csv.DictReader(io.StringIO(summary_only)))
    assert [r["mode"] for r in rows] == ["per-bucket", "shared", "floor"]
    assert rows[2]["device_used_bytes"] == str(280 * MIB)


def test_show_partial_report_says_so(data_dir):
    result = run("show", data_dir / "partial")
    assert result.exit_code == 0
    assert "this report is interrupted" in result.stdout
    assert "not like for like: shared has 2 buckets ok, per-bucket 5" in result.stdout


def test_show_failed_bucket_and_tensor_parallel_ranks(write_report, rows):
    tp_rows = []
    for rank in (0, 1):
        grouped = rows()
        for r in grouped.all():
            r.rank = rank
        tp_rows += grouped.all()
    tp_rows[-2].status, tp_rows[-2].detail = "oom", "CUDA out of memory. Tried to allocate 2.00 GiB"
    path = write_report("tp", tp_rows, tp=2)
    out = run("show", path).stdout
    assert "shared rank 1 (capture order)" in out
    assert "bucket 256: oom: CUDA out of memory. Tried to allocate 2.00 GiB" in out
    assert "worst rank: on this bucket list shared is cheapest" in out
    summary = json.loads(run("show", path, "-f", "json", "--section", "summary").stdout)["summary"]
    assert [s["rank"] for s in summary if s["mode"] == "shared"] == ["0", "1", "max", "sum"]


@pytest.mark.parametrize(
    "name, message",
    [
        (
            "nowhere",
            "does not exist or is not a directory; give a report directory written by bcgprof "
            "capture",
        ),
        ("corrupt", "is corrupt"),
        ("wrong-schema", "schema version 99"),
    ],
)
def test_show_bad_reports(data_dir, name, message):
    assert message in refused(run("show", data_dir / name))


# ---------------------------------------------------------------- compare


def test_compare_table_lists_growth_first(data_dir):
    result = run("compare", data_dir / "baseline", data_dir / "grown")
    assert result.exit_code == 0
    out = result.stdout
    assert "per-mode totals" in out and "+40.00 MiB" in out
    bucket_table = out[out.index("bucket deltas") :]
    first_row = next(row for row in plain_rows(bucket_table) if "per-bucket" in row)
    assert "1024" in first_row and "+40.00 MiB" in first_row


def test_compare_json_and_csv(data_dir):
    data = json.loads(
        run("compare", data_dir / "baseline", data_dir / "partial", "-f", "json").stdout
    )
    assert data["totals"][2] == {"mode": "floor", "rank": "0", "presence": "old-only"}
    assert data["totals"][0]["pool_bytes"]["delta"] == 0
    assert {(b["mode"], b["bucket"]) for b in data["buckets"] if b["presence"] == "old-only"} == {
        ("shared", 1024),
        ("shared", 512),
        ("shared", 256),
        ("floor", 4096),
    }
    out = run(
        "compare", data_dir / "baseline", data_dir / "grown", "-f", "csv", "--section", "buckets"
    ).stdout
    rows = list(csv.DictReader(io.StringIO(out)))
    assert (rows[0]["mode"], rows[0]["bucket"], rows[0]["device_used_change_bytes"]) == (
        "per-bucket",
        "1024",
        str(40 * MIB),
    )


def test_compare_markdown_names_the_differences(data_dir):
    out = run("compare", data_dir / "baseline", data_dir / "other-model", "-f", "markdown").stdout
    assert "the reports differ: model differs: gpt-oss-20b" in out
    assert "### bucket deltas, largest device-used growth first" in out


# ---------------------------------------------------------------- gate


def gate(data_dir, baseline, current, *extra):
    return run("gate", "--baseline", data_dir / baseline, "--current", data_dir / current, *extra)


def test_gate_pass(data_dir, report_copy):
    result = gate(data_dir, "baseline", report_copy("baseline"))
    assert result.exit_code == 0, result.stderr
    assert "PASS: no memory regression" in result.stdout


def test_gate_regression_prints_the_offending_rows(data_dir):
    result = gate(data_dir, "baseline", "grown", "--each-bucket")
    assert result.exit_code == 1
    out = result.stdout
    assert "FAIL: 4 regressions" in out
    assert "per-bucket bucket 1024" in out and "grew 40.00 MiB" in out


def test_gate_each_bucket_says_how_many_bucket_figures_it_checked(data_dir):
    checks = json.loads(gate(data_dir, "baseline", "grown", "--each-bucket", "-f", "json").stdout)[
        "checks"
    ]
    judged = [c for c in checks if c["bucket"] is not None and c["metric"] != "status"]
    failed = sum(c["verdict"] == "regression" for c in judged)
    assert judged and 0 < failed < len(judged)
    out = " ".join(gate(data_dir, "baseline", "grown", "--each-bucket").stdout.split())
    assert f"{len(judged)} checked, {len(judged) - failed} passed, {failed} failed" in out
    assert "bucket figures (pool" not in gate(data_dir, "baseline", "grown").stdout


def test_gate_improvement_passes(data_dir):
    result = gate(data_dir, "grown", "baseline")
    assert result.exit_code == 0
    assert "(2 improvements)" in result.stdout


@pytest.mark.parametrize(
    "current, message",
    [
        ("corrupt", "is corrupt"),
        ("wrong-schema", "schema version 99"),
        ("other-model", "not comparable: model differs"),
        ("nowhere", "does not exist"),
    ],
)
def test_gate_unusable_input_exits_2(data_dir, current, message):
    assert message in refused(gate(data_dir, "baseline", current))


def test_gate_allow_mismatch(data_dir):
    result = gate(data_dir, "baseline", "other-model", "--allow-mismatch")
    assert result.exit_code == 0
    assert "allowed mismatch: model differs" in result.stdout


def test_gate_tolerances_from_the_command_line(data_dir):
    # exactly at the threshold
    assert gate(data_dir, "baseline", "grown", "--abs-tol-mib", "40").exit_code == 0
    assert gate(data_dir, "baseline", "grown", "--abs-tol-mib", "39.99").exit_code == 1
    assert gate(data_dir, "baseline", "grown", "--rel-tol", "14%").exit_code == 0
    assert gate(data_dir, "baseline", "grown", "--rel-tol", "0.13").exit_code == 1
    loose = ("--tol", "pool_bytes=20%", "--tol", "device_used_bytes=:64MiB")
    assert gate(data_dir, "baseline", "grown", *loose).exit_code == 0
    assert gate(data_dir, "baseline", "grown", *loose, "--each-bucket").exit_code == 1
    assert (
        gate(
            data_dir,
            "baseline",
            "grown",
            *loose,
            "--each-bucket",
            "--tol",
            "pool_delta_bytes=:40MiB",
            "--tol",
            "device_used_delta_bytes=:40MiB",
        ).exit_code
        == 0
    )


@pytest.mark.parametrize(
    "args, message",
    [
        (("--tol", "pool=1%"), "unknown metric 'pool'"),
        (("--tol", "pool_bytes=1%:8 parsecs"), "is not a size"),
        (("--rel-tol", "lots"), "--rel-tol 'lots' is not a number"),
    ],
)
def test_gate_bad_tolerances(data_dir, args, message):
    assert message in refused(gate(data_dir, "baseline", "baseline", *args))


def test_gate_summary_md_is_appended(data_dir, tmp_path, report_copy):
    summary = tmp_path / "summary.md"
    summary.write_text("# CI\n\n")
    assert gate(data_dir, "baseline", "grown", "--summary-md", summary).exit_code == 1
    assert (
        gate(data_dir, "baseline", report_copy("baseline"), "--summary-md", summary).exit_code == 0
    )
    assert gate(data_dir, "baseline", "corrupt", "--summary-md", summary).exit_code == 2
    text = summary.read_text()
    assert text.startswith("# CI\n\n## bcgprof gate: FAIL")
    assert "| per-bucket total | pool_bytes | 300.0 MiB | 340.0 MiB | +40.00 MiB |" in text
    assert (
        text.index("## bcgprof gate: FAIL")
        < text.index("## bcgprof gate: PASS")
        < text.index("## bcgprof gate: UNUSABLE INPUT")
    )


# ---------------------------------------------------------------- plot and estimate


def test_plot_command(data_dir, tmp_path):
    out = tmp_path / "cost.png"
    result = run("plot", data_dir / "baseline", "-o", out)
    assert result.exit_code == 0 and f"wrote {out}" in result.stderr and result.stdout == ""
    assert out.read_bytes()[:4] == b"\x89PNG"


def test_plot_needs_an_output():
    assert run("plot", "somewhere").exit_code == 2


def test_estimate_json_is_integers():
    data = json.loads(
        run("estimate", "--model", "gpt-oss-20b", "--buckets", "4,8,16", "-f", "json").stdout
    )
    assert data["label"] == "analytic, not measured"
    assert [b["output_bytes"] for b in data["buckets"]] == [23040, 46080, 92160]
    assert data["per_bucket_total_bytes"] == 161280 and data["shared_total_bytes"] == 92160


def test_estimate_table_is_labelled_analytic():
    result = run("estimate", "-b", "sglang-prefill", "--max-tokens", "4096")
    assert result.exit_code == 0
    assert "analytic, not measured" in result.stdout
    assert "50 buckets" in result.stdout


def test_estimate_accepts_a_config_path(tmp_path, data_dir):
    from bcgprof.spec import presets_dir

    checkpoint = tmp_path / "ckpt"
    checkpoint.mkdir()
    (checkpoint / "config.json").write_text((presets_dir() / "Qwen3-8B.json").read_text())
    data = json.loads(run("estimate", "-m", checkpoint, "-b", "2", "-f", "json").stdout)
    assert data["hidden_size"] == 4096 and data["per_bucket_total_bytes"] == 2 * 4096 * 2


@pytest.mark.parametrize(
    "args, message",
    [
        (("-m", "no-such-model"), "unknown model 'no-such-model'"),
        (("-b", "4,x"), "entry 'x' is not an integer"),
        (("--dtype", "int3"), "unsupported dtype 'int3'"),
    ],
)
def test_estimate_bad_input(args, message):
    assert message in refused(run("estimate", *args))


# ---------------------------------------------------------------- capture (validation only: no GPU
# here)


@pytest.fixture
def captured(monkeypatch):
    """Replace run_capture; the list receives the CaptureOptions it was called with."""
    import bcgprof.measure.runner

    class Calls(list):
        code = 0  # what the fake run_capture returns

    calls = Calls()

    def fake_run_capture(opts, on_event=None, **_):
        from bcgprof.measure.runner import CaptureOutcome

        calls.append(opts)
        return CaptureOutcome(out=None, status="complete", exit_code=calls.code, reporter=False)

    monkeypatch.setattr(bcgprof.measure.runner, "run_capture", fake_run_capture)
    return calls


def test_capture_defaults_reach_run_capture(captured):
    from bcgprof.options import CaptureOptions

    result = run("capture")
    assert result.exit_code == 0, result.stderr
    (opts,) = captured
    assert dataclasses.replace(opts, command="") == CaptureOptions()
    assert opts.command.startswith("bcgprof")


def test_capture_options_reach_run_capture(captured, tmp_path):
    from bcgprof.options import CaptureOptions
    from bcgprof.spec import presets_dir

    checkpoint = tmp_path / "ckpt"
    checkpoint.mkdir()
    (checkpoint / "config.json").write_text((presets_dir() / "Qwen3-8B.json").read_text())
    # only its presence is checked before the GPU
    (checkpoint / "model.safetensors").write_bytes(b"")
    result = run(
        "capture",
        "--model",
        checkpoint,
        "--weights",
        "safetensors",
        "--num-layers",
        "4",
        "--phase",
        "prefill",
        "--buckets",
        "1,2,4",
        "--max-tokens",
        "8192",
        "--max-bs",
        "64",
        "--modes",
        "shared,floor",
        "--warmup",
        "3",
        "--device",
        "cuda:1",
        "--out",
        tmp_path / "r",
        "--verify",
        "all",
        "--in-process",
        "--sample-interval-ms",
        "0.5",
        "--tp",
        "2",
        "--seed",
        "7",
        "--warmup-output",
        "freed",
    )
    assert result.exit_code == 0, result.stderr
    (opts,) = captured
    assert (opts.model, opts.weights, opts.num_layers, opts.phase, opts.buckets) == (
        str(checkpoint),
        "safetensors",
        4,
        "prefill",
        "1,2,4",
    )
    assert (opts.max_tokens, opts.max_bs, opts.modes, opts.warmup, opts.device) == (
        8192,
        64,
        ["shared", "floor"],
        3,
        "cuda:1",
    )
    assert (
        opts.out,
        opts.verify,
        opts.in_process,
        opts.sample_interval_ms,
        opts.tp,
        opts.seed,
    ) == (tmp_path / "r", "all", True, 0.5, 2, 7)
    assert opts.warmup_output == "freed"
    # as a mode's process gets it
    assert CaptureOptions.from_json(opts.to_json()).warmup_output == "freed"
    # tensor-parallel ranks never replay: the forward's collectives
    assert opts.warmup_repeat == "eager"
    # nor repeat breaks: no rank records the allocator's history
    assert opts.break_repeat == "eager"


def test_a_single_gpu_capture_repeats_warm_up_runs_by_their_requests_unless_asked_for_eager_ones(
    captured,
):
    assert run("capture").exit_code == 0
    assert run("capture", "--warmup-repeat", "eager").exit_code == 0
    assert [opts.warmup_repeat for opts in captured] == ["requests", "eager"]
    result = run("capture", "--warmup-repeat", "twice")
    assert result.exit_code == 2 and "--warmup-repeat" in result.stderr


def test_a_single_gpu_capture_repeats_graph_breaks_unless_asked_for_eager_ones_or_a_snapshot(
    captured,
):
    assert run("capture").exit_code == 0
    assert run("capture", "--break-repeat", "eager").exit_code == 0
    # its stacks must name the op, not the repeater
    assert run("capture", "--snapshot").exit_code == 0
    assert [opts.break_repeat for opts in captured] == ["requests", "eager", "eager"]
    from bcgprof.options import CaptureOptions

    # as a mode's process gets it
    assert CaptureOptions.from_json(captured[1].to_json()).break_repeat == "eager"
    result = run("capture", "--break-repeat", "sometimes")
    assert result.exit_code == 2 and "--break-repeat" in result.stderr


def test_a_capture_runs_its_modes_at_fixed_addresses_unless_asked_for_random_ones(captured):
    from bcgprof.options import CaptureOptions

    assert run("capture").exit_code == 0
    assert run("capture", "--address-layout", "random").exit_code == 0
    assert [opts.address_layout for opts in captured] == ["fixed", "random"]
    # as a mode's process gets it
    assert CaptureOptions.from_json(captured[1].to_json()).address_layout == "random"
    result = run("capture", "--address-layout", "wherever")
    assert result.exit_code == 2 and "--address-layout" in result.stderr


def test_capture_exit_code_is_run_captures(captured):
    captured.code = 130
    assert run("capture").exit_code == 130


@pytest.mark.parametrize(
    "args, message",
    [
        (("--buckets", "4,0,8"), "entry '0' must be a positive integer"),
        (("--buckets", "4,4"), "bucket 4 appears twice"),
        (("--max-tokens", "2"), "preset 'sglang-prefill' is empty"),
        (("--modes", "per-bucket,fancy"), "unknown mode 'fancy'"),
        (("--modes", "shared,shared"), "names a mode twice"),
        (("--device", "cpu"), "--device 'cpu' is not a CUDA device"),
        (("--model", "gpt-oss-21b"), "unknown model 'gpt-oss-21b'"),
        (("--warmup-output", "kept"), "--warmup-output"),
    ],
)
def test_capture_rejects_bad_input_before_any_gpu_work(captured, args, message):
    assert message in refused(run("capture", *args))
    assert captured == []


def test_capture_user_errors_from_the_runner_are_one_line(monkeypatch):
    import bcgprof.measure.runner

    def no_gpu(opts, on_event=None, **_):
        raise NoGPUError("no CUDA device found: `bcgprof capture` needs a GPU")

    monkeypatch.setattr(bcgprof.measure.runner, "run_capture", no_gpu)
    assert "no CUDA device found" in refused(run("capture", "--buckets", "4"))


@pytest.mark.parametrize(
    "args",
    [
        ("--verify", "some"),
        ("--phase", "train"),
        ("--weights", "gguf"),
        ("--tp", "0"),
        ("--num-layers", "0"),
    ],
)
def test_capture_choices_and_ranges_are_usage_errors(captured, args):
    assert run("capture", *args).exit_code == 2
    assert captured == []


def test_capture_num_layers_list_runs_one_report_per_count(captured, tmp_path):
    result = run("capture", "--num-layers", "2,4", "--buckets", "16,32", "--out", tmp_path / "l")
    assert result.exit_code == 0, result.stderr
    assert [(o.num_layers, o.out) for o in captured] == [
        (2, tmp_path / "l" / "layers-2"),
        (4, tmp_path / "l" / "layers-4"),
    ]


@pytest.mark.parametrize(
    "value, message",
    [
        ("0", "is not a layer count from 1 to 24"),
        ("2,25", "'25' is not a layer count"),
        ("2,2", "names 2 twice"),
        ("x", "'x' is not a layer count"),
    ],
)
def test_capture_num_layers_bad_lists(captured, value, message):
    assert message in refused(run("capture", "--num-layers", value))
    assert captured == []
