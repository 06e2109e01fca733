"""Captures record allocator traces, and replaying them reproduces the graph pool to the byte (needs
CUDA).

A tiny gpt-oss is captured over a few buckets in every mode; the replay of the profile's own list
must give every row's ``pool_bytes`` and place every allocation where the allocator did. A subset
list is then captured too, and its rows must be what the replay of the profile predicts for it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from bcgprof.analysis.predict.lists import bucket_profile, predict_buckets
from bcgprof.measure.runner import run_capture
from bcgprof.options import CaptureOptions
from bcgprof.report import read_report
from bcgprof.report.traces import read_trace, trace_name

pytestmark = pytest.mark.gpu

MODES = ["per-bucket", "shared", "shared-largest", "floor"]
PROFILE = "32,64,128,256,512,768,1024"
SUBSET = "64,512,768"


def _tiny(tmp_path):
    config = json.loads(Path("configs/models/gpt-oss-20b.json").read_text())
    config.update(
        hidden_size=512,
        intermediate_size=512,
        num_hidden_layers=4,
        num_attention_heads=8,
        num_key_value_heads=2,
        head_dim=64,
        num_local_experts=8,
        vocab_size=1024,
        layer_types=["sliding_attention", "full_attention"] * 2,
    )
    (tmp_path / "tiny").mkdir(exist_ok=True)
    (tmp_path / "tiny" / "config.json").write_text(json.dumps(config))
    return str(tmp_path / "tiny")


def _capture(tmp_path, name, buckets):
    # each mode in its own process, at fixed addresses: in this process, what earlier tests left in
    # the address space can reorder the pool's segments, and the allocator picks between equal
    # blocks by address
    opts = CaptureOptions(
        model=_tiny(tmp_path),
        buckets=buckets,
        modes=list(MODES),
        out=tmp_path / name,
        max_tokens=1024,
        verify="none",
    )
    assert run_capture(opts).exit_code == 0
    return read_report(tmp_path / name)


def _rows(report, mode):
    return sorted((r for r in report.buckets if r.mode == mode), key=lambda r: r.order)


@pytest.fixture(scope="module")
def captured(tmp_path_factory):
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    tmp = tmp_path_factory.mktemp("replay")
    return _capture(tmp, "profile", PROFILE), _capture(tmp, "subset", SUBSET)


def test_every_mode_writes_a_trace_of_every_bucket(captured):
    profile, _ = captured
    for mode in MODES:
        trace = read_trace(profile.path / trace_name(mode))
        assert trace.buckets == [r.bucket for r in _rows(profile, mode)] and trace.incomplete == []
        assert trace.torch_version == torch.__version__ and trace.settings


def test_the_profiles_own_list_replays_to_the_byte(captured):
    profile, _ = captured
    replayer = bucket_profile(profile).replayer
    for mode in MODES:
        check = replayer.check(mode)
        assert check.mismatches == 0, mode
        assert check.pool_bytes == [r.pool_bytes for r in _rows(profile, mode)], mode
    pred = predict_buckets(profile, profile.run.buckets)
    for m in pred.modes:
        assert m.exact and m.pool_bytes == next(
            s.pool_bytes for s in profile.summary if s.mode == m.mode
        )


def test_a_captured_subset_is_what_the_replay_predicts(captured):
    profile, subset = captured
    pred = predict_buckets(profile, subset.run.buckets)
    for m in pred.modes:
        assert [r.pool_bytes for r in m.buckets] == [r.pool_bytes for r in _rows(subset, m.mode)], (
            m.mode
        )
