"""The safety net: the final plan's online deployments re-checked by the discrete-event simulator.

For a deployment of candidate k with r replicas carrying load q_b of bucket b, the
utilisation is u = Σ_b q_b/μ_b / r and each bucket b with load is simulated on one
replica at u·μ_b req/s (the same convention as the predicted p99s of the plan), with the
bucket's length distributions, ``VERIFY_REQUESTS`` Poisson arrivals and a fixed seed. Its
p99 TTFT/TPOT/E2E (worst over the buckets) are compared with the workload's SLO; the
percentile's 95 % confidence interval comes from the order statistics
(``optimizer.models.simulate.percentile_ci``).

A deployment whose simulated p99 exceeds an SLO gets the capacity factor
``(SLO / simulated p99) · (1 − VERIFY_MARGIN)`` (worst metric) on its candidate and the
fleet is re-solved (``optimizer.optimize``), up to ``MAX_VERIFY_ROUNDS`` times.
"""

from __future__ import annotations

from catalog.errors import ModelError
from catalog.load import Catalog
from optimizer.models.params import CalibrationParams
from optimizer.models.perf import build_configs
from optimizer.models.simulate import simulate
from optimizer.planning.candidates import CandidateSet
from optimizer.planning.milp import FleetSolution
from optimizer.results.provenance import VerifiedDeployment

VERIFY_REQUESTS = 4000
VERIFY_SEED = 0
VERIFY_MARGIN = 0.02
MAX_VERIFY_ROUNDS = 3
# Verification is on by default only up to this many online deployments (each costs one
# simulation of VERIFY_REQUESTS requests per bucket it carries, ~0.2-1 s).
MAX_VERIFIED_DEPLOYMENTS = 24
METRICS = ("ttft_p99_ms", "tpot_p99_ms", "e2e_p99_ms")


def online_deployments(cset: CandidateSet, sol: FleetSolution) -> int:
    return sum(1 for wc in cset.workloads if not wc.workload.is_batch for c in wc.kept
               if sol.replicas.get((wc.workload.name, c.key), 0) > 0)


def verify_deployments(cset: CandidateSet, sol: FleetSolution, catalog: Catalog, params: CalibrationParams,
                       *, requests: int = VERIFY_REQUESTS, seed: int = VERIFY_SEED
                       ) -> tuple[list[VerifiedDeployment], list[str]]:
    """Every loaded online deployment of ``sol`` simulated at its routed load (see the module doc).

    Returns the checked deployments and notes on those that could not be simulated.
    """
    out: list[VerifiedDeployment] = []
    notes: list[str] = []
    for wc in cset.workloads:
        w = wc.workload
        if w.is_batch:
            continue
        model = catalog.model(wc.model)
        for c in wc.kept:
            r = sol.replicas.get((w.name, c.key), 0)
            routed = {b.index: sol.routed_qps.get((w.name, b.index, c.key), 0.0) for b in wc.buckets}
            if r <= 0 or sum(routed.values()) <= 0:
                continue
            u = sum(q / c.capacity_qps[b] for b, q in routed.items() if q > 0 and c.capacity_qps[b] > 0) / r
            unit = cset.units[c.device]
            if unit.device is None or c.precision is None:
                continue
            configs = build_configs(model, [(unit.device, catalog.precision(c.precision), c.tp, c.pp)], params)
            worst: dict[str, tuple[float, float, float]] = {}
            predicted: dict[str, float | None] = {}
            try:
                for b in wc.buckets:
                    if routed[b.index] <= 0:
                        continue
                    rate = u * c.capacity_qps[b.index]
                    sim = simulate(configs, 0, rate, b.prompt, b.output, requests=requests, seed=seed)
                    got = wc.predictor(c.key, b.index, rate) if wc.predictor else (None, None, None)
                    for m, pct, pred in zip(METRICS, (sim.ttft, sim.tpot, sim.e2e), got, strict=True):
                        p = pct[99.0]
                        if m not in worst or p.value_ms > worst[m][0]:
                            worst[m] = (p.value_ms, p.ci_low_ms, p.ci_high_ms)
                        if pred is not None:
                            predicted[m] = max(predicted.get(m) or 0.0, pred)
            except ModelError as exc:
                notes.append(f"{w.name} on {c.key}: not simulated ({exc})")
                continue
            slack = []
            for m in METRICS:
                slo = getattr(w.slo, m)
                if slo is not None and m in worst:
                    slack.append((worst[m][0] / slo, m, slo))
            if not slack:
                continue
            ratio, m, slo = max(slack)
            value, lo, hi = worst[m]
            out.append(VerifiedDeployment(
                workload=w.name, key=c.key, qps_per_replica=sum(routed.values()) / r, metric=m, slo_ms=slo,
                predicted_ms=predicted.get(m), simulated_ms=value, simulated_ci_low_ms=lo, simulated_ci_high_ms=hi,
                requests=requests, seed=seed, met=ratio <= 1.0))
    return out, notes


def derate_factor(v: VerifiedDeployment) -> float:
    """Capacity factor for a missed deployment: (SLO / simulated p99) · (1 − VERIFY_MARGIN)."""
    return min(1.0, v.slo_ms / v.simulated_ms) * (1.0 - VERIFY_MARGIN)
