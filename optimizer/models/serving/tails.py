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
    sign: np.ndarray | None = None  # −1 where the law is the mirror image −Y of a shifted gamma Y (κ3 < 0), else 1

    @property
    def all_skewed(self) -> bool:
        return bool(self.skewed.all())

    def take(self, rows: np.ndarray) -> _Shape:
        return _Shape(*(None if getattr(self, f.name) is None else getattr(self, f.name)[rows] for f in fields(self)))


def _shape(mean: np.ndarray, var: np.ndarray, k3: np.ndarray, mirror: np.ndarray | None = None) -> _Shape:
    """Shifted gamma with shape k = 4/γ², scale θ = κ3/(2·var), shift mean − kθ (γ = κ3/sd³);
    normal when the skewness is ~0 (γ <= 1e-3). ``mirror`` (bool, broadcast to ``mean``): where set and γ < −1e-3,
    the mirror image −Y of the shifted gamma Y of mean −mean and skewness −γ (a law bounded above, as the TPOT of a
    concave MoE step, ``latency.concave_step``); elsewhere a negative skewness is taken as 0 (normal)."""
    sd = np.sqrt(np.maximum(var, 0.0))
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        gamma = np.where(sd > 0, k3 / np.maximum(sd, 1e-300) ** 3, 0.0)
    gamma = np.nan_to_num(gamma, nan=0.0, posinf=0.0)
    sign = None
    if mirror is not None:
        sign = np.where(np.broadcast_to(mirror, gamma.shape) & (gamma < -1e-3), -1.0, 1.0)
        mean, gamma = sign * mean, np.nan_to_num(sign * gamma, neginf=0.0)
    skewed = gamma > 1e-3
    g = np.where(skewed, gamma, 1.0)
    k = 4.0 / (g * g)
    scale = np.maximum(k * sd * g / 2.0, 1e-300)
    return _Shape(mean, sd, skewed, scale, mean - k * sd * g / 2.0, 1.0 / (9.0 * k), np.sqrt(k), sign)


def _shape_sf(x: np.ndarray, sh: _Shape) -> np.ndarray:
    """P(X > x): Wilson–Hilferty ``1 − Φ(((y/kθ)^{1/3} − 1 + 1/(9k))·3√k)``, y = x − shift
    (1 for y <= 0); normal ``1 − Φ((x − mean)/sd)`` where unskewed. A mirrored law: 1 − P(Y > −x)."""
    if sh.sign is not None:
        p = _gamma_sf(x * sh.sign, sh)
        return np.where(sh.sign < 0, 1.0 - p, p)
    return _gamma_sf(x, sh)


def _gamma_sf(x: np.ndarray, sh: _Shape) -> np.ndarray:
    """``_shape_sf`` of the (unmirrored) shifted gamma or normal."""
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
    """Inverse of ``_shape_sf`` at 1 − q: ``shift + kθ·(z_q/(3√k) + 1 − 1/(9k))³`` or ``mean + z_q·sd``; a mirrored
    law −Y: −(Y's (1 − q)-quantile)."""
    if sh.sign is not None:
        return np.where(sh.sign < 0, -_gamma_quantile(1.0 - q, sh), _gamma_quantile(q, sh))
    return _gamma_quantile(q, sh)


def _gamma_quantile(q: float, sh: _Shape) -> np.ndarray:
    z = float(normal_ppf(q))
    base = z / (3.0 * sh.sqrt_k) + 1.0 - sh.inv_9k
    x_gamma = sh.shift + sh.scale * int_power(np.maximum(base, 0.0), 3)
    return np.where(sh.skewed, x_gamma, sh.mean + z * sh.sd)


def gamma_quantile(q: float, mean: np.ndarray, var: np.ndarray, k3: np.ndarray) -> np.ndarray:
    """The q-quantile of the shifted gamma with this mean, variance and third cumulant (normal where
    unskewed), Wilson–Hilferty: ``shift + kθ·(z_q/(3√k) + 1 − 1/(9k))³``."""
    return _shape_quantile(q, _shape(mean, var, k3))


def mixture_quantile(q: float, weights: np.ndarray, mean, var, k3, mirror: np.ndarray | None = None) -> np.ndarray:
    """x with Σ_j w_j·P(X_j > x) = 1 − q; components on the last axis of (N, J) arrays, weights (J,) or per row (N, J).
    ``mirror`` (bool (N, 1) or None): rows whose negatively skewed components are mirrored gammas (``_shape``).

    The root lies between the smallest and largest component quantile (components with
    weight > 0). It is found there by the Illinois variant of regula falsi on
    ``ln P(X > x) − ln(1 − q)`` (near-linear in x for gamma-like tails), row by row until
    the bracket is within QUANTILE_RTOL of the value or the tail within 0.1 % of 1 − q.
    """
    mean, var, k3 = np.broadcast_arrays(mean, var, k3)
    finite = np.all(np.isfinite(mean), axis=-1)
    ok = np.isfinite(mean)
    sh = _shape(np.where(ok, mean, 0.0), np.where(ok, var, 0.0), np.where(ok, k3, 0.0), mirror)
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


