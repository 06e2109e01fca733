"""A layer prediction from committed reports captured before traces
(reports/gpt-oss-20b-h200-layers) opens no trace file. The trace set and its cache on a synthetic
profile: tests/unit/test_trace_set.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from bcgprof.analysis.predict import trace_set
from bcgprof.report import read_report


def test_a_layer_prediction_opens_no_trace(monkeypatch):
    """Its band's layout spread needs the deepest capture's traces; reports captured before traces
    have none, and nothing else in a layer prediction reads one."""
    from bcgprof.analysis.predict.layers import predict_layers
    from bcgprof.report import trace_read

    root = Path(__file__).resolve().parents[2] / "reports" / "gpt-oss-20b-h200-layers"
    if not root.is_dir():
        pytest.skip("the committed layer reports are not in this checkout")
    opened = []
    monkeypatch.setattr(trace_read, "read_bytes", lambda path: opened.append(path))
    monkeypatch.setattr(trace_set, "read_bytes", lambda path: opened.append(path))
    predict_layers([read_report(root / "layers-2"), read_report(root / "layers-4")])
    assert opened == []
