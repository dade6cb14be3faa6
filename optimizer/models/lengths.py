"""Token-length distributions as numpy: mean, quantiles, seeded samples, quadrature, buckets.

A :class:`workloads.spec.LengthDist` is one of

- **fixed**: every request has ``mean`` tokens;
- **lognormal** from ``{mean, p99}``: ``ln X ~ N(mu, sigma^2)`` with ``sigma`` from
  ``p99/mean = exp(z99*sigma - sigma^2/2)`` (``LengthDist.lognormal_sigma``) and
  ``mu = ln(mean) - sigma^2/2``;
- **histogram**: ``[[tokens, weight], ...]``, a discrete distribution.

Samples are whole tokens (rounded, >= 1), as a server sees them. Pure functions, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

from workloads.spec import LengthDist

_STD_NORMAL = NormalDist()
BUCKET_SAMPLE_SIZE = 40_000
BUCKET_SEED = 20240531
HISTOGRAM_BINS_PER_BUCKET = 24


def normal_ppf(q) -> np.ndarray:
    """Inverse standard normal CDF, elementwise (``statistics.NormalDist.inv_cdf``)."""
    q = np.asarray(q, dtype=float)
    flat = [_STD_NORMAL.inv_cdf(float(x)) for x in np.clip(q, 1e-15, 1 - 1e-15).ravel()]
    return np.array(flat, dtype=float).reshape(q.shape)


def _lognormal_mu_sigma(dist: LengthDist) -> tuple[float, float]:
    sigma = dist.lognormal_sigma()
    return float(np.log(dist.mean_tokens) - sigma * sigma / 2.0), sigma


def _histogram(dist: LengthDist) -> tuple[np.ndarray, np.ndarray]:
    """Sorted token values and probabilities (weights normalised to 1)."""
    pairs = sorted(dist.histogram or [])
    tokens = np.array([t for t, _ in pairs], dtype=float)
    weights = np.array([w for _, w in pairs], dtype=float)
    return tokens, weights / weights.sum()


def mean_tokens(dist: LengthDist) -> float:
    """E[X] in tokens (fixed: the value; lognormal: the given mean; histogram: Σ t·w / Σ w)."""
    return float(dist.mean_tokens)


def quantile_tokens(dist: LengthDist, q) -> np.ndarray:
    """Quantile(s) ``q`` in [0, 1] of the length in tokens (continuous for the lognormal).

    Lognormal: ``exp(mu + sigma * Phi^-1(q))``; histogram: the smallest value whose
    cumulative weight reaches ``q``; fixed: the value.
    """
    q = np.asarray(q, dtype=float)
    if dist.kind == "fixed":
        return np.full(q.shape, dist.mean_tokens)
    if dist.kind == "lognormal":
        mu, sigma = _lognormal_mu_sigma(dist)
        return np.exp(mu + sigma * normal_ppf(q))
    tokens, probs = _histogram(dist)
    cdf = np.cumsum(probs)
    idx = np.searchsorted(cdf, q - 1e-12, side="left")
    return tokens[np.minimum(idx, len(tokens) - 1)]


def sample_tokens(dist: LengthDist, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` whole-token lengths (int64, >= 1) drawn with ``rng`` (seeded by the caller)."""
    if dist.kind == "fixed":
        return np.full(n, max(1, round(dist.mean_tokens)), dtype=np.int64)
    if dist.kind == "lognormal":
        mu, sigma = _lognormal_mu_sigma(dist)
        x = rng.lognormal(mu, sigma, n)
    else:
        tokens, probs = _histogram(dist)
        x = tokens[rng.choice(len(tokens), size=n, p=probs)]
    return np.maximum(np.rint(x), 1).astype(np.int64)


TAIL_EDGES = (0.001, 0.005, 0.01, 0.02, 0.05, 0.95, 0.98, 0.99, 0.995, 0.999)


