"""Prefix caching and speculative decoding / MTP: paper limits of the serving model under a technique."""

from __future__ import annotations

from dataclasses import fields

import numpy as np
import pytest

from catalog import load_catalog
from catalog.errors import WorkloadError
from optimizer.models import perf, serving
from optimizer.models.attention import attention_flops_per_context_token
from optimizer.models.configs import build_configs
from optimizer.models.params import load_params
from optimizer.models.serving.state import _technique_lengths, lengths_for
from optimizer.models.simulate import simulate
from optimizer.models.speculative import accepted_tokens_per_step, speculative_cost
from optimizer.models.techniques import ServingTechnique, workload_technique
from optimizer.optimize import optimize_plan
from optimizer.planning.candidates import model_candidates
from optimizer.results.check import check_plan
from workloads.load import resolve_catalog
from workloads.spec import SLO, LengthDist, Plan, Workload

CAT = load_catalog(None)
PARAMS = load_params()
LONG_P, SHORT_O = LengthDist(mean=8192), LengthDist(mean=128)
CHAT_P, CHAT_O = LengthDist(mean=2048, p99=8192), LengthDist(mean=256, p99=1024)


def cfg(model="llama-3.1-70b", device="h100-sxm", prec="fp8", tp=4, pp=1):
    return build_configs(CAT.model(model), [(CAT.device(device), CAT.precision(prec), tp, pp)], PARAMS)


def spec(k=3, a=0.8, method="eagle", model="llama-3.1-70b", draft=None):
    return ServingTechnique(speculative=speculative_cost(method, k, a, CAT.model(model),
                                                         CAT.model(draft) if draft else None))


def _same(a, b):
    for f in fields(a):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if isinstance(x, np.ndarray):
            np.testing.assert_array_equal(x, y, err_msg=f.name)
        elif isinstance(x, list | float | int | str):
            assert x == y, f.name


# ---- prefix caching


def test_prefix_hit_zero_is_todays_numbers_bit_for_bit():
    c = cfg()
    slo = SLO(ttft_p99_ms=1500, tpot_p99_ms=60)
    today = serving.capacity_at_slo(c, CHAT_P, CHAT_O, slo, PARAMS)
    w = Workload(name="w", model="llama-3.1-70b", qps=1, prompt_tokens=CHAT_P, output_tokens=CHAT_O, slo=slo,
                 prefix_cache={"hit_fraction": 0.0})
    t = workload_technique(w, CAT.model("llama-3.1-70b"))
    assert not t.active
    _same(today, serving.capacity_at_slo(c, CHAT_P, CHAT_O, slo, PARAMS, technique=t))
    # the technique path itself, with nothing to do, gives the plain lengths exactly
    plain = lengths_for(CHAT_P, CHAT_O)
    via = _technique_lengths(plain.l_nodes, plain.l_w, plain.l_var, plain.o_nodes, plain.o_w, plain.o_var,
                             ServingTechnique(), plain.l_dev)
    for name in ("l_nodes", "o_nodes", "l_var", "l_dev", "o_var", "mean_l", "var_l", "mean_o1", "mean_o", "ctx",
                 "kv_tok_steps", "kv_tok2_steps", "kv_prompt_tokens", "span_offset", "tokens_per_step"):
        np.testing.assert_array_equal(getattr(plain, name), getattr(via, name), err_msg=name)


def test_prefix_hit_cuts_ttft_to_the_prefill_of_the_uncached_tokens():
    """λ → 0: TTFT = prefill of the uncached 40 % (attending to the cached 60 %) + front-end time.

    Compute-bound prefill of P = 3,277 of L = 8,192 tokens: 2·active·P + 4·layers·heads·head_dim·P·(L − P/2)
    FLOPs, against 2·active·L + 4·…·L²/2 uncached."""
    c = cfg()
    h = 0.6
    base = serving.serve_at_rate(c, 1e-4, LONG_P, SHORT_O)
    hit = serving.serve_at_rate(c, 1e-4, LONG_P, SHORT_O, technique=ServingTechnique(prefix_hit_fraction=h))
    m = CAT.model("llama-3.1-70b")
    L, P = 8192.0, 8192.0 * (1 - h)
    attn = attention_flops_per_context_token(m)
    flops = lambda n, span: 2 * m.active_params_b * 1e9 * n + attn * n * span  # noqa: E731
    ratio = flops(P, L - P / 2) / flops(L, L / 2)
    over = PARAMS.request_overhead_ms
    assert (hit.ttft_p50_ms[0] - over) / (base.ttft_p50_ms[0] - over) == pytest.approx(ratio, rel=0.08)
    assert hit.tpot_p50_ms[0] == pytest.approx(base.tpot_p50_ms[0], rel=0.02)  # decode reads the full context


