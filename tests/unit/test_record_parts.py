"""bcgprof record's torch-free parts: the adapters' size and group rules, the engines' log lines,
and the merge of recorded lines into report rows (checked by reading the report back)."""

from __future__ import annotations

import enum
from types import SimpleNamespace

import pytest

from bcgprof.errors import BcgprofError
from bcgprof.record import adapters as table
from bcgprof.record.logs import GIB, engine_figure
from bcgprof.record.merge import merge
from bcgprof.record.session import RecordOptions, _bucket_notes, _run_info
from bcgprof.report import ReportWriter, read_report
from bcgprof.vocab import RunStatus

from helpers import stand_in_recorder

MIB = 2**20


def test_size_rules_read_arguments_attributes_and_leading_dimensions():
    tensor = SimpleNamespace(shape=(48, 4096))
    assert table.size_of("bs", {"bs": 16}) == 16
    assert table.size_of("desc.num_tokens", {"desc": SimpleNamespace(num_tokens=512)}) == 512
    assert table.size_of("new_inputs[0]", {"new_inputs": [SimpleNamespace(shape=()), tensor]}) == 48
    assert table.size_of("bs", {"bs": 0}) is None
    assert table.size_of("bs", {"bs": 1 << 20}) == 1 << 20
    assert table.size_of("bs", {"bs": (1 << 20) + 1}) is None  # bytes, an address: not a size
    assert table.size_of("bs", {"bs": True}) is None
    assert table.size_of("bs", {}) is None


def test_group_rules_follow_the_runner_class_and_vllm_runtime_mode():
    sglang = next(a for a in table.ADAPTERS if a.name == "capture_one_shape")
    for cls_name, group in (
        ("DecodeCudaGraphRunner", "decode"),
        ("PrefillCudaGraphRunner", "prefill"),
        ("EAGLEDraftCudaGraphRunner", "draft"),
        ("CudaGraphRunner", "decode"),
    ):
        assert table.group_of(sglang, type(cls_name, (), {}), {}) == group
    vllm = next(a for a in table.ADAPTERS if a.name == "_warmup_and_capture")
    mode = enum.Enum("CUDAGraphMode", "NONE PIECEWISE FULL")
    assert table.group_of(vllm, None, {"cudagraph_runtime_mode": mode.FULL}) == "full"
    assert table.group_of(vllm, None, {"cudagraph_runtime_mode": mode.PIECEWISE}) == "piecewise"
    assert table.group_of(vllm, None, {}) == "graphs"


@pytest.mark.parametrize(
    "spec", ["pkg", "pkg:fn", "pkg:fn:", "pkg:fn:size:x", "a b:fn:size", ":fn:size"]
)
def test_a_bucket_option_that_is_not_module_qualname_arg_is_refused(spec):
    with pytest.raises(BcgprofError, match="MODULE:QUALNAME:ARG"):
        table.parse_bucket_option(spec)


def test_a_bucket_option_names_its_module_and_function():
    a = table.parse_bucket_option("my_pkg.runner:Runner.capture_one:desc.num_tokens")
    assert (a.module, a.name, a.size, a.group) == (
        "my_pkg.runner",
        "Runner.capture_one",
        "desc.num_tokens",
        "graphs",
    )
    assert a.covers("my_pkg.runner") and not a.covers("my_pkg.runner2")


