"""The scheduler loop as it was before its fast paths: the reference the simulator must equal to the bit.

``tests/models/test_simulator_mechanics.py`` runs both on the same sampled requests; the fast paths
(``optimizer.models.simulate._run``: decode-only stretches, completion steps from a heap, the KV limit
in whole tokens, tabulated A(b) + B(b) and a_dec·b) must give the same floats in the same order.
"""

from __future__ import annotations

from collections import deque

import numpy as np

from catalog.errors import ModelError
from optimizer.models.simulate import StepTime


def reference_run(step_s: StepTime, arrivals: np.ndarray, prompts: np.ndarray, outputs: np.ndarray,
         cap_kv: float, max_seqs: int, chunk: int, warmup_fraction: float,
         request_overhead_s: float = 0.0, cached: np.ndarray | None = None,
         span_offset: np.ndarray | None = None, ranks: int = 1, rank_of: list[int] | None = None) -> dict:
    """``optimizer.models.simulate._run`` as it was before its decode-only fast path (316a2c8..1ec80eb):
    every step through every check, the step time as ``StepTime.__call__`` computes it. One attention rank only
    (``ranks`` 1; the per-rank loop of ep > 1 is checked against this one in test_simulator_mechanics)."""
    assert ranks == 1, "the reference loop has one attention rank"
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
    kv_append, t_append = kv_steps.append, t_steps.append
    pop_done = done_at.pop

    while True:
        while nxt < n_req and arr[nxt] <= t:
            waiting.append(nxt)
            nxt += 1
        if backlog_at_end < 0 and nxt == n_req:
            backlog_at_end = len(waiting) + len(prefilling) + b
        # admission (FCFS, head of line blocks)
        while waiting and n_admitted < max_seqs and kv_used + eff_prompt[waiting[0]] + 1 <= cap_kv:
            rid = waiting.popleft()
            kv_used += eff_prompt[rid] + 1  # the prompt and the token its prefill emits
            prefilling.append([rid, eff_prompt[rid] - skip[rid], offset[rid]])
            n_admitted += 1
        if b == 0 and not prefilling:
            if nxt >= n_req and not waiting:
                break
            if nxt < n_req:
                t = max(t, arr[nxt])
                continue
            raise ModelError("simulator stalled: a waiting request can never be admitted")  # pragma: no cover
        # make room for this step's decode tokens: preempt the latest admitted running sequence
        while b and kv_used + b > cap_kv:
            while running_order and not is_running[running_order[-1]]:
                running_order.pop()
            victim = running_order.pop()
            is_running[victim] = False
            ctx_v = ctx_entry[victim] + (step - entry_step[victim])
            generated[victim] += step - entry_step[victim]
            ctx_sum -= ctx_v
            kv_used -= ctx_v
            b -= 1
            n_admitted -= 1
            epoch[victim] += 1
            eff_prompt[victim] = plen[victim] + generated[victim]
            waiting.appendleft(victim)
            preemptions += 1
        # chunked prefill, FCFS
        budget = chunk
        n_pre = 0
        span_tok = 0.0
        completed: list[int] = []
        for item in prefilling:
            if budget <= 0:
                break
            take = item[1] if item[1] < budget else budget
            span_tok += take * (item[2] + take / 2.0)
            item[1] -= take
            item[2] += take
            budget -= take
            n_pre += take
            if item[1] == 0:
                completed.append(item[0])
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
        # prefill completions emit a token at the end of this step
        for rid in completed:
            if generated[rid] == 0:
                first[rid] = t
            generated[rid] += 1
            out_tokens_done += 1
            remaining = olen[rid] - generated[rid]
            if remaining <= 0:
                finish[rid] = t
                kv_used -= eff_prompt[rid] + 1
                n_admitted -= 1
                continue
            is_running[rid] = True
            running_order.append(rid)
            entry_step[rid] = step
            ctx_entry[rid] = eff_prompt[rid] + 1
            ctx_sum += ctx_entry[rid]
            b += 1
            done_at.setdefault(step + remaining, []).append((rid, epoch[rid]))
        if kv_used > max_kv:
            max_kv = kv_used
        kv_append(kv_used)
        t_append(t)

    return {"first": first, "finish": finish, "t": t, "steps": step, "preemptions": preemptions,
            "batch_time": batch_time, "max_kv": max_kv, "out_tokens": out_tokens_done, "backlog": backlog_at_end,
            "kv_steps": kv_steps, "t_steps": t_steps}
