"""Bucket-list predictions from the committed reports without traces (no GPU): every such report
predates traces, so its list predictions are refused in one line. Replaying traces:
tests/unit/test_replay.py, tests/regression/test_replay_h200.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bcgprof.analysis.predict.lists import PredictionError, predict_buckets

COMMITTED = sorted(
    p.parent.name
    for p in Path("reports").glob("*/run.json")
    if json.loads(p.read_text()).get("status") == "complete"
    and json.loads(p.read_text()).get("tp") == 1
    and json.loads(p.read_text()).get("source", "capture") == "capture"
    and not any(p.parent.glob("traces-*.csv.gz"))
    # a pair of phases in one pool is refused by the reader itself (its phases alone are read)
    and len(json.loads(p.read_text()).get("phases") or []) <= 1
)


@pytest.mark.parametrize("name", COMMITTED)
def test_committed_reports_predate_traces_and_refuse_list_predictions(name):
    from bcgprof.report import read_report

    report = read_report(f"reports/{name}")
    if any(r.status != "ok" for r in report.buckets):
        pytest.skip("a report with failed buckets is refused for that reason first")
    with pytest.raises(PredictionError, match="has no allocator traces"):
        predict_buckets(report, report.run.buckets)
