"""Discrete-event simulator of one replica: continuous batching with chunked prefill.

The check on the analytic serving model (``optimizer.models.serving``): the same scheduler,
step by step, with sampled request lengths and Poisson arrivals. Pure (no I/O); seeded
and deterministic.

Scheduler (iteration-level, vLLM/TensorRT-LLM style), per step:

1. arrivals up to the step start join the waiting queue (FCFS);
2. admission: the head of the waiting queue enters prefill while its prompt (plus any
   tokens it already generated before a preemption) fits in the free KV cache and fewer
   than ``max_sequences`` requests are admitted;
3. if the running sequences' next tokens do not fit in the KV cache, the most recently
   admitted running sequence is preempted (recompute: its KV is freed and it returns to
   the front of the waiting queue with prompt + generated tokens as its new prompt);

   with ep = e > 1 (attention data-parallel ranks) each rank has its own KV cache, K/e tokens, and
   its own waiting queue: request i goes to rank i mod e (round robin in arrival order, the load
   balancer of SGLang's data-parallel attention, what the analytic model takes; deterministic, no draw;
   ``rank_assignment="random"``: a seeded uniform draw; ``"least_loaded"``: at arrival, the rank with the fewest
   4·waiting + admitted requests, lowest index on ties, as vLLM's data-parallel client scores engines), admission
   takes, of the ranks whose head fits in its rank's free KV and whose admitted sequences are under the rank's cap
   ``max_sequences``/e (the engine's scheduler cap is per rank), the earliest-arrived head (so one full rank
   blocks only its own queue), and 3 preempts on the rank whose sequences do not fit, its latest admitted one.
   The prefill queue and the step stay the replica's;
4. the step decodes one token for each of the ``b`` running sequences and spends up to
   ``prefill_chunk_tokens`` on prompts in FCFS order (chunked prefill);
5. it lasts ``decode_step_s(b, mean context, prefill tokens, mean prefill span)``
   from ``optimizer.models.perf``; a request whose prompt completes emits its first token at
   the end of the step (TTFT), then one token per step until its output is done (E2E).

TTFT and E2E include the configuration's per-request front-end time
``c.request_overhead_s`` (``CalibrationParams.request_overhead_ms``: tokenising, engine
queueing, first-token detokenising/HTTP), a constant outside the scheduler, added once to
both exactly as the analytic model does; step times are untouched.
TPOT of a request = (E2E − TTFT) / (output tokens − 1), as MLPerf and vLLM define it.
KV occupancy (prompts admitted to prefill + contexts of running sequences, tokens) is
sampled at the end of every step; ``kv_p99_tokens`` is its p99 over the steps that end
while the measured requests arrive (no warm-up, no drain).
"""

from __future__ import annotations

import math
from collections import deque
from heapq import heappop, heappush

import numpy as np

from catalog.errors import ModelError
from optimizer.models import perf
from optimizer.models.attention import effective_context
from optimizer.models.configs import Configs
from optimizer.models.constants import DEFAULT_PREFILL_CHUNK_TOKENS  # noqa: E402 (re-exported)
from optimizer.models.lengths import fit_window, sample_requests
from optimizer.models.sim_result import PERCENTILES, Percentile, SimResult, percentile_ci  # noqa: F401 (re-exported)
from workloads.spec import LengthDist

_INF = float("inf")