@pytest.mark.parametrize(
    "line, engine, figure, phase",
    [
        (
            "[2026] Capture target decode CUDA graph end. elapsed=3.1 s, mem usage=2.68 GB, avail "
            "mem=40.0 GB.",
            "sglang",
            2.68,
            "decode",
        ),
        (
            "Capture cuda graph end. Time elapsed: 12.3 s. mem usage=2.00 GB. avail mem=35.1 GB.",
            "sglang",
            2.0,
            None,
        ),
        (
            "INFO gpu_model_runner.py:3480] Graph capturing finished in 14 secs, took 0.53 GiB",
            "vllm",
            0.53,
            None,
        ),
        ("CUDA graph pool memory: 1.25 GiB (actual), 3.80 GiB (estimated)", "vllm", 1.25, None),
        (
            "INFO [gpu_model_runner.py:6639] Estimated CUDA graph memory: 1.58 GiB total",
            "vllm",
            1.58,
            None,
        ),
        # free memory before minus after: negative where the capture left more free
        (
            "Capture target prefill CUDA graph end. elapsed=1.0 s, mem usage=-0.05 GB, avail mem=9 "
            "GB.",
            "sglang",
            -0.05,
            "prefill",
        ),
        ("Graph capturing finished in 7 secs, took -0.02 GiB", "vllm", -0.02, None),
        ("Graph capturing finished in 7 secs, took .5 GiB", "vllm", 0.5, None),
    ],
)
def test_engine_log_lines_give_their_figure_in_bytes(line, engine, figure, phase):
    found = engine_figure(line)
    assert found is not None and found["engine"] == engine
    assert found["bytes"] == round(figure * GIB)
    assert found.get("phase") == phase


def test_an_engine_lines_prefix_names_its_rank_and_process():
    sglang = engine_figure(
        "[2026-12-08 10:00:00 DP0 TP3] Capture decode CUDA graph end. elapsed=2 s, mem usage=0.5 GB"
    )
    vllm = engine_figure(
        "(Worker_TP1 pid=514) INFO 07-12 [gpu_model_runner.py:6639] Estimated CUDA graph memory: "
        "1.58 GiB total"
    )
    core = engine_figure("(EngineCore pid=75) Graph capturing finished in 7 secs, took 1.29 GiB")
    assert (sglang["tp"], "pid" in sglang) == (3, False)
    assert (vllm["tp"], vllm["pid"]) == (1, 514)
    assert ("tp" in core, core["pid"]) == (False, 75)
    # a TP inside the figure's own text is not the printer's
    plain = engine_figure("Graph capturing finished in 7 secs, took 1.29 GiB (STEP2)")
    assert plain is not None and "tp" not in plain and "pid" not in plain


def test_lines_that_only_look_alike_give_nothing():
    assert engine_figure("Capture cuda graph begin. mem usage unknown") is None
    assert engine_figure("took 3 GiB") is None
    # no number: nothing, never an exception in the thread that copies the program's output
    for figure in ("1.2.3", "-.", ".", "-"):
        assert engine_figure(f"Graph capturing finished in 1 secs, took {figure} GiB") is None
        assert engine_figure(f"Capture cuda graph end. mem usage={figure} GB") is None


def _reading(pool: int, reserved: int, used: int, live: int | None = None) -> dict:
    return {
        "allocated": live if live is not None else pool,
        "reserved": reserved,
        "used": used,
        "process": used,
        "free": 10**12,
        "pools": {"1,1": [pool, pool if live is None else live]},
    }


def _bucket(
    pid: int, group: str, size: int | None, before: dict, after: dict, rank=None, **more
) -> dict:
    return {
        "kind": "bucket",
        "pid": pid,
        "group": group,
        "size": size,
        "rank": rank,
        "status": "ok",
        "detail": "",
        "graphs": 2,
        "nodes": 10,
        "before": before,
        "after": after,
        "graph_pools": ["1,1"],
        "device_peak": None,
        "warmup_ms": 1.0,
        "capture_ms": 2.0,
        **more,
    }


def test_a_row_is_the_difference_of_its_readings_and_its_ledger_sums_to_device_used():
    lines = [
        _bucket(
            7,
            "decode",
            8,
            _reading(0, 0, 100 * MIB),
            _reading(8 * MIB, 10 * MIB, 114 * MIB, 6 * MIB),
        )
    ]
    row = merge(lines).rows[0]
    assert (row.pool_bytes, row.pool_delta_bytes, row.torch_reserved_delta_bytes) == (
        8 * MIB,
        8 * MIB,
        10 * MIB,
    )
    assert row.device_used_delta_bytes == 14 * MIB and row.non_torch_delta_bytes == 4 * MIB
    assert (row.pool_live_delta_bytes, row.pool_free_delta_bytes, row.outside_pool_delta_bytes) == (
        6 * MIB,
        2 * MIB,
        2 * MIB,
    )
    assert (
        row.pool_live_delta_bytes
        + row.pool_free_delta_bytes
        + row.outside_pool_delta_bytes
        + row.non_torch_delta_bytes
        == row.device_used_delta_bytes
    )
    assert (row.segments, row.graph_nodes, row.pid, row.rank) == (2, 10, 7, 0)


