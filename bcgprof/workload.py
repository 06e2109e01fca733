"""What one mode captures: the model's layer stack and its static input buffers."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Sequence

import torch

from bcgprof import dtypes
from bcgprof.models.config import ModelSpec


@dataclass
class Workload:
    fn: Callable[..., torch.Tensor]
    inputs: list[torch.Tensor]  # [input_ids, positions], each [max_tokens]
    refill: Callable[[Sequence[torch.Tensor], torch.Generator], None]
    build_s: float
    parameter_bytes: int


def build_workload(spec: ModelSpec, *, weights: str, num_layers, device: torch.device,
                   max_tokens: int, seed: int, tp_rank: int = 0, tp_size: int = 1) -> Workload:
    """Build the model on ``device`` and input buffers for the largest bucket.

    Inputs are allocated once and sliced per bucket, as the engines do. ``tp_rank`` /
    ``tp_size``: this tensor-parallel rank's shard (the inputs are the same on every rank).
    """
    from bcgprof import models

    dtype = dtypes.torch_dtype(spec.dtype)
    start = time.perf_counter()
    model = models.load(spec.name if spec.source == "preset" else str(spec.config_path.parent),
                        weights=weights, device=device, dtype=dtype, num_layers=num_layers, seed=seed,
                        tp_rank=tp_rank, tp_size=tp_size)
    torch.cuda.synchronize(device)
    build_s = time.perf_counter() - start
    vocab = int(spec.config["vocab_size"])
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    input_ids = torch.randint(0, vocab, (max_tokens,), device=device, generator=gen)
    positions = torch.arange(max_tokens, device=device)

    def refill(inputs: Sequence[torch.Tensor], generator: torch.Generator) -> None:
        ids, pos = inputs
        ids.copy_(torch.randint(0, vocab, ids.shape, device=ids.device, generator=generator))
        # a random start keeps positions consecutive, as in a chunk of a longer prompt
        start = torch.randint(0, 4096, (1,), device=pos.device, generator=generator)
        pos.copy_(torch.arange(pos.shape[0], device=pos.device) + start)

    param_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    return Workload(fn=model, inputs=[input_ids, positions], refill=refill, build_s=build_s,
                    parameter_bytes=param_bytes)