# ---------------------------------------------------------------------------------------
# Gauss quadrature of a standardised gamma law


def _gamma_jacobi(gamma: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Diagonal a_k = k·γ (k = 0..n−1) and squared off-diagonal b_k² = k + k(k − 1)·γ²/4 (k = 1..n−1) of the
    Jacobi matrix of the standardised gamma law of skewness γ (shape 4/γ²), each (…, n) (b_0² = 0)."""
    k = np.arange(n, dtype=float)
    g = np.asarray(gamma, dtype=float)[..., None]
    return k * g, k + k * (k - 1.0) * g * g / 4.0


def _gauss_by_eigh(gamma: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Golub–Welsch: the rule's nodes are the Jacobi matrix's eigenvalues, its weights their vectors' first
    components squared (the reference ``gamma_gauss_rule`` reproduces; a LAPACK call per matrix, slow in bulk)."""
    a, b2 = _gamma_jacobi(gamma, n)
    jac = np.zeros(a.shape + (n,))
    idx = np.arange(n)
    jac[..., idx, idx] = a
    jac[..., idx[1:], idx[:-1]] = jac[..., idx[:-1], idx[1:]] = np.sqrt(b2[..., 1:])
    z, vec = np.linalg.eigh(jac)
    return z, vec[..., 0, :] ** 2


GAUSS_TABLE_POINTS = 2049  # γ/(1 + γ) on [0, 1e3/1001]: the interpolated nodes start Newton within ~1e-5 of a root
GAMMA_MAX = 1e3  # largest skewness the rule takes (a gamma of shape 4e-6)
_GAUSS_TABLES: dict[int, tuple[np.ndarray, np.ndarray]] = {}


def gamma_gauss_rule(gamma: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Nodes z (…, n), ascending, and weights w (…, n) of the n-point Gauss rule of the standardised gamma law
    of skewness ``gamma`` (mean 0, variance 1, κ3 = γ; γ = 0 the normal, probabilists' Hermite): E[f(Z)] ≈
    Σ_j w_j·f(z_j), exact for polynomials of degree ≤ 2n − 1. γ is clipped to [0, ``GAMMA_MAX``].

    The nodes are the roots of the monic orthogonal polynomial P_n of the three-term recurrence
    P_(k+1)(z) = (z − k·γ)·P_k(z) − (k + k(k − 1)·γ²/4)·P_(k−1)(z) (the generalised-Laguerre Jacobi matrix,
    standardised), found by Newton's method on P_n from nodes interpolated in a table over u = γ/(1 + γ)
    (``GAUSS_TABLE_POINTS`` rules by Golub–Welsch, z/(1 + γ) interpolated: the large nodes grow like γ); the weights
    are Christoffel's, w_j = 1/Σ_k p_k(z_j)² over the orthonormal p_k = P_k/(b_1···b_k). Elementwise numpy: in bulk
    ~5× faster than a batched ``numpy.linalg.eigh`` of the n × n matrices, to ~3e-11 of it."""
    g = np.clip(np.nan_to_num(np.asarray(gamma, dtype=float)), 0.0, GAMMA_MAX)
    if n not in _GAUSS_TABLES:
        u_grid = np.linspace(0.0, GAMMA_MAX / (1.0 + GAMMA_MAX), GAUSS_TABLE_POINTS)
        z_grid, _ = _gauss_by_eigh(u_grid / (1.0 - u_grid), n)
        _GAUSS_TABLES[n] = (u_grid, z_grid / (1.0 + u_grid / (1.0 - u_grid))[:, None])
    u_grid, y_grid = _GAUSS_TABLES[n]
    pos = np.clip(g / (1.0 + g) / u_grid[1], 0.0, len(u_grid) - 1.000001)
    i = pos.astype(int)
    f = (pos - i)[..., None]
    g = g[..., None]
    z = (y_grid[i] * (1.0 - f) + y_grid[i + 1] * f) * (1.0 + g)
    q = g * g / 4.0
    for _ in range(NEWTON_ROUNDS):
        p_prev, p, dp_prev, dp = 0.0, 1.0, 0.0, 0.0
        for k in range(n):
            zk, bk = z - k * g, k + k * (k - 1) * q
            p_prev, p, dp_prev, dp = p, zk * p - bk * p_prev, dp, p + zk * dp - bk * dp_prev
        z = z - p / dp
    # Christoffel numbers: the orthonormal p_k(z_j) by the same recurrence, divided by b_(k+1)
    p_prev, p, total = 0.0, 1.0, 1.0
    b = 0.0
    for k in range(n - 1):
        b_next = np.sqrt(k + 1 + (k + 1) * k * q)
        p_prev, p = p, ((z - k * g) * p - b * p_prev) / b_next
        b = b_next
        total = total + p * p
    return z, np.broadcast_to(1.0 / total, z.shape)


NEWTON_ROUNDS = 1  # from the table's nodes: within 3e-11 of LAPACK's (relative; weights 1e-12), a second round 2e-15
