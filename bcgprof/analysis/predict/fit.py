"""Linear least squares: the one fit behind every fitted figure (explain's cost per graph and per
kernel node, predict's lines in the layer count and its NVML staircase slopes).

``y ~ X coef`` over the columns of ``X``, optionally with every coefficient >= 0. A column that
adds nothing to the span of the ones before it (a constant beside the intercept, a column of
zeros) is left out and gets coefficient 0, so a degenerate fit still answers. numpy is imported
on the first fit: the modules that call this are imported by read commands that never fit.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from itertools import combinations


@dataclass(frozen=True)
class Fit:
    """A solved fit of ``len(residuals)`` rows to ``len(coef)`` columns.

    ``solve`` is the linear map from the observations to the coefficients (one row per column,
    zeros for a left-out column): ``coef[j] == sum(solve[j][i] * y[i])``, which is what error
    propagation needs. ``std_errors[j]`` is the usual ``sqrt(s^2 [(X'X)^-1]_jj)``, ``s^2`` the
    residual sum of squares over the rows to spare (nan with none to spare, 0 for a left-out
    column).
    """

    coef: tuple[float, ...]
    residuals: tuple[float, ...]  # y - fitted, per row
    std_errors: tuple[float, ...]
    solve: tuple[tuple[float, ...], ...]

    @property
    def sse(self) -> float:
        return math.fsum(e * e for e in self.residuals)

    @property
    def max_misfit(self) -> float:
        """The largest absolute residual (0 for no rows)."""
        return max((abs(e) for e in self.residuals), default=0.0)

    def at(self, row: Sequence[float]) -> float:
        """The fitted value at one row of the design (one value per column)."""
        return math.fsum(c * x for c, x in zip(self.coef, row, strict=True))

    def weights_at(self, row: Sequence[float]) -> list[float]:
        """``w`` with ``at(row) == sum(w[i] * y[i])``: how each observation moves the fitted
        value."""
        n = len(self.residuals)
        return [math.fsum(x * s[i] for x, s in zip(row, self.solve, strict=True)) for i in range(n)]


def least_squares(
    columns: Sequence[Sequence[float]], ys: Sequence[float], *, nonnegative: bool = False
) -> Fit:
    """Fit ``ys`` to the ``columns`` (each as long as ``ys``) by least squares.

    ``nonnegative``: the best fit with every coefficient >= 0, found by trying every subset of
    the columns (the design is a few columns wide); of equally good fits the one with fewer
    columns wins.
    """
    import numpy as np

    y = np.asarray(ys, dtype=float)
    if not nonnegative:  # the design's own work done once for every fit to it
        design, cols, solve = _solution(tuple(tuple(float(v) for v in c) for c in columns), len(y))
        fit = _fit(design, y, cols, solve)
        assert fit is not None  # the spanning columns are independent
        return fit
    design = np.asarray(columns, dtype=float).reshape(len(columns), len(y)).T  # [rows, columns]
    k = design.shape[1]
    subsets = [list(s) for size in range(k + 1) for s in combinations(range(k), size)]
    best: Fit | None = None
    for cols in subsets:
        fit = _solve(design, y, cols)
        if fit is None or (nonnegative and min(fit.coef, default=0.0) < 0):
            continue
        if best is None or fit.sse < best.sse:
            best = fit
    assert best is not None  # the empty subset always solves
    return best


@lru_cache(maxsize=64)
def _solution(columns: tuple[tuple[float, ...], ...], rows: int):
    """A design's matrix, its spanning columns and the map from observations to coefficients:
    what every fit to it shares (a layer prediction fits hundreds of figures to one design)."""
    import numpy as np

    design = np.asarray(columns, dtype=float).reshape(len(columns), rows).T  # [rows, columns]
    cols = _spanning(design)
    solve = _solve_map(design, cols)
    for shared in (design, solve):  # kept for later fits: never changed
        if shared is not None:
            shared.flags.writeable = False
    return design, cols, solve


def _spanning(design) -> list[int]:
    """The columns kept: each one that raises the rank of those kept before it."""
    import numpy as np

    keep: list[int] = []
    for j in range(design.shape[1]):
        if np.linalg.matrix_rank(design[:, [*keep, j]]) > len(keep):
            keep.append(j)
    return keep


def _solve(design, y, cols: list[int]) -> Fit | None:
    """The fit on ``cols`` alone (others 0), or None when those columns are dependent."""
    return _fit(design, y, cols, _solve_map(design, cols))


def _solve_map(design, cols: list[int]):
    """The linear map from the observations to the coefficients of the fit on ``cols`` alone (the
    others' rows zero), or None when those columns are dependent."""
    import numpy as np

    n, k = design.shape
    solve = np.zeros((k, n))
    if cols:
        sub = design[:, cols]
        if np.linalg.matrix_rank(sub) < len(cols):
            return None
        solve[cols] = np.linalg.pinv(sub)
    return solve


def _fit(design, y, cols: list[int], solve) -> Fit | None:
    """The fit of ``y`` by ``solve`` (:func:`_solve_map`'s), or None when it is None."""
    import numpy as np

    if solve is None:
        return None
    k = design.shape[1]
    n = design.shape[0]
    coef = solve @ y
    residuals = y - design @ coef
    spare = n - len(cols)
    s2 = float(residuals @ residuals) / spare if spare > 0 else math.nan
    errors = np.sqrt(s2 * np.einsum("ji,ji->j", solve, solve)) if cols else np.zeros(k)
    errors[[j for j in range(k) if j not in cols]] = 0.0
    return Fit(
        tuple(float(c) for c in coef),
        tuple(float(e) for e in residuals),
        tuple(float(e) for e in errors),
        tuple(tuple(float(v) for v in row) for row in solve),
    )
