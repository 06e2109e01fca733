"""Layer stacks of the model families bcgprof profiles, built from a Hugging Face config.json.

One module per family (``gpt_oss``, ``llama``, ``qwen3``, ``qwen3_moe``), chosen from the
config's ``architectures`` / ``model_type`` by the registry in :mod:`bcgprof.spec.registry`. A stack
is the unit a serving engine captures for prefill: ``forward(input_ids [T], positions [T]) -> [T,
hidden]``, the final-norm hidden states. The embedding lookup is part of it; the LM head is not.

    >>> from bcgprof.models import load
    >>> model = load("gpt-oss-20b", device="cuda")                 # dummy weights, bf16
    >>> model = load("/ckpt/gpt-oss-20b", weights="safetensors", num_layers=2)

Layout: presets, config.json and the family registry live in :mod:`bcgprof.spec` (torch-free;
``config`` re-exports it), ``args`` (:class:`ModelArgs`, the shared config reading), ``tp``
(the tensor-parallel split), ``layers/`` (norm, rope, attention, mlp, moe), ``checkpoint`` and
``stack`` (the decoder stack and its checkpoint API), one module per family (its config
reading, modules and checkpoint names), ``weights`` and ``mxfp4`` (filling a built stack).
Adding a family: ``bcgprof/models/<model_type>.py`` with one
:class:`~bcgprof.models.stack.DecoderModel` subclass whose ``family`` is that name, and a preset
with that ``model_type``; nothing else.
"""

from __future__ import annotations

import importlib
import warnings
from contextlib import contextmanager
from pathlib import Path

import torch

from bcgprof import dtypes
from bcgprof.errors import ModelConfigError, NoGPUError
from bcgprof.models.stack import DecoderModel
from bcgprof.models.tp import check_split
from bcgprof.spec import ModelSpec, get_family, resolve_model
from bcgprof.vocab import Weights, current, words

__all__ = ["build_meta", "check_tensor_parallel", "load", "model_class", "torch_dtype"]


def model_class(family: str) -> type[DecoderModel]:
    """The stack class of a registered family: the one DecoderModel subclass defined in the
    family's model file whose ``family`` is its name (the file imported here, on first use)."""
    entry = get_family(family)
    module = importlib.import_module(entry.module)
    found = [
        c
        for c in vars(module).values()
        if isinstance(c, type)
        and issubclass(c, DecoderModel)
        and c.__module__ == module.__name__
        and c.family == family
    ]
    if len(found) != 1:
        raise ModelConfigError(
            f"{entry.module} defines {len(found)} DecoderModel subclasses with family = "
            f"{family!r}; a family's model file defines exactly one"
        )
    return found[0]


def check_tensor_parallel(spec: ModelSpec, tp: int) -> None:
    """Raise one ModelConfigError line when ``spec``'s stack cannot be split over ``tp``
    tensor-parallel ranks (heads, KV heads, MLP and expert intermediate sizes), or its
    config cannot be read: the model's name, what does not divide, and what to do."""
    cls = model_class(spec.family)
    try:
        check_split(cls.read_args(spec.config), tp)
    except ModelConfigError as e:
        raise ModelConfigError(f"{spec.name}: {e}; pick a --tp that divides them") from None


def _spec(model: str | Path | ModelSpec) -> ModelSpec:
    return model if isinstance(model, ModelSpec) else resolve_model(str(model))


def torch_dtype(name: torch.dtype | str) -> torch.dtype:
    """The torch dtype of a name :mod:`bcgprof.dtypes` accepts (a torch dtype is returned as it
    is)."""
    if isinstance(name, torch.dtype):
        return name
    return getattr(torch, dtypes.canonical(name))


def _dtype(dtype: torch.dtype | str | None, spec: ModelSpec) -> torch.dtype:
    return torch_dtype(spec.dtype if dtype is None else dtype)


def build_meta(
    model: str | Path | ModelSpec,
    num_layers: int | None = None,
    tp_rank: int = 0,
    tp_size: int = 1,
    experts: str = "bf16",
    moe: str = "fused-bf16",
) -> DecoderModel:
    """The stack on the ``meta`` device: shapes, parameter counts and sizes, no memory.

    ``tp_rank``/``tp_size``: build tensor-parallel rank ``tp_rank``'s shard of a stack
    split over ``tp_size`` ranks (one ModelConfigError line when it does not split).
    ``experts``: "bf16", or "packed" for MXFP4 experts kept as the checkpoint stores them
    (gpt-oss only; one ModelConfigError line for other families). ``moe``: "fused-bf16", or
    "sglang-mxfp4" for SGLang's MXFP4 MoE workspace (gpt-oss only; :class:`bcgprof.vocab.Moe`)."""
    spec = _spec(model)
    with torch.device("meta"), _no_init():
        return model_class(spec.family)(
            spec.config,
            num_layers=num_layers,
            tp_rank=tp_rank,
            tp_size=tp_size,
            experts=experts,
            moe=moe,
        )