def quadrature(dist: LengthDist, n_nodes: int = 10) -> tuple[np.ndarray, np.ndarray]:
    """Nodes (tokens) and weights (sum 1) such that ``Σ w·f(x) ≈ E[f(X)]``.

    Fixed: one node. Histogram: its own values. Lognormal: probability strata — ``n_nodes``
    equal ones between 5 % and 95 % plus finer ones in both tails (``TAIL_EDGES``), so
    p99s that depend on the longest or shortest requests are resolved — each represented
    by its conditional mean (so Σ w·x = E[X] exactly):
    ``E[X | q_i < U < q_{i+1}] = mean · (Phi(z_{i+1} − sigma) − Phi(z_i − sigma)) / (q_{i+1} − q_i)``.
    Nodes are rounded to whole tokens (>= 1) only in the simulator, not here.
    """
    if dist.kind == "fixed":
        return np.array([dist.mean_tokens]), np.array([1.0])
    if dist.kind == "histogram":
        return _histogram(dist)
    _, sigma = _lognormal_mu_sigma(dist)
    edges_q = np.unique(np.concatenate([[0.0, 1.0], TAIL_EDGES, np.linspace(0.05, 0.95, n_nodes + 1)]))
    z = normal_ppf(edges_q)
    z[0], z[-1] = -np.inf, np.inf
    cdf = np.array([_STD_NORMAL.cdf(v) if np.isfinite(v) else (0.0 if v < 0 else 1.0) for v in z - sigma])
    weights = np.diff(edges_q)
    nodes = dist.mean_tokens * np.diff(cdf) / weights
    return nodes, weights


