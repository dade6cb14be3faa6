"""What a simulation returns: per-request latencies, their percentiles with order-statistic CIs.

``optimizer.models.simulate`` builds a ``SimResult``; its percentiles and KV-occupancy statistics are
computed when first read.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from statistics import NormalDist

import numpy as np

PERCENTILES = (50.0, 90.0, 99.0)


@dataclass(frozen=True)
class Percentile:
    """One latency percentile (ms) with a 95 % order-statistic (binomial) confidence interval."""

    value_ms: float
    ci_low_ms: float
    ci_high_ms: float


@dataclass(frozen=True)
class SimResult:
    """Per-request latencies (s) of a simulation and their percentiles (ms).

    ``ttft_s``, ``e2e_s`` have one entry per measured request; ``tpot_s`` per measured
    request with more than one output token. The first ``warmup`` requests (arriving into
    an empty replica) are excluded from all statistics. The percentiles and the KV occupancy
    statistics are computed when first read (a caller that needs only the latencies, such as
    ``optimizer.planning.verify``, does not pay for them).
    """

    ttft_s: np.ndarray
    tpot_s: np.ndarray
    e2e_s: np.ndarray
    mean_ttft_s: float
    mean_tpot_s: float
    mean_itl_s: float  # token-weighted mean inter-token latency (what benchmarks call ITL)
    output_tokens_per_s: float
    requests: int
    steps: int
    preemptions: int
    mean_batch: float
    max_kv_tokens: float
    duration_s: float
    backlog_at_end: int  # requests not finished when the arrivals stopped (saturation sign)
    steady_window_s: tuple[float, float]  # (first measured arrival, last arrival): the KV statistics' window
    step_end_s: list[float] = field(repr=False)  # end time of every step
    step_kv_tokens: list[float] = field(repr=False)  # KV occupancy at the end of every step
    ranks: int = 1  # attention data-parallel ranks (ep), each with its own KV cache
    # with ranks > 1: every rank's occupancy at the end of every step, ``ranks`` values a step (rank 0 first)
    step_rank_kv_tokens: list[float] = field(default_factory=list, repr=False)

    @cached_property
    def ttft(self) -> dict[float, Percentile]:
        return {q: percentile_ci(self.ttft_s, q) for q in PERCENTILES}

    @cached_property
    def tpot(self) -> dict[float, Percentile]:
        return {q: percentile_ci(self.tpot_s, q) for q in PERCENTILES}

    @cached_property
    def e2e(self) -> dict[float, Percentile]:
        return {q: percentile_ci(self.e2e_s, q) for q in PERCENTILES}

    @cached_property
    def steady_kv_tokens(self) -> np.ndarray:
        """KV occupancy of the steps that end while the measured requests arrive (no warm-up, no drain)."""
        ts = np.asarray(self.step_end_s)
        lo, hi = self.steady_window_s
        steady = (ts >= lo) & (ts <= hi)
        return np.asarray(self.step_kv_tokens)[steady] if steady.any() else np.asarray(self.step_kv_tokens or [0.0])

    @cached_property
    def kv_p99_tokens(self) -> float:
        """p99 of the KV occupancy sampled once per step (steady-state window)."""
        return float(np.percentile(self.steady_kv_tokens, 99.0))

    @cached_property
    def steady_rank_kv_tokens(self) -> np.ndarray:
        """KV occupancy of one attention rank, every rank's at every step of the steady window (the ranks are
        alike: the load balancer sends them requests in turn); the replica's with one rank."""
        if self.ranks == 1:
            return self.steady_kv_tokens
        ts = np.asarray(self.step_end_s)
        lo, hi = self.steady_window_s
        steady = (ts >= lo) & (ts <= hi)
        per = np.asarray(self.step_rank_kv_tokens).reshape(len(ts), self.ranks)
        return (per[steady] if steady.any() else per).ravel()

    @cached_property
    def kv_rank_p99_tokens(self) -> float:
        """p99 of one attention rank's KV occupancy (``steady_rank_kv_tokens``)."""
        return float(np.percentile(self.steady_rank_kv_tokens, 99.0))

    @cached_property
    def kv_mean_tokens(self) -> float:
        """Mean of the same samples."""
        return float(self.steady_kv_tokens.mean())


def percentile_ci(x: np.ndarray, q: float, confidence: float = 0.95) -> Percentile:
    """The q-th percentile of ``x`` (ms) and a distribution-free CI from order statistics.

    The number of samples below the true quantile is Binomial(n, q/100); the CI is the
    pair of order statistics at ``n·p ± z·sqrt(n·p·(1−p))`` (normal approximation).
    """
    n = len(x)
    if n == 0:
        nan = float("nan")
        return Percentile(nan, nan, nan)
    s = np.sort(x)
    p = q / 100.0
    z = 1.959963985 if confidence == 0.95 else NormalDist().inv_cdf((1 + confidence) / 2)  # two-sided normal z
    half = z * np.sqrt(n * p * (1 - p))
    lo = int(np.clip(np.floor(n * p - half) - 1, 0, n - 1))
    hi = int(np.clip(np.ceil(n * p + half), 0, n - 1))
    return Percentile(float(np.percentile(s, q)) * 1e3, float(s[lo]) * 1e3, float(s[hi]) * 1e3)
