"""A graph pool that depends on where the driver places its segments: the layer prediction's band
spans the pools the deepest capture's own list replays to with its segments at random addresses.

``reports/qwen3-8b-h100-layers`` (2 and 4 layers, with traces) and ``reports/qwen3-8b-h100`` (36
layers) were captured on an H100 80GB at fixed addresses; Qwen3-8B's per-bucket pool is 3454009344
bytes at 4 layers and 3164602368 at 36, a best-fit tie decided the other way in another address
layout. The same on the H200 (``reports/qwen3-8b-h200-layers``, ``-layers-8-16-24``,
``reports/qwen3-8b-h200``), where 8, 16 and 24 layers gave three more pools between those two.
"""

from __future__ import annotations

from random import Random

from bcgprof.analysis.predict.allocator import Pool
from bcgprof.analysis.predict.layers import predict_layers
from bcgprof.analysis.predict.layout_spread import LAID_OUT, layout_spread
from bcgprof.report import read_report

FEW = "reports/qwen3-8b-h100-layers"
FULL = "reports/qwen3-8b-h100"


def _rows(report, mode):
    return sorted((r for r in report.buckets if r.mode == mode), key=lambda r: r.order)


def test_the_full_depths_pool_is_one_the_four_layer_trace_replays_to_in_another_layout():
    four, full = read_report(f"{FEW}/layers-4"), read_report(FULL)
    spread = layout_spread(four, "per-bucket", _rows(four, "per-bucket"))
    assert spread is not None and spread.measured == 3454009344
    # the 36-layer outcome, exactly
    assert spread.lowest == _rows(full, "per-bucket")[-1].pool_bytes == 3164602368
    assert (
        spread.below == 3454009344 - 3164602368 and spread.above == spread.highest - spread.measured
    )
    # seeded: it repeats
    assert layout_spread(four, "per-bucket", _rows(four, "per-bucket")) == spread


def test_a_pool_that_no_layout_moves_keeps_its_band():
    four = read_report(f"{FEW}/layers-4")
    for mode in ("shared", "shared-largest", "floor"):
        spread = layout_spread(four, mode, _rows(four, mode))
        assert spread is not None and (spread.below, spread.above) == (0, 0), mode


def test_the_band_spans_the_layouts_and_then_holds_the_measured_full_depth():
    few = [read_report(f"{FEW}/layers-{n}") for n in (2, 4)]
    totals = {s.mode: s.device_used_bytes for s in read_report(FULL).summary}
    pred = predict_layers(few)
    assert pred.layers == 36
    for m in pred.modes:
        assert m.low_bytes <= totals[m.mode] <= m.high_bytes, m.mode
        widened = LAID_OUT in m.band_source
        assert widened == (m.mode == "per-bucket"), m.mode
        if widened:  # without the layouts' spread the band would have missed by about 240 MiB
            spread = layout_spread(few[1], m.mode, _rows(few[1], m.mode))
            assert spread is not None and totals[m.mode] < m.low_bytes + spread.below
            assert m.band_too_wide and any(
                "where the driver places its segments" in n for n in pred.notes
            )


def test_reports_without_traces_get_no_spread():
    four = read_report("reports/gpt-oss-20b-h200-layers/layers-4")
    assert layout_spread(four, "per-bucket", _rows(four, "per-bucket")) is None


def test_a_shuffled_pool_ignores_recorded_addresses_and_repeats_with_its_seed():
    def bases(seed):
        pool = Pool(shuffle=Random(seed))
        for n in range(6):
            # each needs its own segment; the recorded address is ignored
            pool.malloc(30 << 20, at=(n + 1) << 40)
        return sorted(pool.segments)

    assert bases(3) == bases(3) and bases(3) != bases(4)
    assert not set(bases(3)) & {(n + 1) << 40 for n in range(6)}
    plain = Pool()
    plain.malloc(30 << 20, at=1 << 40)
    assert sorted(plain.segments) == [1 << 40]  # without a shuffle the recorded address is used


def test_every_depth_captured_on_the_h200_ends_its_pool_inside_the_four_layer_captures_spread():
    four = read_report("reports/qwen3-8b-h200-layers/layers-4")
    spread = layout_spread(four, "per-bucket", _rows(four, "per-bucket"))
    assert spread is not None
    depths = {
        n: read_report(f"reports/qwen3-8b-h200-layers-8-16-24/layers-{n}") for n in (8, 16, 24)
    }
    depths[36] = read_report("reports/qwen3-8b-h200")
    pools = {n: _rows(r, "per-bucket")[-1].pool_bytes for n, r in depths.items()}
    # 3403677696, 3454009344, 3441426432, 3164602368: the layout moves it
    assert len(set(pools.values())) == 4
    assert all(spread.lowest <= p <= spread.highest for p in pools.values()), pools
    assert spread.lowest == pools[36]
