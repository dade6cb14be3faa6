"""Split into request-size buckets or whole: the cheaper way alone is kept (optimizer.planning.bucketing)."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from catalog import load_catalog
from optimizer.models.params import load_params
from optimizer.optimize import optimize_plan
from optimizer.planning import candidates as cand
from optimizer.planning.bucketing import alone_usd, fold_notes
from optimizer.planning.candidate_set import catalog_units, unit_terms
from optimizer.planning.candidates import model_candidates
from optimizer.results.check import check_plan
from optimizer.results.money import MoneyAssumptions
from optimizer.results.plan_result import Diagnostic
from tests.conftest import EXAMPLES
from workloads import load_plan, parse_plan, resolve_catalog

# The costs below were worked out with the v1 calibration; the cases are kept on it so their
# claims (split cheaper / whole cheaper / a tie) do not move with each refit of the model.
V1_PARAMS = Path(__file__).resolve().parent.parent / "data" / "calibration-v1.yaml"

# Long prompts under a tight TTFT (the 405B service of scripts/bench_optimizer.py, at a
# lower rate): the longest of 4 buckets alone must meet the p99 of its own lengths.
LONG_PROMPTS = {
    "name": "long-prompts", "objective": "tco", "allowed_devices": ["h100-sxm", "h200-sxm", "b200", "b300", "mi300x"],
    "workloads": [{
        "name": "rag", "model": "llama-3.1-405b", "qps": 8,
        "prompt_tokens": {"mean": 512, "p99": 4096}, "output_tokens": {"mean": 256, "p99": 1024},
        "slo": {"ttft_p99_ms": 500, "tpot_p99_ms": 200}, "precisions": ["fp8", "bf16"],
    }],
}


def long_prompts(ttft_p99_ms: float):
    spec = copy.deepcopy(LONG_PROMPTS)
    spec["workloads"][0]["slo"]["ttft_p99_ms"] = ttft_p99_ms
    plan = parse_plan(spec, "long-prompts")
    return plan, resolve_catalog(plan, load_catalog(), "long-prompts"), load_params(V1_PARAMS)


def both_ways(plan, catalog, params):
    """The workload's candidates split into 4 buckets and whole, without the choice."""
    w = plan.workloads[0]
    units = catalog_units(plan, catalog)
    a = MoneyAssumptions.from_plan(plan)
    split = cand._prepare(w, plan, catalog, units, params, 4)
    whole = cand._as_whole(w, split)
    terms = {k: unit_terms(u, a) for k, u in units.items()}
    return (cand._finish(w, split, units, params, a, True), cand._finish(w, whole, units, params, a, True), terms)


@pytest.mark.parametrize("ttft_p99_ms, split_servable", [(500, False), (700, True)])
def test_whole_is_kept_when_split_costs_more(ttft_p99_ms, split_servable):
    """500 ms: the longest bucket alone meets it on no device, the whole workload does; 700 ms: both
    can, split costs about twice as much (one B200 pair vs two, on the shipped catalog)."""
    plan, catalog, params = long_prompts(ttft_p99_ms)
    split, whole, terms = both_ways(plan, catalog, params)
    split_usd, whole_usd = alone_usd(split, terms), alone_usd(whole, terms)
    assert len(split.buckets) == 4 and len(whole.buckets) == 1
    assert whole_usd is not None
    assert (split_usd is not None) == split_servable
    if split_servable:
        assert whole_usd < 0.9 * split_usd

    cset = model_candidates(plan, catalog, params, n_buckets=4)
    assert len(cset.workload("rag").buckets) == 1
    notes = [d for d in cset.diagnostics if d.code == "planned_whole"]
    assert len(notes) == 1 and notes[0].message.startswith("rag is planned as one bucket")

    four = optimize_plan(plan, catalog, params, n_buckets=4, diagnose=False, compare_single_device=False)
    one = optimize_plan(plan, catalog, params, n_buckets=1, diagnose=False, compare_single_device=False)
    assert check_plan(four, plan) == [] and four.workloads[0].met
    assert four.objective_usd == pytest.approx(one.objective_usd, rel=1e-9)
    assert any(d.code == "planned_whole" for d in four.diagnostics)