def test_calls_of_one_size_in_one_process_make_one_row_and_sizes_keep_their_capture_order():
    a, b, c = (
        _reading(0, 0, 0),
        _reading(4 * MIB, 4 * MIB, 6 * MIB),
        _reading(6 * MIB, 6 * MIB, 10 * MIB),
    )
    merged = merge(
        [
            _bucket(1, "prefill", 64, a, b),
            _bucket(1, "prefill", 64, b, c),
            _bucket(1, "prefill", 32, c, c),
        ]
    )
    assert [(r.bucket, r.order) for r in merged.rows] == [(64, 0), (32, 1)]
    first = merged.rows[0]
    assert (
        first.device_used_delta_bytes == 10 * MIB
        and first.segments == 4
        and first.graph_nodes == 20
    )
    assert first.pool_bytes == 6 * MIB and merged.sequences == {"prefill": [64, 32]}


def test_what_the_device_gained_between_a_processs_buckets_is_kept_apart_from_its_rows():
    """A process's span runs from its first bucket's start to its last's end: its rows' growth plus
    what the device gained between buckets (the program's own work there), per process."""
    merged = merge(
        [
            _bucket(5, "graphs", 64, _reading(0, 0, 100 * MIB), _reading(0, 0, 130 * MIB)),
            # 50 MiB taken between the two buckets: in no row
            _bucket(5, "graphs", 32, _reading(0, 0, 180 * MIB), _reading(0, 0, 190 * MIB)),
            _bucket(5, "graphs", 16, {}, _reading(0, 0, 400 * MIB)),  # CUDA not started before
            _bucket(6, "graphs", 64, _reading(0, 0, 0), _reading(0, 0, 8 * MIB), rank=1),
        ]
    )
    spans = {pid: span.as_json() for pid, span in merged.spans.items()}
    assert spans[5] == {
        "rank": 0,
        "pid": 5,
        "buckets": 2,
        "span_bytes": 90 * MIB,
        "in_rows_bytes": 40 * MIB,
        "between_bytes": 50 * MIB,
        "overlapping_buckets": 0,
    }
    assert (
        sum(r.device_used_delta_bytes for r in merged.rows if r.pid == 5 and r.bucket > 16)
        == (spans[5]["in_rows_bytes"])
    )
    assert spans[6]["rank"] == 1 and spans[6]["between_bytes"] == 0


def test_graphs_without_a_bucket_function_are_numbered_and_processes_take_free_ranks():
    r = _reading(0, 0, 0)
    merged = merge(
        [
            _bucket(11, "graphs", None, r, r),
            _bucket(11, "graphs", None, r, r),
            _bucket(12, "graphs", None, r, r, rank=0),
            _bucket(13, "graphs", None, r, r, rank=0),
        ]
    )
    assert sorted((x.pid, x.rank, x.bucket) for x in merged.rows) == [
        (11, 2, 1),
        (11, 2, 2),
        (12, 0, 1),
        (13, 1, 1),
    ]
    assert merged.tp == 3 and any("said rank 0" in n for n in merged.notes)


def test_graphs_without_a_size_never_merge_into_a_bucket_of_their_number():
    """A --bucket function's rows are sized, a graph outside it is numbered: in one group, graph 2
    and bucket 2 would be one row. Numbered lines of a group with sized rows are rows of
    unbucketed; a group with no sized rows keeps its numbered rows (a program with no bucket
    function)."""
    a, b = _reading(0, 0, 0), _reading(2 * MIB, 2 * MIB, 4 * MIB)
    merged = merge(
        [
            _bucket(5, "graphs", 2, a, b, alone=False, by="--bucket"),
            _bucket(5, "graphs", None, b, b, alone=True),
            _bucket(5, "graphs", None, b, b, alone=True),
            _bucket(5, "compiled", None, b, b, alone=True),
        ]
    )
    assert [(r.mode, r.bucket, r.segments) for r in merged.rows] == [
        ("graphs", 2, 2),
        ("unbucketed", 1, 2),
        ("unbucketed", 2, 2),
        ("compiled", 1, 2),
    ]
    assert merged.rows[0].pool_delta_bytes == 2 * MIB
    notes = _bucket_notes(merged, ["loops:capture_one:size"])
    assert any(n.startswith("2 graph(s) of graphs without a size") for n in notes)


