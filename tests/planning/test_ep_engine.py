"""Expert parallelism and the serving engine as candidate dimensions (issue 14).

An MoE workload gets (tp 1, pp 1, ep N) candidates whose capacity is the one ``gpuplan estimate
--ep N`` reports (the same serving function on the same configuration); a dense one gets none;
a workload listing two engines gets both engines' candidates and the MILP picks the cheaper;
verification simulates a deployment with the ep and engine it was planned with.
"""

from __future__ import annotations

import pytest

from catalog import load_catalog
from catalog.errors import WorkloadError
from optimizer.models.configs import build_configs
from optimizer.models.estimate import estimate_serving
from optimizer.models.params import FactorOverride, load_params
from optimizer.models.serving import capacity_at_slo
from optimizer.optimize import optimize_plan
from optimizer.planning.candidates import model_candidates
from reports.context import FIRST_ROW, HEADER_ROW
from reports.workbook import build_workbook
from workloads import parse_plan, resolve_catalog
from workloads.spec import LengthDist

PROMPT = {"mean": 1024, "p99": 4096}
OUTPUT = {"mean": 256, "p99": 1024}
SLO = {"ttft_p99_ms": 1000, "tpot_p99_ms": 50}


def _plan(model: str, devices: list[str], engine=None, qps: float = 40.0):
    w = {"name": "svc", "model": model, "qps": qps, "prompt_tokens": PROMPT, "output_tokens": OUTPUT, "slo": SLO,
         "precisions": ["fp8"]}
    if engine is not None:
        w["engine"] = engine
    plan = parse_plan({"name": "e", "allowed_devices": devices, "workloads": [w]}, "e")
    return plan, resolve_catalog(plan, load_catalog(), "e")


def _kept(plan, catalog, params=None):
    cset = model_candidates(plan, catalog, params or load_params(None), n_buckets=1, prune=False)  # every candidate evaluated
    return [c for c in cset.workloads[0].candidates if c.kept]


def test_moe_workload_gets_ep_candidates_with_estimates_capacity():
    """qwen3-30b-a3b on H100 SXM (8 GPUs per server): ep 2, 4 and 8 at tp 1, pp 1, each with the capacity
    ``estimate_serving`` (the serving path of ``gpuplan estimate --ep N``) gives the same configuration."""
    plan, catalog = _plan("qwen3-30b-a3b", ["h100-sxm"])
    kept = {c.key: c for c in _kept(plan, catalog)}
    ep = {c.ep: c for c in kept.values() if c.ep > 1}
    assert sorted(ep) == [2, 4, 8]
    w = plan.workloads[0]
    model, device, fp8 = catalog.model(w.model), catalog.device("h100-sxm"), catalog.precision("fp8")
    for n, c in ep.items():
        assert c.key == f"h100_sxm__fp8__tp1__pp1__ep{n}" and (c.tp, c.pp, c.gpus) == (1, 1, n)
        assert c.engine == "trtllm"
        configs = build_configs(model, [(device, fp8, 1, 1)], load_params(None), ep=n)
        est = estimate_serving(configs, LengthDist(**PROMPT), LengthDist(**OUTPUT), slo=w.slo, devices=catalog.devices)
        assert c.capacity_qps[0] > 0
        assert c.capacity_qps[0] == pytest.approx(est["max_qps_at_slo"], abs=1e-4)  # estimate rounds to 4 decimals
        direct = capacity_at_slo(configs, LengthDist(**PROMPT), LengthDist(**OUTPUT), w.slo).max_qps[0]
        assert c.capacity_qps[0] == pytest.approx(direct, rel=1e-9)
    # the cost of a replica scales with its GPUs: an ep8 replica costs what a tp8 one does
    assert ep[8].cost_per_replica_usd == pytest.approx(kept["h100_sxm__fp8__tp8__pp1"].cost_per_replica_usd)


def test_dense_workload_gets_no_ep_candidates():
    plan, catalog = _plan("llama-3.1-8b", ["h100-sxm"])
    cset = model_candidates(plan, catalog, load_params(None), n_buckets=1, prune=False)
    cands = cset.workloads[0].candidates
    assert cands and all(c.ep == 1 and "__ep" not in c.key for c in cands)


