"""Workloads of one shape share their candidates; bucketing's solves alone drop options they never need.

``candidates.shape_key``: a workload's candidates depend on its model, lengths, SLO, precisions,
engines and serving techniques, not on its name, rate or replica rules, so the workloads of one
shape are evaluated once (``model_candidates``) and each gets the shape's candidates with its own
bucket rates. ``bucketing.undominated_options``: an option another one of the same stage beats
in cost and capacity (on devices with no server, inventory or allowed rule) is left out of the
workload's problem alone, whose optimum does not move.
"""

from __future__ import annotations

import copy
from dataclasses import replace

import pytest

from catalog import load_catalog
from optimizer.planning import candidates as cand
from optimizer.planning import evaluate
from optimizer.planning.bucketing import undominated_options
from optimizer.planning.milp.problem import Demand, Option, UnitTerms
from optimizer.planning.milp.solve import solve_alone
from optimizer.results.money import LinearTerms
from workloads import parse_plan, resolve_catalog

BASE = {"model": "llama-3.1-8b", "prompt_tokens": {"mean": 512, "p99": 2048},
        "output_tokens": {"mean": 64, "p99": 256}, "slo": {"ttft_p99_ms": 800, "tpot_p99_ms": 60},
        "precisions": ["fp8", "bf16"]}
SPEC = {"name": "shapes", "objective": "tco", "allowed_devices": ["h100-sxm", "l40s", "mi300x"], "workloads": [
    {"name": "a", "qps": 40, **BASE},
    {"name": "b", "qps": 7.5, "min_replicas": 3, "redundancy": "n+1", **BASE},  # a's shape, other rate and rules
    {"name": "c", "qps": 40, **{**BASE, "slo": {"ttft_p99_ms": 400, "tpot_p99_ms": 60}}},
]}


def _plan(names):
    spec = copy.deepcopy(SPEC)
    spec["workloads"] = [w for w in spec["workloads"] if w["name"] in names]
    plan = parse_plan(spec, "shapes")
    return plan, resolve_catalog(plan, load_catalog(), "shapes")


def test_shape_key_ignores_only_the_rate_and_the_replica_rules():
    plan, _ = _plan({"a", "b", "c"})
    a, b, c = plan.workloads
    assert cand.shape_key(a) == cand.shape_key(b)
    assert cand.shape_key(a) != cand.shape_key(c)
    other = copy.deepcopy(SPEC["workloads"][0]) | {"prompt_tokens": {"mean": 600, "p99": 2048}}
    assert cand.shape_key(parse_plan({"workloads": [other]}, "x").workloads[0]) != cand.shape_key(a)


def test_workloads_of_one_shape_get_the_candidates_they_get_alone(monkeypatch):
    prepared = []
    real = cand._prepare
    monkeypatch.setattr(cand, "_prepare", lambda w, *args: prepared.append(w.name) or real(w, *args))
    plan, catalog = _plan({"a", "b", "c"})
    evaluate._CAPACITY_CACHE.clear()
    together = cand.model_candidates(plan, catalog)
    assert prepared == ["a", "c"]  # b is a's shape: not prepared nor evaluated again

    evaluate._CAPACITY_CACHE.clear()
    plan_b, catalog_b = _plan({"b"})
    alone = cand.model_candidates(plan_b, catalog_b).workload("b")
    shared = together.workload("b")
    assert shared.workload == plan.workload("b")
    assert shared.candidates == alone.candidates  # every field, capacities bit for bit
    assert all(c.workload == "b" for c in shared.candidates)
    assert [bk.qps for bk in shared.buckets] == [bk.fraction * 7.5 for bk in alone.buckets]
    assert shared.buckets == alone.buckets
    assert all(c.workload == "a" for c in together.workload("a").candidates)


def _unit(key: str, usd_per_gpu: float, gpus_per_node: int = 8, **kw) -> UnitTerms:
    zero = LinearTerms(0.0, 0.0)
    return UnitTerms(key, gpus_per_node, LinearTerms(usd_per_gpu, 800.0), zero, zero, zero, **kw)


# Amortised $ per GPU: d1 100 + 800/8 = 200, d2 150 + 800/4 = 350, d3 (full servers only) 100.
UNITS = {"d1": _unit("d1", 100.0), "d2": _unit("d2", 150.0, 4), "d3": _unit("d3", 0.0, full_servers_only=True)}
OPTIONS = (
    Option("w", "k1", "d1", 1, (10.0, 10.0)),   # $200
    Option("w", "k2", "d2", 1, (8.0, 9.0)),     # $350, less capacity than k1: dominated
    Option("w", "k3", "d2", 2, (25.0, 5.0)),    # $700, more capacity than k1 in bucket 0: kept
    Option("w", "k4", "d1", 1, (10.0, 10.0)),   # k1's equal: the first of them is kept
    Option("w", "k5", "d3", 1, (5.0, 5.0)),     # full servers only: never left out
    Option("w", "k6", "d2", 1, (20.0, 8.5)),    # $350, as k2 but less capacity in bucket 1: kept
    Option("w", "k7", "d1", 2, (6.0, 6.0), "decode"),  # another stage: kept
)


@pytest.mark.parametrize("demand", [
    Demand("w", (30.0, 12.0), 3), Demand("w", (3.0, 100.0), 1), Demand("w", (55.0, 0.5), 8),
    Demand("w", (30.0, 12.0), 2, n_plus_one=True), Demand("w", (30.0, 12.0), 2, n_plus_one=True, per_server=True),
])
def test_undominated_options_keep_the_optimum_alone(demand):
    kept = undominated_options(demand, OPTIONS, UNITS)
    names = {o.key for o in kept}
    # per server N+1: spares are 8 // 1 = 8 on d1 and 4 // 1 = 4 on d2, so k1 (8 spares) no longer beats k2 (4)
    assert names == ({"k1", "k2", "k3", "k5", "k6", "k7"} if demand.per_server else {"k1", "k3", "k5", "k6", "k7"})
    colocated = tuple(o for o in OPTIONS if o.stage == "colocated")
    full = solve_alone(demand, colocated, UNITS, time_limit_s=5, gap=1e-9)
    fewer = solve_alone(demand, tuple(o for o in kept if o.stage == "colocated"), UNITS, time_limit_s=5, gap=1e-9)
    assert fewer.objective_usd == pytest.approx(full.objective_usd, rel=1e-9)


def test_options_of_restricted_devices_are_never_dominators():
    units = {**UNITS, "d1": replace(UNITS["d1"], inventory_gpus=4)}
    kept = undominated_options(Demand("w", (30.0, 12.0), 3), OPTIONS, units)
    assert {o.key for o in kept} == {o.key for o in OPTIONS}  # k1 and k4 on an inventoried device: none goes
