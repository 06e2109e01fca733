"""tests/tolerances.py: the bound holds for sums in any order, is attained within a small factor
by an adversarial sum, follows the dtype, and holds for a float32 forward of every family
against the same model in float64."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch

from bcgprof.models import model_class
from bcgprof.models.mxfp4 import FP4_VALUES
from bcgprof.spec import family_names

from .test_models_tiny import inputs, randomize_, tiny_config
from tolerances import FP4_E2M1_EPS, close, eps, model_close

SIZES = [2, 10, 100, 1000, 4096, 100_000]


def _orders(x: np.ndarray) -> dict[str, float]:
    """The float32 sum of x in several orders that all round differently."""
    n = len(x)
    pad = np.zeros((-n) % 32, dtype=np.float32)
    return {
        "sequential": float(
            np.cumsum(x, dtype=np.float32)[-1]
        ),  # left to right, every partial sum rounded
        "reversed": float(np.cumsum(x[::-1], dtype=np.float32)[-1]),
        "blocked": float(
            np.cumsum(
                np.concatenate([x, pad]).reshape(-1, 32).sum(axis=1, dtype=np.float32),
                dtype=np.float32,
            )[-1]
        ),
        "pairwise": float(np.sum(x, dtype=np.float32)),
        "torch": float(torch.from_numpy(x).sum()),
    }


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("kind", ["normal", "positive", "wide"])
def test_sums_in_any_order_lie_inside_the_bound(n, kind):
    rng = np.random.default_rng(n)
    x = {
        "normal": rng.standard_normal(n),
        "positive": rng.random(n),
        "wide": rng.standard_normal(n) * 10.0 ** rng.integers(-6, 6, n),
    }[kind].astype(np.float32)
    # float32 values sum exactly in float64's fsum (to 2^-53)
    exact = math.fsum(x.astype(np.float64))
    magnitude = math.fsum(np.abs(x).astype(np.float64))
    tol = close(torch.float32, reduction=n, scale=magnitude)
    sums = _orders(x)
    for name, s in sums.items():  # each within gamma(n) * sum|x| of the exact sum: half the bound
        assert abs(s - exact) <= tol["atol"] / 2, (name, s, exact)
    for a in sums.values():  # any two within the whole bound, which assert_close applies
        for b in sums.values():
            assert abs(a - b) <= tol["atol"]


@pytest.mark.parametrize("n", [16, 1000, 100_000])
def test_the_bound_is_attained_within_a_factor_of_four(n):
    # 1 + u rounds to 1 (a tie, to even): left to right, each of the n - 1 terms u is lost, while
    # summed first they add exactly to (n - 1) u; so the two orders differ by about n u, half the
    # bound
    u = eps(torch.float32) / 2
    x = np.array([1.0] + [u] * (n - 1), dtype=np.float32)
    sequential = float(np.cumsum(x, dtype=np.float32)[-1])
    small_first = float(np.float32(1.0) + np.cumsum(x[1:], dtype=np.float32)[-1])
    assert sequential == 1.0
    tol = close(torch.float32, reduction=n, scale=math.fsum(x.astype(np.float64)))
    assert tol["atol"] / 4 <= abs(small_first - sequential) <= tol["atol"]


def test_the_bound_follows_the_dtype_depth_and_scale():
    one = close(torch.float32, reduction=1)
    # two roundings apart
    assert one["rtol"] == pytest.approx(torch.finfo(torch.float32).eps, rel=1e-6)
    assert close(torch.bfloat16, reduction=1)["rtol"] == pytest.approx(2.0**-7, rel=1e-2)
    assert close(torch.float16, reduction=1)["rtol"] == pytest.approx(2.0**-10, rel=1e-3)
    deep = close(torch.float32, reduction=64, depth=4, scale=3.0)
    assert deep == close(torch.float32, reduction=256, scale=3.0)
    assert deep["atol"] == pytest.approx(3.0 * deep["rtol"])
    assert deep["rtol"] == pytest.approx(256 * one["rtol"], rel=1e-4)  # linear while n * u << 1
    with pytest.raises(ValueError, match="no useful bound"):
        close(torch.bfloat16, reduction=128)
    with pytest.raises(ValueError, match=">= 1"):
        close(torch.float32, reduction=0)


def test_fp4_e2m1_rounds_to_within_half_its_eps():
    # between neighbouring normal E2M1 values (1 mantissa bit) the midpoint is within eps/2 relative
    normal = sorted(v for v in set(FP4_VALUES) if v >= 1.0)
    assert normal == [1.0, 1.5, 2.0, 3.0, 4.0, 6.0]
    for lo, hi in itertools.pairwise(normal):
        assert (hi - lo) / 2 / lo <= FP4_E2M1_EPS / 2
    assert FP4_E2M1_EPS == 1.5 - 1.0
    if hasattr(torch, "float4_e2m1fn_x2"):
        assert eps(torch.float4_e2m1fn_x2) == FP4_E2M1_EPS


@pytest.mark.parametrize("family", family_names())
def test_a_float32_forward_lies_inside_half_the_model_bound_of_float64(family):
    # float64 is exact at float32's scale, so a correct float32 forward is within half the bound
    # (the other half is the other float32 implementation a test compares it with)
    T = 40
    model = model_class(family)(tiny_config(family)).eval()
    randomize_(model, 0)
    ids, positions = inputs(model.args.vocab_size, T)
    with torch.no_grad():
        got = model(ids, positions)
        model.double().reset_buffers()
        exact = model(ids, positions)
    assert exact.dtype == torch.float64
    tol = model_close(model.args, keys=T, scale=exact.abs().max().item())
    assert (got.double() - exact).abs().max().item() <= tol["atol"] / 2