def _objective(plan, catalog, params=None) -> float:
    return optimize_plan(plan, catalog, params or load_params(None), compare_single_device=False, diagnose=False,
                         verify=False, sensitivity=False).objective_usd


def _sglang_params():
    """The shipped parameters plus an SGLang override (a user's calibration of SGLang on every device):
    step and per-sequence host time 2x the defaults', bandwidth share 0.9x."""
    params = load_params(None)
    sglang = FactorOverride(engine="sglang", step_overhead_ms=2 * params.step_overhead_ms,
                            sequence_overhead_us=2 * params.sequence_overhead_us,
                            memory_bandwidth_efficiency=0.9 * params.memory_bandwidth_efficiency, note="test")
    return params.model_copy(update={"overrides": [*params.overrides, sglang]})


def test_two_engines_give_both_candidate_sets_and_the_cheaper_plan():
    """engine: [trtllm, sglang] for qwen3-30b-a3b on H100s at 1,500 req/s (more than one 8-GPU server), with
    parameters that know SGLang: the candidates of each engine (SGLang keys end in __sglang, the
    TensorRT-LLM ones as today), and the plan's objective is the lower of the two one-engine plans.
    (At 400 req/s both engines now plan $676,024: since MoE replicas are no longer called saturated on
    the rising part of their step time, serving.fixed_point, one tp1 replica serves 3x more and the
    engines' difference is lost in whole replicas; at 1,000 req/s $1,014,036 against $1,352,048. With the fit-v10
    parameters, whose per-sequence host time is 3.8 us not 8.9, SGLang's 2x of it costs less and both engines plan
    $1,014,036 at 1,000 req/s; at 1,500 req/s $1,352,048 against $1,690,059, as with the model-v4 parameters.)"""
    params = _sglang_params()
    plan, catalog = _plan("qwen3-30b-a3b", ["h100-sxm"], engine=["trtllm", "sglang"], qps=1500)
    kept = _kept(plan, catalog, params)
    by_engine = {e: {c.key for c in kept if c.engine == e} for e in ("trtllm", "sglang")}
    assert by_engine["trtllm"] and by_engine["sglang"]
    assert {k + "__sglang" for k in by_engine["trtllm"]} == by_engine["sglang"]
    both = _objective(plan, catalog, params)
    alone = {e: _objective(*_plan("qwen3-30b-a3b", ["h100-sxm"], engine=e, qps=1500), params) for e in ("trtllm", "sglang")}
    assert alone["trtllm"] != pytest.approx(alone["sglang"], rel=1e-3)  # the engines differ, so the choice matters
    assert both == pytest.approx(min(alone.values()), rel=1e-9)


def test_vllm_is_measured_on_amd_only_so_its_factors_are_the_non_nvidia_stacks():
    """The shipped fit has vLLM rows on MI300X alone and TensorRT-LLM rows on NVIDIA alone: the vLLM-fitted
    factors select every vendor but NVIDIA (``exclude_vendors: [nvidia]``). vLLM on an H100 gets what
    TensorRT-LLM gets there (the Hopper and FP8 classes), not MI300X's FP8 GEMM share; SGLang on an
    MI300X and vLLM on a Gaudi 3 (a vendor nobody measured) get what vLLM on MI300X gets; engine:
    [trtllm, vllm] on H100s plans what either alone plans."""
    params, cat = load_params(None), load_catalog()
    h100, mi300x = cat.device("h100-sxm"), cat.device("mi300x")
    assert params.factors_for(h100, "vllm", "fp8") == params.factors_for(h100, "trtllm", "fp8")
    assert params.factors_for(mi300x, "sglang", "fp8") == params.factors_for(mi300x, "vllm", "fp8")
    vllm_rows = params.factors_for(mi300x, "vllm", "fp8")
    gaudi3 = params.factors_for(cat.device("gaudi3"), "vllm", "fp8")
    assert (gaudi3.memory_bandwidth_efficiency, gaudi3.compute_efficiency, gaudi3.step_overhead_ms) == (
        vllm_rows.memory_bandwidth_efficiency, vllm_rows.compute_efficiency, vllm_rows.step_overhead_ms)
    assert params.factors_for(mi300x, "vllm", "fp8").compute_efficiency < 0.5 * params.factors_for(
        h100, "vllm", "fp8").compute_efficiency
    both = _objective(*_plan("qwen3-30b-a3b", ["h100-sxm"], engine=["trtllm", "vllm"], qps=400))
    alone = _objective(*_plan("qwen3-30b-a3b", ["h100-sxm"], engine="trtllm", qps=400))
    assert both == pytest.approx(alone, rel=1e-9)