def test_unsized_bucket_calls_are_warned_of_by_the_function_that_made_them():
    """A --bucket's size argument and an adapter's size rule fail for different reasons (a typo
    in ARG; an engine version the table does not know), so each warning names its own remedy."""
    r = _reading(0, 0, 0)
    merged = merge(
        [
            _bucket(11, "compiled", None, r, r, alone=False, by="torch:record_function"),
            _bucket(11, "compiled", None, r, r, alone=False, by="torch:record_function"),
            _bucket(11, "graphs", None, r, r, alone=False, by="--bucket"),
            _bucket(11, "graphs", 8, r, r, alone=False, by="--bucket"),
            _bucket(11, "graphs", None, r, r, alone=True),
        ]
    )
    assert merged.unsized_calls == {"torch:record_function": 2, "--bucket": 1}
    assert merged.graphs_alone == 1 and merged.bucket_calls == 1
    notes = _bucket_notes(merged, ["m:f:bs"])
    assert notes == [
        "1 call(s) of --bucket's function gave no positive int (at most 1048576) from the size "
        "argument: their rows are numbered in capture order; check --bucket's ARG",
        "2 call(s) of adapter torch:record_function gave no positive int (at most 1048576) from "
        "the size argument: their rows are numbered in capture order; its size rule does not fit "
        "this program; "
        "give --bucket MODULE:QUALNAME:ARG",
        # the unsized call and the graph alone share graphs with bucket 8: numbered apart
        "2 graph(s) of graphs without a size (captured outside its bucket function, or by a call "
        "whose size could not be read) are rows of unbucketed, numbered in capture order apart "
        "from its sized rows",
    ]
    assert sorted((r.mode, r.bucket) for r in merged.rows) == [
        ("compiled", 1),
        ("compiled", 2),
        ("graphs", 8),
        ("unbucketed", 1),
        ("unbucketed", 2),
    ]


def test_merged_rows_read_back_as_a_valid_recorded_report(tmp_path):
    a, b = _reading(0, 0, 0), _reading(2 * MIB, 2 * MIB, 4 * MIB)
    merged = merge(
        [
            {
                "kind": "process",
                "pid": 5,
                "rank": None,
                "gpu": "GPU X",
                "torch": "2.11",
                "cuda": "13.0",
                "driver": "580",
                "memory_source": "nvml",
                "hook_path": "class-patch",
                "engines": {},
            },
            _bucket(5, "decode", 4, a, b),
            _bucket(5, "decode", 2, b, b),
            _bucket(6, "decode", 4, a, b, rank=1),
            _bucket(5, "prefill", 512, b, b),
        ]
    )
    options = RecordOptions(command=["python", "serve.py"], out=tmp_path / "r")
    run = _run_info(
        options, merged, [], RunStatus.COMPLETE if merged.complete else RunStatus.PARTIAL, "now"
    )
    ReportWriter(tmp_path / "r", run, merged.rows)
    report = read_report(tmp_path / "r")
    assert report.run.source == "record" and report.run.modes == ["decode", "prefill"]
    assert (
        report.run.status == "partial"
        and "rank 1 captured 1 of decode's 2 buckets" in merged.notes[0]
    )
    assert [(r.mode, r.rank, r.bucket) for r in report.buckets] == [
        ("decode", 0, 4),
        ("decode", 0, 2),
        ("decode", 1, 4),
        ("prefill", 0, 512),
    ]
    assert report.run.gpu_name == "GPU X" and report.run.config_hash.startswith("rec-")


