"""``--weights one-layer``: one layer's weights for every layer, the same computation as distinct
weights."""

from __future__ import annotations

import pytest
import torch

from bcgprof.errors import ModelConfigError
from bcgprof.models import build_meta, load
from bcgprof.models.weights import parameter_bytes, share_layer_weights
from bcgprof.spec import family_names, resolve_model

from .test_models_tiny import inputs, tiny_config, write_config


def _layer_params(layer) -> list[torch.Tensor]:
    return [p for _, p in layer.named_parameters()]


@pytest.mark.parametrize("family", family_names())
def test_shared_layers_hold_one_set_of_tensors_and_compute_what_distinct_copies_of_it_compute(
    tmp_path, family
):
    path = write_config(tmp_path / family, tiny_config(family))
    shared = load(path, weights="one-layer", device="cpu", seed=5)
    distinct = load(path, weights="dummy", device="cpu", seed=5)
    first = _layer_params(shared.layers[0])
    for layer in shared.layers[1:]:
        assert all(a is b for a, b in zip(_layer_params(layer), first, strict=True))
    # Only the layers' bytes shrink, to one layer's.
    one_layer = sum(p.numel() * p.element_size() for p in first)
    n = len(distinct.layers)
    assert parameter_bytes(shared) == parameter_bytes(distinct) - (n - 1) * one_layer
    # Distinct weights holding the shared values, layer for layer, give the same hidden states bit
    # for bit: sharing changes what the weights hold, never what the forward computes with them.
    with torch.no_grad():
        for layer in distinct.layers:
            for p, q in zip(_layer_params(layer), first, strict=True):
                p.copy_(q)
        distinct.embed_tokens.weight.copy_(shared.embed_tokens.weight)
        distinct.norm.weight.copy_(shared.norm.weight)
    ids, pos = inputs(256, 24)
    assert torch.equal(shared(ids, pos), distinct(ids, pos))


def test_layers_of_another_shape_keep_their_own_set(tmp_path):
    # Qwen3-MoE with a dense layer among the sparse ones: two layer shapes, two weight sets.
    config = tiny_config("qwen3_moe", num_hidden_layers=4, mlp_only_layers=[1])
    model = build_meta(resolve_model(str(write_config(tmp_path / "q", config))), None)
    assert share_layer_weights(model) == 2
    sparse = _layer_params(model.layers[0])
    assert all(a is b for a, b in zip(_layer_params(model.layers[2]), sparse, strict=True))
    assert not any(a is b for a in _layer_params(model.layers[1]) for b in sparse)


def test_gpt_oss_120b_shared_is_one_layer_of_parameters_on_meta():
    # What lets the full 36 layers fit one GPU: ~6.4 GB of one layer's bf16 experts instead of ~230
    # GB.
    model = build_meta(resolve_model("gpt-oss-120b"), None)
    full = sum(p.numel() for p in model.parameters())
    share_layer_weights(model)
    kept = sum(p.numel() for p in model.parameters())
    per_layer = sum(p.numel() for p in model.layers[0].parameters())
    assert len(model.layers) == 36 and kept == full - 35 * per_layer and kept * 2 < 10 * 2**30


def test_one_layer_weights_are_dummy_values_only():
    with pytest.raises(ModelConfigError, match="weights must be"):
        load("gpt-oss-20b", weights="tied", device="meta")


def test_the_old_name_of_one_layer_weights_still_loads_them_with_a_warning(tmp_path):
    path = write_config(tmp_path / "llama", tiny_config("llama"))
    with pytest.warns(
        FutureWarning, match="weights='shared' is deprecated.*use weights='one-layer'"
    ):
        old = load(path, weights="shared", device="cpu", seed=5)
    first = _layer_params(old.layers[0])
    assert all(a is b for a, b in zip(_layer_params(old.layers[1]), first, strict=True))
