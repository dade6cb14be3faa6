"""Shifted-gamma tails (Wilson–Hilferty) and quantiles of mixtures over quadrature nodes."""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

import numpy as np

from optimizer.models.lengths import normal_ppf
from optimizer.models.serving.state import QUANTILE_ITERATIONS, QUANTILE_RTOL, int_power

# ---------------------------------------------------------------------------------------
# Shifted-gamma tails and mixture quantiles


def _std_normal_sf(z: np.ndarray) -> np.ndarray:
    """1 − Φ(z) (Abramowitz–Stegun 7.1.26 erfc, |error| < 1.5e-7)."""
    x = np.minimum(np.abs(z), 60.0) / math.sqrt(2.0)
    t = 1.0 / (1.0 + 0.3275911 * x)
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    erfc = poly * np.exp(-x * x)
    return np.where(z >= 0, 0.5 * erfc, 1.0 - 0.5 * erfc)


@dataclass(frozen=True)
class _Shape:
    """Per-component constants of the shifted gamma (or normal) fitted to (mean, var, κ3)."""

    mean: np.ndarray
    sd: np.ndarray
    skewed: np.ndarray
    scale: np.ndarray  # k·θ, k = 4/γ² the gamma shape
    shift: np.ndarray  # mean − k·θ
    inv_9k: np.ndarray  # 1/(9k) and √k, of the Wilson–Hilferty transform
    sqrt_k: np.ndarray

    @property
    def all_skewed(self) -> bool:
        return bool(self.skewed.all())

    def take(self, rows: np.ndarray) -> _Shape:
        return _Shape(*(getattr(self, f.name)[rows] for f in fields(self)))


def _shape(mean: np.ndarray, var: np.ndarray, k3: np.ndarray) -> _Shape:
    """Shifted gamma with shape k = 4/γ², scale θ = κ3/(2·var), shift mean − kθ (γ = κ3/sd³);
    normal when the skewness is ~0 (γ <= 1e-3)."""
    sd = np.sqrt(np.maximum(var, 0.0))
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        gamma = np.where(sd > 0, k3 / np.maximum(sd, 1e-300) ** 3, 0.0)
    gamma = np.nan_to_num(gamma, nan=0.0, posinf=0.0)
    skewed = gamma > 1e-3
    g = np.where(skewed, gamma, 1.0)
    k = 4.0 / (g * g)
    scale = np.maximum(k * sd * g / 2.0, 1e-300)
    return _Shape(mean, sd, skewed, scale, mean - k * sd * g / 2.0, 1.0 / (9.0 * k), np.sqrt(k))


def _shape_sf(x: np.ndarray, sh: _Shape) -> np.ndarray:
    """P(X > x): Wilson–Hilferty ``1 − Φ(((y/kθ)^{1/3} − 1 + 1/(9k))·3√k)``, y = x − shift
    (1 for y <= 0); normal ``1 − Φ((x − mean)/sd)`` where unskewed."""
    y = (x - sh.shift) / sh.scale
    z_gamma = (np.cbrt(np.maximum(y, 0.0)) - 1.0 + sh.inv_9k) * 3.0 * sh.sqrt_k
    if sh.all_skewed:
        return np.where(y <= 0, 1.0, _std_normal_sf(z_gamma))
    z_norm = (x - sh.mean) / np.maximum(sh.sd, 1e-300)
    p = _std_normal_sf(np.where(sh.skewed, z_gamma, z_norm))
    p_gamma = np.where(y <= 0, 1.0, p)
    p_norm = np.where(sh.sd > 0, p, (x < sh.mean).astype(float))
    return np.where(sh.skewed, p_gamma, p_norm)


def _shape_quantile(q: float, sh: _Shape) -> np.ndarray:
    """Inverse of ``_shape_sf`` at 1 − q: ``shift + kθ·(z_q/(3√k) + 1 − 1/(9k))³`` or ``mean + z_q·sd``."""
    z = float(normal_ppf(q))
    base = z / (3.0 * sh.sqrt_k) + 1.0 - sh.inv_9k
    x_gamma = sh.shift + sh.scale * int_power(np.maximum(base, 0.0), 3)
    return np.where(sh.skewed, x_gamma, sh.mean + z * sh.sd)


