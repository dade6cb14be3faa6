"""The safety net: the final plan's online deployments re-checked by the discrete-event simulator.

For a deployment of candidate k with r replicas carrying load q_b of bucket b, the
utilisation is u = Σ_b q_b/μ_b / r and each bucket b with load is simulated on one
replica at u·μ_b req/s (the same convention as the predicted p99s of the plan), with the
bucket's length distributions: ``REPLICATIONS`` independent runs (seeds seed, seed+1, ...)
of ``VERIFY_REQUESTS`` Poisson arrivals each. The simulated p99 is that of all runs'
requests pooled; its 95 % confidence interval is mean ± t·sd/√R of the runs' own p99s
(replications: queueing makes successive requests' latencies correlated, so the
order-statistic interval of one run is far too narrow — seeds 0-2 of one chat deployment
give 765-1,419 ms at 4,000 requests). The worst p99 over the buckets of each metric is
compared with the workload's SLO. Pools are simulated as their stage runs
(``_stage_latencies``: a prefill replica's TTFT with the KV transfer, a decode replica's TPOT);
speculative candidates are not simulated (the simulator has no speculative decoding) and say so.

A deployment whose simulated p99 exceeds an SLO gets the capacity factor
``(SLO / simulated p99) · (1 − VERIFY_MARGIN)`` (worst metric) on its candidate and the
fleet is re-solved (``optimizer.optimize``), up to ``MAX_VERIFY_ROUNDS`` times.
"""

from __future__ import annotations

import numpy as np

from catalog.errors import ModelError
from catalog.load import Catalog
from optimizer.models import disagg
from optimizer.models.lengths import quantile_tokens
from optimizer.models.params import CalibrationParams
from optimizer.models.perf import build_configs
from optimizer.models.simulate import simulate
from optimizer.planning.candidate_set import CandidateSet
from optimizer.planning.milp.problem import FleetSolution
from optimizer.results.provenance import VerifiedDeployment

VERIFY_REQUESTS = 8000
REPLICATIONS = 5
T_975 = {2: 12.706, 3: 4.303, 4: 3.182, 5: 2.776, 6: 2.571, 8: 2.365, 10: 2.262}  # Student t, R - 1 dof
VERIFY_SEED = 0
VERIFY_MARGIN = 0.02
MAX_VERIFY_ROUNDS = 5
# Verification is on by default only up to this many online deployments (each costs
# REPLICATIONS simulations of VERIFY_REQUESTS requests per bucket it carries, ~0.5-2 s).
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
            if c.key.endswith("__spec"):
                notes.append(f"{w.name} on {c.key}: not simulated (the simulator has no speculative decoding)")
                continue
            configs = build_configs(model, [(unit.device, catalog.precision(c.precision), c.tp, c.pp)], params)
            worst: dict[str, tuple[float, float, float]] = {}
            predicted: dict[str, float | None] = {}
            try:
                for b in wc.buckets:
                    if routed[b.index] <= 0:
                        continue
                    rate = u * c.capacity_qps[b.index]
                    runs = [_stage_latencies(configs, c.stage, w, unit.device, rate, b, requests, seed + i)
                            for i in range(REPLICATIONS)]
                    got = wc.predictor(c.key, b.index, rate) if wc.predictor else (None, None, None)
                    for m, attr, pred in zip(METRICS, ("ttft_s", "tpot_s", "e2e_s"), got, strict=True):
                        p99 = replicated_p99_ms([run[attr] for run in runs if attr in run])
                        if p99 is not None and (m not in worst or p99[0] > worst[m][0]):
                            worst[m] = p99
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
                requests=requests * REPLICATIONS, seed=seed, met=ratio <= 1.0))
    return out, notes


def _stage_latencies(configs, stage: str, w, device, rate: float, b, requests: int, seed: int) -> dict[str, np.ndarray]:
    """Per-request latencies (s) of one simulated replica, as its stage measures them: colocated
    (with the workload's prefix cache), a prefill pool's TTFT plus the p99 KV transfer of the
    bucket, or a decode pool's TPOT (its requests arrive with their KV; ``optimizer.models.disagg``)."""
    pc = w.prefix_cache
    cache = {"prefix_hit_fraction": float(pc.hit_fraction or 0.0) if pc else 0.0,
             "shared_prefix_tokens": int(pc.shared_prefix_tokens or 0) if pc else 0}
    if stage == "prefill":
        run = simulate(configs, 0, rate, b.prompt, disagg.PREFILL_OUTPUT, requests=requests, seed=seed, **cache)
        link = disagg.kv_link_bytes_s(configs, [device.scaleout_nic_gbps_per_gpu or np.nan])
        sent = disagg.sent_tokens(float(quantile_tokens(b.prompt, 0.99)), None) - cache["shared_prefix_tokens"]
        t_kv = float(disagg.kv_transfer_ms(configs, max(sent, 1.0), link)[0]) / 1e3
        return {"ttft_s": run.ttft_s + t_kv}
    if stage == "decode":
        run = simulate(configs, 0, rate, b.prompt, b.output, requests=requests, seed=seed,
                       prefix_hit_fraction=1.0, shared_prefix_tokens=cache["shared_prefix_tokens"])
        return {"tpot_s": run.tpot_s}
    run = simulate(configs, 0, rate, b.prompt, b.output, requests=requests, seed=seed, **cache)
    return {"ttft_s": run.ttft_s, "tpot_s": run.tpot_s, "e2e_s": run.e2e_s}


def replicated_p99_ms(samples: list[np.ndarray]) -> tuple[float, float, float] | None:
    """(pooled p99, CI low, CI high) in ms of R runs' latencies (s): CI = mean ± t·sd/√R of the runs' p99s."""
    runs = [x for x in samples if len(x)]
    if not runs:
        return None
    pooled = float(np.percentile(np.concatenate(runs), 99.0)) * 1e3
    each = np.array([np.percentile(x, 99.0) for x in runs]) * 1e3
    if len(each) < 2:
        return pooled, pooled, pooled
    half = T_975.get(len(each), 2.0) * float(np.std(each, ddof=1)) / np.sqrt(len(each))
    return pooled, float(np.mean(each) - half), float(np.mean(each) + half)


def derate_factor(v: VerifiedDeployment) -> float:
    """Capacity factor for a missed deployment: (SLO / simulated p99) · (1 − VERIFY_MARGIN)."""
    return min(1.0, v.slo_ms / v.simulated_ms) * (1.0 - VERIFY_MARGIN)
