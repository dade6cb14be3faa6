"""The safety net: the final plan's online deployments re-checked by the discrete-event simulator.

For a deployment of candidate k with r replicas carrying load q_b of bucket b, the
utilisation is u = Σ_b q_b/μ_b / r and each bucket b with load is simulated on one
replica at u·μ_b req/s (the same convention as the predicted p99s of the plan), with the
bucket's length distributions: up to ``REPLICATIONS`` independent runs (seeds seed, seed+1, ...)
of ``VERIFY_REQUESTS`` Poisson arrivals each. The simulated p99 is that of all runs'
requests pooled; its 95 % confidence interval is exp(m ± t·s/√R), m and s the mean and standard
deviation of the runs' own log p99s (replications: queueing makes successive requests' latencies
correlated, so the order-statistic interval of one run is far too narrow — seeds 0-2 of one chat
deployment give 765-1,419 ms at 4,000 requests; in logs, because a p99 is positive and its spread
multiplicative: near saturation the runs differ by factors, and mean ± t·sd of the raw p99s went
below zero — a 26,773 ms p99 against a 2,000 ms SLO was reported as (−7,202, 22,070), "cannot be
told from the SLO", and not re-sized). The interval is widened to contain the pooled p99. The worst p99 over the buckets of each metric is
compared with the workload's SLO.

**Sequential stopping rule.** A bucket stops after R < REPLICATIONS runs (R ≥ MIN_REPLICATIONS)
when, for every metric with an SLO, the one-sided 99 % t-bound of the runs' mean log p99 clears
the SLO — exp(m + t₀.₉₉·s/√R) < SLO (met) or exp(m − t₀.₉₉·s/√R) > SLO (missed) — and otherwise
runs on to REPLICATIONS, where the pooled p99 decides as before. With looks at R = 2, 3, 4
the chance that an early stop decides a metric the wrong way is at most 3 × 1 % (Bonferroni),
under the t-model of the runs' p99s; a deployment far from its SLO (most of them) costs 2 runs
instead of 5. Runs are independent of one another, so every bucket's next runs are simulated
in parallel (forked workers, ``optimizer.planning.evaluate.parallel_workers``) in waves, and
the result does not depend on the worker count. Pools are simulated as their stage runs
(``_stage_latencies``: a prefill replica's TTFT with the KV transfer, a decode replica's TPOT);
speculative candidates are not simulated (the simulator has no speculative decoding) and say so.

A deployment whose simulated p99 exceeds an SLO beyond the runs' noise (95 % CI above it, or the
pooled p99 over 1.2× the SLO: ``optimizer.planning.safeguards.confidently_missed``) gets the capacity factor
``(SLO / simulated p99) · (1 − VERIFY_MARGIN)`` (worst metric) on its candidate and the
fleet is re-solved (``optimizer.optimize``), up to ``MAX_VERIFY_ROUNDS`` times.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np
import numpy.ma  # noqa: F401 - np.percentile imports it on first use (~30-90 ms): here, before workers fork

from catalog.errors import ModelError
from catalog.load import Catalog
from optimizer.models import disagg
from optimizer.models.lengths import quantile_tokens
from optimizer.models.params import CalibrationParams
from optimizer.models.simulate import StepTime, simulate, step_time_for
from optimizer.planning import disk_cache
from optimizer.planning.candidate_set import CandidateSet, Combo, combo_configs
from optimizer.planning.evaluate import parallel_workers
from optimizer.planning.milp.problem import FleetSolution
from optimizer.results.provenance import VerifiedDeployment
from optimizer.workers import run_pool

VERIFY_REQUESTS = 8000
REPLICATIONS = 5
MIN_REPLICATIONS = 2
T_99 = {2: 31.821, 3: 6.965, 4: 4.541}  # one-sided 99 % Student t, R - 1 dof, for the early looks
T_975 = {2: 12.706, 3: 4.303, 4: 3.182, 5: 2.776, 6: 2.571, 8: 2.365, 10: 2.262}  # Student t, R - 1 dof
VERIFY_SEED = 0
VERIFY_MARGIN = 0.02
MAX_VERIFY_ROUNDS = 5
# Verification is on by default only up to this many online deployments (each costs
# MIN_REPLICATIONS to REPLICATIONS simulations of VERIFY_REQUESTS requests per bucket it carries).
# Measured 2026-12-01: the 29 online deployments of scripts/bench_optimizer.py's 20-workload plan
# take 7.3 s on 2 cores (no re-size round): ~0.25 s each, so 48 cost ~12 s per round.
MAX_VERIFIED_DEPLOYMENTS = 48
METRICS = ("ttft_p99_ms", "tpot_p99_ms", "e2e_p99_ms")


def online_deployments(cset: CandidateSet, sol: FleetSolution) -> int:
    return sum(1 for wc in cset.workloads if not wc.workload.is_batch for c in wc.kept
               if sol.replicas.get((wc.workload.name, c.key), 0) > 0)


@dataclass
class _Bucket:
    """One loaded bucket of a deployment to simulate: its rate per replica and the runs so far."""

    bucket: object  # BucketSpec
    rate: float
    runs: list[dict[str, np.ndarray]] = field(default_factory=list)
    error: str | None = None
    done: bool = False


@dataclass
class _Check:
    """One loaded online deployment to simulate: what it runs on and its buckets."""

    wc: object  # WorkloadCandidates
    c: object  # Candidate
    replicas: int
    routed: dict[int, float]
    device: object
    configs: object
    buckets: list[_Bucket]
    # what a simulation of it depends on besides its rate, bucket, requests and seed (model, device,
    # precision, sharding, calibration, stage, workload): its disk cache key (disk_cache)
    sim_key: tuple = ()
    step_time: StepTime | None = None  # the configuration's step-time tables, built once for all its runs
    step_time_tried: bool = False

    def prepare(self) -> None:
        """Build ``step_time`` (in the parent, before the workers fork: every run of the check shares it).
        A configuration it cannot build is left to ``simulate``, which raises in its own order of checks."""
        if not self.step_time_tried:
            self.step_time_tried = True
            try:
                self.step_time = step_time_for(self.configs, 0)
            except ModelError:
                self.step_time = None


def _checks(cset: CandidateSet, sol: FleetSolution, catalog: Catalog, params: CalibrationParams
            ) -> tuple[list[_Check], list[str]]:
    """The loaded online deployments of ``sol`` that the simulator can run, and notes on the others."""
    out: list[_Check] = []
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
            q = catalog.precision(c.precision)
            engine = c.engine or None  # the engine and sharding it was planned with
            configs = combo_configs(model, [Combo(unit.device, q, c.tp, c.pp, c.ep, engine)], params)
            buckets = [_Bucket(b, u * c.capacity_qps[b.index]) for b in wc.buckets if routed[b.index] > 0]
            sim_key = (model.model_dump_json(), unit.device.model_dump_json(), q.model_dump_json(), c.tp, c.pp,
                       params.model_dump_json(), c.stage, w.model_dump_json()) + ((c.ep,) if c.ep > 1 else ()) + (
                           (engine,) if isinstance(w.engine, list) else ()) + (
                           (c.decode_receive_bytes_s, c.decode_tokens_per_step) if c.stage == "prefill" else ())
            out.append(_Check(wc, c, r, routed, unit.device, configs, buckets, sim_key))
    return out, notes


_SIM_TASKS: list[tuple] = []  # the runs of the wave being simulated (inherited by forked workers)


def _sim_task(i: int) -> dict[str, np.ndarray] | str:
    """One run of ``_SIM_TASKS[i]``; a ModelError comes back as its message."""
    check, bucket, requests, seed = _SIM_TASKS[i]
    try:
        return _stage_latencies(check.configs, check.c.stage, check.wc.workload, check.device, bucket.rate,
                                bucket.bucket, requests, seed, check.step_time, check.c)
    except ModelError as exc:
        return str(exc)


def _simulate_waves(checks: list[_Check], requests: int, seed: int) -> None:
    """Runs of every bucket until the stopping rule (module doc) decides it, wave by wave: the
    first wave runs MIN_REPLICATIONS of every bucket, each later one the next run of the undecided."""
    live = [(ch, b) for ch in checks for b in ch.buckets]
    while live:
        tasks = [(ch, b, requests, seed + len(b.runs) + k) for ch, b in live
                 for k in range(MIN_REPLICATIONS if not b.runs else 1)]
        got = _simulated(tasks)
        for (_, b, _, _), run in zip(tasks, got, strict=True):
            if isinstance(run, str):
                b.error = b.error or run
            else:
                b.runs.append(run)
        for ch, b in live:
            b.done = b.error is not None or len(b.runs) >= REPLICATIONS or _decided(b.runs, ch.wc.workload)
        live = [(ch, b) for ch, b in live if not b.done]


def _simulated(tasks: list[tuple]) -> list[dict[str, np.ndarray] | str]:
    """``_sim_task`` of every task, from the disk cache where it has them (a run is a pure function
    of its check's ``sim_key``, rate, bucket, requests and seed), the others on the worker pool."""
    global _SIM_TASKS
    keys = [(ch.sim_key, b.rate, b.bucket.prompt.model_dump_json(), b.bucket.output.model_dump_json(), n, seed)
            for ch, b, n, seed in tasks]
    got = [_MEMO.get(k, disk_cache.MISSING) if _MEMO is not None else disk_cache.MISSING for k in keys]
    got = [disk_cache.get("simulation", k) if g is disk_cache.MISSING else g for k, g in zip(keys, got, strict=True)]
    todo = [i for i, g in enumerate(got) if g is disk_cache.MISSING]
    for i in todo:
        tasks[i][0].prepare()
    workers = min(parallel_workers(), len(todo))
    _SIM_TASKS = [tasks[i] for i in todo]
    try:
        fresh = run_pool(_sim_task, range(len(todo)), workers) if workers > 1 else [
            _sim_task(i) for i in range(len(todo))]
    finally:
        _SIM_TASKS = []
    for i, run in zip(todo, fresh, strict=True):
        got[i] = run
        disk_cache.put("simulation", keys[i], run)
    if _MEMO is not None:
        _MEMO.update(zip(keys, got, strict=True))
    return got


# Runs already simulated in this verification (``remembered``): a re-size round re-checks the deployments the
# re-solve left as they were (same candidate, replicas and routed load: the same keys) without simulating them
# again, with the disk cache off too. None outside a ``remembered`` block.
_MEMO: dict | None = None


@contextmanager
def remembered() -> Iterator[None]:
    """Within the block, every simulation run is kept in memory by its key (``_simulated``) and not run twice;
    the memory is freed on leaving it (a run is 3 arrays of VERIFY_REQUESTS latencies, ~0.2 MB)."""
    global _MEMO
    outer = _MEMO
    _MEMO = {} if outer is None else outer
    try:
        yield
    finally:
        _MEMO = outer


def _decided(runs: list[dict[str, np.ndarray]], w) -> bool:
    """True when every SLO metric's one-sided 99 % t-bound of the runs' mean p99 clears its SLO."""
    r = len(runs)
    if r < MIN_REPLICATIONS or r not in T_99:
        return False
    for m, attr in zip(METRICS, ("ttft_s", "tpot_s", "e2e_s"), strict=True):
        slo = getattr(w.slo, m)
        if slo is None or attr not in runs[0]:
            continue
        each = np.array([np.percentile(run[attr], 99.0) for run in runs if len(run[attr])]) * 1e3
        if len(each) < r:
            return False
        logs = _logs(each)
        half = T_99[r] * float(np.std(logs, ddof=1)) / np.sqrt(r)
        mean = float(np.mean(logs))
        if not (mean + half < np.log(slo) or mean - half > np.log(slo)):
            return False
    return True


def _logs(p99s_ms: np.ndarray) -> np.ndarray:
    """ln of the runs' p99s (ms), a zero one (no latency to speak of) at 1 ns."""
    return np.log(np.maximum(p99s_ms, 1e-6))


def verify_deployments(cset: CandidateSet, sol: FleetSolution, catalog: Catalog, params: CalibrationParams,
                       *, requests: int = VERIFY_REQUESTS, seed: int = VERIFY_SEED
                       ) -> tuple[list[VerifiedDeployment], list[str]]:
    """Every loaded online deployment of ``sol`` simulated at its routed load (see the module doc).

    Returns the checked deployments and notes on those that could not be simulated.
    """
    checks, notes = _checks(cset, sol, catalog, params)
    _simulate_waves(checks, requests, seed)
    out: list[VerifiedDeployment] = []
    for ch in checks:
        w, c = ch.wc.workload, ch.c
        if failed := next((b.error for b in ch.buckets if b.error is not None), None):
            notes.append(f"{w.name} on {c.key}: not simulated ({failed})")
            continue
        worst: dict[str, tuple[tuple[float, float, float], int]] = {}
        predicted: dict[str, float | None] = {}
        for b in ch.buckets:
            got = ch.wc.predictor(c.key, b.bucket.index, b.rate) if ch.wc.predictor else (None, None, None)
            for m, attr, pred in zip(METRICS, ("ttft_s", "tpot_s", "e2e_s"), got, strict=True):
                p99 = replicated_p99_ms([run[attr] for run in b.runs if attr in run])
                if p99 is not None and (m not in worst or p99[0] > worst[m][0][0]):
                    worst[m] = (p99, len(b.runs))
                if pred is not None:
                    predicted[m] = max(predicted.get(m) or 0.0, pred)
        slack = [(worst[m][0][0] / slo, m, slo) for m in METRICS
                 if (slo := getattr(w.slo, m)) is not None and m in worst]
        if not slack:
            continue
        ratio, m, slo = max(slack)
        (value, lo, hi), runs = worst[m]
        out.append(VerifiedDeployment(
            workload=w.name, key=c.key, qps_per_replica=sum(ch.routed.values()) / ch.replicas, metric=m, slo_ms=slo,
            predicted_ms=predicted.get(m), simulated_ms=value, simulated_ci_low_ms=lo, simulated_ci_high_ms=hi,
            requests=requests * runs, seed=seed, met=ratio <= 1.0))
    return out, notes


def _stage_latencies(configs, stage: str, w, device, rate: float, b, requests: int, seed: int,
                     step_time: StepTime | None = None, candidate=None) -> dict[str, np.ndarray]:
    """Per-request latencies (s) of one simulated replica, as its stage measures them: colocated
    (with the workload's prefix cache), a prefill pool's TTFT plus the p99 KV transfer of the
    bucket and the decode wait its candidate budgets (``disagg.DecodeSide`` from ``candidate``'s
    decode figures: the transfer at the slower side, one decode step), or a decode pool's TPOT
    (its requests arrive with their KV; ``optimizer.models.disagg``)."""
    pc = w.prefix_cache
    cache = {"prefix_hit_fraction": float(pc.hit_fraction or 0.0) if pc else 0.0,
             "shared_prefix_tokens": int(pc.shared_prefix_tokens or 0) if pc else 0}
    if stage == "prefill":
        run = simulate(configs, 0, rate, b.prompt, disagg.PREFILL_OUTPUT, requests=requests, seed=seed,
                       step_time=step_time, **cache)
        link = disagg.kv_link_bytes_s(configs, [device.scaleout_nic_gbps_per_gpu or np.nan])
        side = None
        if candidate is not None and candidate.decode_receive_bytes_s is not None:
            side = disagg.DecodeSide(candidate.decode_receive_bytes_s, candidate.decode_tokens_per_step)
            link = disagg.pair_link_bytes_s(link, side.receive_link_bytes_s)
        sent = disagg.sent_tokens(float(quantile_tokens(b.prompt, 0.99)), None) - cache["shared_prefix_tokens"]
        t_kv = float(disagg.kv_transfer_ms(configs, max(sent, 1.0), link)[0]) / 1e3
        wait = side.wait_p99_ms(w.slo, b.output) / 1e3 if side is not None else 0.0
        return {"ttft_s": run.ttft_s + t_kv + wait}
    if stage == "decode":
        run = simulate(configs, 0, rate, b.prompt, b.output, requests=requests, seed=seed, step_time=step_time,
                       prefix_hit_fraction=1.0, shared_prefix_tokens=cache["shared_prefix_tokens"])
        return {"tpot_s": run.tpot_s}
    run = simulate(configs, 0, rate, b.prompt, b.output, requests=requests, seed=seed, step_time=step_time, **cache)
    return {"ttft_s": run.ttft_s, "tpot_s": run.tpot_s, "e2e_s": run.e2e_s}


def replicated_p99_ms(samples: list[np.ndarray]) -> tuple[float, float, float] | None:
    """(pooled p99, CI low, CI high) in ms of R runs' latencies (s): CI = exp(m ± t·s/√R) over the runs' log
    p99s, widened to contain the pooled p99 (module doc)."""
    runs = [x for x in samples if len(x)]
    if not runs:
        return None
    pooled = float(np.percentile(np.concatenate(runs), 99.0)) * 1e3
    each = np.array([np.percentile(x, 99.0) for x in runs]) * 1e3
    if len(each) < 2:
        return pooled, pooled, pooled
    logs = _logs(each)
    half = T_975.get(len(each), 2.0) * float(np.std(logs, ddof=1)) / np.sqrt(len(each))
    mean = float(np.mean(logs))
    return pooled, min(pooled, float(np.exp(mean - half))), max(pooled, float(np.exp(mean + half)))


def derate_factor(v: VerifiedDeployment) -> float:
    """Capacity factor for a missed deployment: (SLO / simulated p99) · (1 − VERIFY_MARGIN)."""
    return min(1.0, v.slo_ms / v.simulated_ms) * (1.0 - VERIFY_MARGIN)