def test_prefix_hit_raises_capacity_when_ttft_binds():
    c = cfg()
    slo = SLO(ttft_p99_ms=1500)
    base = serving.capacity_at_slo(c, LONG_P, SHORT_O, slo, PARAMS)
    hit = serving.capacity_at_slo(c, LONG_P, SHORT_O, slo, PARAMS, technique=ServingTechnique(prefix_hit_fraction=0.6))
    assert hit.max_qps[0] > 1.8 * base.max_qps[0]


def test_shared_prefix_is_held_once_per_replica():
    """KV capacity loses N tokens once; each running sequence holds L − N own tokens."""
    c = cfg()
    n = 6000.0
    t = ServingTechnique(shared_prefix_tokens=n)
    assert t.configure(c).kv_capacity_tokens[0] == pytest.approx(c.kv_capacity_tokens[0] - n)
    base = serving.serve_at_rate(c, 2.0, LONG_P, SHORT_O)
    shared = serving.serve_at_rate(c, 2.0, LONG_P, SHORT_O, technique=t)
    # resident KV ≈ λ·(time in system)·tokens held: (8192 − 6000 + 64) vs (8192 + 64) per request
    assert shared.kv_p99_tokens[0] < 0.45 * base.kv_p99_tokens[0]
    assert shared.ttft_p99_ms[0] < 0.5 * base.ttft_p99_ms[0]


# ---- speculative decoding


@pytest.mark.parametrize(("k", "a", "expected"), [(3, 0.0, 1.0), (3, 1.0, 4.0), (3, 0.5, 1.875), (1, 0.9, 1.9)])
def test_accepted_tokens_per_step(k, a, expected):
    """(1 − a^(k+1))/(1 − a): 1 + 0.5 + 0.25 + 0.125 = 1.875; DeepSeek-V3 k = 1, a = 0.9 → 1.9."""
    assert accepted_tokens_per_step(k, a) == pytest.approx(expected)


@pytest.mark.parametrize("method", ["mtp", "eagle", "draft"])
def test_acceptance_zero_never_helps(method):
    c = cfg()
    t = spec(3, 0.0, method, draft="llama-3.1-8b" if method == "draft" else None)
    for batch in (1, 16, 128):
        plain = perf.decode_step_s(c, batch, 2048)[0]
        with_spec = perf.decode_step_s(t.configure(c), batch, 2048)[0] / t.tokens_per_step
        assert with_spec > plain
    slo = SLO(ttft_p99_ms=2000, tpot_p99_ms=60)
    base = serving.capacity_at_slo(c, CHAT_P, CHAT_O, slo, PARAMS)
    assert serving.capacity_at_slo(c, CHAT_P, CHAT_O, slo, PARAMS, technique=t).max_qps[0] <= base.max_qps[0]


def test_full_acceptance_approaches_k_plus_one_at_batch_one():
    """a → 1, k = 3, batch 1 (memory-bound): the verify pass costs about one ordinary step, so
    tokens per second per sequence approach 4× less the draft head's share (1 layer of 80 + the LM head)."""
    c = cfg()
    t = spec(3, 0.999)
    plain = perf.decode_step_s(c, 1, 2048)[0]
    speedup = plain / (perf.decode_step_s(t.configure(c), 1, 2048)[0] / t.tokens_per_step)
    assert 0.85 * 4 < speedup < 4.0
    r0 = serving.serve_at_rate(c, 1e-3, CHAT_P, CHAT_O)
    r1 = serving.serve_at_rate(c, 1e-3, CHAT_P, CHAT_O, technique=t)
    assert r0.tpot_mean_ms[0] / r1.tpot_mean_ms[0] == pytest.approx(speedup, rel=0.05)


def test_speculative_gain_shrinks_as_batches_turn_compute_bound():
    """k = 3, a = 0.8: A = 2.95 tokens a step. Memory-bound at batch 1 (gain near A less the
    draft's share); compute-bound at large batch, where the GEMMs and all-reduces of a step cost 4×
    an ordinary one's (gain → A/4 = 0.74 on those parts); the per-sequence host time and the KV
    reads, which do not grow with k, hold the whole step's gain near break-even (≤ 1.05 at 4,096)."""
    c = cfg()
    t = spec(3, 0.8)
    cs = t.configure(c)
    gains = [perf.decode_step_s(c, b, 512)[0] * t.tokens_per_step / perf.decode_step_s(cs, b, 512)[0]
             for b in (1, 8, 64, 256, 1024, 4096)]
    assert gains == sorted(gains, reverse=True)
    assert gains[0] > 2.5 and gains[-1] < 1.05
    assert gains[-1] > t.tokens_per_step / 4


