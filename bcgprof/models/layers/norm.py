"""RMSNorm, in float32 over the last dim: ``[..., D] -> [..., D]``."""

from __future__ import annotations

import torch
from torch import nn


class RMSNorm(nn.Module):
    """RMSNorm in float32 over the last dim.

    ``weight_in_fp32`` picks where the weight is applied: gpt-oss multiplies the float32
    normalised values and casts once; Llama/Qwen cast first and multiply in the input dtype.
    """

    def __init__(self, dim: int, eps: float, weight_in_fp32: bool = False):
        super().__init__()
        self.eps = eps
        self.weight_in_fp32 = weight_in_fp32
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        xf = x.to(torch.float32)
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        if self.weight_in_fp32:
            return (self.weight * xf).to(dtype)
        return self.weight * xf.to(dtype)

    def extra_repr(self) -> str:
        return f"{tuple(self.weight.shape)}, eps={self.eps}"