def test_trtllm_is_not_planned_on_amd():
    plan, catalog = _plan("qwen3-30b-a3b", ["mi300x"], engine=["trtllm", "vllm"])
    cset = model_candidates(plan, catalog, load_params(None), n_buckets=1, prune=False)
    cands = cset.workloads[0].candidates
    assert {c.engine for c in cands if c.kept} == {"vllm"}
    trt = [c for c in cands if c.engine == "trtllm" and c.device == "mi300x"]
    assert trt and all("NVIDIA GPUs only" in c.pruned_reason for c in trt)


@pytest.mark.parametrize("engine, needle", [("tensorrt", "is not one of trtllm, vllm, sglang"),
                                            (["vllm", "vllm"], "lists an engine twice"),
                                            ([], "is not one of")])
def test_bad_engine_is_refused_with_the_fix(engine, needle):
    with pytest.raises(WorkloadError) as err:
        _plan("llama-3.1-8b", ["h100-sxm"], engine=engine)
    assert "engine" in str(err.value) and needle in str(err.value)


def test_an_ep_deployment_is_simulated_with_its_ep_and_engine(monkeypatch):
    """mixtral-8x7b on MI300X: an expert-parallel candidate (ep 4) is chosen and checked by simulation as that
    configuration (ep and vLLM), not as tp 1. (It was qwen3-30b-a3b, whose tp1 replica now serves it
    cheaper than any ep one: MoE replicas are no longer called saturated on the rising part of their step
    time, serving.fixed_point.)"""
    from optimizer.planning import verify

    seen = []
    real = verify._checks

    def spy(*args, **kwargs):
        checks, notes = real(*args, **kwargs)
        seen.extend((ch.c.key, ch.c.ep, ch.configs.keys[0], int(ch.configs.ep[0]), ch.configs.engines[0])
                    for ch in checks)
        return checks, notes

    monkeypatch.setattr(verify, "_checks", spy)
    plan, catalog = _plan("mixtral-8x7b", ["mi300x"], engine=["vllm", "sglang"])
    r = optimize_plan(plan, catalog, load_params(None), compare_single_device=False, verify=True, sensitivity=False)
    assert any(d.ep > 1 for d in r.deployments), [d.key for d in r.deployments]
    assert seen and any(ep > 1 for _, ep, _, _, _ in seen)
    for key, ep, simulated, sim_ep, engine in seen:
        assert key == simulated and ep == sim_ep
        assert engine == ("sglang" if key.endswith("__sglang") else "vllm")
    # the JSON rows and the workbook's Deployments sheet show the ep; GPUs = replicas · tp · pp · ep
    js = r.to_json()
    dep = next(d for d in js["deployments"] if d["ep"] > 1)
    assert dep["key"].endswith(f"__ep{dep['ep']}") or f"__ep{dep['ep']}__" in dep["key"]
    assert dep["engine"] in ("vllm", "sglang")
    assert any(c["ep"] > 1 and c["gpus"] == c["tp"] * c["pp"] * c["ep"] for c in js["candidates"])
    ws = build_workbook(js)["Deployments"]
    header = [c.value for c in ws[HEADER_ROW]]
    col = {h: i for i, h in enumerate(header) if h}
    row = next(r for r in ws.iter_rows(min_row=FIRST_ROW) if r[col["Configuration key"]].value == dep["key"])
    assert row[col["Expert parallel"]].value == dep["ep"]
    assert row[col["Expert parallel"]].coordinate in row[col["GPUs"]].value  # the formula multiplies by it
