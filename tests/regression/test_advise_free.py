"""`advise --free` on the H200 profile of Llama-3.1-8B (reports/llama-3.1-8b-h200-traced), where the
free memory changes the per-bucket advice; on synthetic profiles: tests/unit/test_advise_free.py."""

from __future__ import annotations

from bcgprof.analysis.predict.advise import advise
from bcgprof.analysis.predict.lists import predict_buckets

LLAMA = "reports/llama-3.1-8b-h200-traced"


def test_on_the_h200_profile_the_free_memory_changes_the_per_bucket_advice(shared_profiles):
    report, _ = shared_profiles(LLAMA)  # advise and predict replay the session's prepared profile
    free, budget = int(4.75 * 2**30), int(3.3 * 2**30)
    plain = advise(report, budget, mode="per-bucket")
    bound = advise(report, budget, mode="per-bucket", free=free)
    # the unconstrained list would not capture
    assert plain.needs_free_bytes > free >= bound.needs_free_bytes
    assert bound.expected_padding_pct > plain.expected_padding_pct and bound.high_bytes <= budget
    check = predict_buckets(report, bound.buckets, ["per-bucket"], free=free).mode("per-bucket")
    assert check.needs_free.fits and check.needs_free.needs_free_bytes == bound.needs_free_bytes
