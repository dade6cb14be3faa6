"""Load feedback: a longer step admits more arrivals, which make later steps longer (a self-exciting process)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from optimizer.models.serving.fixed_point import State
from optimizer.models.serving.rows import RowLengths
from optimizer.models.serving.state import GRID_BLOCK_ELEMENTS

# Window integrals of the linear load-feedback model (see ``feedback_factors``), as functions of the
# decode gain v: I_a(v) = (1/2π)∫ K(θ)²/|1 − v·K₁(θ)|² dθ, I_b(v) = (1/2π)∫ K(θ)·Re K₁(θ)/|1 − v·K₁(θ)|² dθ
# with K₁(θ) = (1 − e^{−iθ})/(iθ) (a boxcar of one lifetime, θ = ω·steps) and K = |K₁|². Both are
# tabulated as 1/(1 − v) − Δ(v) (I_c(v) = (1/2π)∫ K/|1 − vK₁|² = 1/(1 − v) exactly), Δ by
# quadrature on θ ∈ [0, 6000] with dθ = 1e-3 (tests/test_serving.py re-checks three points).
# Exact ends: I_a(0) = 2/3, I_b(0) = 1/2.
_FEEDBACK_V = np.array([0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95, 0.98])
_DELTA_A = np.array([1 / 3, 0.3417, 0.3505, 0.3598, 0.3694, 0.3794, 0.3899, 0.4008, 0.4064, 0.4122,
                     0.4180, 0.4240, 0.4302, 0.4340])
_DELTA_B = np.array([0.5, 0.5170, 0.5349, 0.5539, 0.5738, 0.5947, 0.6169, 0.6402, 0.6523, 0.6648,
                     0.6776, 0.6908, 0.7043, 0.7126])
_MAX_GAIN = 0.98


def feedback_integrals(v) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(I_a, I_b, I_c) of the load-feedback model at decode gain ``v`` in [0, 0.98] (see the table above)."""
    v = np.clip(np.asarray(v, dtype=float), 0.0, _MAX_GAIN)
    ic = 1.0 / (1.0 - v)
    return ic - np.interp(v, _FEEDBACK_V, _DELTA_A), ic - np.interp(v, _FEEDBACK_V, _DELTA_B), ic


@dataclass(frozen=True)
class _Feedback:
    """Load-feedback factors of the TPOT moments (arrays (N,))."""

    bias_s: np.ndarray  # request-weighted mean TPOT − t̄
    prefill_factor: np.ndarray  # long-window variance factor of the per-step prefill noise
    prefill_k3_factor: np.ndarray  # its third-cumulant factor, (1 + 2g)·prefill_factor² (a branching process)
    batch_factor: np.ndarray  # factor on the M/G/∞ batch-average variance
    batch_k3_factor: np.ndarray  # its third-cumulant factor, (1 + 2g)·batch_factor² (the same clusters)
    cross_var_s2: np.ndarray  # covariance of prefill noise and batch drift (s²)
    occupancy_factor: np.ndarray  # Var / Poisson variance of the instantaneous batch and KV occupancy