def test_draft_model_memory_lowers_kv_capacity():
    """An 8B draft in fp8 holds 8.03e9 parameters at the target's stored bytes per parameter (fp8 body,
    BF16 embeddings: ~1.01 B) over 4 GPUs, plus its KV (32 layers vs 80: ratio 0.4 per token)."""
    c = cfg()
    t = spec(4, 0.7, "draft", draft="llama-3.1-8b")
    got = t.configure(c).kv_capacity_tokens[0]
    kv_gpu = c.kv_bytes_per_token[0] / (c.kv_shards[0] * c.pp[0])
    bytes_per_param = c.weight_bytes_total[0] / (c.model.total_params_b * 1e9)
    assert 1.0 < bytes_per_param < 1.03
    free = c.kv_capacity_tokens[0] * kv_gpu - 8.03e9 * bytes_per_param / 4
    assert got == pytest.approx(free / (kv_gpu * (1 + 32 / 80)), rel=1e-9)


def _prefill_increment_s(c, n=2048, span=1024.0):
    """Time a step spends on n prompt tokens at mean span ``span``: step(b=0, n) − step(b=0, 0)."""
    return perf.decode_step_s(c, 0, 0, n, span)[0] - perf.decode_step_s(c, 0, 0, 0, 0)[0]


def test_draft_model_prefills_the_prompt_too():
    """A draft model holds the prompt's KV, so it prefills every prompt token the target does.
    Llama-3.1-8B drafting for Llama-3.1-70B fp8 on one H200 (tp1: no all-reduce in either), 2,048
    prompt tokens at mean span 1,024. On paper: GEMMs 2·(8.03e9 − 2·128,256·4,096)·n = 2·6.979e9·n
    FLOPs at the GPU's achieved dense rate (the draft's weights are read by the step's draft
    passes anyway: FLOPs only), 10.2 % of the target's 2·(70.6e9 − 2·128,256·8,192)·n; attention
    4·32·32·128 FLOPs per query and context token, 20 % of the target's 4·80·64·128. The added time
    matches that within 1e-9; as a share of the target's own prefill increment it is 10-13 % (the
    target's increment is its compute less the part the weight read already overlapped). Without the
    draft's prefill the increment did not change at all (TTFT optimistic)."""
    c = cfg(device="h200-sxm", tp=1)
    t = spec(3, 0.8, "draft", draft="llama-3.1-8b")
    cs = t.configure(c)
    added = _prefill_increment_s(cs) - _prefill_increment_s(c)
    k = c.stage
    draft_body = 8.03e9 - 2 * 128_256 * 4_096
    gemm = 2.0 * draft_body * 2048 / k.gemm_flops_s[0]
    attn = 0.2 * 2048 * 1024 * k.prefill_attn_s_per_ctx_token[0]
    assert 4 * 32 * 32 * 128 / attention_flops_per_context_token(CAT.model("llama-3.1-70b")) == pytest.approx(0.2)
    assert added == pytest.approx(gemm + attn, rel=1e-9)
    assert 0.10 < added / _prefill_increment_s(c) < 0.13
    # and the serving model's TTFT of a lone 8,192-token prompt grows with it: by the ~10-11 % of its
    # prefill above plus the k draft passes of its four chunk steps (~3-4 %; alone they gave 1.036)
    lone = [serving.serve_at_rate(x, 1e-3, LONG_P, SHORT_O, technique=tt).ttft_mean_ms[0] for x, tt in ((c, None), (c, t))]
    assert 1.12 < lone[1] / lone[0] < 1.17


