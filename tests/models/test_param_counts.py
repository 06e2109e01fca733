"""Parameter counts of the presets' stacks against the published model sizes.

Published sizes count the whole model: embeddings, every layer, the final norm and the
LM head, MoE experts as bf16-equivalent parameters (gpt-oss ships them in MXFP4). Our
stack stops before the LM head (it runs outside the captured graph), so the test adds
vocab x hidden for it (none of these models ties it to the embedding).
"""

import pytest
import torch

from bcgprof import models
from bcgprof.models.weights import count_parameters, parameter_bytes

PUBLISHED = {  # model cards
    "gpt-oss-20b": 20.9e9,
    "gpt-oss-120b": 116.8e9,
    "Llama-3.1-8B": 8.03e9,
    "Llama-3.1-70B": 70.6e9,
    "Qwen3-8B": 8.19e9,
    "Qwen3-30B-A3B": 30.5e9,
}


@pytest.mark.parametrize("name", list(PUBLISHED))
def test_matches_published_size(name):
    stack = models.build_meta(name)
    config = stack.config
    assert not config.get("tie_word_embeddings")
    lm_head = config["vocab_size"] * config["hidden_size"]
    total = count_parameters(stack) + lm_head
    assert total == pytest.approx(PUBLISHED[name], rel=0.01)


def test_meta_counts_allocate_nothing_and_bytes_follow_dtype():
    stack = models.build_meta("gpt-oss-120b")
    assert all(p.is_meta for p in stack.parameters())
    n = count_parameters(stack)
    assert parameter_bytes(stack.to(torch.bfloat16)) == 2 * n
    assert parameter_bytes(stack.to(torch.float32)) == 4 * n


def test_truncated_stack_counts_layers():
    # embeddings + final norm + N identical layers: the count is linear in N
    one, two, four = (
        count_parameters(models.build_meta("gpt-oss-20b", num_layers=n)) for n in (1, 2, 4)
    )
    per_layer = two - one
    assert four - two == 2 * per_layer
    h, e, i = 2880, 32, 2880
    experts = e * (h * 2 * i + 2 * i + i * h + h)  # gate_up, its bias, down, its bias
    assert experts < per_layer < experts * 1.05  # attention and router are a few percent