def feedback_factors(lam: np.ndarray, s: State, lens: RowLengths,
                     gain_slope_s: np.ndarray | None = None) -> _Feedback:
    """Load feedback: a longer step admits more arrivals, which make later steps longer.

    Linearised in the step clock, arrivals per step are ``a_k = ξ_k + λ·δT_k`` (ξ Poisson,
    variance λ·t̄) and the step time is ``δT_k = s·δb_k + ε·a_{k−1}`` with the batch
    ``δb_k = Σ_{m=1..n} a_{k−m}`` (n = E[O−1] steps of decoding, s = dD/db, ε = ∂E[T]/∂m the
    marginal prefill cost of one prompt). That is a self-exciting (Hawkes) process with
    branching ratio ``u_p + u_d``, ``u_p = λ·ε`` (``rho1``) and ``u_d = λ·n·s``: each request's
    own prefill and decode time lets ``u_p + u_d`` further requests in, which do the same.
    In the frequency domain (θ = ω·n) the gain is ``u_p + u_d·K₁(θ)``, so fluctuations slower
    than one lifetime are amplified by ``1/|1 − u_p − u_d·K₁|²``. Averaging over a request's
    n steps (window |K₁|² = K) gives, with ``v = u_d/(1 − u_p)`` and ``A = 1/(1 − u_p)²``:

    - batch drift: M/G/∞ variance × ``A·I_a(v)/I_a(0)``, its third cumulant × ``(1 + 2g)·(A·I_a(v)/I_a(0))²``
      (the clusters below, as for the prefill noise);
    - prefill noise: ``Var(T)/n × A·I_c(v)`` (was the lag-1 factor (1 + ρ₁)/(1 − ρ₁)), and its third
      cumulant ``κ3(T)/n² × (1 + 2g)·(A·I_c(v))²``: the arrivals come in clusters (an immigrant and its
      descendants, a Galton–Watson tree of Poisson(g) offspring: Borel sizes N with E[N] = 1/(1 − g),
      E[N²] = 1/(1 − g)³, E[N³] = (1 + 2g)/(1 − g)⁵), so over a long window the counts' cumulants are
      those of a Poisson count of the same mean × 1, 1/(1 − g)², (1 + 2g)/(1 − g)⁴: the κ3 factor is
      (1 + 2g) × the square of the variance factor, not its 3/2 power (which keeps the skewness of a
      Poisson count; knee10: with it the TPOT p99 of llama-3.1-70b fp4 on rtx_pro_6000 at its TPOT
      capacity was 100.0 ms against 106.1 ms simulated, the per-output-length sds within 5 % and the
      p99s 6-10 % under; with (1 + 2g)·F² 105.6 ms);
    - cross term (the same arrivals are prefilled in and then decode during the window):
      ``2·λ·t̄·s·ε·A·I_b(v)``;
    - mean: requests see steps weighted by the batch, ``E[bT]/E[b] = t̄ + Cov(b, T)/b̄`` with
      ``Cov(b, T)/b̄ = A·(s·I_c(v) + ε/n·(I_c(v) − 1/2)) − ε/(2n)``; the larger batch this
      implies lengthens t̄ itself by ``u_d/(1 − g)`` of it (linear response of the fixed
      point, g = u_p + u_d), so the shift is ``bias·(1 − u_p)/(1 − g)``.

    - instantaneous batch and KV occupancy (a boxcar of one lifetime, unaveraged): variance
      × ``A·I_c(v) = 1/((1 − u_p)(1 − g))`` (``occupancy_factor``). Against the simulator
      (scripts/agreement.py) this matches the batch variance to ~15 % up to 70 % load; at
      90 % with a large prefill share (u_p > 0.5) it overstates it up to 2× (the linear
      response ignores that the prefill queue and the chunk budget cap a step's extra), so
      the KV p99 there errs high (conservative).

    At u_p = u_d = 0 this is the old model plus the cross term and ``s`` (the tagged request
    in its own batch). g is capped at 0.98.
    """
    n = np.maximum(lens.mean_o1, 1.0)
    up = np.clip(s.rho1, 0.0, 0.95)
    slope = np.maximum(s.slope_s, 0.0)
    eps = np.maximum(s.eps_s, 0.0)
    # the gain's slope: a running step's D(B + 2) − D(B + 1) over the others B where D is not linear
    # (``latency._at_spread_slope``); the tangent ``s.slope_s`` by default
    ud = lam * lens.mean_o1 * (slope if gain_slope_s is None else np.maximum(gain_slope_s, 0.0))
    g = np.minimum(up + ud, _MAX_GAIN)
    # the fixed point's response to a larger mean batch: dE[D(B)]/db̄ = E[D(B + 1) − D(B)] (Stein–Chen, Poisson B),
    # the spread slope ``s.slope_s``, not the running step's gain slope (the same for a D linear over the spread)
    g_mean = np.minimum(up + lam * lens.mean_o1 * slope, _MAX_GAIN)
    ia, ib, ic = feedback_integrals(ud / (1.0 - up))
    amp = 1.0 / (1.0 - up) ** 2
    cov = amp * (slope * ic + eps / n * (ic - 0.5)) - eps / (2.0 * n)
    tbar = np.where(np.isfinite(s.step_s), s.step_s, 0.0)
    return _Feedback(
        bias_s=cov * (1.0 - up) / (1.0 - g_mean),
        prefill_factor=amp * ic,
        prefill_k3_factor=(1.0 + 2.0 * g) * (amp * ic) ** 2,
        batch_factor=amp * ia / (2.0 / 3.0),
        batch_k3_factor=(1.0 + 2.0 * g) * (amp * ia / (2.0 / 3.0)) ** 2,
        cross_var_s2=2.0 * lam * tbar * slope * eps * amp * ib,
        occupancy_factor=amp * ic,
    )