def test_mtp_layer_prefills_the_prompt_too():
    """MTP: the extra layer runs over every prompt token (one layer: f = 1/61 of DeepSeek-V3's GEMM
    FLOPs per token, dense and routed, and of its prefill attention); the LM head only on the last
    token (not per prompt token). fp8 on 8 × H200, 2,048 tokens at span 1,024: the added time is
    f·(n·(φ_dense/F_gemm + φ_expert/F_moe) + t_prefill_attn), within 1e-9 (0 before)."""
    m = CAT.model("deepseek-v3")
    c = build_configs(m, [(CAT.device("h200-sxm"), CAT.precision("fp8"), 8, 1)], PARAMS)
    cs = ServingTechnique(speculative=speculative_cost("mtp", 1, 0.875, m)).configure(c)
    added = _prefill_increment_s(cs) - _prefill_increment_s(c)
    k = c.stage
    layer = 2048 * (k.gemm_flops_per_token[0] / k.gemm_flops_s[0] + k.expert_flops_per_token[0] / k.moe_flops_s[0])
    attn = 2048 * float(m.effective_kv_tokens(1024.0)) * k.prefill_attn_s_per_ctx_token[0]
    assert added == pytest.approx((layer + attn) / 61, rel=1e-9)
    assert added > 0


@pytest.mark.xfail(strict=True, reason=(
    "MTP gain 1.60 at tp8 batch 128 with fit-v11 (1.68 with fit-v10): the MoE routing glue charges each verified draft "
    "token its routing bytes, g = 17.8 B per routed pair and hidden element on every tensor-parallel rank, 3.5 of the "
    "52.4 ms step; g was fitted mostly on expert-parallel rows and the tensor-parallel MoE rows read it as pessimistic "
    "(Mixtral on L40S -0.6 -> -6.3 %), docs/model-accuracy.md 'MoE routing glue (fit-v11)'; XPASS (a failure) once the "
    "glue's tensor-parallel share is fixed"))
def test_mtp_gain_matches_deepseek_v3_report():
    """DeepSeek-V3 Technical Report (arXiv 2412.19437, 2024-12, §5.4.3): one MTP token accepted
    85-90 % of the time gives 1.8× the tokens per second. The model on 8 × H100 SXM (the H800's
    compute and bandwidth) in fp8 at batch 128, k = 1, a = 0.875: A = 1.875 and a verify step
    ~1.07× an ordinary one (still memory-bound on the experts and the MLA latent)."""
    m = CAT.model("deepseek-v3")
    c = build_configs(m, [(CAT.device("h100-sxm"), CAT.precision("fp8"), 8, 1)], PARAMS)
    t = ServingTechnique(speculative=speculative_cost("mtp", 1, 0.875, m))
    gain = perf.decode_step_s(c, 128, 2048)[0] * t.tokens_per_step / perf.decode_step_s(t.configure(c), 128, 2048)[0]
    assert gain == pytest.approx(1.8, rel=0.1)


# ---- through the optimizer


def _chat_plan(**extra):
    w = dict(name="chat", model="llama-3.1-70b", qps=10, prompt_tokens={"mean": 2000, "p99": 4000},
             output_tokens={"mean": 300, "p99": 1000}, slo={"ttft_p99_ms": 2000, "tpot_p99_ms": 25},
             precisions=["fp8"], **extra)
    return Plan(name="x", allowed_devices=["h100-sxm"], workloads=[w])


@pytest.fixture(scope="module")
def plain_chat():
    return optimize_plan(_chat_plan(), CAT, PARAMS, compare_single_device=False)


def test_optimizer_prefix_hit_zero_is_todays_plan(plain_chat):
    r = optimize_plan(_chat_plan(prefix_cache={"hit_fraction": 0.0}), CAT, PARAMS, compare_single_device=False)
    assert r.objective_usd == plain_chat.objective_usd
    assert [(d.key, d.replicas, d.qps) for d in r.deployments] == [(d.key, d.replicas, d.qps) for d in plain_chat.deployments]


def test_optimizer_prefix_cache_never_costs_more(plain_chat):
    plan = _chat_plan(prefix_cache={"hit_fraction": 0.6})
    r = optimize_plan(plan, CAT, PARAMS, compare_single_device=False)
    assert check_plan(r, plan) == [] and r.objective_usd < plain_chat.objective_usd
    assert all(d.technique == "prefix cache 60%" for d in r.deployments)


def test_optimizer_uses_speculation_only_where_it_pays(plain_chat):
    """A TPOT of 25 ms on 70B: EAGLE k = 3 at a = 0.8 (2.95 tokens a step) lets fewer GPUs meet it;
    at a = 0 the speculative candidates are dearer everywhere and the plan is today's."""
    plan = _chat_plan(speculative={"method": "eagle", "tokens": 3, "acceptance_rate": 0.8})
    r = optimize_plan(plan, CAT, PARAMS, compare_single_device=False)
    assert check_plan(r, plan) == [] and r.objective_usd < 0.6 * plain_chat.objective_usd
    assert all(d.key.endswith("__spec") and d.technique == "eagle k3 a0.8" for d in r.deployments)
    note = next(d.message for d in r.diagnostics if d.code == "technique")
    assert "speculative decoding cut its cost alone" in note
    zero = optimize_plan(_chat_plan(speculative={"method": "eagle", "tokens": 3, "acceptance_rate": 0.0}),
                         CAT, PARAMS, compare_single_device=False)
    assert zero.objective_usd == plain_chat.objective_usd
    assert not any(d.key.endswith("__spec") for d in zero.deployments)