def gamma_quantile(q: float, mean: np.ndarray, var: np.ndarray, k3: np.ndarray) -> np.ndarray:
    """The q-quantile of the shifted gamma with this mean, variance and third cumulant (normal where
    unskewed), Wilson–Hilferty: ``shift + kθ·(z_q/(3√k) + 1 − 1/(9k))³``."""
    return _shape_quantile(q, _shape(mean, var, k3))


def mixture_quantile(q: float, weights: np.ndarray, mean, var, k3) -> np.ndarray:
    """x with Σ_j w_j·P(X_j > x) = 1 − q; components on the last axis of (N, J) arrays, weights (J,) or per row (N, J).

    The root lies between the smallest and largest component quantile (components with
    weight > 0). It is found there by the Illinois variant of regula falsi on
    ``ln P(X > x) − ln(1 − q)`` (near-linear in x for gamma-like tails), row by row until
    the bracket is within QUANTILE_RTOL of the value or the tail within 0.1 % of 1 − q.
    """
    mean, var, k3 = np.broadcast_arrays(mean, var, k3)
    finite = np.all(np.isfinite(mean), axis=-1)
    ok = np.isfinite(mean)
    sh = _shape(np.where(ok, mean, 0.0), np.where(ok, var, 0.0), np.where(ok, k3, 0.0))
    xq = _shape_quantile(q, sh)
    used = np.broadcast_to(np.asarray(weights) > 0, xq.shape)
    lo = np.min(np.where(used, xq, np.inf), axis=-1)
    hi = np.max(np.where(used, xq, -np.inf), axis=-1)
    log_target = math.log(1.0 - q)
    weights = np.asarray(weights)

    def f(x, rows):  # decreasing in x
        every_row = len(rows) == len(lo)
        sf = _shape_sf(x[:, None], sh if every_row else sh.take(rows))
        tail = sf @ weights if weights.ndim == 1 else np.einsum("ij,ij->i", sf, weights if every_row else weights[rows])
        return np.log(np.maximum(tail, 1e-300)) - log_target

    every = np.arange(len(lo))
    # the bracket is exact only up to rounding of the inverse: widen where it left the root out
    span = np.maximum(hi - lo, 1e-9 * np.maximum(np.abs(hi), 1e-12))
    lo, hi = lo - 1e-6 * span, hi + 1e-6 * span
    f_lo, f_hi = f(lo, every), f(hi, every)
    lo, f_lo = np.where(f_lo < 0, lo - span, lo), np.where(f_lo < 0, f(lo - span, every), f_lo)
    hi, f_hi = np.where(f_hi > 0, hi + span, hi), np.where(f_hi > 0, f(hi + span, every), f_hi)
    side = np.zeros(lo.shape)
    for _ in range(QUANTILE_ITERATIONS):
        width = hi - lo
        done = ((width <= QUANTILE_RTOL * np.maximum(np.abs(hi), 1e-12))
                | (np.minimum(-f_hi, f_lo) <= 1e-3) | ~finite)
        rows = np.flatnonzero(~done)
        if not len(rows):
            break
        a, b, fa, fb = lo[rows], hi[rows], f_lo[rows], f_hi[rows]
        denom = fa - fb
        x = np.where(denom > 0, a + (b - a) * fa / np.where(denom > 0, denom, 1.0), 0.5 * (a + b))
        x = np.clip(x, a + 1e-4 * (b - a), b - 1e-4 * (b - a))
        fx = f(x, rows)
        right = fx > 0  # root above x
        s_ = side[rows]
        lo[rows] = np.where(right, x, a)
        hi[rows] = np.where(right, b, x)
        # Illinois: halve the stale end's value when the same end is kept twice
        f_hi[rows] = np.where(right, np.where(s_ > 0, fb / 2.0, fb), fx)
        f_lo[rows] = np.where(right, fx, np.where(s_ < 0, fa / 2.0, fa))
        side[rows] = np.where(right, 1.0, -1.0)
    x = np.where(np.abs(f_lo) < np.abs(f_hi), lo, hi)
    return np.where(finite, x, np.inf)
