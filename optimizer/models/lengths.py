"""Token-length distributions as numpy: mean, quantiles, seeded samples, quadrature, buckets.

A :class:`workloads.spec.LengthDist` is one of

- **fixed**: every request has ``mean`` tokens;
- **lognormal** from ``{mean, p99}``: ``ln X ~ N(mu, sigma^2)`` with ``sigma`` from
  ``p99/mean = exp(z99*sigma - sigma^2/2)`` (``LengthDist.lognormal_sigma``) and
  ``mu = ln(mean) - sigma^2/2``;
- **histogram**: ``[[tokens, weight], ...]``, a discrete distribution.

A lognormal with ``max`` = m is the law conditioned on X <= m (``LengthDist``): its quantiles, strata and
samples are those of the cut law (z_m = (ln m − mu)/sigma, the uncut law's share Phi(z_m) below it).

**The context window** (``fit_window``): a request's prompt + output must fit the model's
``max_context_tokens`` W, or the engine (vLLM ``max_model_len``, TensorRT-LLM ``max_seq_len``) rejects it and
it loads no replica. The planner models prompt and output as independent, so it keeps them independent and
cuts each law: the prompt at c and the output at W − c. A bounded law (fixed, histogram) is kept whole and the
other one is cut at W − its longest length (exactly the law given prompt + output <= W when the kept law is
fixed); two lognormals split the window where the share of requests kept, F_P(c)·F_O(W − c), is largest (one
concave maximum). Two bounded laws that do not fit are an error. A cut that leaves out less than
``WINDOW_SHARE_IGNORED`` of a law leaves that law as stated (its analytic figures are bit-identical), and the
simulator still never samples past the cut (``sample_requests``). The share left out, 1 − F_P(c)·F_O(W − c),
is reported; above ``WINDOW_SHARE_WARNED`` the plan warns.

Samples are whole tokens (rounded, >= 1), as a server sees them. Pure functions, no I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from statistics import NormalDist

import numpy as np

from catalog.errors import ModelError
from workloads.spec import MAX_LOGNORMAL_P99_RATIO, LengthDist

_STD_NORMAL = NormalDist()
BUCKET_SAMPLE_SIZE = 40_000
BUCKET_SEED = 20240531
HISTOGRAM_BINS_PER_BUCKET = 24
WINDOW_SHARE_IGNORED = 1e-9  # a cut leaving out less of a law than this (one request in 10⁹) leaves it as stated
WINDOW_SHARE_WARNED = 1e-4  # a plan warns when the context window leaves out more requests than this
_SPLIT_ITERATIONS = 60  # golden-section steps for two lognormals' split of the window (0.618^60 ≈ 3e-13 of it)


def normal_ppf(q) -> np.ndarray:
    """Inverse standard normal CDF, elementwise (``statistics.NormalDist.inv_cdf``)."""
    q = np.asarray(q, dtype=float)
    flat = [_STD_NORMAL.inv_cdf(float(x)) for x in np.clip(q, 1e-15, 1 - 1e-15).ravel()]
    return np.array(flat, dtype=float).reshape(q.shape)


def _lognormal_mu_sigma(dist: LengthDist) -> tuple[float, float]:
    """(mu, sigma) of the lognormal fitted to the stated {mean, p99} (before any ``max`` cut)."""
    sigma = dist.lognormal_sigma()
    return float(np.log(float(dist.mean)) - sigma * sigma / 2.0), sigma


def _lognormal_cut(dist: LengthDist) -> tuple[float, float, float, float]:
    """(mu, sigma, z_m, Phi(z_m)): the cut's standardised value and the uncut law's share below it
    (no ``max``: inf and 1.0)."""
    mu, sigma = _lognormal_mu_sigma(dist)
    if dist.max is None:
        return mu, sigma, np.inf, 1.0
    z_m = (float(np.log(dist.max)) - mu) / sigma
    return mu, sigma, z_m, _STD_NORMAL.cdf(z_m)


def _phi_tail(z: float) -> float:
    """Phi(z) = erfc(−z/√2)/2, accurate relative to itself far in the lower tail (``NormalDist.cdf`` computes
    (1 + erf)/2, which is 0 below z ≈ −8.3)."""
    return 0.5 * math.erfc(-z / math.sqrt(2.0))


def _phi(z: np.ndarray) -> np.ndarray:
    """Standard normal CDF elementwise, exact 0 and 1 at ∓inf."""
    return np.array([_STD_NORMAL.cdf(v) if np.isfinite(v) else (0.0 if v < 0 else 1.0) for v in z])


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

    Lognormal: ``exp(mu + sigma * Phi^-1(q))`` (cut at m: ``Phi^-1(q · Phi(z_m))``); histogram: the smallest value whose
    cumulative weight reaches ``q``; fixed: the value.
    """
    q = np.asarray(q, dtype=float)
    if dist.kind == "fixed":
        return np.full(q.shape, dist.mean_tokens)
    if dist.kind == "lognormal":
        mu, sigma, _, kept = _lognormal_cut(dist)
        return np.exp(mu + sigma * normal_ppf(q if dist.max is None else q * kept))
    tokens, probs = _histogram(dist)
    cdf = np.cumsum(probs)
    idx = np.searchsorted(cdf, q - 1e-12, side="left")
    return tokens[np.minimum(idx, len(tokens) - 1)]


