"""Monte Carlo of a what-if file's ``uncertainty`` section: draws, the base fleet's odds, cost spread.

Three steps, each a pure function of its inputs and the seed:

1. :func:`uncertainty_scenarios` — K min-cost scenarios, each the base plan with every rate
   × a lognormal demand draw (median 1, σ of the file) and each listed device's prices × a
   uniform draw in [low, high] (:func:`sample_uncertainty`, seeded by ``seed``).
2. :func:`model_error_draws` — K draws of each base-fleet configuration's (device, engine, ep)
   capacity factor from its fidelity band (seeded by ``seed + 1``, so the demand and price draws stay as they were).
3. :func:`summarise_uncertainty` — the cost's p50/p90 over the feasible draws, the number of
   infeasible ones, and the share of draws in which the *base* fleet (not re-solved) still meets
   every SLO (:func:`fixed_fleet_meets`), with and without model error.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from catalog.load import Catalog
from optimizer.models.fidelity import Z90
from optimizer.planning.headroom import FidelityKey, fidelity_key
from optimizer.results.plan_result import PlanResult
from optimizer.results.provenance import Fidelity
from optimizer.whatif_demand import scaled
from workloads.scenarios import Scenario, Uncertainty, with_price_multipliers
from workloads.spec import Plan

MODEL_ERROR_NOTE = "capacity of each device × a draw from its fidelity band (one draw per class per sample)"


@dataclass(frozen=True)
class UncertaintySummary:
    """What the Monte Carlo draws say (``uncertainty`` of the what-if JSON)."""

    samples: int
    seed: int
    cost_p50_usd: float | None
    cost_p90_usd: float | None
    infeasible_samples: int
    base_fleet_meets_slo_probability: float
    base_fleet_meets_slo_probability_without_model_error: float
    model_error: str = MODEL_ERROR_NOTE

    def to_json(self) -> dict[str, object]:
        return {"samples": self.samples, "seed": self.seed, "cost_p50_usd": self.cost_p50_usd,
                "cost_p90_usd": self.cost_p90_usd, "infeasible_samples": self.infeasible_samples,
                "base_fleet_meets_slo_probability": self.base_fleet_meets_slo_probability,
                "base_fleet_meets_slo_probability_without_model_error":
                    self.base_fleet_meets_slo_probability_without_model_error,
                "model_error": self.model_error}


def sample_uncertainty(uncertainty: Uncertainty, samples: int, seed: int) -> list[tuple[float, dict[str, float]]]:
    """K draws of (demand multiplier, {device: price multiplier}); seeded, deterministic.

    Demand: lognormal with median 1 and the given σ. Prices: uniform in [low, high].
    """
    rng = np.random.default_rng(seed)
    draws = []
    sigma = uncertainty.demand.sigma if uncertainty.demand else 0.0
    for _ in range(samples):
        demand = float(math.exp(rng.normal(0.0, sigma))) if sigma > 0 else 1.0
        prices = {k: float(rng.uniform(v.low, v.high)) for k, v in sorted(uncertainty.prices.items())}
        draws.append((demand, prices))
    return draws


def uncertainty_scenarios(base: Plan, uncertainty: Uncertainty, samples: int, seed: int,
                          catalog: Catalog) -> list[Scenario]:
    """One min-cost scenario per draw (demand scaled, device prices multiplied)."""
    out = []
    for i, (demand, prices) in enumerate(sample_uncertainty(uncertainty, samples, seed)):
        plan = scaled(base, demand)
        if prices:
            plan = with_price_multipliers(plan, prices, catalog)
        out.append(Scenario(name=f"sample-{i + 1}", group="samples", level=demand, plan=plan,
                            overrides={"demand_multiplier": demand, **{f"price:{k}": v for k, v in prices.items()}}))
    return out


def fixed_fleet_meets(base: PlanResult, multipliers: Sequence[float],
                      capacity_factors: Sequence[dict[FidelityKey, float]] | None = None) -> list[bool]:
    """Whether the base plan's fleet still meets every SLO when all demand is scaled by each multiplier
    (and, with ``capacity_factors``, each deployment's capacity by that sample's model-error factor of
    its (device, engine, ep)).

    A workload is met while its scaled rate is within the capacity at SLO of the replicas
    deployed for it (Σ factor[device, engine, ep] · capacity_qps of its deployments; routing is free
    to rebalance).
    """
    rates = {w.name: w.qps for w in base.workloads}
    if not rates or not base.status.has_plan:
        return [False for _ in multipliers]
    out = []
    for i, m in enumerate(multipliers):
        factors = capacity_factors[i] if capacity_factors is not None else {}
        capacity: dict[str, float] = {}
        for d in base.deployments:
            capacity[d.workload] = capacity.get(d.workload, 0.0) + d.capacity_qps * factors.get(fidelity_key(d), 1.0)
        out.append(all(rates[n] * m <= capacity.get(n, 0.0) * (1 + 1e-9) for n in rates))
    return out


def model_error_draws(base: PlanResult, samples: int, seed: int) -> list[dict[FidelityKey, float]]:
    """K draws of {(device, engine, ep): capacity factor} for the configurations of the base plan's deployments.

    Each configuration's log factor is normal with its fidelity band as 10th/90th percentile
    (``Deployment.fidelity``, rated for its device, engine and ep; ``optimizer.models.fidelity``):
    μ = (ln low + ln high)/2, σ = (ln high − ln low)/(2·Z90). Configurations of one fidelity class share
    one standard-normal draw per sample (a class's error is common to its devices: the same extrapolation).
    Seeded by ``seed + 1``, so the demand and price draws of ``sample_uncertainty`` stay as they were.
    """
    bands: dict[FidelityKey, Fidelity] = {}
    for d in base.deployments:  # a configuration's widest band (one deployment's may be widened by its own rows)
        old = bands.get(fidelity_key(d))
        if d.fidelity is not None and (old is None or d.fidelity.high_factor / d.fidelity.low_factor
                                       > old.high_factor / old.low_factor):
            bands[fidelity_key(d)] = d.fidelity
    classes = sorted({f.class_ for f in bands.values()})
    rng = np.random.default_rng(seed + 1)
    draws = []
    for _ in range(samples):
        z = {c: float(rng.standard_normal()) for c in classes}
        row = {}
        for key, f in sorted(bands.items()):
            lo, hi = math.log(f.low_factor), math.log(f.high_factor)
            row[key] = math.exp((lo + hi) / 2 + (hi - lo) / (2 * Z90) * z[f.class_])
        draws.append(row)
    return draws


def percentile(values: Sequence[float | None], q: float) -> float | None:
    """The q-th percentile (numpy's linear interpolation) of the finite values; None if there are none."""
    finite = [v for v in values if v is not None and math.isfinite(v)]
    return float(np.percentile(finite, q)) if finite else None


def summarise_uncertainty(base: PlanResult, draws: Sequence[tuple[float, PlanResult]], seed: int) -> UncertaintySummary:
    """The spread of K re-solved draws ``(demand multiplier, result)`` and the base fleet's odds.

    cost p50/p90 over the draws with a plan; P(meets) = share of draws whose demand the base
    fleet carries, each device's capacity × its model-error draw (and on the point model).
    """
    costs = [r.objective_usd for _, r in draws if r.status.has_plan]
    levels = [m for m, _ in draws]
    point = fixed_fleet_meets(base, levels)
    with_error = fixed_fleet_meets(base, levels, model_error_draws(base, len(levels), seed))
    n = max(len(levels), 1)
    return UncertaintySummary(
        samples=len(draws), seed=seed, cost_p50_usd=percentile(costs, 50), cost_p90_usd=percentile(costs, 90),
        infeasible_samples=len(draws) - len(costs), base_fleet_meets_slo_probability=sum(with_error) / n,
        base_fleet_meets_slo_probability_without_model_error=sum(point) / n)