def batch_average_var(lam, tbar, window, o1, o_w) -> np.ndarray:
    """Variance of the M/G/∞ population averaged over a window W (per config, per O node; o1, o_w (N, QO)).

    ``(2λ/W²)·Σ_q w_q·I(s_q, W)`` with service ``s_q = (O_q−1)·t̄`` and
    ``I = W²s/2 − W³/6`` (s >= W) or ``W·s²/2 − s³/6`` (s < W).
    """
    integral = np.empty(window.shape)  # (N, QO), by blocks of rows: the (rows, QO, QO') temporaries stay in cache
    step = max(1, GRID_BLOCK_ELEMENTS // max(window.shape[1] * o1.shape[1], 1))
    for start in range(0, len(window), step):
        rows = slice(start, start + step)
        s = o1[rows, None, :] * tbar[rows, None, None]  # (rows, 1, QO') others' service
        w = window[rows, :, None]  # (rows, QO, 1)
        big = w * w * s / 2.0 - w * w * w / 6.0
        small = w * s * s / 2.0 - s * s * s / 6.0
        integral[rows] = (np.where(s >= w, big, small) @ o_w[rows, :, None])[:, :, 0]
    with np.errstate(invalid="ignore", divide="ignore"):
        v = 2.0 * lam[:, None] * integral / np.maximum(window, 1e-300) ** 2
    return np.where(window > 0, v, 0.0)


def batch_average_cumulants(lam, tbar, window, o1, o_w) -> tuple[np.ndarray, np.ndarray]:
    """Variance and third cumulant of the M/G/∞ population averaged over a window W (per config, per O node; as
    ``batch_average_var``), in one pass.

    Shot noise: another request of service s arriving at offset a overlaps the window for o(a), a trapezoid rising
    over m = min(s, W), flat at m for |s − W|, falling over m; its k-th cumulant is ``λ·Σ_q w_q·∫(o/W)^k da`` =
    ``(λ/W^k)·Σ_q w_q·(2m^(k+1)/(k+1) + |s_q − W|·m^k)``. k = 2 is ``batch_average_var`` (to rounding); k = 3:
    ``(λ/W³)·Σ_q w_q·m³·(|s_q − W| + m/2)``. For s = W it is λW/2 = b̄/2 against the variance 2b̄/3: skewness
    0.92/√b̄, what the simulated TPOT of a nearly idle MoE replica shows (qwen3-30b-a3b fp8 h100 at 2.89 req/s,
    b̄ = 0.91: 1.11 simulated, docs/model-accuracy.md "MoE TPOT p99 at mid load").
    """
    integral = np.empty(window.shape + (2,))
    step = max(1, GRID_BLOCK_ELEMENTS // max(window.shape[1] * o1.shape[1], 1))
    for start in range(0, len(window), step):
        rows = slice(start, start + step)
        s = o1[rows, None, :] * tbar[rows, None, None]  # (rows, 1, QO') others' service
        w = window[rows, :, None]  # (rows, QO, 1)
        m = np.minimum(s, w)
        flat = np.abs(s - w)
        m2 = m * m
        ow = o_w[rows, :, None]  # (rows, QO', 1): two (rows, QO, QO') products, not one stacked (2× the time)
        integral[rows, :, 0] = (m2 * (flat + 2.0 * m / 3.0) @ ow)[:, :, 0]
        integral[rows, :, 1] = (m2 * m * (flat + m / 2.0) @ ow)[:, :, 0]
    with np.errstate(invalid="ignore", divide="ignore"):
        w = np.maximum(window, 1e-300)
        var = lam[:, None] * integral[..., 0] / w**2
        k3 = lam[:, None] * integral[..., 1] / w**3
    return np.where(window > 0, var, 0.0), np.where(window > 0, k3, 0.0)
