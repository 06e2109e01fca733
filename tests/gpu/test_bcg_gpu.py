"""The breakable CUDA graph engine and the capture modes, on small models. Needs CUDA."""

from pathlib import Path

import pytest
import torch

from bcgprof.measure.capture import Capturer, capture_buckets
from bcgprof.report import read_report

from .toy import ToyBreakModel

pytestmark = pytest.mark.gpu

BUCKETS = [8, 64, 256, 1024]


def _toy(side_streams=False, dtype=torch.bfloat16):
    torch.manual_seed(0)
    model = ToyBreakModel(side_streams=side_streams).cuda().to(dtype).eval().requires_grad_(False)
    ids = torch.randint(0, 97, (max(BUCKETS),), device="cuda")
    pos = torch.arange(max(BUCKETS), device="cuda")
    return model, [ids, pos]


@pytest.mark.parametrize("side_streams", [False, True])
def test_segments_are_breaks_plus_one_and_replay_equals_eager(side_streams):
    model, inputs = _toy(side_streams)
    result = capture_buckets(model, inputs, BUCKETS, mode="per-bucket", verify="all")
    assert [r.bucket for r in result.records] == sorted(BUCKETS, reverse=True)
    for r in result.records:
        assert r.status == "ok", r.detail
        assert r.segments == model.breaks + 1
        assert r.replay_max_abs_diff == 0.0
        assert r.pool_bytes >= r.retained_output_bytes


def test_replay_reads_current_inputs():
    model, inputs = _toy()
    result = capture_buckets(model, inputs, [64], verify="none")
    inputs[0].random_(0, 97)
    replayed = result.replay(64).clone()
    with torch.no_grad():
        eager = model(inputs[0][:64], inputs[1][:64])
    assert torch.equal(replayed, eager)


def test_per_bucket_keeps_one_output_per_bucket():
    model, inputs = _toy()
    result = capture_buckets(model, inputs, BUCKETS, mode="per-bucket", verify="none")
    hidden, size = 64, torch.bfloat16.itemsize
    for r in result.records:
        assert r.retained_output_bytes == r.bucket * hidden * size
    outputs = {b: c.output.data_ptr() for b, c in result.captures.items()}
    assert len(set(outputs.values())) == len(BUCKETS)  # distinct, all alive


def test_shared_mode_keeps_one_buffer():
    model, inputs = _toy()
    result = capture_buckets(model, inputs, BUCKETS, mode="shared", verify="all")
    hidden, size = 64, torch.bfloat16.itemsize
    largest = max(BUCKETS)
    retained = {r.bucket: r.retained_output_bytes for r in result.records}
    assert retained[largest] == largest * hidden * size
    assert all(v == 0 for b, v in retained.items() if b != largest)
    base = result.shared_output.data_ptr()
    assert all(c.output.data_ptr() == base for c in result.captures.values())
    assert all(r.replay_max_abs_diff == 0.0 for r in result.records)


def test_shared_mode_refuses_an_output_that_does_not_fit():
    model, inputs = _toy()
    small = torch.empty(100, 64, device="cuda", dtype=torch.bfloat16)
    result = capture_buckets(
        model, inputs, [64, 256], mode="shared", shared_output=small, verify="none"
    )
    first = result.records[0]
    assert first.bucket == 256 and first.status == "error"
    assert "does not fit the shared output buffer" in first.detail
    assert len(result.records) == 1  # the mode stops at the failing bucket


def test_floor_captures_only_the_largest_bucket():
    model, inputs = _toy()
    result = capture_buckets(model, inputs, BUCKETS, mode="floor", verify="all")
    assert [r.bucket for r in result.records] == [max(BUCKETS)]


def test_shared_pool_sits_at_the_floor():
    model, inputs = _toy()
    per_bucket = capture_buckets(model, inputs, BUCKETS, mode="per-bucket", verify="none")
    per_pool = per_bucket.records[-1].pool_bytes
    del per_bucket
    torch.cuda.empty_cache()
    shared = capture_buckets(model, inputs, BUCKETS, mode="shared", verify="none")
    shared_pool = shared.records[-1].pool_bytes
    del shared
    torch.cuda.empty_cache()
    floor = capture_buckets(model, inputs, BUCKETS, mode="floor", verify="none")
    floor_pool = floor.records[-1].pool_bytes
    assert shared_pool <= per_pool
    assert shared_pool <= floor_pool * 1.05 + (2 << 20)


def test_graph_memory_is_freed_with_the_graphs():
    model, inputs = _toy()
    capture_buckets(model, inputs, [8], verify="none")  # library workspaces of the capture stream
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    before = torch.cuda.memory_reserved()
    result = capture_buckets(model, inputs, BUCKETS, verify="none")
    assert torch.cuda.memory_reserved() > before
    del result
    import gc

    gc.collect()
    torch.cuda.empty_cache()
    assert torch.cuda.memory_reserved() <= before + (2 << 20)


@pytest.mark.parametrize("during", ["warmup", "capture"])
def test_out_of_memory_mid_mode_keeps_finished_rows(during):
    model, inputs = _toy()

    captured_first = []

    def greedy(ids, positions):
        # once the first bucket is captured, the second asks for far more than the card has
        capturing = torch.cuda.is_current_stream_capturing()
        if capturing and ids.shape[0] == 1024:
            captured_first.append(True)
        if ids.shape[0] == 64 and captured_first and capturing == (during == "capture"):
            torch.empty(1 << 42, dtype=torch.uint8, device="cuda")
        return model(ids, positions)

    result = capture_buckets(greedy, inputs, [64, 1024], verify="none")
    statuses = [r.status for r in result.records]
    assert statuses == ["ok", "oom"]
    assert (
        result.records[-1].free_bytes is not None
        and "OutOfMemoryError" in result.records[-1].detail
    )
    # the stream left capture mode: ordinary work still runs
    assert torch.ones(4, device="cuda").sum().item() == 4


def test_cli_capture_oom_leaves_a_readable_partial_report(tmp_path, monkeypatch):
    """run_capture in-process on a tiny gpt-oss, with the allocator capped below what it needs."""
    import json

    from bcgprof.measure.runner import run_capture
    from bcgprof.options import CaptureOptions

    config = json.loads(Path("configs/models/gpt-oss-20b.json").read_text())
    config.update(
        hidden_size=256,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=64,
        num_local_experts=4,
        vocab_size=512,
        layer_types=["sliding_attention", "full_attention"],
    )
    (tmp_path / "tiny").mkdir()
    (tmp_path / "tiny" / "config.json").write_text(json.dumps(config))
    total = torch.cuda.get_device_properties(0).total_memory
    torch.cuda.empty_cache()
    torch.cuda.set_per_process_memory_fraction((torch.cuda.memory_reserved() + (96 << 20)) / total)
    try:
        opts = CaptureOptions(
            model=str(tmp_path / "tiny"),
            buckets="16,32768",
            modes=["per-bucket"],
            out=tmp_path / "report",
            in_process=True,
            max_tokens=32768,
        )
        code = run_capture(opts).exit_code
    finally:
        torch.cuda.set_per_process_memory_fraction(1.0)
    assert code != 0
    report = read_report(tmp_path / "report")
    assert report.run.status in ("partial", "failed")
    assert [r.status for r in report.buckets] == ["oom"]


def test_capturer_rejects_buffers_smaller_than_the_largest_bucket():
    from bcgprof.errors import CaptureError

    model, inputs = _toy()
    with pytest.raises(CaptureError, match="exceeds the input buffers"):
        Capturer(model, inputs, [max(BUCKETS) * 2])