def test_a_rank_that_skipped_a_bucket_keeps_the_rows_before_the_gap(tmp_path):
    r = _reading(0, 0, 0)
    merged = merge(
        [
            _bucket(1, "decode", 8, r, r, rank=0),
            _bucket(1, "decode", 4, r, r, rank=0),
            _bucket(2, "decode", 4, r, r, rank=1),
        ]
    )
    assert [(x.rank, x.bucket) for x in merged.rows] == [(0, 8), (0, 4)]
    assert any("left out" in n for n in merged.notes)


def _recorded(path, group: str):
    a, b = _reading(0, 0, 0), _reading(2 * MIB, 2 * MIB, 4 * MIB)
    merged = merge([_bucket(5, group, 4, a, b), _bucket(5, group, 2, b, b)])
    run = _run_info(
        RecordOptions(command=["python", "x.py"], out=path), merged, [], RunStatus.COMPLETE, "now"
    )
    ReportWriter(path, run, merged.rows)
    return read_report(path)


def test_pairs_compare_a_group_of_one_report_with_a_mode_of_the_other(tmp_path):
    from bcgprof.analysis.compare import BOTH, compare_reports, paired_modes

    old, new = _recorded(tmp_path / "a", "graphs"), _recorded(tmp_path / "b", "decode")
    assert {t.presence for t in compare_reports(old, new).totals} == {"old-only", "new-only"}
    paired = compare_reports(paired_modes(old, new, ["graphs=decode"]), new)
    assert {t.presence for t in paired.totals} == {BOTH}
    assert all(
        c.delta == 0 for t in paired.totals for c in t.changes.values() if c.delta is not None
    )
    for bad, says in (
        ("graphs", "OLD=NEW"),
        ("nope=decode", "modes are graphs"),
        ("graphs=nope", "modes are graphs"),
    ):
        with pytest.raises(BcgprofError, match=says):
            paired_modes(old, new, [bad])


def test_gate_judges_one_recording_against_another(tmp_path):
    from typer.testing import CliRunner

    from bcgprof.cli import app

    def recorded(path, grown: int):
        a, b = _reading(0, 0, 0), _reading(2 * MIB, 2 * MIB, (4 + grown) * MIB)
        merged = merge([_bucket(5, "decode", 4, a, b), _bucket(5, "decode", 2, b, b)])
        run = _run_info(
            RecordOptions(command=["python", "serve.py"], out=path),
            merged,
            [],
            RunStatus.COMPLETE,
            "now",
        )
        ReportWriter(path, run, merged.rows)

    recorded(tmp_path / "v1", 0)
    recorded(tmp_path / "v2", 0)
    recorded(tmp_path / "v3", 64)
    runner = CliRunner()
    args = [
        "gate",
        "--baseline",
        str(tmp_path / "v1"),
        "--each-bucket",
        "--rel-tol",
        "0",
        "--abs-tol-mib",
        "0",
    ]
    same = runner.invoke(app, [*args, "--current", str(tmp_path / "v2")])
    grown = runner.invoke(app, [*args, "--current", str(tmp_path / "v3")])
    assert same.exit_code == 0 and "PASS" in same.stdout
    assert grown.exit_code == 1 and "decode" in grown.stdout


def test_the_line_reader_reads_each_appended_line_once_and_waits_for_a_torn_one(tmp_path):
    from bcgprof.record.rows import LineReader, LineWriter

    writer, reader = LineWriter(tmp_path), LineReader(tmp_path)
    assert reader.read() == []
    writer.write("process", rank=None)
    writer.write("bucket", bucket=8)
    first = reader.read()
    assert [line["kind"] for line in first] == ["process", "bucket"]
    path = next(tmp_path.glob("*.jsonl"))
    with open(path, "ab") as f:  # a line caught half written
        f.write(b'{"kind": "bucket", "pid": 7, "bucket"')
    assert reader.read() == first
    with open(path, "ab") as f:
        f.write(b': 16}\n{"not": "a line of ours"}\nnot json\n')
    lines = reader.read()
    assert [line.get("bucket") for line in lines] == [None, 8, 16]
    (tmp_path / "1.jsonl").write_bytes(b'{"kind": "process", "pid": 1}\n')  # sorts first
    assert reader.read()[0]["pid"] == 1


