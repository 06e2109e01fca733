"""Rotary position embedding: one RoPE description from either config dialect
(:func:`rope_parameters`), its inverse frequencies for default, linear, llama3 and YaRN
scaling (:func:`rope_inv_freq`), the cos/sin tables (:class:`RotaryEmbedding`) and the
rotation itself (:func:`apply_rotary`)."""

from __future__ import annotations

import math

import torch
from torch import nn

from bcgprof.errors import ModelConfigError


def rope_parameters(
    config: dict, layer_type: str | None = None, default_theta: float = 10000.0
) -> dict:
    """One RoPE description from either config dialect.

    Published configs say ``rope_theta`` plus ``rope_scaling`` (a dict or null, its type
    under ``rope_type`` or the older ``type``). Configs written by transformers 5 say
    ``rope_parameters``: a dict holding ``rope_theta``, ``rope_type`` and the scaling
    keys, or one such dict per layer type. Returns a flat dict with at least
    ``rope_type`` and ``rope_theta``, plus ``original_max_position_embeddings`` for the
    scaled types, as transformers standardises it.
    """
    params = config.get("rope_parameters")
    if isinstance(params, dict) and any(isinstance(v, dict) for v in params.values()):
        nested = {k: v for k, v in params.items() if isinstance(v, dict)}
        key = (
            layer_type
            if layer_type in nested
            else ("full_attention" if "full_attention" in nested else None)
        )
        if key is None:
            raise ModelConfigError(
                f"rope_parameters has no entry for layer type {layer_type!r}: {sorted(nested)}"
            )
        params = nested[key]
    merged: dict = {}
    if isinstance(config.get("rope_scaling"), dict):
        merged.update(config["rope_scaling"])
    if isinstance(params, dict):
        merged.update(params)
    rope_type = merged.get("rope_type") or merged.get("type") or "default"
    theta = merged.get("rope_theta")
    if theta is None:
        theta = config.get("rope_theta", default_theta)
    merged["rope_type"] = rope_type
    merged["rope_theta"] = float(theta)
    merged.pop("type", None)
    if rope_type in ("llama3", "yarn"):
        merged.setdefault("original_max_position_embeddings", config.get("max_position_embeddings"))
    if float(merged.get("partial_rotary_factor") or 1.0) != 1.0:
        raise ModelConfigError("partial_rotary_factor != 1 is not supported")
    return merged


def rope_inv_freq(
    params: dict, head_dim: int, max_position_embeddings: int
) -> tuple[torch.Tensor, float]:
    """Inverse frequencies ``[head_dim // 2]`` (float32, CPU) and the cos/sin scale.

    Follows transformers' ``ROPE_INIT_FUNCTIONS`` for default, linear, llama3 and yarn.
    """
    base = params["rope_theta"]
    dim = head_dim
    rope_type = params["rope_type"]
    inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).to(torch.float32) / dim))
    if rope_type == "default":
        return inv_freq, 1.0
    if rope_type == "linear":
        return inv_freq / float(params["factor"]), 1.0
    if rope_type == "llama3":
        factor = float(params["factor"])
        low_ff, high_ff = float(params["low_freq_factor"]), float(params["high_freq_factor"])
        old_len = float(params["original_max_position_embeddings"])
        low_wavelen, high_wavelen = old_len / low_ff, old_len / high_ff
        wavelen = 2 * math.pi / inv_freq
        scaled = torch.where(wavelen > low_wavelen, inv_freq / factor, inv_freq)
        smooth = (old_len / wavelen - low_ff) / (high_ff - low_ff)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = ~(wavelen < high_wavelen) * ~(wavelen > low_wavelen)
        return torch.where(medium, smoothed, scaled), 1.0
    if rope_type == "yarn":
        given = params.get("factor")
        orig = float(params["original_max_position_embeddings"])
        if given is None:
            given = max_position_embeddings / orig
        factor = float(given)

        def get_mscale(scale: float, mscale: float = 1.0) -> float:
            return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0

        attention_factor = params.get("attention_factor")
        if attention_factor is None:
            mscale, mscale_all = params.get("mscale"), params.get("mscale_all_dim")
            if mscale and mscale_all:
                attention_factor = get_mscale(factor, mscale) / get_mscale(factor, mscale_all)
            else:
                attention_factor = get_mscale(factor)
        beta_fast = params.get("beta_fast") or 32
        beta_slow = params.get("beta_slow") or 1

        def correction_dim(rotations: float) -> float:
            return (dim * math.log(orig / (rotations * 2 * math.pi))) / (2 * math.log(base))

        low, high = correction_dim(beta_fast), correction_dim(beta_slow)
        if params.get("truncate", True):
            low, high = math.floor(low), math.ceil(high)
        low, high = max(low, 0), min(high, dim - 1)
        if low == high:
            high += 0.001
        ramp = ((torch.arange(dim // 2, dtype=torch.float32) - low) / (high - low)).clamp(0, 1)
        pos_freqs = base ** (torch.arange(0, dim, 2).to(torch.float32) / dim)
        extrapolation, interpolation = 1.0 / pos_freqs, 1.0 / (factor * pos_freqs)
        extra_factor = 1 - ramp
        inv = interpolation * (1 - extra_factor) + extrapolation * extra_factor
        return inv, float(attention_factor)
    raise ModelConfigError(
        f"rope_type {rope_type!r} is not supported (default, linear, llama3, yarn)"
    )


class RotaryEmbedding(nn.Module):
    """cos/sin ``[T, head_dim // 2]`` for the given positions, computed on the fly.

    ``inv_freq`` is a non-persistent float32 buffer. It is recomputed whenever the module
    is moved or cast (``to_empty`` after a meta build leaves it uninitialised, a cast to
    bf16 would round it), so it is always exact float32 on the module's device.
    """

    inv_freq: torch.Tensor  # the buffer registered in __init__

    def __init__(self, params: dict, head_dim: int, max_position_embeddings: int):
        super().__init__()
        self.params = dict(params)
        self.head_dim = head_dim
        self.max_position_embeddings = max_position_embeddings
        # computed on the host whatever the default device (on meta it would have no values, and
        # its first arithmetic there imports torch's compiler stack), then placed like the module
        with torch.device("cpu"):
            inv_freq, self.attention_scaling = rope_inv_freq(
                self.params, head_dim, max_position_embeddings
            )
        self.register_buffer("inv_freq", inv_freq.to(torch.empty(0).device), persistent=False)

    def reset_buffers(self) -> None:
        inv_freq, self.attention_scaling = rope_inv_freq(
            self.params, self.head_dim, self.max_position_embeddings
        )
        if self.inv_freq.device.type != "meta":
            inv_freq = inv_freq.to(self.inv_freq.device)
        else:
            inv_freq = torch.empty_like(inv_freq, device="meta")
        self.inv_freq = inv_freq  # re-registers the buffer (float32)

    def _apply(self, fn, recurse=True):
        super()._apply(fn, recurse)
        self.reset_buffers()
        return self

    def forward(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        freqs = positions.to(torch.float32)[:, None] * self.inv_freq[None, :]  # [T, D/2]
        return freqs.cos() * self.attention_scaling, freqs.sin() * self.attention_scaling


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Neox-style rotation of ``x`` [T, H, D] (halves, as transformers' rotate_half).

    cos/sin are cast to x's dtype first, as transformers does.
    """
    cos = cos.to(x.dtype)[:, None, :]  # [T, 1, D/2]
    sin = sin.to(x.dtype)[:, None, :]
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)
