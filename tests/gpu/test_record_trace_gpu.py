"""`bcgprof record --trace` of a real capture loop, replayed by predict (needs CUDA).

``examples/record/graph_loop.py`` is recorded with its bucket function and ``--trace``: predict over
the recording's own list must give every row's measured pool to the byte (predict refuses a trace
whose replay does not), and a shorter list predicted from it must be what a recording of that list
measured. explain reads the recording too.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bcgprof.analysis.predict.lists import predict_buckets
from bcgprof.report import read_report

pytestmark = pytest.mark.gpu

ROOT = Path(__file__).resolve().parents[2]
LOOP = ROOT / "examples" / "record" / "graph_loop.py"


def _bcgprof(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run(
        [sys.executable, "-m", "bcgprof", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=600,
    )


def _record(out: Path, sizes: int):
    proc = _bcgprof(
        "record", "--trace", "--bucket", "loops:capture_one:size", "--out", str(out),
        "--", sys.executable, str(LOOP), str(sizes),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "allocator trace of graphs written" in proc.stderr
    return read_report(out)


def test_a_recorded_trace_replays_to_its_own_pool_and_predicts_a_shorter_list(tmp_path):
    profile = _record(tmp_path / "six", 6)
    assert (tmp_path / "six" / "traces-graphs.csv.gz").is_file()
    measured = [r.pool_bytes for r in sorted(profile.buckets, key=lambda r: r.order)]
    own = predict_buckets(profile, profile.run.buckets)
    assert [r.pool_bytes for r in own.modes[0].buckets] == measured
    shorter = _record(tmp_path / "three", 3)  # 768, 512, 256: buckets of the profile
    predicted = predict_buckets(profile, shorter.run.buckets)
    assert [r.pool_bytes for r in predicted.modes[0].buckets] == [
        r.pool_bytes for r in sorted(shorter.buckets, key=lambda r: r.order)
    ]
    cli = _bcgprof("predict", "--from", str(tmp_path / "six"), "--buckets", "256,512", "-f", "json")
    assert cli.returncode == 0, cli.stderr
    assert json.loads(cli.stdout)["modes"][0]["mode"] == "graphs"
    explained = _bcgprof("explain", str(tmp_path / "six"))
    assert explained.returncode == 0, explained.stderr