def test_the_line_reader_reads_no_more_than_its_bounds(tmp_path, monkeypatch):
    """The spool is the program's to fill: a file is read up to MAX_FILE bytes, and no more than
    MAX_FILES files, so the parent's memory and polls stay bounded; what was left is said."""
    from bcgprof.record import rows

    monkeypatch.setattr(rows, "MAX_FILE", 120)
    monkeypatch.setattr(rows, "MAX_FILES", 1)
    line = b'{"kind": "process", "pid": 2, "pad": "xxxxxxxxxx"}\n'  # 51 bytes
    (tmp_path / "2.jsonl").write_bytes(line * 3)
    reader = rows.LineReader(tmp_path)
    assert len(reader.read()) == 2 and reader.unread == {"2.jsonl"}
    with open(tmp_path / "2.jsonl", "ab") as f:
        f.write(line)
    assert len(reader.read()) == 2  # nothing past the bound, however much comes
    (tmp_path / "3.jsonl").write_bytes(line)
    assert len(reader.read()) == 2 and "more files" in reader.unread


def test_the_line_reader_counts_what_it_cannot_parse_and_never_opens_a_pipe(tmp_path):
    import os

    from bcgprof.record import rows

    (tmp_path / "2.jsonl").write_bytes(b'not json\n{"kind": "x"}\n{"kind": "x", "pid": 2}\n')
    os.mkfifo(tmp_path / "3.jsonl")  # a read of it would wait for a writer for ever
    reader = rows.LineReader(tmp_path)
    assert [line["pid"] for line in reader.read()] == [2]
    assert reader.unparsed == 2 and reader.unread == {"3.jsonl"}
    assert reader.read() == [{"kind": "x", "pid": 2}] and reader.unparsed == 2
    (tmp_path / "2.jsonl").write_bytes(b'{"kind": "y", "pid": 2}\n')  # shorter: rewritten
    assert reader.read() == [{"kind": "x", "pid": 2}] and "2.jsonl" in reader.unread


