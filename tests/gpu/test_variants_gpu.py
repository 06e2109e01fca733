"""The output-buffer variants, full graphs, capture order, the ledger and the pool peak, on
small models. Needs CUDA."""

import pytest
import torch

from bcgprof.measure.capture import Capturer, capture_buckets
from bcgprof.options import CaptureOptions
from bcgprof.report import LEDGER_FIELDS

from .toy import ToyBreakModel

pytestmark = pytest.mark.gpu

BUCKETS = [8, 64, 256, 1024]
HIDDEN, SIZE = 64, torch.bfloat16.itemsize


def _toy():
    torch.manual_seed(0)
    model = ToyBreakModel().cuda().to(torch.bfloat16).eval().requires_grad_(False)
    ids = torch.randint(0, 97, (max(BUCKETS),), device="cuda")
    pos = torch.arange(max(BUCKETS), device="cuda")
    return model, [ids, pos]


@pytest.mark.parametrize("mode", ["per-bucket", "shared", "shared-largest", "floor"])
@pytest.mark.parametrize("order", ["largest-first", "smallest-first"])
def test_the_ledger_sums_exactly_to_the_device_used_delta(mode, order):
    if mode == "shared-largest" and order == "smallest-first":
        pytest.skip("refused: shared-largest captures largest first")
    model, inputs = _toy()
    result = capture_buckets(model, inputs, BUCKETS, mode=mode, order=order, verify="all")
    for r in result.records:
        assert r.status == "ok", r.detail
        assert all(getattr(r, name) is not None for name in LEDGER_FIELDS)
        assert (
            r.pool_live_delta_bytes
            + r.pool_free_delta_bytes
            + r.outside_pool_delta_bytes
            + r.non_torch_delta_bytes
        ) == r.device_used_delta_bytes
        assert r.pool_live_delta_bytes + r.pool_free_delta_bytes == r.pool_delta_bytes
        assert 0 <= r.pool_output_bytes <= r.retained_output_bytes
        assert r.replay_max_abs_diff in (None, 0.0)


def test_shared_largest_keeps_one_buffer_in_the_pool_and_counts_it_once():
    model, inputs = _toy()
    result = capture_buckets(model, inputs, BUCKETS, mode="shared-largest", verify="all")
    largest = max(BUCKETS)
    retained = {r.bucket: (r.retained_output_bytes, r.pool_output_bytes) for r in result.records}
    assert retained[largest] == (largest * HIDDEN * SIZE, largest * HIDDEN * SIZE)  # in the pool
    assert all(v == (0, 0) for b, v in retained.items() if b != largest)
    base = result.captures[largest].output
    assert result.shared_output is base
    assert all(c.output.data_ptr() == base.data_ptr() for c in result.captures.values())
    assert all(r.replay_max_abs_diff == 0.0 for r in result.records)


def test_shared_largest_pool_sits_at_the_floor():
    model, inputs = _toy()
    shared = capture_buckets(model, inputs, BUCKETS, mode="shared-largest", verify="none")
    pool = shared.records[-1].pool_bytes
    del shared
    torch.cuda.empty_cache()
    floor = capture_buckets(model, inputs, BUCKETS, mode="floor", verify="none")
    assert pool <= floor.records[-1].pool_bytes * 1.005 + (2 << 20)


def test_shared_largest_refuses_smallest_first():
    from bcgprof.errors import CaptureError

    model, inputs = _toy()
    with pytest.raises(CaptureError, match="--order largest-first"):
        Capturer(
            model, inputs, BUCKETS, CaptureOptions(order="smallest-first"), mode="shared-largest"
        )


def test_smallest_first_captures_ascending_and_shared_buffer_is_max_size():
    model, inputs = _toy()
    result = capture_buckets(
        model, inputs, BUCKETS, mode="shared", order="smallest-first", verify="all"
    )
    assert [r.bucket for r in result.records] == sorted(BUCKETS)
    assert tuple(result.shared_output.shape) == (max(BUCKETS), HIDDEN)
    assert result.records[0].retained_output_bytes == max(BUCKETS) * HIDDEN * SIZE
    assert all(r.replay_max_abs_diff in (None, 0.0) for r in result.records)


def test_a_full_graph_has_one_segment_and_replays_exactly():
    model, inputs = _toy()
    result = capture_buckets(model, inputs, BUCKETS, mode="per-bucket", graph="full", verify="all")
    for r in result.records:
        assert r.status == "ok", r.detail
        assert r.segments == 1
        assert r.replay_max_abs_diff == 0.0
    breakable = capture_buckets(model, inputs, [64], mode="per-bucket", verify="none")
    assert breakable.records[0].segments == model.breaks + 1