def sample_tokens(dist: LengthDist, n: int, rng: np.random.Generator, limit_tokens: float | None = None) -> np.ndarray:
    """``n`` whole-token lengths (int64, >= 1) drawn with ``rng`` (seeded by the caller).

    A lognormal cut at c = min(``max``, ``limit_tokens``) (a limit applies to lognormals only): n draws of the
    uncut law, and each draw above c replaced by ``exp(mu + sigma·Phi^-1(u·Phi(z_c)))``, u ~ U(0, 1) from
    ``rng`` — an exact draw of the cut law (a draw is kept with probability Phi(z_c), replaced otherwise by an
    independent draw of the cut law). Draws below c consume nothing more, so a cut no draw reaches leaves the
    stream, and every later draw, as without it.
    """
    if dist.kind == "fixed":
        return np.full(n, max(1, round(dist.mean_tokens)), dtype=np.int64)
    if dist.kind == "lognormal":
        mu, sigma = _lognormal_mu_sigma(dist)
        x = rng.lognormal(mu, sigma, n)
        cut = min(dist.max if dist.max is not None else np.inf, np.inf if limit_tokens is None else limit_tokens)
        over = x > cut
        if over.any():
            kept = _STD_NORMAL.cdf((float(np.log(cut)) - mu) / sigma)
            x[over] = np.minimum(np.exp(mu + sigma * normal_ppf(rng.random(int(over.sum())) * kept)), cut)
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
    Cut at m (``max``): the strata are those of the cut law, z_i = Phi^-1(q_i · Phi(z_m)), the top one ends at
    z_m, and each node divides by (q_{i+1} − q_i)·Phi(z_m).
    Nodes are rounded to whole tokens (>= 1) only in the simulator, not here.
    """
    if dist.kind == "fixed":
        return np.array([dist.mean_tokens]), np.array([1.0])
    if dist.kind == "histogram":
        return _histogram(dist)
    _, sigma, z_m, kept = _lognormal_cut(dist)
    edges_q = np.unique(np.concatenate([[0.0, 1.0], TAIL_EDGES, np.linspace(0.05, 0.95, n_nodes + 1)]))
    z = normal_ppf(edges_q if dist.max is None else edges_q * kept)
    z[0], z[-1] = -np.inf, z_m
    cdf = _phi(z - sigma)
    weights = np.diff(edges_q)
    nodes = float(dist.mean) * np.diff(cdf) / (weights if dist.max is None else weights * kept)
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
    mu, sigma, z_m, kept = _lognormal_cut(dist)
    edges_q = np.clip(np.concatenate([[0.0], np.cumsum(weights)]), 0.0, 1.0)
    z = normal_ppf(edges_q if dist.max is None else edges_q * kept)
    z[0], z[-1] = -np.inf, z_m
    cdf2 = _phi(z - 2 * sigma)
    second = np.exp(2 * mu + 2 * sigma * sigma) * np.diff(cdf2) / (weights if dist.max is None else weights * kept)
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

    x_cap = the ``q_cap`` quantile (lengths beyond it count at it, ``QUEUE_TAIL_Q``; a cut law's own). Lognormal: by
    Gauss–Legendre over z in each stratum (``X = e^{mu + sigma·z}``, density φ(z)/(q_{i+1} − q_i)) plus the
    censored mass at x_cap; without the cap Σ_i w_i·E[(X − node_i + node_i)^j | i] is the closed form
    ``E[X^j] = e^{j·mu + j²·sigma²/2}``. Fixed and histogram nodes are exact values: zeros. The deviations,
    not raw moments, so that narrow strata keep their precision.
    """
    nodes, weights = quadrature(dist, n_nodes)
    out = np.zeros((len(nodes), DEVIATION_ORDERS))
    if dist.kind != "lognormal":
        return out
    mu, sigma, _, kept = _lognormal_cut(dist)
    edges_q = np.concatenate([[0.0], np.cumsum(weights)])
    z = normal_ppf(np.clip(edges_q, 0.0, 1.0) if dist.max is None else np.clip(edges_q, 0.0, 1.0) * kept)
    z_cap = float(normal_ppf(q_cap if dist.max is None else q_cap * kept))
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
            acc += (dens[:, None] * dev[:, None] ** powers[None, :]).sum(axis=0) / kept  # the cut law's density
        q_hi = 1.0 if i == len(nodes) - 1 else float(edges_q[i + 1])
        beyond = q_hi - max(q_cap, float(edges_q[i]))
        if beyond > 0:
            acc += beyond * (x_cap - node) ** powers
        out[i] = acc / weights[i]
    return out


