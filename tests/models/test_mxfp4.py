"""MXFP4 dequantisation against transformers' reference conversion, bit for bit."""

import pytest
import torch

from bcgprof.models.mxfp4 import FP4_VALUES, dequantize_mxfp4, dequantized_shape

reference = pytest.importorskip("transformers.integrations.mxfp4").convert_moe_packed_tensors


def packed(e, r, g, *, lo=118, hi=130, seed=0):
    """Random blocks [E, R, G, 16] and scales [E, R, G]; scales in a trained model's range."""
    gen = torch.Generator().manual_seed(seed)
    blocks = torch.randint(0, 256, (e, r, g, 16), dtype=torch.uint8, generator=gen)
    scales = torch.randint(lo, hi + 1, (e, r, g), dtype=torch.uint8, generator=gen)
    return blocks, scales


def bits(t):
    return t.view(torch.int16) if t.element_size() == 2 else t.view(torch.int32)


@pytest.mark.parametrize("shape", [(1, 1, 1), (2, 6, 3), (4, 64, 4), (3, 17, 5), (8, 90, 2)])
@pytest.mark.parametrize("rows_per_chunk", [1, 7, 64, 1 << 21])
def test_matches_reference_bit_for_bit(shape, rows_per_chunk):
    blocks, scales = packed(*shape, seed=sum(shape))
    want = reference(blocks.clone(), scales.clone())
    got = dequantize_mxfp4(blocks, scales, rows_per_chunk=rows_per_chunk)
    assert got.shape == want.shape == dequantized_shape(blocks.shape, scales.shape)
    assert got.dtype == want.dtype == torch.bfloat16
    assert got.is_contiguous()
    assert torch.equal(bits(got), bits(want))


def test_matches_reference_over_every_exponent_and_float32():
    # every E8M0 code incl. those that underflow bf16 (subnormals) or overflow to inf
    blocks, scales = packed(4, 64, 8, lo=0, hi=255, seed=1)
    assert set(scales.unique().tolist()) == set(range(256))
    for dtype in (torch.bfloat16, torch.float32):
        want = reference(blocks.clone(), scales.clone(), dtype=dtype)
        got = dequantize_mxfp4(blocks, scales, dtype=dtype, rows_per_chunk=5)
        assert got.dtype == dtype
        assert torch.equal(bits(got), bits(want))


def test_layout_by_hand():
    # one expert, rows r=0,1, one group: byte 0x21 holds 0.5 (low nibble 1) then 1.0 (high 2)
    blocks = torch.zeros(1, 2, 1, 16, dtype=torch.uint8)
    blocks[0, 0, 0, 0] = 0x21
    blocks[0, 1, 0, 15] = 0xF7  # last byte of row 1: 6.0 then -6.0
    scales = torch.tensor([[[128], [125]]], dtype=torch.uint8)  # x2 and x0.25
    out = dequantize_mxfp4(blocks, scales)
    assert out.shape == (1, 32, 2)  # [E, G*32, R]: the transpose puts rows last
    assert out[0, 0, 0] == 1.0 and out[0, 1, 0] == 2.0
    assert out[0, 30, 1] == 1.5 and out[0, 31, 1] == -1.5
    assert out.count_nonzero() == 4
    assert FP4_VALUES[0xF] == -6.0


def test_gpt_oss_layouts():
    # gate_up_proj_blocks [E, 2I, H/32, 16] -> [E, H, 2I]; down_proj_blocks [E, H, I/32, 16] -> [E,
    # I, H]
    e, h, i = 32, 2880, 2880
    assert dequantized_shape((e, 2 * i, h // 32, 16), (e, 2 * i, h // 32)) == (e, h, 2 * i)
    assert dequantized_shape((e, h, i // 32, 16)) == (e, i, h)


@pytest.mark.parametrize(
    "blocks_shape, scales_shape",
    [((2, 4, 3, 8), (2, 4, 3)), ((4, 3, 16), (4, 3)), ((2, 4, 3, 16), (2, 4, 2))],
)
def test_bad_shapes_are_named(blocks_shape, scales_shape):
    with pytest.raises(ValueError, match=r"\[") as err:
        dequantized_shape(blocks_shape, scales_shape)
    assert "\n" not in str(err.value)


def test_rejects_non_uint8():
    blocks, scales = packed(1, 2, 1)
    with pytest.raises(ValueError, match="uint8"):
        dequantize_mxfp4(blocks.to(torch.int32), scales)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_on_device_matches_and_peak_is_bounded():
    # gpt-oss-20b's gate_up_proj of one layer, packed on the host as safetensors gives it
    blocks, scales = packed(32, 5760, 90, seed=3)
    want = reference(blocks.clone(), scales.clone())
    device = torch.device("cuda")
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    got = dequantize_mxfp4(blocks, scales, device=device, rows_per_chunk=1 << 18)
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - base
    out_bytes = got.numel() * got.element_size()
    assert got.device.type == "cuda"
    assert torch.equal(bits(got.cpu()), bits(want))
    # the output plus one chunk; the reference's transpose alone would need 2x the output
    chunk_bytes = (1 << 18) * 32 * (2 + 4 + 4 + 4) + (1 << 18) * 16 * 2
    assert peak <= out_bytes + 2 * chunk_bytes, (peak, out_bytes)
