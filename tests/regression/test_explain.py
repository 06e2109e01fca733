"""`bcgprof explain` on a committed report written before the ledger
(reports/gpt-oss-20b-h200-unfused); on synthetic reports: tests/unit/test_explain.py."""

from __future__ import annotations

import pytest

from bcgprof.analysis.explain import explain_report
from bcgprof.report import read_report


def test_the_committed_reference_report_explains_without_a_ledger():
    exp = explain_report(read_report("reports/gpt-oss-20b-h200-unfused"))
    assert exp.fit is not None and exp.fit.rows > 100
    assert exp.fit.separable  # node counts per bucket vary a little (1815..2272 over 25 graphs)
    assert exp.fit.fitted_bytes == pytest.approx(exp.fit.measured_bytes, rel=0.01)
    assert any("no ledger columns" in n for n in exp.notes)
