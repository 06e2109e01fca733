from bcgprof.analysis.compare import BOTH, NEW_ONLY, OLD_ONLY, compare_reports, run_differences
from bcgprof.report import read_report

MIB = 1024**2


def test_identical_reports_have_no_growth_and_no_differences(data_dir):
    report = read_report(data_dir / "baseline")
    cmp = compare_reports(report, report)
    assert cmp.differences == []
    assert all(c.growth == 0 and c.presence == BOTH for c in cmp.buckets)
    assert [(t.mode, t.presence) for t in cmp.totals] == [
        ("per-bucket", BOTH),
        ("shared", BOTH),
        ("floor", BOTH),
    ]


def test_totals_side_by_side(data_dir):
    cmp = compare_reports(read_report(data_dir / "baseline"), read_report(data_dir / "grown"))
    per_bucket = cmp.totals[0]
    assert per_bucket.mode == "per-bucket"
    pool = per_bucket.changes["pool_bytes"]
    assert (pool.old, pool.new, pool.delta) == (300 * MIB, 340 * MIB, 40 * MIB)
    assert round(pool.pct, 2) == 13.33
    assert cmp.totals[1].changes["device_used_bytes"].delta == 0


def test_largest_growth_first(write_report, rows):
    base = write_report("base")
    grouped = rows()
    growth = {
        ("shared", 512): 3 * MIB,
        ("per-bucket", 2048): 30 * MIB,
        ("per-bucket", 256): 7 * MIB,
        ("floor", 4096): -5 * MIB,
    }
    for (mode, bucket), g in growth.items():
        grouped[mode][bucket].device_used_delta_bytes += g
        grouped[mode][
            bucket
        ].non_torch_delta_bytes += g  # memory outside torch: a capture derives it so
    cmp = compare_reports(read_report(base), read_report(write_report("cur", grouped.all())))
    order = [(c.mode, c.bucket) for c in cmp.buckets]
    assert order[:3] == [("per-bucket", 2048), ("per-bucket", 256), ("shared", 512)]
    assert order[-1] == ("floor", 4096)  # the only shrink comes last
    assert [c.growth for c in cmp.buckets][:3] == [30 * MIB, 7 * MIB, 3 * MIB]


def test_buckets_in_one_report_only_are_listed_as_such(write_report, rows):
    base = write_report("base")
    grouped = rows(buckets=[128, 256, 512, 1024, 2048])  # lost 4096, gained 128
    cmp = compare_reports(read_report(base), read_report(write_report("cur", grouped.all())))
    one_sided = [(c.mode, c.bucket, c.presence) for c in cmp.buckets if c.presence != BOTH]
    assert ("per-bucket", 4096, OLD_ONLY) in one_sided
    assert ("per-bucket", 128, NEW_ONLY) in one_sided
    # one-sided rows come after every paired row
    presences = [c.presence for c in cmp.buckets]
    assert presences.index(OLD_ONLY) > max(i for i, p in enumerate(presences) if p == BOTH)
    assert any(
        d == "bucket list differs (only in old: 4096; only in new: 128)" for d in cmp.differences
    )


def test_modes_present_in_one_report(data_dir):
    cmp = compare_reports(read_report(data_dir / "baseline"), read_report(data_dir / "partial"))
    assert [(t.mode, t.presence) for t in cmp.totals] == [
        ("per-bucket", BOTH),
        ("shared", BOTH),
        ("floor", OLD_ONLY),
    ]
    # shared 1024/512/256 and floor 4096
    assert sum(c.presence == OLD_ONLY for c in cmp.buckets) == 4


def test_run_differences_name_both_values(data_dir):
    a = read_report(data_dir / "baseline").run
    b = read_report(data_dir / "other-model").run
    assert run_differences(a, b) == [
        "model differs: gpt-oss-20b (config 5d1b7c0e2a9f4e61) vs Qwen3-8B (config 9a04c3e1b7d25f80)"
    ]


def test_packed_experts_are_a_difference_compare_names(data_dir):
    import dataclasses

    a = read_report(data_dir / "baseline").run
    assert run_differences(a, dataclasses.replace(a, experts="packed")) == [
        "expert weights differ: bf16 vs packed"
    ]


