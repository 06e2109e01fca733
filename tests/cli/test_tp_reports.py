"""show, compare and gate on hand-made two-rank (tensor-parallel) reports."""

import json

from typer.testing import CliRunner

from bcgprof.cli import app

MIB = 1024**2
runner = CliRunner()


def run(*args):
    return runner.invoke(app, [str(a) for a in args])


def tp_rows(rows, grow=None, amount=24 * MIB):
    """Baseline-shaped rows for ranks 0 and 1; ``grow`` = the rank whose shared bucket 4096
    grows."""
    out = []
    for rank in (0, 1):
        grouped = rows()
        for r in grouped.all():
            r.rank = rank
        if rank == grow:
            row = grouped["shared"][4096]
            row.device_used_delta_bytes += amount
            row.non_torch_delta_bytes += amount
        out += grouped.all()
    return out


def test_gate_fails_naming_the_worst_rank_rank0_included(write_report, rows, tmp_path):
    base = write_report("base", tp_rows(rows), tp=2)
    for rank in (0, 1):
        cur = write_report(f"cur{rank}", tp_rows(rows, grow=rank), tp=2)
        result = run("gate", "--baseline", base, "--current", cur)
        assert result.exit_code == 1, result.output
        assert f"worst: shared rank {rank} total device_used_bytes" in " ".join(
            result.output.split()
        )
    # both ranks grew: the one that grew most is the worst
    both = tp_rows(rows, grow=1, amount=40 * MIB)
    for r in both:
        if r.rank == 0 and r.mode == "shared" and r.bucket == 4096:
            r.device_used_delta_bytes += 20 * MIB
            r.non_torch_delta_bytes += 20 * MIB
    result = run("gate", "--baseline", base, "--current", write_report("both", both, tp=2))
    text = " ".join(result.output.split())
    assert result.exit_code == 1 and "FAIL: 2 regressions; worst: shared rank 1 total" in text


def test_gate_refuses_a_single_gpu_baseline_for_a_tp_report(write_report, rows):
    single = write_report("single", None)
    tp = write_report("tp", tp_rows(rows), tp=2)
    result = run("gate", "--baseline", single, "--current", tp)
    assert result.exit_code == 2
    assert "tensor-parallel ranks" in result.output


def test_compare_pairs_ranks_and_the_max_and_sum_rows(write_report, rows):
    base = write_report("base", tp_rows(rows), tp=2)
    cur = write_report("cur", tp_rows(rows, grow=1), tp=2)
    data = json.loads(run("compare", base, cur, "-f", "json").stdout)
    shared = {t["rank"]: t for t in data["totals"] if t["mode"] == "shared"}
    assert set(shared) == {"0", "1", "max", "sum"}
    assert shared["0"]["device_used_bytes"]["delta"] == 0
    assert shared["1"]["device_used_bytes"]["delta"] == 24 * MIB
    assert shared["max"]["device_used_bytes"]["delta"] == 24 * MIB
    assert shared["sum"]["device_used_bytes"]["delta"] == 24 * MIB
    grown = [
        b
        for b in data["buckets"]
        if b.get("presence") == "both"
        and b["rank"] == "1"
        and b["bucket"] == 4096
        and b["mode"] == "shared"
    ]
    assert grown
    table = run("compare", base, cur).stdout
    assert "rank" in table


def test_show_summary_has_rank_max_and_sum(write_report, rows):
    path = write_report("tp", tp_rows(rows, grow=1), tp=2)
    data = json.loads(run("show", path, "-f", "json").stdout)
    summary = [s for s in data["summary"] if s["mode"] == "shared"]
    assert [s["rank"] for s in summary] == ["0", "1", "max", "sum"]
    by = {s["rank"]: s for s in summary}
    assert by["max"]["device_used_bytes"] == by["1"]["device_used_bytes"]
    assert (
        by["sum"]["device_used_bytes"]
        == by["0"]["device_used_bytes"] + by["1"]["device_used_bytes"]
    )
    assert {b["rank"] for b in data["buckets"]} == {"0", "1"}  # ranks are strings in every JSON row