def test_floor_records_the_pool_peak_by_site():
    from bcgprof.measure.sites import NO_SITE

    model, inputs = _toy()
    capturer = Capturer(model, inputs, BUCKETS, mode="floor", record_sites=True)
    try:
        records = list(capturer.run())
    finally:
        capturer.close()
    (record,) = records
    peak = capturer.result.pool_peak
    assert peak is not None and peak.events > 0
    assert peak.pool_bytes == record.pool_bytes
    assert peak.peak_live_bytes + peak.slack_bytes == record.pool_bytes
    assert sum(s.bytes for s in peak.sites) == peak.peak_live_bytes
    named = sum(s.bytes for s in peak.sites if s.site != NO_SITE)
    assert named >= 0.9 * peak.peak_live_bytes, peak.sites
    # list indices fold into N
    assert {"pre.N", "post.N"} & {s.site for s in peak.sites}, peak.sites
    assert not any("forward" in vars(m) for m in model.modules())  # the frame renaming is undone


@pytest.mark.parametrize("mode", ["per-bucket", "shared"])
def test_freeing_each_warm_up_output_changes_no_pool_figure_and_never_raises_a_peak(mode):
    """--warmup-output freed (as SGLang's warm-up) against held: the graph pool is private, so its
    rows are the same; the held output of the first run can only add to the warm-up's peak."""
    model, inputs = _toy()
    held = capture_buckets(model, inputs, BUCKETS, mode=mode, verify="none").records
    freed = capture_buckets(
        model, inputs, BUCKETS, mode=mode, verify="none", warmup_output="freed"
    ).records
    same = (
        "bucket",
        "status",
        "pool_bytes",
        "pool_delta_bytes",
        "retained_output_bytes",
        "segments",
        "graph_nodes",
    )
    assert [[getattr(r, f) for f in same] for r in freed] == [
        [getattr(r, f) for f in same] for r in held
    ]
    for h, f in zip(held, freed, strict=True):
        assert (
            0
            <= h.peak_transient_bytes - f.peak_transient_bytes
            <= -(-h.bucket * HIDDEN * SIZE // 512) * 512
        )


@pytest.mark.parametrize("warmup_output", ["held", "freed"])
def test_a_warm_up_run_made_of_its_requests_leaves_every_allocator_figure_as_an_eager_run(
    warmup_output,
):
    """--warmup-repeat requests: the second warm-up run is the first's allocator requests made
    again; the allocated peak (peak transient) and the pool must equal two eager runs', and every
    bucket must have been repeated (a plan that never engages would pass the comparison
    vacuously)."""
    from bcgprof.measure.tracing import AllocatorRecorder

    def records(repeat):
        model, inputs = _toy()
        opts = CaptureOptions(
            warmup_output=warmup_output, warmup_repeat=repeat, break_repeat="eager"
        )
        cap = Capturer(model, inputs, BUCKETS, opts, mode="per-bucket")
        cap.recorder = AllocatorRecorder(None, "per-bucket", cap.pool)
        try:
            rows = list(cap.run())
        finally:
            cap.recorder.stop()
            cap.close()
        return rows, cap.repeated_runs

    eager, none_repeated = records("eager")
    repeated, repeated_runs = records("requests")
    assert none_repeated == 0 and repeated_runs == len(BUCKETS)
    same = (
        "bucket",
        "status",
        "pool_bytes",
        "pool_delta_bytes",
        "peak_transient_bytes",
        "retained_output_bytes",
        "torch_allocated_delta_bytes",
        "segments",
    )
    assert [[getattr(r, f) for f in same] for r in repeated] == [
        [getattr(r, f) for f in same] for r in eager
    ]


def test_graph_breaks_repeated_by_their_requests_leave_every_allocator_figure_as_breaks_that_run():
    """--break-repeat requests: each bucket's first break call of its shapes runs, the toy's other
    layers and the whole capture repeat its allocator requests; every allocator figure must equal
    those of a capture whose breaks all run, the counts must show the repeats happened (a handler
    that never engages would pass the comparison vacuously), and every replay must still equal an
    eager forward."""
    from bcgprof.measure.tracing import AllocatorRecorder

    def records(repeat):
        model, inputs = _toy()
        opts = CaptureOptions(warmup_repeat="requests", break_repeat=repeat)
        cap = Capturer(model, inputs, BUCKETS, opts, mode="per-bucket")
        cap.recorder = AllocatorRecorder(None, "per-bucket", cap.pool)
        try:
            rows = list(cap.run())
            checked = cap.verify("all")
        finally:
            cap.recorder.stop()
            cap.close()
        return rows, (cap.breaks_run, cap.breaks_repeated), checked

    layers = ToyBreakModel().breaks
    eager, eager_counts, _ = records("eager")
    repeated, counts, checked = records("requests")
    assert eager_counts == (0, 0)
    # per bucket: warm-up run 1 runs the first call and repeats the other layers'; run 2 is repeated
    # whole (no break called); the capture repeats every layer's
    assert counts == (len(BUCKETS), len(BUCKETS) * (layers - 1 + layers))
    same = (
        "bucket",
        "status",
        "pool_bytes",
        "pool_delta_bytes",
        "peak_transient_bytes",
        "retained_output_bytes",
        "torch_allocated_delta_bytes",
        "torch_reserved_delta_bytes",
        "segments",
        "graph_nodes",
    )
    assert [[getattr(r, f) for f in same] for r in repeated] == [
        [getattr(r, f) for f in same] for r in eager
    ]
    assert [r.status for r in checked] == ["ok"] * len(BUCKETS)
    assert all(r.replay_max_abs_diff == 0.0 for r in checked)