def quadrature_spread(dist: LengthDist, n_nodes: int = 10) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``quadrature`` plus the variance of the length inside each node's stratum (tokens²).

    Lognormal: ``E[X² | stratum] = e^{2mu + 2sigma²}·(Phi(z_{i+1} − 2sigma) − Phi(z_i − 2sigma))/(q_{i+1} − q_i)``
    minus the node². Fixed and histogram nodes are exact values (variance 0). A mixture over
    strata with their spread has a continuous CDF, so its p99 is not stuck on a node.
    """
    nodes, weights = quadrature(dist, n_nodes)
    if dist.kind != "lognormal":
        return nodes, weights, np.zeros_like(nodes)
    mu, sigma = _lognormal_mu_sigma(dist)
    edges_q = np.concatenate([[0.0], np.cumsum(weights)])
    z = normal_ppf(np.clip(edges_q, 0.0, 1.0))
    z[0], z[-1] = -np.inf, np.inf
    cdf2 = np.array([_STD_NORMAL.cdf(v) if np.isfinite(v) else (0.0 if v < 0 else 1.0) for v in z - 2 * sigma])
    second = np.exp(2 * mu + 2 * sigma * sigma) * np.diff(cdf2) / weights
    return nodes, weights, np.maximum(second - nodes**2, 0.0)


# A p99 cannot resolve prompts rarer than this: their moments (to L^8 for the fourth of a quadratic service
# time) are held by lengths a 10^4-request window rarely sees, and a gamma fitted to moments they dominate
# puts the p99 at the wrong place (svc07 of scripts/bench_optimizer.py: 389 ms uncensored, 447 ms to second
# order, 508 ms censored here, against 512 ms simulated). Lengths beyond it count at it.
QUEUE_TAIL_Q = 1.0 - 1e-4
DEVIATION_ORDERS = 8
_GAUSS_POINTS = 48
_GAUSS_X, _GAUSS_W = np.polynomial.legendre.leggauss(_GAUSS_POINTS)  # once: leggauss is ~1.3 ms a call
_Z_FLOOR = -8.5


def stratum_deviations(dist: LengthDist, n_nodes: int = 10, q_cap: float = QUEUE_TAIL_Q) -> np.ndarray:
    """``E[(min(X, x_cap) − node)^j | stratum]``, j = 1..DEVIATION_ORDERS, per node of ``quadrature`` (tokens^j, (Q, 8)).

    x_cap = the ``q_cap`` quantile (lengths beyond it count at it, ``QUEUE_TAIL_Q``). Lognormal: by
    Gauss–Legendre over z in each stratum (``X = e^{mu + sigma·z}``, density φ(z)/(q_{i+1} − q_i)) plus the
    censored mass at x_cap; without the cap Σ_i w_i·E[(X − node_i + node_i)^j | i] is the closed form
    ``E[X^j] = e^{j·mu + j²·sigma²/2}``. Fixed and histogram nodes are exact values: zeros. The deviations,
    not raw moments, so that narrow strata keep their precision.
    """
    nodes, weights = quadrature(dist, n_nodes)
    out = np.zeros((len(nodes), DEVIATION_ORDERS))
    if dist.kind != "lognormal":
        return out
    mu, sigma = _lognormal_mu_sigma(dist)
    edges_q = np.concatenate([[0.0], np.cumsum(weights)])
    z = normal_ppf(np.clip(edges_q, 0.0, 1.0))
    z_cap = float(normal_ppf(q_cap))
    x_cap = float(np.exp(mu + sigma * z_cap))
    gx, gw = _GAUSS_X, _GAUSS_W
    powers = np.arange(1, DEVIATION_ORDERS + 1)
    for i, node in enumerate(nodes):
        lo = _Z_FLOOR if i == 0 else float(z[i])
        hi = z_cap if i == len(nodes) - 1 else min(float(z[i + 1]), z_cap)
        acc = np.zeros(DEVIATION_ORDERS)
        if hi > lo:
            zz = (hi - lo) / 2.0 * gx + (hi + lo) / 2.0
            dens = gw * (hi - lo) / 2.0 * np.exp(-zz * zz / 2.0) / np.sqrt(2.0 * np.pi)
            dev = np.exp(mu + sigma * zz) - node
            acc += (dens[:, None] * dev[:, None] ** powers[None, :]).sum(axis=0)
        q_hi = 1.0 if i == len(nodes) - 1 else float(edges_q[i + 1])
        beyond = q_hi - max(q_cap, float(edges_q[i]))
        if beyond > 0:
            acc += beyond * (x_cap - node) ** powers
        out[i] = acc / weights[i]
    return out


@dataclass(frozen=True)
class Bucket:
    """A request-size class: its share of the requests and its prompt/output distributions."""

    fraction: float
    prompt: LengthDist
    output: LengthDist
    label: str


def _histogram_dist(values: np.ndarray, bins: int) -> LengthDist:
    """A histogram LengthDist of at most ``bins`` rows summarising integer ``values``."""
    values = np.sort(values)
    if values[0] == values[-1]:
        return LengthDist(mean=float(values[0]))
    groups = np.array_split(values, min(bins, len(values)))
    rows: dict[float, float] = {}
    for g in groups:
        if len(g):
            t = float(max(1, round(float(g.mean()))))
            rows[t] = rows.get(t, 0.0) + float(len(g))
    if len(rows) == 1:
        return LengthDist(mean=next(iter(rows)))
    return LengthDist(histogram=sorted(rows.items()))


def split_buckets(prompt: LengthDist, output: LengthDist, n_buckets: int) -> list[Bucket]:
    """Split requests into ``n_buckets`` equal-count size classes by prompt + output tokens.

    Requests (prompt and output independent, as the workload states them) are sampled
    with a fixed seed, sorted by ``prompt + output`` and cut at the quantiles
    ``k/n_buckets``; each bucket gets ``fraction = 1/n_buckets`` and histogram
    distributions of its prompts and outputs (treated as independent inside the bucket).
    ``n_buckets = 1`` or two fixed lengths return the workload itself as one bucket.
    The Mélange idea (arXiv 2404.14527): short requests may go to cheap devices.
    """
    if n_buckets < 1:
        from catalog.errors import WorkloadError

        raise WorkloadError(f"n_buckets must be >= 1 (got {n_buckets})")
    if n_buckets == 1 or (prompt.kind == "fixed" and output.kind == "fixed"):
        return [Bucket(1.0, prompt, output, "all")]
    rng = np.random.default_rng(BUCKET_SEED)
    p = sample_tokens(prompt, BUCKET_SAMPLE_SIZE, rng)
    o = sample_tokens(output, BUCKET_SAMPLE_SIZE, rng)
    order = np.argsort(p + o, kind="stable")
    buckets = []
    for k, idx in enumerate(np.array_split(order, n_buckets)):
        total = p[idx] + o[idx]
        buckets.append(Bucket(
            fraction=len(idx) / BUCKET_SAMPLE_SIZE,
            prompt=_histogram_dist(p[idx], HISTOGRAM_BINS_PER_BUCKET),
            output=_histogram_dist(o[idx], HISTOGRAM_BINS_PER_BUCKET),
            label=f"b{k}_{int(total.min())}_{int(total.max())}tok",
        ))
    return buckets


def length_from_flags(mean: float, p99: float | None, what: str) -> LengthDist:
    """Fixed ``mean`` tokens, or the lognormal fitted to ``{mean, p99}`` when ``p99`` is given.

    A p99 below the mean is a WorkloadError naming both flags and the gap.
    """
    from catalog.errors import WorkloadError

    if p99 is not None and p99 < mean:
        raise WorkloadError(f"--{what}-p99 {p99:g} is below the mean --{what}-tokens {mean:g} (short by "
                            f"{mean - p99:g} tokens); a p99 must be >= the mean")
    return LengthDist(mean=mean, p99=p99)
