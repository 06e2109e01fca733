"""What one mode captures: the model's layer stack, its static input buffers, and for
decode the KV cache.

Prefill inputs are token ids and positions of one chunk, ``[max_tokens]`` each; a bucket
of ``T`` tokens runs on their first ``T``. Decode inputs are one new token per sequence
and its position, ``[max_bs]`` each; a bucket of ``B`` sequences runs on the first ``B``
(sequence ``b`` lives in row ``b`` of the cache, and attends over slots ``0..position``).
The KV cache is allocated once, before any capture, outside the graph pool, and never
charged to a bucket.

Several phases of one process (:func:`build_phase_workloads`) share one model: each phase has its
own input buffers, decode its KV cache (allocated, like the prefill buffers, before any phase is
captured), and an ``activate`` that puts the model in the phase's form (the cache attached to its
attention layers for decode, detached for prefill) before the phase is captured or replayed.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from bcgprof.errors import CaptureError
from bcgprof.report_format import GIB
from bcgprof.spec import ModelSpec


@dataclass
class Workload:
    fn: Callable[..., torch.Tensor]
    inputs: list[torch.Tensor]  # [input_ids, positions], each [max_tokens]
    refill: Callable[[Sequence[torch.Tensor], torch.Generator], None]
    build_s: float
    parameter_bytes: int
    kv_cache_bytes: int = 0  # decode: the cache allocated before any capture
    # puts the shared model in this phase's form (see build_phase_workloads); nothing for one phase
    activate: Callable[[], None] = lambda: None


def build_workload(
    spec: ModelSpec,
    *,
    weights: str,
    num_layers,
    device: torch.device,
    experts: str = "bf16",
    max_tokens: int,
    seed: int,
    tp_rank: int = 0,
    tp_size: int = 1,
    phase: str = "prefill",
    max_bs: int = 256,
    context_len: int = 4096,
    moe: str = "fused-bf16",
) -> Workload:
    """Build the model on ``device`` and input buffers for the largest bucket (and, for
    decode, a KV cache for ``max_bs`` sequences of ``context_len`` tokens).

    Inputs are allocated once and sliced per bucket, as the engines do. ``tp_rank`` /
    ``tp_size``: this tensor-parallel rank's shard (the inputs are the same on every rank).
    ``experts``: "bf16" or "packed" (gpt-oss's MXFP4 experts kept packed,
    :func:`bcgprof.models.load`). ``moe``: the MoE's workspace, "fused-bf16" or "sglang-mxfp4"
    (:func:`bcgprof.models.load`).
    """
    model, gen, build_s, param_bytes = _load(
        spec, weights, num_layers, device, experts, seed, tp_rank, tp_size, moe
    )
    vocab = int(spec.config["vocab_size"])
    if phase == "decode":
        return _decode_workload(
            model, vocab, device, gen, max_bs, context_len, build_s, param_bytes
        )
    return _prefill_workload(model, vocab, device, gen, max_tokens, build_s, param_bytes)


def build_phase_workloads(
    spec: ModelSpec,
    phases: Sequence[str],
    *,
    weights: str,
    num_layers,
    device: torch.device,
    experts: str = "bf16",
    max_tokens: int,
    seed: int,
    max_bs: int = 256,
    context_len: int = 4096,
    moe: str = "fused-bf16",
) -> list[Workload]:
    """One model on ``device`` and, per phase of ``phases``, its input buffers (and decode's KV
    cache), all allocated before any capture; each workload's ``activate`` readies the shared
    model for its phase. ``max_tokens``: the largest prefill bucket; ``max_bs`` the largest
    decode one. The model's build time and bytes are the first workload's alone."""
    model, gen, build_s, param_bytes = _load(
        spec, weights, num_layers, device, experts, seed, 0, 1, moe
    )
    vocab = int(spec.config["vocab_size"])
    out = []
    for i, phase in enumerate(phases):
        spent, size = (build_s, param_bytes) if i == 0 else (0.0, 0)
        if phase == "decode":
            work = _decode_workload(model, vocab, device, gen, max_bs, context_len, spent, size)
        else:
            work = _prefill_workload(model, vocab, device, gen, max_tokens, spent, size)
        out.append(work)
    return out


def _load(spec, weights, num_layers, device, experts, seed, tp_rank, tp_size, moe):
    """The model on ``device``, a seeded generator, the build's seconds and the parameter bytes."""
    from bcgprof import models

    dtype = models.torch_dtype(spec.dtype)
    start = time.perf_counter()
    model = models.load(
        spec.name if spec.source == "preset" else str(spec.config_path.parent),
        weights=weights,
        device=device,
        dtype=dtype,
        num_layers=num_layers,
        seed=seed,
        tp_rank=tp_rank,
        tp_size=tp_size,
        experts=experts,
        moe=moe,
    )
    torch.cuda.synchronize(device)
    build_s = time.perf_counter() - start
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    param_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    return model, gen, build_s, param_bytes


