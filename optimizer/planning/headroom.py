"""Headroom as a policy: capacities derated and demand raised before the fleet is sized.

The candidates' capacities at the SLO (req/s per replica) are multiplied by

    factor[d, e, p] = target_utilization · capacity_factor_at(fidelity[d, e, p], confidence)   (1 without confidence)

for a candidate on device d served by engine e at expert-parallel degree p (``fidelity_key``), so each
candidate is derated by the band of its own configuration — a TensorRT-LLM tp H100 by that of
H100/TensorRT-LLM, an ep8 or vLLM H100 beside it by its own — times a per-candidate factor from the
simulator's verification (``optimizer.planning.verify``); and every bucket's rate by the demand factor

    demand_factor = exp(demand_sigma · Φ⁻¹(demand_quantile))

(the demand_quantile of a lognormal forecast whose median is the stated rate). Since every
downstream figure (routing, replicas, deployment capacity, predicted p99s, the check) reads
the derated candidate set, the plan is sized and reported consistently.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace
from statistics import NormalDist

from optimizer.models.fidelity import capacity_factor_at
from optimizer.planning.candidate_set import Candidate, CandidateSet
from optimizer.results.plan_result import Deployment
from optimizer.results.provenance import Fidelity, HeadroomPolicy
from workloads.spec import Plan

# (device, engine, expert-parallel degree): what a candidate's fidelity depends on ("" engine: a capacity-table unit);
# not the candidate's string key (``optimizer.models.configs.config_key``)
FidelityKey = tuple[str, str, int]


def fidelity_key(c: Candidate | Deployment) -> FidelityKey:
    """The configuration a fidelity class is rated for: (device, engine, ep) of a candidate or deployment."""
    return c.device, c.engine, c.ep


def demand_factor(plan: Plan) -> float:
    """exp(demand_sigma · Φ⁻¹(demand_quantile)); 1 at the median (demand_quantile 0.5)."""
    if plan.demand_quantile == 0.5 or plan.demand_sigma == 0:
        return 1.0
    return math.exp(plan.demand_sigma * NormalDist().inv_cdf(plan.demand_quantile))


def policy_of(plan: Plan) -> HeadroomPolicy:
    return HeadroomPolicy(plan.confidence, plan.target_utilization, plan.demand_quantile, plan.demand_sigma,
                          demand_factor(plan))


def capacity_factors(plan: Plan, fidelity: Mapping[FidelityKey, Fidelity]) -> dict[FidelityKey, float]:
    """Per (device, engine, ep): target_utilization × the confidence level's factor of its fidelity band."""
    out = {}
    for k, fid in fidelity.items():
        f = plan.target_utilization
        if plan.confidence is not None:
            f *= capacity_factor_at(fid, plan.confidence)
        out[k] = f
    return out


def candidate_capacity_factors(plan: Plan, fidelity: Mapping[FidelityKey, Fidelity],
                               candidates: Mapping[tuple[str, str], Fidelity],
                               cset: CandidateSet) -> dict[tuple[str, str], float]:
    """Per (workload, key) whose band was widened (``safeguards.candidate_fidelity``), at the plan's confidence
    level: capacity_factor_at(widened) / capacity_factor_at(its configuration's band), the factor ``sized``
    multiplies on top of ``capacity_factors``; none without a confidence level."""
    if plan.confidence is None or not candidates:
        return {}
    key_of = {(wc.workload.name, c.key): fidelity_key(c) for wc in cset.workloads for c in wc.kept}
    return {k: capacity_factor_at(f, plan.confidence) / capacity_factor_at(fidelity[key_of[k]], plan.confidence)
            for k, f in candidates.items()}


def sized(cset: CandidateSet, config_factors: Mapping[FidelityKey, float], demand: float = 1.0,
          candidate_factors: Mapping[tuple[str, str], float] | None = None) -> CandidateSet:
    """``cset`` with kept candidates' capacities × the factor of their configuration (``fidelity_key``) and
    their own (workload, key) factor, bucket rates × ``demand``. A non-empty ``config_factors`` must
    cover every kept candidate's configuration (KeyError otherwise); an empty one means factor 1."""
    candidate_factors = candidate_factors or {}
    if all(f == 1.0 for f in config_factors.values()) and demand == 1.0 and not candidate_factors:
        return cset
    workloads = []
    for wc in cset.workloads:
        w = wc.workload.name
        cands = []
        for c in wc.candidates:
            if c.kept:  # pruned candidates keep their capacities: no factor looked up
                k = fidelity_key(c)
                if config_factors and k not in config_factors:
                    # a map keyed otherwise (e.g. by device) would leave the candidate underated in silence
                    raise KeyError(f"sized: no capacity factor for configuration {k} of kept candidate "
                                   f"{w}/{c.key}; build the factors from fidelity_map of this candidate set")
                f = config_factors.get(k, 1.0) * candidate_factors.get((w, c.key), 1.0)
                if f != 1.0:
                    c = replace(c, capacity_qps=tuple(mu * f for mu in c.capacity_qps))
            cands.append(c)
        buckets = tuple(replace(b, qps=b.qps * demand) for b in wc.buckets) if demand != 1.0 else wc.buckets
        workloads.append(replace(wc, candidates=tuple(cands), buckets=buckets))
    return replace(cset, workloads=tuple(workloads))
