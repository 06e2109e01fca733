"""bcgprof.analysis.predict.fit: the one least-squares fit, against the closed forms of a straight
line and a brute-force search of the non-negative fits."""

from __future__ import annotations

import itertools
import math
import random

import pytest

from bcgprof.analysis.predict.fit import least_squares

XS = [1.0, 2.0, 3.0, 4.0, 5.0, 7.0]
YS = [1.0, 3.0, 2.0, 5.0, 4.0, 8.5]


def _closed_form_line(xs, ys):
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx
    a = my - b * mx
    s2 = sum((y - a - b * x) ** 2 for x, y in zip(xs, ys, strict=True)) / (n - 2)
    return a, b, math.sqrt(s2 / sxx), mx, sxx


def test_a_line_matches_its_closed_form_coefficients_errors_and_weights():
    fit = least_squares([[1.0] * len(XS), XS], YS)
    a, b, b_error, mx, sxx = _closed_form_line(XS, YS)
    assert fit.coef == pytest.approx((a, b), rel=1e-12)
    assert fit.std_errors[1] == pytest.approx(b_error, rel=1e-12)
    assert fit.residuals == pytest.approx(
        [y - a - b * x for x, y in zip(XS, YS, strict=True)], abs=1e-12
    )
    assert fit.max_misfit == pytest.approx(
        max(abs(y - a - b * x) for x, y in zip(XS, YS, strict=True)), rel=1e-12
    )
    x = 11.0
    assert fit.at((1.0, x)) == pytest.approx(a + b * x, rel=1e-12)
    weights = fit.weights_at((1.0, x))
    assert weights == pytest.approx(
        [1 / len(XS) + (v - mx) * (x - mx) / sxx for v in XS], rel=1e-12
    )
    # the weights do not depend on the observations: another ys, the same weights give its value
    other = [random.Random(1).uniform(-5, 5) for _ in XS]
    assert sum(w * y for w, y in zip(weights, other, strict=True)) == pytest.approx(
        least_squares([[1.0] * len(XS), XS], other).at((1.0, x)), rel=1e-9
    )


def test_a_column_that_adds_nothing_gets_zero():
    # x constant beside the intercept
    fit = least_squares([[1.0] * 4, [3.0] * 4], [1.0, 2.0, 3.0, 6.0])
    assert fit.coef == pytest.approx((3.0, 0.0)) and fit.std_errors[1] == 0.0
    fit = least_squares([[1.0, 2.0, 3.0], [0.0, 0.0, 0.0]], [2.0, 4.0, 6.5])
    assert fit.coef[1] == 0.0 and fit.coef[0] == pytest.approx((2 + 8 + 19.5) / 14)


def test_one_row_per_column_fits_exactly_with_no_error_estimate():
    fit = least_squares([[1.0, 1.0], [1.0, 2.0]], [3.0, 5.0])
    assert fit.coef == pytest.approx((1.0, 2.0)) and fit.max_misfit == pytest.approx(0.0, abs=1e-12)
    assert all(math.isnan(e) for e in fit.std_errors)


@pytest.mark.parametrize("seed", range(8))
def test_the_nonnegative_fit_is_the_best_over_a_grid_of_nonnegative_coefficients(seed):
    rng = random.Random(seed)
    n = 12
    x1 = [rng.uniform(1, 10) for _ in range(n)]
    # nearly collinear, as graphs and nodes are
    x2 = [v * rng.uniform(2, 3) + rng.uniform(-1, 1) for v in x1]
    ys = [
        rng.uniform(-1, 2) * a + rng.uniform(-1, 2) * b + rng.gauss(0, 1)
        for a, b in zip(x1, x2, strict=True)
    ]
    fit = least_squares([x1, x2], ys, nonnegative=True)
    assert min(fit.coef) >= 0

    def sse(a, b):
        return sum((y - a * u - b * v) ** 2 for u, v, y in zip(x1, x2, ys, strict=True))

    assert fit.sse == pytest.approx(sse(*fit.coef), rel=1e-9)
    grid = [i / 40 for i in range(0, 121)]
    assert fit.sse <= min(sse(a, b) for a, b in itertools.product(grid, grid)) + 1e-9


def test_the_nonnegative_fit_keeps_the_free_fit_when_it_is_nonnegative_and_drops_a_negative_column():  # noqa: E501 (the test's name)
    x1, x2 = [1.0, 2.0, 3.0, 4.0], [1.0, 0.0, 2.0, 1.0]
    assert least_squares([x1, x2], [3.0, 4.0, 8.0, 9.0], nonnegative=True).coef == pytest.approx(
        (2.0, 1.0)
    )
    # free fit: (2.8..., -0.6...)
    fit = least_squares([x1, x2], [3.0, 6.0, 7.0, 11.0], nonnegative=True)
    assert least_squares([x1, x2], [3.0, 6.0, 7.0, 11.0]).coef[1] < 0
    assert fit.coef[1] == 0.0 and fit.coef[0] == pytest.approx(
        sum(a * y for a, y in zip(x1, [3, 6, 7, 11], strict=True)) / 30
    )
    assert least_squares([x1], [-1.0, -2.0, -3.0, -4.0], nonnegative=True).coef == (0.0,)
