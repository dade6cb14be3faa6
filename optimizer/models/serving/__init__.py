"""Analytic serving model of one replica under Poisson load, vectorised over configurations.

Scheduler (the one ``optimizer.models.simulate`` runs step by step): continuous batching; every
step decodes one token for each of the ``b`` running sequences and processes up to
``prefill_chunk_tokens`` prompt tokens FCFS (chunked prefill); a prompt's last chunk
emits the first token. Step time ``t(b, c, n, span)`` is ``optimizer.models.perf.decode_step_s``.

Mean behaviour (all arrays over the N configurations):

- ``D(b) = t(b, c̄, 0, 0)``: a decode-only step at mean context
  ``c̄ = E[L] + E[(O−1)·O]/(2·E[O−1])`` (time-weighted context of a running sequence).
- ``e(L) = Σ_chunks [t(b, c̄, n_j, s_j) − D(b)]``: extra step time a prompt of L tokens
  costs when its chunks ride alone; the K prompts that arrived during the previous step share
  the next one, ``T = D(b) + g(K prompts)``, K a mixed Poisson of mean ``m = λ·t̄`` and variance
  ``m/(1 − (λε)²)`` (a long step lets more prompts in; ``state._steps``), and ``ε = (E[T] − D)/m``.
- Step time and running batch (Little's law), a fixed point solved by Newton's method:
  ``t̄ = D(b)/(1 − λ·ε)``, ``b = λ·E[O−1]·t̄``; the smallest root (the state a queue reaches from
  empty). No root (or ``λ·ε >= 1``, or a batch over the scheduler cap) = saturated. For an MoE model
  the step is concave in b until it touches every expert (``fixed_point.moe_hump_batch``), so h = E[T] − t
  can rise from D(0) and still turn down to its root: there the search climbs by fixed-point steps
  ``t ← E[T](t)``, which never pass the smallest root (``fixed_point._next_iterate``; Newton's "h' >= 0 while
  h > 0 = no root" called qwen3-30b-a3b int8 on h100-sxm saturated from 5 req/s, its SLO capacity now
  31.5 req/s). ``utilization = λ·(ε + E[O−1]·dD/db)`` (→ 1 at the compute limit; for an MoE model it
  can fall as the rate grows, dD/db falling once most experts are touched).

Tails (per request; moments, then a shifted gamma with the Wilson–Hilferty tail, mixed
over quadrature nodes of the length distributions and inverted by bisection):

- **TPOT** of a request with O outputs lives ``W = (O−1)·t̄``: mean ``t̄`` plus the
  request-weighted bias ``Cov(b, T)/b̄`` (requests see steps in proportion to the batch),
  plus the prompts of the ``Poisson(λW)`` arrivals during its life (compound Poisson:
  variance ``λ·W·E[ε_L²]/(O−1)²``), the batch fluctuation of the M/G/∞ decode population
  averaged over W (``(dD/db)²·(2λ/W²)∫₀^W (W−τ)E[(S−τ)⁺]dτ``) and their covariance — all
  amplified by load feedback (a long step admits more arrivals, whose prefill and decode
  lengthen later steps: a self-exciting process with branching ratio ``λ·(ε + E[O−1]·dD/db)``,
  see ``feedback.feedback_factors``). The prefill share of TPOT is an average of per-step extras in
  ``[0, t(b, C) − D(b)]`` (a step carries at most one chunk), which bounds its variance.
  **MoE models** (``latency.concave_step``: D flat on [0, 1], then concave until every expert is
  touched) take dD/db over the batch's spread instead of the tangent: the feedback's slopes are
  ``E[D(B + 1) − D(B)]`` (the bias's fixed-point response, Stein–Chen) and ``E[D(B + 2) − D(B + 1)]``
  (the gain, a running step), B ~ N(b̄, F·b̄) by 7-point Gauss–Hermite; the drift is D(1 + B) itself,
  B the shifted gamma of the window-averaged batch's three cumulants (``tails.gamma_gauss_rule``),
  over a life of (O − 1) request-weighted steps; the mean is the size-biased step E[D(1 + B')] (B the batch's
  negative-binomial law of dispersion F, B' the others a sequence finds in its step) at the fixed point moved by
  its Jensen gap (E[D(B)] − D(b̄))/(1 − g) (``latency._size_biased_step``), and a TPOT node of negative skewness
  is the mirrored shifted gamma (bounded above, as D(1 + B) of a concave D is).
  Dense rows keep the tangent (their D is linear over the spread).
- **TTFT** = residual of the step in progress (length-biased step durations, uniform
  residual; zero when the replica is idle, probability ``e^{−b}``) + prompts that join the
  same step + the M/G/1 FCFS wait for the prompt work ahead (Takács moments,
  ``E[W] = λE[S²]/(2(1−u))``, ``u = λ·E[S]``) + its own prefill steps + the front-end time
  ``request_overhead_s`` (tokenising, engine queueing, first-token detokenising/HTTP; a constant,
  calibrated on the online TTFT rows). In a busy queue every step is a full chunk, and the tokens
  of a prompt of L tokens attend to spans summing to L²/2 however the chunks cut it, so its service
  is ``S(L) = (L/C)·t(b, c̄, C, L/2)`` (``latency.prefill_service_s``; it was ``L·t(b, C, C/2)/C``,
  every chunk at the first one's span), at the time-averaged batch ``b̄·(1 + Cov(b, T)/(b̄·t̄))``.
  That batch drifts over a request's life, slowly against the queue's turnover, so W is a
  quasi-static mixture over three nodes of the batch (``b ± √3·√(F·b)``, weights 1/6, 2/3, 1/6;
  F the occupancy feedback below), carried by its first three moments (``E[S^k]`` of the service,
  quadratic in L, from the prompt's deviations to δ⁸ inside each stratum, a lognormal censored at its
  1 − 10⁻⁴ quantile: ``latency.service_moments``): a long busy period lets the batch grow, which slows the queue
  that made it long. Near saturation with long prompts the old queue was 0.70 busy where the
  simulator's was 0.81 and its TTFT p99 1.8 s against 3.0-6.0 s (the svc18 bucket of
  ``tests/models/test_serving_saturation.py``; now within 8 % of the median of seeds at 70-100 % of its capacity).
- **TPOT**, besides the above: a request starts to decode just after its last prefill chunk, with
  the prompts that arrived during its wait and prefill still queued (work H, a compound Poisson
  over its sojourn); their full-chunk steps are its first ones, ``f·H/n`` more per token over n = O − 1 steps
  (f = the prefill share of a full-chunk step), redistributed so that the token-weighted mean stays
  the Little's-law one (``latency._queue_behind``).
- **E2E** = TTFT + (O − 1)·TPOT (so the front-end time counts once in E2E too).
- **KV cache** (p99 occupancy, not the mean): resident tokens are an M/G/∞ shot noise
  over-dispersed by the same load feedback as the batch,
  ``mean = λ·(t̄ + bias)·E[Σ_j (L+j)] + λ·E[TTFT]·E[L]`` (decoding sequences at the
  request-weighted step ``t̄ + Cov(b, T)/b̄``, plus prompts waiting for or in prefill),
  ``var = F·λ·t̄·E[Σ_j (L+j)²]`` (j = 1..O−1) with ``F = A·I_c(v) = 1/((1 − u_p)(1 − g))``
  (``feedback.feedback_factors``: u_p = λ·ε, g = λ·(ε + E[O−1]·dD/db), capped at 0.98), p99 ≈ mean +
  2.326·sd; fits when p99 ≤ KV capacity and the batch ``b̄ + 2.326·√(F·b̄)`` is within the
  scheduler cap. F is 1.2-1.5 at 20 % load and 5-20 at 90 %; without it (F = 1, Poisson)
  the p99 was 13-30 % under the simulator's at 90 % load and memory-limited capacities
  5-10 % too high (the simulator preempted thousands of times at them). The hold is per attention
  rank (``latency.kv_per_rank``): an ep = e > 1 replica (attention data-parallel) keeps each sequence
  on one of e ranks, each with K/e tokens of KV and every e-th request (round robin: Erlang-e gaps), so its
  p99.9 is that of a shot noise of mean / e and κ2 (λ/e)·[∫E f² − (1 − 1/e)·η·∫m²], held against K/e; the running
  batch of one rank likewise against the scheduler cap / e (``latency.batch_per_rank``; e = 1: the replica's,
  unchanged).
- **Capacity** (``capacity.capacity_at_slo``; ``capacity_at_slo_sets`` for several length sets, a
  workload's buckets, in one search over per-row lengths, ``rows.RowLengths``): the largest λ with every p99 met and the KV p99
  and batch p99 fitting, and at most ``SERVER_OFFLINE_CEILING`` (0.88) of the replica's offline
  request rate (the lowest measured Server/Offline ratio; the basis is at the constant).

Pure: no I/O, no printing. Times in seconds internally; ``_ms`` fields in results.

Modules: ``rows`` (request lengths per row), ``state`` (length quadrature, per-step prompt work), ``fixed_point`` (the running batch and step time), ``feedback``
(load feedback), ``tails`` (shifted-gamma tails, mixture quantiles), ``carrying`` (the steps that
carry a prompt with J others, the TTFT's T_next), ``latency`` (``serve_at_rate``), ``capacity`` (``capacity_at_slo``), ``floors`` (physical floors of the
p99s, batch throughput), ``bounds`` (an upper bound on the capacity without a search, for screening).
"""

from optimizer.models.constants import DEFAULT_PREFILL_CHUNK_TOKENS, Z99
from optimizer.models.serving.bounds import capacity_upper_bound_sets
from optimizer.models.serving.capacity import (
    CAPACITY_RTOL,
    Capacity,
    capacity_at_slo,
    capacity_at_slo_sets,
    slo_targets,
)
from optimizer.models.serving.feedback import feedback_factors, feedback_integrals
from optimizer.models.serving.floors import batch_throughput, check_slo_floors, slo_floor_ms
from optimizer.models.serving.latency import LoadResult, check_rate, serve_at_rate

__all__ = [
    "CAPACITY_RTOL", "DEFAULT_PREFILL_CHUNK_TOKENS", "Z99", "Capacity", "LoadResult", "batch_throughput",
    "capacity_at_slo", "capacity_at_slo_sets", "capacity_upper_bound_sets", "check_rate", "check_slo_floors", "feedback_factors", "feedback_integrals",
    "serve_at_rate", "slo_floor_ms", "slo_targets",
]