def test_technique_note_costs_are_fleets_one_can_buy():
    """Planner review 24: the ``technique`` note priced each side with servers amortised per GPU, a share of
    a board no one sells (DeepSeek-R1 with MTP on B200: "cut its cost alone to $471,198 from $706,797", 12
    GPUs at 1.5 boards, where the fleet without MTP is 2 boards, $942,396). Here 70B at 6 req/s on H100 SXM:
    EAGLE needs 5 GPUs, plain replicas 12 (the note read $211,257 from $507,018); both are whole 8-GPU HGX
    boards, each 8 × 27,839 + 50,000 = $272,712 capex + 3 × (10.2 kW × 0.7 × 1.3 × 8,760 h × $0.10 + 5 % of
    capex) = $338,011.90 over 3 years: 1 board with EAGLE, 2 without."""
    w = dict(name="chat", model="llama-3.1-70b", qps=6, prompt_tokens={"mean": 2000, "p99": 4000},
             output_tokens={"mean": 300, "p99": 1000}, slo={"ttft_p99_ms": 2000, "tpot_p99_ms": 25},
             precisions=["fp8"], speculative={"method": "eagle", "tokens": 3, "acceptance_rate": 0.8})
    cset = model_candidates(Plan(name="x", allowed_devices=["h100-sxm"], workloads=[w]), CAT, PARAMS)
    note = next(d.message for d in cset.diagnostics if d.code == "technique")
    capex = 8 * 27_839 + 50_000
    board_tco = capex + 3 * (10.2 * 0.7 * 1.3 * 8760 * 0.10 + 0.05 * capex)
    assert note == (f"chat: speculative decoding cut its cost alone to ${board_tco:,.0f} from ${2 * board_tco:,.0f} "
                    "with colocated replicas only (50.0% less)")


def test_unsimulated_speculative_deployment_is_a_warning():
    """The simulator has no speculative decoding: a plan served by speculative replicas only was reported as
    verification all_met with nothing simulated and no warning (only a note in the verification record), so
    its p99s, the analytic model's alone, read as checked. Now a not_simulated warning names each one."""
    plan = _chat_plan(speculative={"method": "eagle", "tokens": 3, "acceptance_rate": 0.8})
    r = optimize_plan(plan, CAT, PARAMS, compare_single_device=False, verify=None)
    spec_keys = [d.key for d in r.deployments if d.key.endswith("__spec")]
    assert spec_keys and r.verification is not None and r.verification.deployments == ()
    warning = next(d for d in r.diagnostics if d.code == "not_simulated")
    assert warning.level == "warning" and all(f"chat on {k}: not simulated" in warning.message for k in spec_keys)


def test_prefix_cache_analytic_agrees_with_simulator():
    """The simulator's prefix cache (``simulate(prefix_hit_fraction=…, shared_prefix_tokens=…)``) against
    the analytic model at 40 % and 80 % of capacity: the cache adds at most 10 points of TTFT/TPOT p99
    disagreement to the colocated model's own at the same load (which, under the issue-14 calibration,
    is itself up to ~21 % optimistic on TPOT at 80 % load here: scripts/agreement.py tracks it)."""
    c = cfg()
    p, o = LengthDist(mean=4000, p99=12000), LengthDist(mean=200, p99=800)
    slo = SLO(ttft_p99_ms=1500, tpot_p99_ms=60)

    def errors(t, kw):
        cap = serving.capacity_at_slo(c, p, o, slo, PARAMS, technique=t).max_qps[0]
        out = []
        for f in (0.4, 0.8):
            r = serving.serve_at_rate(c, f * cap, p, o, technique=t)
            s = simulate(c, 0, f * cap, p, o, requests=8000, **kw)
            out += [r.ttft_p99_ms[0] / s.ttft[99.0].value_ms - 1, r.tpot_p99_ms[0] / s.tpot[99.0].value_ms - 1]
        return np.abs(out)

    plain = errors(ServingTechnique(), {})
    for t, kw in ((ServingTechnique(prefix_hit_fraction=0.6), {"prefix_hit_fraction": 0.6}),
                  (ServingTechnique(shared_prefix_tokens=2000), {"shared_prefix_tokens": 2000})):
        cached = errors(t, kw)
        assert np.median(cached - plain) <= 0.10, (cached, plain)
        assert np.max(cached) <= np.max(plain) + 0.15, (cached, plain)


