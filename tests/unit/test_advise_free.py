"""`advise --free`: the advised list must also capture with the given free memory (the second
constraint of a server's start-up). Checked against every list of a small synthetic traced profile
and through the CLI (on the H200 profile of Llama-3.1-8B, where the constraint changes the advice:
tests/regression/test_advise_free.py)."""

from __future__ import annotations

import itertools
import json

import pytest
from typer.testing import CliRunner

from bcgprof.analysis.predict.advise import AdviceError, advise, length_weights, padding_pct
from bcgprof.analysis.predict.lists import bucket_profile, predict_buckets
from bcgprof.cli import app

MIB = 1 << 20


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory):
    from traced_profile import write_profile

    return write_profile(tmp_path_factory.mktemp("advise-free") / "profile")


def _every_list(report, mode):
    """(padding, band top, needs free) of every list drawn from the profile (the largest bucket
    always kept)."""
    candidates = sorted(report.run.buckets)
    profile = bucket_profile(report)
    weights, requested, _ = length_weights(candidates, None)
    out = []
    for k in range(len(candidates)):
        for rest in itertools.combinations(candidates[:-1], k):
            chosen = [*rest, candidates[-1]]
            m = predict_buckets(report, chosen, [mode], profile=profile).mode(mode)
            assert m is not None and m.needs_free is not None
            out.append(
                (
                    padding_pct(chosen, weights, requested),
                    m.high_bytes,
                    m.needs_free.needs_free_bytes,
                    chosen,
                )
            )
    return out


@pytest.mark.parametrize("mode", ["per-bucket", "shared"])
def test_the_advice_is_the_least_padded_list_within_both_the_budget_and_the_free_memory(
    synthetic, mode
):
    lists = _every_list(synthetic, mode)
    needs = sorted({n for _, _, n, _ in lists})
    # every list fits the budget: only the free memory decides
    budget = max(h for _, h, _, _ in lists)
    binding = 0
    for free in needs[:: max(1, len(needs) // 6)]:
        best = min(p for p, h, n, _ in lists if h <= budget and n <= free)
        advice = advise(synthetic, budget, mode=mode, free=free)
        assert advice.needs_free_bytes is not None and advice.needs_free_bytes <= free
        assert advice.free_margin_bytes == free - advice.needs_free_bytes >= 0
        assert advice.expected_padding_pct == pytest.approx(best, abs=1e-3)
        binding += best > min(p for p, _, _, _ in lists)
    assert binding, "no free size tried made the constraint bind"


def test_too_little_free_for_the_largest_bucket_alone_is_refused(synthetic):
    alone = predict_buckets(synthetic, [max(synthetic.run.buckets)], ["per-bucket"]).mode(
        "per-bucket"
    )
    with pytest.raises(AdviceError, match="largest bucket alone needs .* free"):
        advise(synthetic, 10 * 2**30, mode="per-bucket", free=alone.needs_free.needs_free_bytes - 1)


def test_the_cli_prints_and_writes_the_free_constraint(synthetic):
    alone = predict_buckets(synthetic, [max(synthetic.run.buckets)], ["shared"]).mode("shared")
    free = alone.needs_free.needs_free_bytes + 64 * MIB
    runner = CliRunner()
    r = runner.invoke(
        app,
        [
            "advise",
            "--from",
            str(synthetic.path),
            "--budget",
            "8GiB",
            "--mode",
            "shared",
            "--free",
            f"{free // MIB}MiB",
            "-f",
            "json",
        ],
    )
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert (
        data["free_bytes"] == free // MIB * MIB and data["needs_free_bytes"] <= data["free_bytes"]
    )
    assert data["free_margin_bytes"] == data["free_bytes"] - data["needs_free_bytes"]
    r = runner.invoke(
        app, ["advise", "--from", str(synthetic.path), "--budget", "8GiB", "--free", "4096"]
    )
    assert r.exit_code == 2 and "--free '4096' has no unit" in r.output
    r = runner.invoke(
        app, ["advise", "--from", str(synthetic.path), "--budget", "8GiB", "--free", "1MiB"]
    )
    assert r.exit_code == 2 and "more than --free 1 MiB" in r.output and "Traceback" not in r.output
    r = runner.invoke(
        app,
        [
            "advise",
            "--from",
            str(synthetic.path),
            "--budget",
            "8GiB",
            "--mode",
            "shared",
            "--free",
            f"{free // MIB}MiB",
        ],
    )
    assert r.exit_code == 0 and "free margin" in r.stdout and "needs" in r.stdout