_INITS = (
    "uniform_",
    "normal_",
    "kaiming_uniform_",
    "kaiming_normal_",
    "xavier_uniform_",
    "xavier_normal_",
    "trunc_normal_",
    "constant_",
    "ones_",
    "zeros_",
)


@contextmanager
def _no_init():
    """``torch.nn.init`` as no-ops while modules are built on meta, where there are no values to
    initialise: the first random init of a meta tensor imports torch's compiler stack (seconds)."""
    saved = {name: getattr(torch.nn.init, name) for name in _INITS}
    try:
        for name in _INITS:
            setattr(torch.nn.init, name, lambda tensor, *args, **kwargs: tensor)
        yield
    finally:
        for name, fn in saved.items():
            setattr(torch.nn.init, name, fn)


def load(
    model: str | Path | ModelSpec,
    weights: str = "dummy",
    device: str | torch.device = "cuda",
    dtype: torch.dtype | str | None = None,
    num_layers: int | None = None,
    seed: int = 0,
    tp_rank: int = 0,
    tp_size: int = 1,
    experts: str = "bf16",
    moe: str = "fused-bf16",
) -> DecoderModel:
    """Build a model's layer stack on ``device`` with dummy or checkpoint weights.

    ``model``: a preset name (``gpt-oss-20b``), a config.json path or a checkpoint
    directory. ``weights``: ``"dummy"`` (seeded random values made on the device, in the
    dtype), ``"one-layer"`` (dummy values, one set that every layer of a shape uses:
    :func:`~bcgprof.models.weights.share_layer_weights`; ``"shared"`` is its old name, read with
    a warning for one release) or ``"safetensors"`` (a checkpoint directory in the published Hugging
    Face layout, gpt-oss's MXFP4 experts dequantised). ``dtype``: default from the config
    (bf16 for the presets). ``num_layers``: keep only the first N layers.
    ``tp_rank``/``tp_size``: only this tensor-parallel rank's shard (heads, intermediate
    columns) is built and filled; a checkpoint's published tensors are sliced for the
    rank as they load, and the forward all-reduces over the default process group, which
    must be initialised for ``tp_size`` > 1. Dummy shards are drawn per parameter name,
    as unsharded ones are (they are not slices of the unsharded model's dummy values).
    ``experts``: "bf16" (expert weights in ``dtype``) or "packed" (gpt-oss's MXFP4 experts
    kept as uint8 blocks and scales, decoded inside the fused MoE's GEMMs; a checkpoint's
    ``*_blocks`` / ``*_scales`` load as stored; dummy blocks are random bytes). ``moe``: the MoE's
    workspace, "fused-bf16" or "sglang-mxfp4" (as :func:`build_meta`).

    The module is built on ``meta``, cast, then materialised uninitialised on the device
    in its final dtype (no CPU staging, no float32 detour), then filled. Returned in eval
    mode with gradients off; ``forward(input_ids, positions) -> [T, hidden]``.
    """
    spec = _spec(model)
    if isinstance(weights, str) and current(Weights, weights) != weights:
        warnings.warn(
            f"weights={weights!r} is deprecated and will be removed in the next release; use "
            f"weights={current(Weights, weights)!r}",
            FutureWarning,
            stacklevel=2,
        )
        weights = current(Weights, weights)
    if weights not in words(Weights):
        raise ModelConfigError(
            f"weights must be one of {', '.join(map(repr, words(Weights)))}, got {weights!r}"
        )
    if weights == Weights.SAFETENSORS and spec.checkpoint_dir is None:
        raise ModelConfigError(
            f"{spec.name} is a preset with no checkpoint; pass a checkpoint directory for "
            "weights='safetensors'"
        )
    torch_dtype = _dtype(dtype, spec)
    device = torch.device(device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise NoGPUError(f"device {device} requested but CUDA is not available; use device='cpu'")

    from bcgprof.models import weights as weight_loading

    module = build_meta(
        spec, num_layers, tp_rank=tp_rank, tp_size=tp_size, experts=experts, moe=moe
    )
    module = module.to(dtype=torch_dtype)  # still meta: nothing allocated
    if weights == Weights.ONE_LAYER:
        # tied on meta, so one layer's weights are ever allocated
        weight_loading.share_layer_weights(module)
        module = weight_loading.materialise(module, device)
    else:
        module = module.to_empty(device=device)

    if weights in (Weights.DUMMY, Weights.ONE_LAYER):
        weight_loading.init_dummy(module, seed)
    else:
        assert spec.checkpoint_dir is not None  # a preset was refused above
        weight_loading.load_safetensors(module, spec.checkpoint_dir)
    module.reset_buffers()
    module.eval()
    module.requires_grad_(False)
    return module