# ---- bad input: one line naming the field and the fix

BASE = dict(name="w", model="llama-3.1-70b", qps=1, prompt_tokens=2000, output_tokens=200, slo={"tpot_p99_ms": 50})


@pytest.mark.parametrize(("change", "message"), [
    ({"prefix_cache": {}}, "give exactly one of hit_fraction"),
    ({"prefix_cache": {"hit_fraction": 0.5, "shared_prefix_tokens": 10}}, "give exactly one of hit_fraction"),
    ({"prefix_cache": {"hit_fraction": 1.0}}, "less than 1"),
    ({"prefix_cache": {"shared_prefix_tokens": 2000}}, "is not below the mean prompt"),
    ({"speculative": {"method": "draft", "tokens": 3, "acceptance_rate": 0.7}}, "needs draft_model"),
    ({"speculative": {"method": "mtp", "draft_model": "llama-3.1-8b", "tokens": 3, "acceptance_rate": 0.7}},
     "draft_model is only used with method 'draft'"),
    ({"speculative": {"method": "eagle", "tokens": 3, "acceptance_rate": 1.2}}, "less than or equal to 1"),
    ({"qps": None, "tokens_per_day": 1e6, "slo": {}, "disaggregation": "allowed"}, "apply to online workloads"),
])
def test_bad_technique_input(change, message):
    with pytest.raises(ValueError, match=message):
        Workload(**{**BASE, **change})


def test_unknown_draft_model_names_the_field():
    w = {**BASE, "speculative": {"method": "draft", "draft_model": "llama-9b", "tokens": 3, "acceptance_rate": 0.7}}
    with pytest.raises(WorkloadError, match=r"workloads\[0\]\.speculative\.draft_model: unknown model 'llama-9b'"):
        resolve_catalog(Plan(workloads=[w]), CAT, "plan.yaml")


def test_a_draft_must_share_the_vocabulary_and_be_smaller():
    """DeepSeek-R1 (vocabulary 129,280) cannot draft for Llama-3.1-70B (128,256): the target verifies the draft's
    token ids; Llama-3.1-70B cannot draft for itself or a smaller Llama (70B active >= 8B); Llama-3.1-8B for the
    70B is accepted."""
    def plan(draft, target="llama-3.1-70b"):
        spec = {"method": "draft", "draft_model": draft, "tokens": 3, "acceptance_rate": 0.7}
        return Plan(workloads=[{**BASE, "model": target, "speculative": spec}])
    with pytest.raises(WorkloadError, match=r"draft_model: deepseek-r1 has a vocabulary of 129,280 tokens and "
                                            r"llama-3.1-70b of 128,256"):
        resolve_catalog(plan("deepseek-r1"), CAT, "plan.yaml")
    with pytest.raises(WorkloadError, match=r"draft_model: llama-3.1-70b \(70.6B active parameters\) is no smaller"):
        resolve_catalog(plan("llama-3.1-70b", "llama-3.1-8b"), CAT, "plan.yaml")
    resolve_catalog(plan("llama-3.1-8b"), CAT, "plan.yaml")


def test_mtp_needs_a_model_with_mtp_layers():
    w = {**BASE, "speculative": {"method": "mtp", "tokens": 1, "acceptance_rate": 0.85}}
    with pytest.raises(WorkloadError, match=r"speculative\.method: 'llama-3.1-70b' has no multi-token-prediction"):
        resolve_catalog(Plan(workloads=[w]), CAT, "plan.yaml")
    resolve_catalog(Plan(workloads=[{**w, "model": "deepseek-v3"}]), CAT, "plan.yaml")  # DeepSeek-V3/R1: 1 MTP module
    # DeepSeek-R1's config.json (the catalog's own source) has num_nextn_predict_layers 1 too; it was left at 0, so
    # speculative mtp on deepseek-r1 was refused
    assert CAT.model("deepseek-r1").mtp_layers == 1
    resolve_catalog(Plan(workloads=[{**w, "model": "deepseek-r1"}]), CAT, "plan.yaml")