def test_the_output_copy_survives_any_line_and_bounds_a_line_without_newline():
    import io

    from bcgprof.record import session

    long = b"x" * (session.MAX_TEE_LINE + 10)
    text = long + b"\nGraph capturing finished in 1 secs, took 0.5 GiB\n"
    sink, found = io.BytesIO(), []
    session._Tee(io.BytesIO(text), sink, found, []).run()
    assert sink.getvalue() == text and [f["bytes"] for f in found] == [GIB // 2]
    broken = session._Tee(io.BytesIO(b"a\nb\n"), io.BytesIO(), found, [])
    broken._scan = lambda line: 1 / 0  # type: ignore[method-assign]
    broken.run()  # a figure that cannot be read stops nothing


def test_a_buckets_hook_time_counts_what_the_hook_does_at_each_graphs_capture_end(
    tmp_path, monkeypatch
):
    """hook_ms is the whole of the hook's time in a bucket: a slow node count (a first import of the
    CUDA bindings, say) shows in it, where only the readings were counted before."""
    import time

    import bcgprof.bcg.graph as graph_module
    from bcgprof.record.rows import LineReader

    def slow_count(graph):
        time.sleep(0.05)
        return 7

    monkeypatch.setattr(graph_module, "graph_node_count", slow_count)
    _, capture = stand_in_recorder(tmp_path)  # the patched graph class keeps its recorder
    for _ in range(2):  # no bucket function: each graph is a bucket
        capture()
    rows = [line for line in LineReader(tmp_path).read() if line["kind"] == "bucket"]
    assert [row["nodes"] for row in rows] == [7, 7]
    assert all(row["hook_ms"] >= 50 for row in rows)
    assert all(row["capture_ms"] < row["hook_ms"] + 50 for row in rows)


def test_show_sets_the_programs_logged_figures_and_each_ranks_span_beside_the_rows(tmp_path):
    """What the engine logged is its own figure (free memory before and after); show prints it
    beside the recording's own span, and skips run.json entries of the wrong shape."""
    from bcgprof.render.recorded_views import recorded_lines
    from bcgprof.render.views import show_view

    a, b = _reading(0, 0, 0), _reading(2 * MIB, 2 * MIB, 4 * MIB)
    merged = merge([_bucket(5, "decode", 4, a, b), _bucket(5, "decode", 2, b, b)])
    logged = [
        engine_figure("Capture target decode CUDA graph end. elapsed=1 s, mem usage=0.50 GB, x"),
        {"engine": "vllm", "what": "took", "bytes": "lots"},  # hand-edited: skipped
        "not a figure",
    ]
    run = _run_info(
        RecordOptions(command=["python", "serve.py"], out=tmp_path / "r"),
        merged,
        logged,  # type: ignore[arg-type]
        RunStatus.COMPLETE,
        "now",
    )
    ReportWriter(tmp_path / "r", run, merged.rows)
    report = read_report(tmp_path / "r")
    texts = [line.lead + line.text for line in recorded_lines(report)]
    assert texts == [
        "the program logged: sglang decode mem usage 0.50 GiB",
        "rank 0: device used +4.00 MiB from its first bucket's start to its last's end, "
        "+4.00 MiB in its rows",
    ]
    assert [line.text for line in show_view(report, "summary").foot][-2:] == [
        ": sglang decode mem usage 0.50 GiB",
        texts[1],
    ]
    assert recorded_lines(_recorded(tmp_path / "none", "decode"))[0].text.startswith("rank 0")
    report.run.extra["recorded"] = {"engine_log": {"not": "a list"}, "between_buckets": [1]}
    assert recorded_lines(report) == []
    # nine workers' lines: eight shown and the rest counted; every rank's span, up to 8
    span = {"rank": 0, "buckets": 2, "span_bytes": MIB, "in_rows_bytes": MIB}
    report.run.extra["recorded"] = {
        "engine_log": [{"engine": "vllm", "what": "took", "bytes": GIB}] * 9,
        "between_buckets": [dict(span, rank=r) for r in range(8)],
    }
    lines = recorded_lines(report)
    assert lines[0].text.endswith("vllm took 1.00 GiB, and 1 more") and len(lines) == 9
    report.run.extra["recorded"]["engine_log"] = [
        {"engine": "vllm", "what": "took", "bytes": GIB, "tp": r} for r in (0, 1)
    ]
    assert recorded_lines(report)[0].text == ": vllm took 1.00 GiB (TP0), vllm took 1.00 GiB (TP1)"


@pytest.mark.parametrize(
    "change, reason",
    [
        ({"group": "../elsewhere"}, "unknown group '../elsewhere'"),
        ({"size": 10**30}, "is not an int from 1 to 1048576"),
        ({"size": "8"}, "is not an int from 1 to 1048576"),
        ({"status": "fine\nreally"}, "bucket status"),
        ({"after": {"used": "lots"}}, "reading 'after' of the wrong shape"),
        ({"before": {"pools": {"1,1": "x"}}}, "reading 'before' of the wrong shape"),
        ({"before": [1, 2]}, "reading 'before' of the wrong shape"),
        ({"warmup_ms": float("inf")}, "'warmup_ms' is not a finite number"),
        ({"graphs": True}, "'graphs' is not a count"),
        ({"rank": "0"}, "'rank' is not a count"),
        ({"graph_pools": "1,1"}, "'graph_pools'"),
        # shapes a set cannot hold, and figures within a count but beyond a report's columns
        ({"group": ["decode"]}, "unknown group"),
        ({"status": {"ok": 1}}, "bucket status"),
        ({"after": _reading(0, 0, 2**55)}, "reading 'after' of the wrong shape"),
        ({"warmup_ms": 5e11}, "'warmup_ms' is not a finite number of ms"),
        ({"pid": 2**40}, "pid 1099511627776 out of range"),
        ({"detail": ["x"]}, "'detail' is not text"),
    ],
)
def test_a_line_of_another_shape_in_the_spool_is_skipped_with_a_warning(tmp_path, change, reason):
    """The spool lies in the report, where the program can write: a line the hook would never
    write costs its own row and a warning, never the report (exit 2) or a traceback."""
    a, b = _reading(0, 0, 0), _reading(2 * MIB, 2 * MIB, 4 * MIB)
    good = _bucket(5, "decode", 4, a, b)
    merged = merge([good, {**_bucket(5, "decode", 2, b, b), **change}])
    assert [(r.mode, r.bucket) for r in merged.rows] == [("decode", 4)]
    assert merged.malformed == 1 and reason in merged.malformed_first
    notes = _bucket_notes(merged, [])
    assert notes and notes[-1].startswith("1 line(s) in the recording's .record folder")
    assert _written_buckets(tmp_path / "r", merged) == [4]


def _written_buckets(path, merged) -> list[int]:
    """The buckets of the report the merged rows make, written and read back."""
    options = RecordOptions(command=["python", "x.py"], out=path)
    ReportWriter(path, _run_info(options, merged, [], RunStatus.PARTIAL, "now"), merged.rows)
    return [r.bucket for r in read_report(path).buckets]


def test_process_and_trace_lines_of_another_shape_are_skipped():
    r = _reading(0, 0, 0)
    bad = [
        {"kind": "process", "pid": 5, "rank": "zero", "gpu": "X"},
        {"kind": "process", "pid": 5, "argv": {"a": 1}},
        {"kind": "trace", "pid": 5, "group": "../x", "state": "written", "note": ""},
        {"kind": "trace", "pid": 5, "group": ["graphs"], "state": "written", "note": ""},
    ]
    merged = merge([*bad, _bucket(5, "decode", 4, r, r)])
    assert merged.malformed == 4 and merged.processes == [] and merged.traces == {}
    assert merged.rows[0].rank == 0


def test_readings_of_the_right_shape_whose_row_a_report_cannot_hold_are_skipped(tmp_path):
    """Each reading within a count, their sum over two calls of one bucket past a report's byte
    column: the row is skipped as malformed, and the rest is a report that reads back."""
    a, b = _reading(0, 0, 0), _reading(0, 0, 2**50)
    lines = [_bucket(5, "decode", 8, a, b), _bucket(5, "decode", 8, a, b)]
    merged = merge([*lines, _bucket(5, "decode", 4, a, a)])
    assert [r.bucket for r in merged.rows] == [4]
    assert merged.malformed == 1 and "device_used_delta_bytes" in merged.malformed_first
    assert _written_buckets(tmp_path / "r", merged) == [4]


def test_an_unbucketed_row_says_its_group_and_a_decode_recording_stays_decode(tmp_path):
    r = _reading(0, 0, 0)
    merged = merge([_bucket(5, "decode", 8, r, r), _bucket(5, "decode", None, r, r, alone=True)])
    assert [(x.mode, x.detail) for x in merged.rows] == [
        ("decode", ""),
        ("unbucketed", "captured in decode, outside its bucket function"),
    ]
    options = RecordOptions(command=["python", "x.py"], out=tmp_path / "r")
    assert _run_info(options, merged, [], RunStatus.COMPLETE, "now").phase == "decode"


def test_buckets_of_one_process_that_ran_side_by_side_are_warned_of():
    """Two threads of one process capturing at once: each bucket's readings are device-wide and
    cover the process's pools, so each holds the other's growth. The lines (written as buckets
    end) tell it: a bucket that began before the previous one ended."""

    def timed(size, began, ended, pid=5):
        line = _bucket(pid, "decode", size, _reading(0, 0, 0), _reading(0, 0, MIB))
        line["before"]["time"], line["after"]["time"] = began, ended
        return line

    merged = merge([timed(8, 1.0, 2.0), timed(4, 1.5, 3.0), timed(2, 3.5, 4.0)])
    assert [s.overlapping for s in merged.spans_by_rank()] == [1]
    notes = _bucket_notes(merged, [])
    assert notes == [
        "rank 0 (process 5): 1 bucket(s) began while another of its buckets was open (captures "
        "on several threads); each one's figures, read device-wide and over the process's graph "
        "pools, include the other's"
    ]
    in_order = merge([timed(8, 1.0, 2.0), timed(4, 2.0, 3.0), timed(4, 5.0, 6.0, pid=6)])
    assert [s.overlapping for s in in_order.spans_by_rank()] == [0, 0]
    assert _bucket_notes(in_order, []) == []
    assert merge([timed(8, float("nan"), 2.0)]).malformed == 1