# ---------------------------------------------------------------------------------------
# The context window


@dataclass(frozen=True)
class Windowed:
    """A (prompt, output) pair of laws cut to fit a context window (``fit_window``)."""

    prompt: LengthDist
    output: LengthDist
    prompt_cut_tokens: float  # no sampled prompt is longer (inf: none is cut)
    output_cut_tokens: float
    share_cut: float  # share of the stated requests left out: 1 − F_P(prompt cut)·F_O(output cut)
    window_tokens: int


def _top_tokens(dist: LengthDist) -> float:
    """The longest length a sample can have: a fixed or histogram length rounded as sampled (>= 1); a
    lognormal's ``max`` rounded, else inf."""
    if dist.kind == "fixed":
        return float(max(1, round(dist.mean_tokens)))
    if dist.kind == "histogram":
        return float(max(max(1, round(t)) for t, _ in dist.histogram or []))
    return float(max(1, round(dist.max))) if dist.max is not None else np.inf


def _share_above(dist: LengthDist, cut: float) -> float:
    """P(X > cut) under ``dist`` (its own ``max`` cut included), for the cuts ``fit_window`` makes: a bounded law's
    at or above its top (0); a lognormal's ``(Phi(−z_c) − Phi(−z_m)) / Phi(z_m)``, accurate far in the tail."""
    if dist.kind != "lognormal":
        return 0.0 if cut >= _top_tokens(dist) else 1.0
    mu, sigma, z_m, kept = _lognormal_cut(dist)
    if dist.max is not None and cut >= dist.max:
        return 0.0
    z_c = (float(np.log(cut)) - mu) / sigma
    beyond_m = 0.0 if dist.max is None else _phi_tail(-z_m)
    return max(_phi_tail(-z_c) - beyond_m, 0.0) / kept


def _log_phi(z: float) -> float:
    """ln Phi(z), finite for every finite z: ``log1p(−Phi(−z))`` above −5, ``ln Phi(z)`` down to −37, below
    that the asymptotic ``ln φ(z) − ln(−z) + ln(1 − 1/z² + 3/z⁴)`` (where Phi(z) underflows)."""
    if z > -5.0:
        return math.log1p(-_phi_tail(-z))
    if z > -37.0:
        return math.log(_phi_tail(z))
    return -z * z / 2.0 - 0.5 * math.log(2.0 * math.pi) - math.log(-z) + math.log1p(-1.0 / (z * z) + 3.0 / z**4)