def _prefill_workload(model, vocab, device, gen, max_tokens, build_s, param_bytes) -> Workload:
    from bcgprof.models import kvcache

    input_ids = torch.randint(0, vocab, (max_tokens,), device=device, generator=gen)
    positions = torch.arange(max_tokens, device=device)

    def refill(inputs: Sequence[torch.Tensor], generator: torch.Generator) -> None:
        ids, pos = inputs
        ids.copy_(torch.randint(0, vocab, ids.shape, device=ids.device, generator=generator))
        # a random start keeps positions consecutive, as in a chunk of a longer prompt
        start = torch.randint(0, 4096, (1,), device=pos.device, generator=generator)
        pos.copy_(torch.arange(pos.shape[0], device=pos.device) + start)

    return Workload(
        fn=model,
        inputs=[input_ids, positions],
        refill=refill,
        build_s=build_s,
        parameter_bytes=param_bytes,
        activate=lambda: kvcache.attach(model, None),
    )


def check_cache_fits(need: int, free: int, max_bs: int, context_len: int) -> None:
    """One line when the KV cache does not fit in the free memory."""
    if need > free:
        raise CaptureError(
            f"the KV cache for --max-bs {max_bs} x --context-len {context_len} needs "
            f"{need / GIB:.2f} GiB but only {free / GIB:.2f} GiB of GPU memory is free for it "
            "(after the weights); lower --max-bs or --context-len"
        )


def _decode_workload(
    model,
    vocab: int,
    device: torch.device,
    gen: torch.Generator,
    max_bs: int,
    context_len: int,
    build_s: float,
    param_bytes: int,
) -> Workload:
    from bcgprof.models import kvcache

    need = kvcache.cache_bytes(model, max_bs, context_len)
    free, _ = torch.cuda.mem_get_info(device)
    check_cache_fits(need, int(free), max_bs, context_len)
    # past tokens' keys and values
    cache = kvcache.allocate(model, max_bs, context_len, device, gen)
    kvcache.attach(model, cache)
    input_ids = torch.randint(0, vocab, (max_bs,), device=device, generator=gen)
    positions = torch.randint(0, context_len, (max_bs,), device=device, generator=gen)

    def refill(inputs: Sequence[torch.Tensor], generator: torch.Generator) -> None:
        ids, pos = inputs
        ids.copy_(torch.randint(0, vocab, ids.shape, device=ids.device, generator=generator))
        pos.copy_(torch.randint(0, context_len, pos.shape, device=pos.device, generator=generator))
        for t in cache.k + cache.v:  # new past tokens too
            t.normal_(0.0, 1.0, generator=generator)

    return Workload(
        fn=model,
        inputs=[input_ids, positions],
        refill=refill,
        build_s=build_s,
        parameter_bytes=param_bytes,
        kv_cache_bytes=cache.nbytes,
        activate=lambda: kvcache.attach(model, cache),
    )