def test_ties_are_planned_whole_without_a_note():
    """The chat fleet is served whole (no size-aware routing): chat and nightly-summaries cost the same
    split or whole, so they are planned whole and no note names them; code-completion is cheaper whole
    ($56,385 vs $59,375 split with the fit-v11 parameters of the MoE routing glue; a tie with the
    model-v3 and fit-v10 ones; $51,762 vs $56,385 with the v2 ones) and gets the note."""
    plan = load_plan(EXAMPLES / "chat-fleet.yaml")
    catalog = resolve_catalog(plan, load_catalog(), "chat-fleet.yaml")
    cset = model_candidates(plan, catalog, load_params(None), n_buckets=4)
    assert [len(wc.buckets) for wc in cset.workloads] == [1, 1, 1]
    notes = [d.message for d in cset.diagnostics if d.code == "planned_whole"]
    assert len(notes) == 1 and notes[0].startswith("code-completion is planned as one bucket")
    assert "$56,385 whole vs $59,375 split" in notes[0]
    result = optimize_plan(plan, catalog, load_params(None), candidates=cset, diagnose=False,
                           compare_single_device=False)
    # fit-v10 and fit-v11 calibrations (444,495.318 with the model-v3/v4 parameters, test_same_answers; 424,734.264
    # with the v2 parameters, 397,691.618 before the serving changes)
    assert result.objective_usd == pytest.approx(471_198.164, abs=0.01)


def test_split_is_kept_where_it_is_cheaper():
    """The lengths and SLO of a Mixtral service (svc13 of the benchmark) on five devices, served by
    llama-3.1-70b at 20 req/s: alone $50,961 split, $55,584 whole (short requests go to cheaper
    replicas); it stays split. (Mixtral at 80 req/s was $50,961 split, $62,619 whole until MoE replicas
    stopped being called saturated on the rising part of their step time, ``serving.fixed_point.solve_state``:
    now $45,756 both ways, as at 20-640 req/s — its split no longer pays.)"""
    spec = {"name": "moe", "objective": "tco", "allowed_devices": ["rtx-pro-6000", "mi300x", "mi355x", "l40s", "h100-sxm"],
            "workloads": [{"name": "moe", "model": "llama-3.1-70b", "qps": 20, "min_replicas": 2,
                           "prompt_tokens": {"mean": 1024, "p99": 4096}, "output_tokens": {"mean": 64, "p99": 256},
                           "slo": {"ttft_p99_ms": 2000, "tpot_p99_ms": 100},
                           "precisions": ["bf16", "fp16", "fp8", "int8", "int4", "fp4"]}]}
    plan = parse_plan(spec, "moe")
    catalog = resolve_catalog(plan, load_catalog(), "moe")
    params = load_params(V1_PARAMS)
    split, whole, terms = both_ways(plan, catalog, params)
    assert alone_usd(split, terms) < 0.95 * alone_usd(whole, terms)
    cset = model_candidates(plan, catalog, params, n_buckets=4)
    assert len(cset.workload("moe").buckets) == 4 and not cset.diagnostics


def test_many_notes_fold_into_one():
    notes = [Diagnostic("info", "planned_whole", f"svc{i:03d} is planned as one bucket: alone it costs $1 whole vs $2 split")
             for i in range(12)]
    assert fold_notes(notes[:5]) == notes[:5]
    folded = fold_notes(notes)
    assert len(folded) == 1 and folded[0].code == "planned_whole"
    assert folded[0].message.startswith("12 workloads are planned as one bucket")
    assert folded[0].message.endswith("svc000, svc001, svc002, svc003, svc004, svc005, svc006, svc007, svc008, svc009 and 2 more")