def _log_below(dist: LengthDist, cut: float) -> float:
    """ln P(X <= cut) of a lognormal (its own ``max`` included): ln Phi(z_c) − ln Phi(z_m), 0 at or above max."""
    mu, sigma, z_m, _ = _lognormal_cut(dist)
    if dist.max is not None and cut >= dist.max:
        return 0.0
    return _log_phi((math.log(cut) - mu) / sigma) - (0.0 if dist.max is None else _log_phi(z_m))


def _best_split(prompt: LengthDist, output: LengthDist, window: int) -> int:
    """The prompt cut c in [1, W − 1] of two lognormals keeping most requests: the maximum of
    ``ln P(X_P <= c) + ln P(X_O <= W − c)`` (``_log_below``), concave in c (ln Phi is concave and increasing, z(c) =
    (ln c − mu)/sigma concave), by golden section, then the better of the two whole tokens around it.
    Cached by the laws' figures (a capacity search asks for the same pair at every call)."""
    return _best_split_of(prompt.mean, prompt.p99, prompt.max, output.mean, output.p99, output.max, window)


@lru_cache(maxsize=4096)
def _best_split_of(p_mean, p_p99, p_max, o_mean, o_p99, o_max, window: int) -> int:
    prompt = LengthDist(mean=p_mean, p99=p_p99, max=p_max)
    output = LengthDist(mean=o_mean, p99=o_p99, max=o_max)

    def kept(c: float) -> float:
        return _log_below(prompt, c) + _log_below(output, window - c)

    lo, hi = 1.0, window - 1.0
    g = (np.sqrt(5.0) - 1.0) / 2.0
    a, b = hi - g * (hi - lo), lo + g * (hi - lo)
    fa, fb = kept(a), kept(b)
    for _ in range(_SPLIT_ITERATIONS):
        if fa >= fb:
            hi, b, fb = b, a, fa
            a = hi - g * (hi - lo)
            fa = kept(a)
        else:
            lo, a, fa = a, b, fb
            b = lo + g * (hi - lo)
            fb = kept(b)
    c = (lo + hi) / 2.0
    down, up = max(int(np.floor(c)), 1), min(int(np.ceil(c)), window - 1)
    return up if kept(up) > kept(down) else down


def _cut(dist: LengthDist, cut: float, share: float) -> LengthDist:
    """``dist`` conditioned on X <= cut (a lognormal whose cut leaves out more than WINDOW_SHARE_IGNORED); else itself."""
    if dist.kind != "lognormal" or share <= WINDOW_SHARE_IGNORED:
        return dist
    return LengthDist(mean=dist.mean, p99=dist.p99, max=cut)


def fit_window(prompt: LengthDist, output: LengthDist, window_tokens: int) -> Windowed:
    """The prompt and output laws cut so that every request fits ``window_tokens`` (the rule: module docstring).

    Laws that fit already (every sampled prompt + output <= W) come back as they are, share 0 (so a pair cut
    once is not cut again). Raises ModelError when two bounded laws do not fit, or a bounded one leaves no
    token of the window to the other.
    """
    w = int(window_tokens)
    top_p, top_o = _top_tokens(prompt), _top_tokens(output)
    if top_p + top_o <= w:
        return Windowed(prompt, output, top_p, top_o, 0.0, w)
    bounded_p, bounded_o = prompt.kind != "lognormal", output.kind != "lognormal"
    fix = "shorten the requests or choose a model with a longer context"
    if bounded_p and bounded_o:
        raise ModelError(f"a request of {top_p:,.0f} prompt + {top_o:,.0f} output tokens does not fit the "
                         f"{w:,}-token context window; {fix}")
    if bounded_p and top_p >= w or bounded_o and top_o >= w:
        what, longest = ("prompt", top_p) if bounded_p else ("output", top_o)
        raise ModelError(f"a {longest:,.0f}-token {what} leaves no token of the {w:,}-token context window to the "
                         f"{'output' if bounded_p else 'prompt'}; {fix}")
    if bounded_o:
        cut_p = w - top_o  # the prompt cut below the window by the longest output
    elif bounded_p:
        cut_p = top_p  # the prompt kept whole, the output cut at w − its longest
    else:
        cut_p = float(_best_split(prompt, output, w))
    cut_o = w - cut_p
    a, b = _share_above(prompt, cut_p), _share_above(output, cut_o)
    return Windowed(_cut(prompt, cut_p, a), _cut(output, cut_o, b), cut_p, cut_o, a + b - a * b, w)


