"""The dense SwiGLU MLP (:class:`DenseMLP`): gate/up projection, the fused SiLU-and-multiply
(:func:`bcgprof.models.kernels.silu_and_mul`, which allocates only its output), down projection."""

from __future__ import annotations

from collections.abc import Iterator

import torch
from torch import nn

from bcgprof.errors import ModelConfigError
from bcgprof.models.checkpoint import CheckpointTarget
from bcgprof.models.kernels import silu_and_mul
from bcgprof.models.tp import row_parallel_linear, shard_range, shard_size


class DenseMLP(nn.Module):
    """SwiGLU MLP with fused gate/up: down(silu(gate(x)) * up(x)).

    Under tensor parallelism gate_up holds this rank's 1/tp of the intermediate for both
    gate and up (column-parallel), down the matching input columns (row-parallel), and
    the output is all-reduced over the ranks.
    """

    def __init__(
        self,
        hidden_size: int,
        intermediate_size: int,
        bias: bool = False,
        *,
        tp_rank: int = 0,
        tp_size: int = 1,
    ):
        super().__init__()
        if intermediate_size % tp_size:
            raise ModelConfigError(
                f"intermediate_size {intermediate_size} is not divisible by {tp_size} "
                "tensor-parallel ranks"
            )
        self.hidden_size = hidden_size
        self.tp_rank, self.tp_size = tp_rank, tp_size
        self.total_intermediate_size = intermediate_size
        self.intermediate_size = shard_size(intermediate_size, tp_size)  # this rank's share
        I = self.intermediate_size
        self.gate_up_proj = nn.Linear(hidden_size, 2 * I, bias=bias)
        self.down_proj = nn.Linear(I, hidden_size, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # As SGLang's LlamaMLP: gate_up [T, 2I] is held until the down projection returns,
        # beside the activation [T, I] and then down's output [T, H]
        gate_up = self.gate_up_proj(x)  # [T, 2I]
        # [T, H]
        return row_parallel_linear(
            silu_and_mul(gate_up), self.down_proj, self.tp_rank, self.tp_size
        )

    def checkpoint_entries(self, ckpt: str, param: str) -> Iterator[CheckpointTarget]:
        H, I, full = self.hidden_size, self.intermediate_size, self.total_intermediate_size
        rows = shard_range(full, self.tp_rank, self.tp_size)
        src, cols = ((rows,), (slice(None), rows)) if self.tp_size > 1 else ((), ())
        bias = self.down_proj.bias is not None
        for name, lo in (("gate_proj", 0), ("up_proj", I)):
            yield CheckpointTarget(
                f"{ckpt}.{name}.weight",
                f"{param}.gate_up_proj.weight",
                (slice(lo, lo + I),),
                (full, H),
                src,
            )
            if bias:
                yield CheckpointTarget(
                    f"{ckpt}.{name}.bias",
                    f"{param}.gate_up_proj.bias",
                    (slice(lo, lo + I),),
                    (full,),
                    src,
                )
        yield CheckpointTarget(
            f"{ckpt}.down_proj.weight", f"{param}.down_proj.weight", (), (H, full), cols
        )
        if bias:
            yield CheckpointTarget(f"{ckpt}.down_proj.bias", f"{param}.down_proj.bias", (), (H,))
