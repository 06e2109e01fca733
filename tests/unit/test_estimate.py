import json

import pytest

from bcgprof.analysis.estimate import LABEL, estimate_output_buffers
from bcgprof.buckets import parse_buckets
from bcgprof.errors import ModelConfigError
from bcgprof.spec import resolve_model


def test_gpt_oss_20b_by_hand():
    spec = resolve_model("gpt-oss-20b")  # hidden 2880, bf16
    est = estimate_output_buffers(spec, [4096, 256, 1024])
    assert [b.bucket for b in est.buckets] == [256, 1024, 4096]
    assert [b.output_bytes for b in est.buckets] == [
        256 * 2880 * 2,
        1024 * 2880 * 2,
        4096 * 2880 * 2,
    ]
    assert est.buckets[0].output_bytes == 1_474_560
    assert est.per_bucket_total_bytes == 1_474_560 + 5_898_240 + 23_592_960 == 30_965_760
    assert est.shared_total_bytes == 23_592_960
    assert est.saved_bytes == 7_372_800
    assert est.label == LABEL == "analytic, not measured"


def test_full_sglang_prefill_for_gpt_oss_20b():
    est = estimate_output_buffers(resolve_model("gpt-oss-20b"), parse_buckets("sglang-prefill"))
    # The 74 buckets add up to 296,032 tokens; the largest is 16384.
    assert len(est.buckets) == 74
    assert est.per_bucket_total_bytes == 296_032 * 2880 * 2 == 1_705_144_320
    assert est.shared_total_bytes == 16384 * 2880 * 2 == 94_371_840


def test_other_preset_and_dtype_override():
    spec = resolve_model("Qwen3-8B")  # hidden 4096
    est = estimate_output_buffers(spec, [8, 16], phase="decode", dtype="float32")
    assert est.dtype_bytes == 4
    assert est.per_bucket_total_bytes == (8 + 16) * 4096 * 4
    assert est.shared_total_bytes == 16 * 4096 * 4
    data = est.to_json()
    assert json.loads(json.dumps(data)) == data
    assert data["buckets"] == [
        {"bucket": 8, "rows": 8, "output_bytes": 131072},
        {"bucket": 16, "rows": 16, "output_bytes": 262144},
    ]


def test_unknown_dtype_is_a_user_error():
    with pytest.raises(ModelConfigError, match="unsupported dtype 'int3'"):
        estimate_output_buffers(resolve_model("gpt-oss-20b"), [4], dtype="int3")