def window_pair(prompt: LengthDist, output: LengthDist, window_tokens: int) -> tuple[LengthDist, LengthDist]:
    """The (prompt, output) laws of ``fit_window``: what every analytic entry point evaluates, so the quadrature
    and the simulator see one law."""
    w = fit_window(prompt, output, window_tokens)
    return w.prompt, w.output


def sample_requests(windowed: Windowed, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """``n`` (prompt, output) whole-token lengths of ``windowed``'s laws, prompts first (``sample_tokens``), each
    at most its cut: no request is longer than the window."""
    prompts = sample_tokens(windowed.prompt, n, rng, windowed.prompt_cut_tokens)
    return prompts, sample_tokens(windowed.output, n, rng, windowed.output_cut_tokens)


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


def split_buckets(prompt: LengthDist, output: LengthDist, n_buckets: int,
                  window_tokens: int | None = None) -> list[Bucket]:
    """Split requests into ``n_buckets`` equal-count size classes by prompt + output tokens.

    Requests (prompt and output independent, as the workload states them) are sampled
    with a fixed seed, sorted by ``prompt + output`` and cut at the quantiles
    ``k/n_buckets``; each bucket gets ``fraction = 1/n_buckets`` and histogram
    distributions of its prompts and outputs (treated as independent inside the bucket).
    ``n_buckets = 1`` or two fixed lengths return the workload itself as one bucket. With ``window_tokens``
    the requests are sampled within the context window (``fit_window``, ``sample_requests``): no bucket holds a
    request the window cuts (the same draws when none reaches a cut).
    The Mélange idea (arXiv 2404.14527): short requests may go to cheap devices.
    """
    if n_buckets < 1:
        from catalog.errors import WorkloadError

        raise WorkloadError(f"n_buckets must be >= 1 (got {n_buckets})")
    if n_buckets == 1 or (prompt.kind == "fixed" and output.kind == "fixed"):
        return [Bucket(1.0, prompt, output, "all")]
    rng = np.random.default_rng(BUCKET_SEED)
    if window_tokens is None:
        p = sample_tokens(prompt, BUCKET_SAMPLE_SIZE, rng)
        o = sample_tokens(output, BUCKET_SAMPLE_SIZE, rng)
    else:
        p, o = sample_requests(fit_window(prompt, output, window_tokens), BUCKET_SAMPLE_SIZE, rng)
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

    A p99 below the mean, or above the largest p99/mean of a lognormal, is a WorkloadError naming both flags.
    """
    from catalog.errors import WorkloadError

    if p99 is not None and p99 < mean:
        raise WorkloadError(f"--{what}-p99 {p99:g} is below the mean --{what}-tokens {mean:g} (short by "
                            f"{mean - p99:g} tokens); a p99 must be >= the mean")
    if p99 is not None and p99 > MAX_LOGNORMAL_P99_RATIO * mean:
        raise WorkloadError(f"--{what}-p99 {p99:g} is {p99 / mean:.3g}× the mean --{what}-tokens {mean:g}, beyond any "
                            f"lognormal's (at most {MAX_LOGNORMAL_P99_RATIO:.2f}× the mean); give --{what}-p99 <= "
                            f"{math.floor(MAX_LOGNORMAL_P99_RATIO * mean):,}")
    return LengthDist(mean=mean, p99=p99)
