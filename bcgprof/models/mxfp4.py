"""Dequantise gpt-oss MXFP4 expert weights.

gpt-oss checkpoints store each expert projection ``X`` as two tensors:

* ``X_blocks``: uint8 ``[E, R, G, 16]``: 32 FP4 (e2m1) values per group, two per byte,
  low nibble first;
* ``X_scales``: uint8 ``[E, R, G]``: one E8M0 exponent per 32-value group, bias 127.

Value ``j`` of group ``g`` in row ``r`` is ``fp4(nibble) * 2**(scale - 127)``. The result
follows transformers' reference (``convert_moe_packed_tensors`` in
``transformers/integrations/mxfp4.py``) bit for bit, including its final transpose:
``[E, R, G*32] -> [E, G*32, R]``, i.e. ``gate_up_proj`` ``[E, H, 2I]`` and
``down_proj`` ``[E, I, H]``, the layout of transformers' ``GptOssExperts``.

Unlike the reference, the transpose is written chunk by chunk into the final tensor, so
the peak is the output plus one chunk (the reference holds two full copies), and the
work can run on the target device: a GPU load never stages a bf16 expert tensor on host.
"""

from __future__ import annotations

import torch

# e2m1 code -> value; the sign is the code's top bit
FP4_VALUES = (
    0.0,
    0.5,
    1.0,
    1.5,
    2.0,
    3.0,
    4.0,
    6.0,
    -0.0,
    -0.5,
    -1.0,
    -1.5,
    -2.0,
    -3.0,
    -4.0,
    -6.0,
)
SCALE_BIAS = 127
GROUP = 32  # values per scale

# E8M0 scales of dummy packed weights, inclusive: uniform random codes have an rms of 2.93, so
# their values have an rms of about 0.006 to 0.09 (0.023 at 120, near the bf16 dummies' std of
# 0.02), finite at every depth.
DUMMY_SCALES = (118, 122)

# 32-value groups per chunk: 1M groups = 32M values = 64 MiB in bf16, plus the int32
# nibble indices (2 x 64 MiB) and the fp32 product inside ldexp (128 MiB). Large enough
# that a GPU stays busy (a gpt-oss-20b layer dequantises in milliseconds).
ROWS_PER_CHUNK = 1 << 20


def dequantized_shape(blocks_shape, scales_shape=None) -> tuple[int, ...]:
    """Shape of the dequantised, transposed tensor, from the packed shapes alone.

    ``[E, R, G, 16]`` -> ``[E, G*32, R]``. Lets a loader check shapes before doing the work.
    """
    if len(blocks_shape) != 4 or blocks_shape[-1] != GROUP // 2:
        raise ValueError(f"MXFP4 blocks must be [E, rows, groups, 16], got {list(blocks_shape)}")
    if scales_shape is not None and tuple(scales_shape) != tuple(blocks_shape[:-1]):
        raise ValueError(
            f"MXFP4 scales {list(scales_shape)} do not match blocks {list(blocks_shape)} (want "
            f"{list(blocks_shape[:-1])})"
        )
    e, r, g, _ = blocks_shape
    return (e, g * GROUP, r)


def packed_dims(blocks_shape, scales_shape=None) -> tuple[int, int, int]:
    """(E, rows, columns) of a packed projection: ``[E, R, G, 16]`` -> ``(E, R, G*32)``, i.e. the
    dequantised tensor ``[E, G*32, R]`` read as E matrices of G*32 x R (K x N of a GEMM)."""
    e, k, r = dequantized_shape(blocks_shape, scales_shape)
    return e, r, k


def dequantize_mxfp4(
    blocks: torch.Tensor,
    scales: torch.Tensor,
    *,
    dtype: torch.dtype = torch.bfloat16,
    device: torch.device | str | None = None,
    rows_per_chunk: int = ROWS_PER_CHUNK,
) -> torch.Tensor:
    """Packed expert weights -> ``[E, G*32, R]`` in ``dtype`` on ``device``.

    ``blocks`` and ``scales`` may live anywhere (typically host memory, straight from
    safetensors); only one chunk of them is on ``device`` at a time. ``device`` defaults
    to the blocks' device. Peak memory on ``device``: the output plus about
    ``rows_per_chunk * 32 * (2 * itemsize + 12)`` bytes.
    """
    e, h, r = dequantized_shape(blocks.shape, scales.shape)
    g = blocks.shape[2]
    if blocks.dtype != torch.uint8 or scales.dtype != torch.uint8:
        raise ValueError(
            f"MXFP4 blocks and scales must be uint8, got {blocks.dtype} and {scales.dtype}"
        )
    device = torch.device(device) if device is not None else blocks.device
    lut = torch.tensor(FP4_VALUES, dtype=dtype, device=device)
    out = torch.empty(e, h, r, dtype=dtype, device=device)  # [E, G*32, R]

    # whole experts per chunk when they fit, else slices of one expert's rows
    per_expert = r * g
    experts_step = max(1, rows_per_chunk // per_expert)
    rows_step = r if per_expert <= rows_per_chunk else max(1, rows_per_chunk // g)
    for e0 in range(0, e, experts_step):
        e1 = min(e0 + experts_step, e)
        for r0 in range(0, r, rows_step):
            r1 = min(r0 + rows_step, r)
            blk = blocks[e0:e1, r0:r1].to(device)  # [e, r, G, 16] uint8
            exp = scales[e0:e1, r0:r1].to(device).to(torch.int32) - SCALE_BIAS  # [e, r, G]
            vals = torch.empty(*blk.shape[:-1], GROUP, dtype=dtype, device=device)  # [e, r, G, 32]
            # uint8 indices would be read as a boolean mask: index with int32
            vals[..., 0::2] = lut[(blk & 0x0F).to(torch.int32)]
            vals[..., 1::2] = lut[(blk >> 4).to(torch.int32)]
            del blk
            # the same op as the reference (fp32 product, one rounding into dtype), so
            # out-of-range scales round, overflow and flush exactly as there
            torch.ldexp(vals, exp.unsqueeze(-1), out=vals)
            del exp
            out[e0:e1, :, r0:r1] = vals.view(e1 - e0, r1 - r0, h).transpose(1, 2)
            del vals
    return out