class StepTime:
    """Fast scalar step time of one configuration, exact to ``optimizer.models.perf.decode_step_s``.

    The perf model's step is ``A(T) + B(b) + a_dec·b·c + a_pre·n·span`` for T = b + n tokens:
    ``A`` = the GEMM roofline, the communication and the fixed host time (functions of T only;
    MoE expert reads make them non-linear), ``B`` = the lm_head and the per-sequence host time
    (linear in b), decode attention a smooth max of two terms linear in the b·c' attended context
    tokens (so linear in b·c' too; c' = ``effective_context(c)`` of a sliding-window model),
    prefill attention linear in n·span'. ``A`` and ``B`` are tabulated at
    whole tokens by vectorised calls of ``perf.decode_parts``; ``a_dec`` and ``a_pre`` are read
    off one probe.
    The construction checks the result against ``decode_step_s`` at random points and
    raises if they differ by more than 1e-9 (relative), so a change of the perf model
    cannot go unnoticed.
    """

    def __init__(self, c: Configs, index: int, max_tokens: int):
        one = _select(c, index)
        if not bool(one.supported[0]):
            raise ModelError(f"{one.keys[0]}: {one.reason[0]}")
        tokens = np.arange(max_tokens + 1, dtype=float)
        zero = np.zeros_like(tokens)
        by_tokens = perf.decode_step_s(one, zero[None, :], zero[None, :], tokens[None, :])[0]
        by_batch = perf.decode_step_s(one, tokens[None, :], zero[None, :])[0]
        self._a = by_tokens.tolist()  # A(T): gemm + comm + fixed host of T tokens
        self._b = (by_batch - by_tokens).tolist()  # B(b): lm_head + per-sequence host
        probe = perf.decode_step_s(one, np.array([[1.0, 1.0, 0.0]]), np.array([[0.0, 1000.0, 0.0]]),
                                   np.array([[0.0, 0.0, 1.0]]), np.array([[0.0, 0.0, 1000.0]]))[0]
        self._att = float(probe[1] - probe[0]) / float(effective_context(one.model, 1000.0))  # per b·c
        self._model = one.model
        self._plain = one.model.sliding_window_tokens is None  # effective context = context (no window)
        self._pre = float(probe[2] - self._a[1]) / float(effective_context(one.model, 1000.0))  # per n·span
        # a decode-only step's A(b) + B(b) and a_dec·b, tabulated by b (the same operations, elementwise)
        self._ab = (by_tokens + (by_batch - by_tokens)).tolist()
        self._att_b = (self._att * tokens).tolist()
        self.max_tokens = max_tokens
        self._check(one)

    def __call__(self, batch: int, context_tokens: float, prefill_tokens: int = 0,
                 prefill_span_tokens: float = 0.0) -> float:
        """Seconds of one step: ``A(b + n) + B(b) + a_dec·b·c + a_pre·n·span``."""
        ctx, span = context_tokens, prefill_span_tokens  # the scheduler's hot path: effective_context(c) is c
        if not self._plain:
            ctx = effective_context(self._model, context_tokens)
            span = effective_context(self._model, prefill_span_tokens)
        return self._a[batch + prefill_tokens] + self._b[batch] + self._att * batch * ctx + self._pre * prefill_tokens * span

    def _check(self, one: Configs) -> None:
        rng = np.random.default_rng(0)
        b = rng.integers(0, self.max_tokens // 2 + 1, 64)
        n = rng.integers(0, self.max_tokens // 2 + 1, 64)
        ctx = rng.uniform(0, 20000, 64)
        span = rng.uniform(0, 8000, 64)
        want = perf.decode_step_s(one, b[None, :], ctx[None, :], n[None, :], span[None, :])[0]
        got = np.array([self(int(bi), float(ci), int(ni), float(si)) for bi, ci, ni, si in zip(b, ctx, n, span, strict=True)])
        err = float(np.max(np.abs(got - want) / want))
        if not err <= 1e-9:
            raise ModelError(f"simulator step-time table disagrees with optimizer.models.perf.decode_step_s by {err:.2e} "
                             "(relative); the perf model's step structure changed: update optimizer.models.simulate.StepTime")


def _select(c: Configs, index: int) -> Configs:
    """A one-config view of ``c`` (row ``index`` of every array field)."""
    kwargs = {}
    for name in c.__dataclass_fields__:
        v = getattr(c, name)
        if isinstance(v, np.ndarray):
            kwargs[name] = v[index:index + 1]
        elif isinstance(v, list):
            kwargs[name] = v[index:index + 1]
        else:
            kwargs[name] = v
    return Configs(**kwargs)


def step_time_for(c: Configs, index: int, max_sequences: int | None = None,
                  prefill_chunk_tokens: int = DEFAULT_PREFILL_CHUNK_TOKENS) -> StepTime:
    """The step time ``simulate`` builds for these arguments (tables up to max_sequences + chunk
    tokens), for callers that run several simulations of one configuration."""
    return StepTime(c, index, int(max_sequences or c.batch_cap[index]) + int(prefill_chunk_tokens))


def simulate(
    c: Configs,
    index: int,
    qps: float,
    prompt: LengthDist,
    output: LengthDist,
    requests: int = 20_000,
    seed: int = 0,
    prefill_chunk_tokens: int = DEFAULT_PREFILL_CHUNK_TOKENS,
    max_sequences: int | None = None,
    warmup_fraction: float = 0.05,
    step_time: StepTime | None = None,
    prefix_hit_fraction: float = 0.0,
    shared_prefix_tokens: int = 0,
    rank_assignment: str = "round_robin",
) -> SimResult:
    """Simulate ``requests`` Poisson arrivals at ``qps`` on configuration ``index`` of ``c``.

    Lengths are sampled from ``prompt``/``output`` (whole tokens) cut to the model's context window
    (``lengths.fit_window``, the analytic model's law: no request is longer than the window), arrival gaps are
    Exp(qps); both from ``numpy.random.default_rng(seed)`` so a seed fixes the result.
    KV capacity is ``c.kv_capacity_tokens[index]``, split over its e = ``c.ep[index]`` attention ranks (K/e each,
    module doc; a shared prefix is held once per rank); ``rank_assignment`` sends request i to rank i mod e
    (``round_robin``, what the analytic model's per-rank KV takes, ``serving.latency.kv_per_rank``), to a uniform
    draw (``random``, a Poisson thinning) or to the least loaded rank at its arrival (``least_loaded``); the
    running-sequence cap is the replica's ``max_sequences`` (default ``c.batch_cap[index]``: the engine's cap per
    attention rank × ep, or ``max_batch``), held per attention rank as max(⌊max_sequences/e⌋, 1).

    Prefix caching, as the analytic model has it (``optimizer.models.techniques``): a request
    prefills P = max(round(L·(1 − h)) − N', 1) tokens whose attention starts after the L − P
    cached ones; it holds L − N' tokens of KV (N' = min(N, L − 1)), and N tokens are held once
    (taken off the KV capacity). h = 1 is a decode pool's request, whose KV arrived with it.
    """
    if not qps > 0:
        raise ModelError(f"request rate must be > 0 req/s (got {qps})")
    if requests < 1:
        raise ModelError(f"requests must be >= 1 (got {requests})")
    rng = np.random.default_rng(seed)
    with np.errstate(over="ignore"):
        arrivals = np.cumsum(rng.exponential(1.0 / qps, requests))
    if not np.isfinite(arrivals[-1]):  # qps 5e-324: 1/qps is inf (1e-307: the sum of the gaps passes 1.8e308)
        raise ModelError(f"request rate {qps:g} req/s is so low that {requests:,} arrivals pass the largest time a "
                         "float holds (1.8e308 s); give a rate of at least 1e-300 req/s")
    prompts, outputs = sample_requests(fit_window(prompt, output, c.model.max_context_tokens), requests, rng)
    ranks = int(c.ep[index])
    cap_kv = float(c.kv_capacity_tokens[index]) / ranks - shared_prefix_tokens  # of one attention rank
    max_seqs = int(max_sequences or c.batch_cap[index])
    shared = np.minimum(shared_prefix_tokens, prompts - 1)
    compute = np.maximum(np.round(prompts * (1.0 - prefix_hit_fraction)) - shared, 1).astype(np.int64)
    held = (prompts - shared).astype(prompts.dtype) if shared_prefix_tokens else prompts
    chunk = int(prefill_chunk_tokens)
    if step_time is None:
        step_time = step_time_for(c, index, max_seqs, chunk)
    elif step_time.max_tokens < max_seqs + chunk:
        raise ModelError(f"step_time: tables up to {step_time.max_tokens:,} tokens, this simulation needs "
                         f"{max_seqs + chunk:,}; build it with step_time_for(c, index, max_sequences, prefill_chunk_tokens)")
    longest = int(held.max() + outputs.max())
    if longest > cap_kv:
        where = f"the KV cache of one of its {ranks} attention ranks" if ranks > 1 else "the KV cache"
        raise ModelError(f"{c.keys[index]}: a request of {longest:,} tokens does not fit in {where} "
                         f"({cap_kv:,.0f} tokens); shorten the requests or raise tp/pp")
    cached = (prompts - shared - compute) if (prefix_hit_fraction or shared_prefix_tokens) else None
    return _run(step_time, arrivals, held, outputs, cap_kv, max_seqs, chunk, warmup_fraction,
                float(c.request_overhead_s), cached, prompts - compute if cached is not None else None,
                ranks=ranks, rank_of=_rank_of(ranks, requests, rank_assignment, seed))


def _rank_of(ranks: int, requests: int, assignment: str, seed: int) -> list[int]:
    """The attention rank of each request: ``round_robin`` i mod ranks; ``random`` uniform draws of
    ``numpy.random.default_rng([seed, 1])`` (a stream of its own: the arrivals and lengths are those of
    round robin's run); ``least_loaded`` −1, chosen at arrival in ``_run``."""
    if assignment == "round_robin":
        return [i % ranks for i in range(requests)]
    if assignment == "random":
        return np.random.default_rng([seed, 1]).integers(0, ranks, requests).tolist()
    if assignment == "least_loaded":
        return [-1] * requests  # chosen at arrival (``_run``)
    raise ModelError(f"rank_assignment must be round_robin, random or least_loaded (got {assignment!r})")


def _preempt_latest(order: list[int], step: int, is_running: list[bool], ctx_entry: list, entry_step: list[int],
                    generated: list[int], epoch: list[int], eff_prompt: list, plen) -> tuple[int, float]:
    """Preempt the latest admitted sequence still running in ``order`` (a replica's or one rank's admission
    order, popped in place): it stops, keeps the tokens it generated (its prompt to recompute is now
    prompt + generated; ``epoch`` voids its pending completion) and frees its context. Returns (the request,
    its context tokens, which the caller takes off its KV and context counters)."""
    while order and not is_running[order[-1]]:
        order.pop()
    victim = order.pop()
    is_running[victim] = False
    ctx_v = ctx_entry[victim] + (step - entry_step[victim])
    generated[victim] += step - entry_step[victim]
    epoch[victim] += 1
    eff_prompt[victim] = plen[victim] + generated[victim]
    return victim, ctx_v


def _run(step_s: StepTime, arrivals: np.ndarray, prompts: np.ndarray, outputs: np.ndarray,
         cap_kv: float, max_seqs: int, chunk: int, warmup_fraction: float,
         request_overhead_s: float = 0.0, cached: np.ndarray | None = None,
         span_offset: np.ndarray | None = None, ranks: int = 1, rank_of: list[int] | None = None) -> SimResult:
    """The scheduler loop. ``prompts``: KV tokens each request holds; ``cached``: of those, how
    many are not computed; ``span_offset``: tokens its first prefill chunk already attends to;
    ``cap_kv``: KV tokens of one of the ``ranks`` attention ranks, ``rank_of[i]`` request i's (module doc; ranks > 1 runs the
    general step, not the decode-only fast path, and keeps each rank's KV, batch, queue and preemption order)."""
    n_req = len(arrivals)
    arr = arrivals.tolist()
    plen = prompts.tolist()
    skip = cached.tolist() if cached is not None else [0] * n_req
    offset = span_offset.tolist() if span_offset is not None else [0] * n_req
    olen = outputs.tolist()
    first = [0.0] * n_req
    finish = [0.0] * n_req
    generated = [0] * n_req  # output tokens emitted so far
    eff_prompt = plen[:]  # tokens to (re)prefill: prompt + tokens generated before a preemption
    epoch = [0] * n_req  # bumped on preemption to invalidate scheduled completions
    entry_step = [0] * n_req  # step index at which the sequence's context was ctx_at_entry
    ctx_entry = [0] * n_req

    waiting: deque[int] = deque()
    prefilling: deque[list] = deque()  # [rid, remaining prompt tokens, processed tokens]
    running_order: list[int] = []  # admission order of decoding sequences (for LIFO preemption)
    is_running = [False] * n_req
    done_at: dict[int, list[tuple[int, int]]] = {}  # step -> [(rid, epoch)]
    multi = ranks > 1
    rank_of = rank_of if rank_of is not None else [0] * n_req
    rank_wait: list[deque[int]] = [deque() for _ in range(ranks)]  # with ranks > 1: request i waits on rank_of[i]
    rank_kv = [0.0] * ranks
    rank_b = [0] * ranks
    rank_running: list[list[int]] = [[] for _ in range(ranks)]
    rank_adm = [0] * ranks  # admitted (prefilling or decoding) sequences of each rank, at most rank_cap
    rank_cap = max(max_seqs // ranks, 1)  # the engine's cap is per attention rank's scheduler (max_seqs: the replica's)
    least_loaded = multi and rank_of[0] < 0  # rank chosen at arrival: fewest 4·waiting + admitted (vLLM's DP balance)
    rank_steps: list[float] = []  # every rank's KV at the end of every step
    n_wait = 0  # requests in rank_wait

    t = 0.0
    step = 0
    nxt = 0  # next arrival index
    b = 0  # decoding sequences
    ctx_sum = 0.0  # Σ context of decoding sequences
    kv_used = 0.0
    n_admitted = 0
    preemptions = 0
    batch_time = 0.0
    max_kv = 0.0
    out_tokens_done = 0
    backlog_at_end = -1
    kv_steps: list[float] = []  # KV occupancy at the end of each step
    t_steps: list[float] = []
    # the step time inlined: ``StepTime.__call__``'s operations in its order (the same bits), with
    # ``Model.effective_kv_tokens`` spelt out for a model with a sliding window
    a_tab, b_tab, att, pre = step_s._a, step_s._b, step_s._att, step_s._pre
    m = step_s._model
    windowed = not step_s._plain
    if windowed:
        w_full, w_layers, w_tokens, n_layers = (m.num_layers - m.windowed_layers, m.windowed_layers,
                                                m.sliding_window_tokens, m.num_layers)
    # a decode-only step (no prefill tokens) is A(b) + B(b) + (a_dec·b)·c + a_pre·0·0.0, and the last
    # term is 0.0 when a_pre is finite: A(b) + B(b) and a_dec·b are tabulated by b (StepTime)
    decode_only = math.isfinite(pre) and not multi
    ab_tab, att_tab = step_s._ab, step_s._att_b
    floor_cap = math.floor(cap_kv)  # KV occupancies are whole tokens: kv + b > cap_kv <=> kv > floor(cap_kv) - b
    pending: list[int] = []  # the steps of done_at, a heap (each pushed once, when its entry is created)
    arr_s = arr + [_INF]  # a sentinel past the last arrival
    t_next = arr_s[0]
    kv_append, t_append = kv_steps.append, t_steps.append
    pop_done = done_at.pop
    wait_append, wait_pop = waiting.append, waiting.popleft

    while True:
        if t_next <= t:
            while arr_s[nxt] <= t:
                if multi:
                    if least_loaded:
                        rank_of[nxt] = min(range(ranks), key=lambda r: 4 * len(rank_wait[r]) + rank_adm[r])
                    rank_wait[rank_of[nxt]].append(nxt)
                    n_wait += 1
                else:
                    wait_append(nxt)
                nxt += 1
            t_next = arr_s[nxt]
            if backlog_at_end < 0 and nxt == n_req:
                backlog_at_end = len(waiting) + n_wait + len(prefilling) + b
        # admission (FCFS, head of line blocks; per rank with ranks > 1)
        if multi:
            while n_wait:
                rid = -1
                for r in range(ranks):
                    q = rank_wait[r]
                    if (q and (rid < 0 or q[0] < rid) and rank_adm[r] < rank_cap
                            and rank_kv[r] + eff_prompt[q[0]] + 1 <= cap_kv):
                        rid, r_in = q[0], r
                if rid < 0:
                    break
                rank_wait[r_in].popleft()
                n_wait -= 1
                rank_kv[r_in] += eff_prompt[rid] + 1
                rank_adm[r_in] += 1
                kv_used += eff_prompt[rid] + 1
                prefilling.append([rid, eff_prompt[rid] - skip[rid], offset[rid]])
                n_admitted += 1
        while waiting and n_admitted < max_seqs and kv_used + eff_prompt[waiting[0]] + 1 <= cap_kv:
            rid = wait_pop()
            kv_used += eff_prompt[rid] + 1  # the prompt and the token its prefill emits
            prefilling.append([rid, eff_prompt[rid] - skip[rid], offset[rid]])
            n_admitted += 1
        if b == 0 and not prefilling:
            if nxt >= n_req and not waiting and not n_wait:
                break
            if nxt < n_req:
                t = max(t, arr[nxt])
                continue
            raise ModelError("simulator stalled: a waiting request can never be admitted")  # pragma: no cover
        # make room for this step's decode tokens: preempt the latest admitted running sequence
        while b and kv_used + b > cap_kv and not multi:
            victim, ctx_v = _preempt_latest(running_order, step, is_running, ctx_entry, entry_step, generated,
                                            epoch, eff_prompt, plen)
            ctx_sum -= ctx_v
            kv_used -= ctx_v
            b -= 1
            n_admitted -= 1
            waiting.appendleft(victim)
            preemptions += 1
        if multi:
            for r in range(ranks):
                order = rank_running[r]
                while rank_b[r] and rank_kv[r] + rank_b[r] > cap_kv:
                    victim, ctx_v = _preempt_latest(order, step, is_running, ctx_entry, entry_step, generated,
                                                    epoch, eff_prompt, plen)
                    ctx_sum -= ctx_v
                    kv_used -= ctx_v
                    rank_kv[r] -= ctx_v
                    b -= 1
                    rank_b[r] -= 1
                    rank_adm[r] -= 1
                    n_admitted -= 1
                    rank_wait[r].appendleft(victim)
                    n_wait += 1
                    preemptions += 1
        if b and not prefilling and decode_only:
            # decode-only steps until the next one sees an arrival, a completion or a preemption
            while pending[0] <= step:  # steps already done (a running sequence completes later)
                heappop(pending)
            next_done = pending[0]
            kv_limit = floor_cap - b
            ab, att_b, b0, s0 = ab_tab[b], att_tab[b], b, step
            while True:
                ctx = ctx_sum / b
                if windowed:
                    ctx = (w_full * ctx + w_layers * ((ctx + w_tokens - abs(ctx - w_tokens)) / 2)) / n_layers
                dt = ab + att_b * ctx
                t += dt
                batch_time += b * dt
                step += 1
                ctx_sum += b
                kv_used += b
                if step == next_done:
                    if step - s0 > 1 and kv_used - b > max_kv:  # the previous step's occupancy
                        max_kv = kv_used - b
                    for rid, ep in pop_done(step):
                        if epoch[rid] != ep:
                            continue
                        is_running[rid] = False
                        finish[rid] = t
                        generated[rid] = olen[rid]
                        ctx_v = ctx_entry[rid] + (step - entry_step[rid])
                        ctx_sum -= ctx_v
                        kv_used -= ctx_v
                        b -= 1
                        n_admitted -= 1
                    heappop(pending)
                    kv_append(kv_used)
                    t_append(t)
                    break
                kv_append(kv_used)
                t_append(t)
                if t >= t_next or kv_used > kv_limit:
                    break
            if kv_used > max_kv:
                max_kv = kv_used
            out_tokens_done += b0 * (step - s0)
            continue
        # chunked prefill, FCFS: whole prompts while they fit in the budget, then part of the next one
        budget = chunk
        span_tok = 0.0
        completed: list[int] = []
        for item in prefilling:
            take = item[1]
            if take <= budget:
                span_tok += take * (item[2] + take / 2.0)
                budget -= take
                completed.append(item[0])
                if budget <= 0:
                    break
            else:
                span_tok += budget * (item[2] + budget / 2.0)
                item[1] = take - budget
                item[2] += budget
                budget = 0
                break
        n_pre = chunk - budget
        for _ in completed:
            prefilling.popleft()
        ctx = ctx_sum / b if b else 0.0
        span = span_tok / n_pre if n_pre else 0.0
        if windowed:
            ctx = (w_full * ctx + w_layers * ((ctx + w_tokens - abs(ctx - w_tokens)) / 2)) / n_layers
            span = (w_full * span + w_layers * ((span + w_tokens - abs(span - w_tokens)) / 2)) / n_layers
        dt = a_tab[b + n_pre] + b_tab[b] + att * b * ctx + pre * n_pre * span
        t += dt
        batch_time += b * dt
        step += 1
        # decode: every running sequence emitted one token during this step
        ctx_sum += b
        kv_used += b
        out_tokens_done += b
        if multi:
            for r in range(ranks):
                rank_kv[r] += rank_b[r]
        for rid, ep in pop_done(step, ()):
            if epoch[rid] != ep:
                continue
            is_running[rid] = False
            finish[rid] = t
            generated[rid] = olen[rid]
            ctx_v = ctx_entry[rid] + (step - entry_step[rid])
            ctx_sum -= ctx_v
            kv_used -= ctx_v
            b -= 1
            n_admitted -= 1
            if multi:
                rank_kv[rank_of[rid]] -= ctx_v
                rank_b[rank_of[rid]] -= 1
                rank_adm[rank_of[rid]] -= 1
        # prefill completions emit a token at the end of this step
        out_tokens_done += len(completed)
        for rid in completed:
            emitted = generated[rid] + 1
            if emitted == 1:
                first[rid] = t
            generated[rid] = emitted
            remaining = olen[rid] - emitted
            if remaining <= 0:
                finish[rid] = t
                kv_used -= eff_prompt[rid] + 1
                n_admitted -= 1
                if multi:
                    rank_kv[rank_of[rid]] -= eff_prompt[rid] + 1
                    rank_adm[rank_of[rid]] -= 1
                continue
            is_running[rid] = True
            if multi:
                rank_running[rank_of[rid]].append(rid)
                rank_b[rank_of[rid]] += 1
            else:
                running_order.append(rid)
            entry_step[rid] = step
            ctx_entry[rid] = held = eff_prompt[rid] + 1
            ctx_sum += held
            b += 1
            key = step + remaining
            entries = done_at.get(key)
            if entries is None:
                done_at[key] = [(rid, epoch[rid])]
                heappush(pending, key)
            else:
                entries.append((rid, epoch[rid]))
        if kv_used > max_kv:
            max_kv = kv_used
        kv_append(kv_used)
        t_append(t)
        if multi:
            rank_steps.extend(rank_kv)

    warm = int(n_req * warmup_fraction)
    a = np.asarray(arr[warm:])
    ttft = np.asarray(first[warm:]) - a + request_overhead_s  # front-end time, once per request
    e2e = np.asarray(finish[warm:]) - a + request_overhead_s
    o = np.asarray(olen[warm:])
    multi = o > 1
    tpot = (e2e[multi] - ttft[multi]) / (o[multi] - 1)
    itl = float((e2e[multi] - ttft[multi]).sum() / (o[multi] - 1).sum()) if multi.any() else float("nan")
    return SimResult(
        ttft_s=ttft, tpot_s=tpot, e2e_s=e2e,
        mean_ttft_s=float(ttft.mean()), mean_tpot_s=float(tpot.mean()) if len(tpot) else float("nan"),
        mean_itl_s=itl,
        output_tokens_per_s=float(out_tokens_done / t) if t > 0 else 0.0,
        requests=len(a), steps=step, preemptions=preemptions,
        mean_batch=batch_time / t if t > 0 else 0.0, max_kv_tokens=max_kv, duration_s=t,
        backlog_at_end=max(backlog_at_end, 0),
        steady_window_s=(arr[warm] if warm < n_req else 0.0, arr[-1]), step_end_s=t_steps, step_kv_tokens=kv_steps,
        ranks=ranks, step_rank_kv_tokens=rank_steps,
    )