def test_a_different_graph_kind_or_order_is_a_mismatch_the_gate_refuses_unless_allowed(report_copy):
    import json

    from bcgprof.analysis.compare import run_differences
    from bcgprof.analysis.gate import GateMismatchError, GateOptions, gate_reports
    from bcgprof.report import read_report

    base = report_copy("baseline")
    other = report_copy("grown")
    data = json.loads((other / "run.json").read_text())
    data.update(graph="full", order="smallest-first")
    (other / "run.json").write_text(json.dumps(data))
    # its rows captured smallest first too, as run.json now says (the reader checks bucket against
    # order)
    lines = (other / "buckets.csv").read_text().splitlines()
    rows = [line.split(",") for line in lines[1:]]
    for r in rows:
        r[1] = r[1] if r[0] == "floor" else str(sorted(data["buckets"])[int(r[2])])
    (other / "buckets.csv").write_text("\n".join([lines[0]] + [",".join(r) for r in rows]) + "\n")
    diffs = run_differences(read_report(base).run, read_report(other).run)
    assert "graph kinds differ: breakable vs full" in diffs
    assert "capture orders differ: largest-first vs smallest-first" in diffs
    import pytest

    with pytest.raises(GateMismatchError, match="graph kinds differ"):
        gate_reports(read_report(base), read_report(other))
    result = gate_reports(read_report(base), read_report(other), GateOptions(allow_mismatch=True))
    assert any("graph kinds differ" in n for n in result.notes)


def test_a_different_warm_up_is_a_mismatch_and_an_older_report_held_its_outputs(report_copy):
    """The warm-up's eager peak is part of the peak figures: runs per bucket and whether each run's
    output was held during the next must agree; a report written before --warmup-output held it."""
    import json

    import pytest

    from bcgprof.analysis.gate import GateMismatchError, gate_reports

    base, other = report_copy("baseline"), report_copy("grown")

    def set_warmup(path, **extra):
        data = json.loads((path / "run.json").read_text())
        data["extra"] = {
            k: v for k, v in data.get("extra", {}).items() if k not in ("warmup", "warmup_output")
        }
        data["extra"].update(extra)
        (path / "run.json").write_text(json.dumps(data))

    set_warmup(base, warmup=2)  # written before the option: held
    set_warmup(other, warmup=2, warmup_output="held")
    assert run_differences(read_report(base).run, read_report(other).run) == []
    set_warmup(other, warmup=2, warmup_output="freed")
    assert run_differences(read_report(base).run, read_report(other).run) == [
        "warm-up differs: 2 run(s) a bucket, outputs held vs 2 run(s) a bucket, outputs freed"
    ]
    with pytest.raises(GateMismatchError, match="warm-up differs"):
        gate_reports(read_report(base), read_report(other))
    set_warmup(other, warmup=1, warmup_output="held")
    assert run_differences(read_report(base).run, read_report(other).run) == [
        "warm-up differs: 2 run(s) a bucket, outputs held vs 1 run(s) a bucket, outputs held"
    ]
    set_warmup(other)  # run.json does not say: nothing to compare
    assert run_differences(read_report(base).run, read_report(other).run) == []
    # how later runs were made (by their allocator requests, or eager) is not what was measured
    set_warmup(other, warmup=2, warmup_output="held", warmup_repeat="requests")
    assert run_differences(read_report(base).run, read_report(other).run) == []


def test_the_run_line_names_freed_warm_up_outputs_only(report_copy):
    import json

    from bcgprof.render.views import run_line

    path = report_copy("baseline")
    assert "warm-up" not in run_line(read_report(path))  # held, or written before the field
    data = json.loads((path / "run.json").read_text())
    data.setdefault("extra", {})["warmup_output"] = "freed"
    (path / "run.json").write_text(json.dumps(data))
    assert "weights; warm-up outputs freed)" in run_line(read_report(path))


def test_the_run_line_names_shared_executables_only(report_copy):
    import json

    from bcgprof.render.views import run_line

    path = report_copy("baseline")
    assert "executables" not in run_line(read_report(path))  # one per segment, or before the field
    data = json.loads((path / "run.json").read_text())
    data["executables"] = "per-signature"
    (path / "run.json").write_text(json.dumps(data))
    assert "dummy weights, per-signature executables)" in run_line(read_report(path))
