"""Candidates: every way to serve each workload, with its capacity per bucket, cost and power.

The records (Candidate, CandidateSet, …) are in :mod:`optimizer.planning.candidate_set`, their
evaluation (jobs, memo, worker pool) in :mod:`optimizer.planning.evaluate`.
Enumeration: every allowed device × every allowed precision the device runs × every engine
the workload allows (``Workload.engines``; the device's default when it names none) × tp in
{1, 2, 4, 8} dividing gpus_per_node × pp in {1, 2, 4, 8} where needed to fit (the smallest
pp that fits at that tp, and none beyond); for an MoE model also expert parallelism (tp 1,
pp 1, ep N for N > 1 in the same degrees as tp: attention data-parallel over N GPUs, experts
split N ways, TensorRT-LLM's "DEP"; pruned with the memory reason when it does not fit at pp 1).
Each gets its capacity at the workload's SLO
(req/s per replica) in every request-size bucket — ``capacity_at_slo`` of the serving
model; for a batch workload the SLO-free throughput ``batch_throughput`` — its cost per
replica under the plan's objective and its power. An online workload is evaluated both
split into buckets and whole, and split only where that costs less alone
(:mod:`optimizer.planning.bucketing`: a split bucket must meet the p99s on its own).
Workloads that differ only by their rate and replica rules (``shape_key``) are evaluated once:
each gets the candidates of the first of them, with its own bucket rates (the split-or-whole
choice is still made per workload: it depends on the rate).

Pruned candidates keep their reason (``pruned_reason``):

- device not allowed by the plan, or missing a figure the objective or a limit needs
  (``Device.unusable_for``);
- precision not run natively, model does not fit (the perf model's reason);
- no capacity at the SLO in any bucket (``limited_by`` says which p99 binds);
- dominated: within one device and stage, m = ⌊g_a/g_b⌋ ≥ 1 copies of another candidate b use no
  more GPUs than a and give at least a's capacity in every bucket (pools: and b pairs as widely,
  ``pairs_as_widely``). Such an a is never
  needed: replacing each replica of a by m replicas of b keeps every constraint (GPUs,
  servers, power, inventory, min_replicas, N+1; n+1-node spread q of a: m·q of b per server, offered
  up to ``milp.problem.MAX_SPREAD_REPLICAS_PER_SERVER``) and the cost. Where m × b's capacity already
  covers a's capacity bound, a is marked so without being evaluated
  (:mod:`optimizer.planning.screening`; capacity 0, limited_by ``'not evaluated'``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from catalog.load import Catalog
from catalog.schema import Device, Model
from optimizer.models import serving
from optimizer.models.configs import Configs, config_key
from optimizer.models.disagg import (
    DecodeSide,
    kv_link_bytes_s,
    pool_p99_ms,
    prefill_tiers,
    receive_tiers,
    sent_tokens,
    tier_label,
)
from optimizer.models.lengths import split_buckets
from optimizer.models.params import CalibrationParams, load_params
from optimizer.models.techniques import ServingTechnique, workload_technique
from optimizer.planning.bucketing import choose_bucketing, fold_notes
from optimizer.planning.candidate_set import (
    PP_DEGREES,
    TP_DEGREES,
    BucketSpec,
    Candidate,
    CandidateSet,
    Combo,
    Predictor,
    UnitSpec,
    WorkloadCandidates,
    catalog_units,
    cloud_limit_notes,
    combo_configs,
    cost_per_replica_usd,
    missing_figures,
    unit_terms,
)
from optimizer.planning.context_window import fit_plan_windows
from optimizer.planning.evaluate import bucket_capacity, finite_or_zero, variant_job
from optimizer.planning.screening import Screened, dominated_reason, evaluate_screened
from optimizer.planning.solver_options import DEFAULT_N_BUCKETS
from optimizer.planning.technique_savings import technique_note
from optimizer.results.money import MoneyAssumptions
from optimizer.results.plan_result import Diagnostic
from workloads.spec import SLO, Plan, Workload

# Workload shapes (``shape_key``) whose configs are built and evaluated together (memory stays bounded
# for large plans).
WORKLOADS_PER_BATCH = 32

# ---------------------------------------------------------------------------------------
# Pruning
# ---------------------------------------------------------------------------------------


def dominated_by(a: Candidate, b: Candidate) -> int:
    """m ≥ 1 when m = ⌊g_a/g_b⌋ copies of b give at least a's capacity in every bucket, else 0."""
    if a.device != b.device or a.stage != b.stage or a.key == b.key or b.gpus > a.gpus:
        return 0
    if not pairs_as_widely(b, a):
        return 0
    m = a.gpus // b.gpus
    if all(m * cb >= ca for ca, cb in zip(a.capacity_qps, b.capacity_qps, strict=True)):
        return m
    return 0


def pairs_as_widely(b: Candidate, a: Candidate) -> bool:
    """b may stand in for a under the pairing rule (``milp.problem.pairing_rows``): a prefill b of a
    receive tier no faster than a's (it may feed every decode replica a may), a decode b receiving at
    least as fast as a (it may take every prefill replica's KV a may); always for colocated ones."""
    if a.stage == "prefill":
        return (b.pair_link_bytes_s or 0.0) <= (a.pair_link_bytes_s or 0.0)
    if a.stage == "decode":
        return (b.pair_link_bytes_s or 0.0) >= (a.pair_link_bytes_s or 0.0)
    return True


def prune_dominated(candidates: Sequence[Candidate]) -> list[Candidate]:
    """Mark kept candidates dominated by another kept one of the same device (see module doc).

    Ties (each dominates the other: same GPUs, same capacities) keep the first by
    (gpus, key), so exactly one of a group of equals survives.
    """
    kept = sorted((c for c in candidates if c.kept), key=lambda c: (c.device, c.gpus, c.key))
    by_device: dict[str, list[Candidate]] = {}
    for c in kept:
        by_device.setdefault(c.device, []).append(c)
    reasons: dict[str, str] = {}
    for group in by_device.values():
        for i, a in enumerate(group):
            for j, b in enumerate(group):
                if i == j or b.key in reasons:
                    continue
                m = dominated_by(a, b)
                if m and not (dominated_by(b, a) and j > i):
                    reasons[a.key] = dominated_reason(m, b.key, b.gpus)
                    break
    return [replace(c, pruned_reason=reasons[c.key]) if c.key in reasons else c for c in candidates]


def prune_unpaired(candidates: Sequence[Candidate]) -> list[Candidate]:
    """Mark kept prefill candidates of a receive tier r no kept decode candidate needs.

    With no kept decode candidate receiving at ≥ r, a tier-r prefill replica can feed none. With
    none receiving in [r, r'), r' the next tier kept for the same configuration, the tier-r' variant
    feeds the same decode replicas at no less capacity (its transfer budget min(s, r') is the faster),
    so replacing each tier-r replica by a tier-r' one keeps every constraint and the cost.
    """
    links = sorted(c.pair_link_bytes_s or 0.0 for c in candidates if c.kept and c.stage == "decode")
    pre = [c for c in candidates if c.kept and c.stage == "prefill"]
    reasons: dict[str, str] = {}
    for a in pre:
        r = a.pair_link_bytes_s or 0.0
        if not any(x >= r for x in links):
            reasons[a.key] = f"no decode candidate receives KV at >= {tier_label(r)} (its pairing tier)"
            continue
        base = a.key.rsplit("__rx", 1)[0]
        up = sorted((c for c in pre if c.key.rsplit("__rx", 1)[0] == base and (c.pair_link_bytes_s or 0.0) > r
                     and all(cb >= ca for ca, cb in zip(a.capacity_qps, c.capacity_qps, strict=True))),
                    key=lambda c: c.pair_link_bytes_s or 0.0)
        if up and not any(r <= x < (up[0].pair_link_bytes_s or 0.0) for x in links):
            reasons[a.key] = (f"dominated by {up[0].key}: no decode candidate receives between its tier and that "
                              "one's, so it feeds the same decode replicas with at least this capacity")
    return [replace(c, pruned_reason=reasons[c.key]) if c.key in reasons else c for c in candidates]



# ---------------------------------------------------------------------------------------
# Model-based candidates
# ---------------------------------------------------------------------------------------


def tp_degrees(device: Device, server_gpus: int | None = None) -> list[int]:
    """Tensor-parallel degrees within one server: {1, 2, 4, 8} dividing the device's gpus_per_node
    and the size of the server it is bought in (a plan may fix a PCIe server at 4 slots)."""
    sizes = (device.gpus_per_node, server_gpus or device.gpus_per_node)
    return [t for t in TP_DEGREES if all(t <= g and g % t == 0 for g in sizes)]



def _bucket_specs(w: Workload, n_buckets: int, window_tokens: int) -> tuple[BucketSpec, ...]:
    """Request-size buckets: online workloads split by size (``split_buckets``, its requests sampled within the
    model's context window ``window_tokens``); batch ones whole."""

    rate = w.request_rate_qps
    parts = split_buckets(w.prompt_tokens, w.output_tokens, 1 if w.is_batch else n_buckets, window_tokens)
    return tuple(
        BucketSpec(i, b.fraction, b.fraction * rate, b.label, b.prompt.mean_tokens, b.output.mean_tokens,
                   b.prompt, b.output)
        for i, b in enumerate(parts)
    )


def ep_degrees(model: Model, device: Device, server_gpus: int | None = None) -> list[int]:
    """Expert-parallel degrees of an MoE model: those of ``tp_degrees`` above 1 (one server's
    scale-up domain); none for a dense model."""
    return [n for n in tp_degrees(device, server_gpus) if n > 1] if model.is_moe else []


def _combos(w: Workload, model: Model, catalog: Catalog, units: dict[str, UnitSpec], plan: Plan, n_buckets: int
            ) -> tuple[list[Combo], list[Candidate]]:
    """Configurations to evaluate at pp = 1 (``_prepare`` adds pp where tp needs it), and candidates
    pruned before any model runs: per device, precision and engine, (tp t, ep 1) for t in
    ``tp_degrees`` and (tp 1, ep N) for N in ``ep_degrees``."""

    todo, pruned = [], []
    zeros, nones = (0.0,) * n_buckets, (None,) * n_buckets
    for key, unit in units.items():
        dev = unit.device
        if dev is None:
            continue
        why = None
        if not unit.allowed:
            why = (f"{key} is a consumer card (licence restricts datacenter use); list it in allowed_devices to plan it"
                   if plan.allowed_devices is None else f"{key} is not in the plan's allowed_devices")
        elif unit.inventory_gpus == 0:
            why = f"inventory of {key} is 0"
        elif below_one_server(unit):
            why = f"inventory of {key} ({unit.inventory_gpus} GPUs) is less than {whole_unit(unit)}"
        elif missing := missing_figures(dev, plan):
            why = f"{key} has no {', '.join(missing)}; add it with --catalog or the plan's devices section"
        shardings = [(t, 1) for t in tp_degrees(dev, unit.gpus_per_node)]
        shardings += [(1, n) for n in ep_degrees(model, dev, unit.gpus_per_node)]
        for q_name in w.precisions:
            q = catalog.precision(q_name)
            q_why = why or q.unsupported_reason(dev)
            for n, engine in enumerate(w.engines):
                e_why = q_why or engine_reason(dev, engine)
                for t, e in shardings:
                    if e_why is None:
                        todo.append(Combo(dev, q, t, 1, e, engine))
                    elif e == 1 and (n == 0 or q_why is None):  # one row per tp says why (not per ep and engine)
                        pruned.append(Candidate(w.name, config_key(dev, q, t, 1, engine, e), key, q.key, t, 1, t * e,
                                                zeros, nones, pruned_reason=e_why, ep=e, engine=engine or ""))
    return todo, pruned


def smallest_purchase_gpus(unit: UnitSpec) -> int:
    """The fewest GPUs of the unit a fleet can buy (or rent): a server that comes whole (a fixed-size board or
    rack, or any server under allow_partial_servers: false), else one cloud instance (``gpus_per_instance``,
    1 for cards bought one by one)."""
    return unit.gpus_per_node if unit.price.fixed_size or unit.full_servers_only else unit.price.gpus_per_instance


def whole_unit(unit: UnitSpec) -> str:
    """What the unit is bought in, for a message: 'one server of 8, which is bought whole' or 'one cloud
    instance of 4 GPUs (cloud_gpus_per_instance)'."""
    if smallest_purchase_gpus(unit) == unit.gpus_per_node:
        return f"one server of {unit.gpus_per_node}, which is bought whole"
    return f"one cloud instance of {unit.price.gpus_per_instance} GPUs (cloud_gpus_per_instance)"


def below_one_server(unit: UnitSpec) -> bool:
    """True when the unit's inventory (GPUs available) is short of the smallest purchase
    (:func:`smallest_purchase_gpus`): the MILP's GPUs bought ≤ inventory then forces 0 of them."""
    n = unit.inventory_gpus
    return n is not None and 0 < n < smallest_purchase_gpus(unit)


def engine_reason(device: Device, engine: str | None) -> str | None:
    """Why ``engine`` cannot serve on ``device``, or None: TensorRT-LLM is built on CUDA and runs on
    NVIDIA GPUs only (https://github.com/NVIDIA/TensorRT-LLM, read 2026-12-01); vLLM and SGLang also run on
    AMD (ROCm) and other accelerators, so they are left to the calibration's factors."""
    if engine == "trtllm" and device.vendor != "nvidia":
        return f"TensorRT-LLM runs on NVIDIA GPUs only, {device.key} is {device.vendor}; list vllm or sglang for it"
    return None


@dataclass(frozen=True)
class _Variant:
    """One way to run the workload's configs: colocated or one pool of a disaggregated pair, with
    the technique it uses; ``rows`` of ``_Prepared.chosen`` it covers (pools: devices with a NIC figure)."""

    stage: str
    technique: ServingTechnique | None
    prefix: str  # of the candidate key: "" | "prefill__" | "decode__"
    suffix: str  # "" | "__spec"
    rows: tuple[int, ...]
    configs: Configs
    nic_gbps_per_gpu: tuple[float, ...] | None = None
    decode_side: DecodeSide | None = None  # prefill pools: what they budget for the decode pools they feed

    @property
    def label(self) -> str:
        return self.technique.label() if self.technique is not None else ""


@dataclass(frozen=True)
class _Prepared:
    """A workload before the serving model runs: its buckets, the configs to evaluate, early prunes."""

    model: Model
    buckets: tuple[BucketSpec, ...]
    pruned: list[Candidate]
    chosen: list[Combo]
    configs: Configs | None
    variants: tuple[_Variant, ...] = ()


def _variants(w: Workload, model: Model, catalog: Catalog, chosen: list[Combo], configs: Configs
              ) -> tuple[_Variant, ...]:
    """Colocated as today (with the workload's prefix cache), colocated with speculative decoding
    when the workload allows it, and prefill + decode pools when it allows disaggregation
    (online workloads; devices with a ``scaleout_nic_gbps_per_gpu``)."""
    every = tuple(range(len(chosen)))
    if w.is_batch:
        return (_Variant("colocated", None, "", "", every, configs),)
    draft = catalog.model(w.speculative.draft_model) if w.speculative and w.speculative.draft_model else None
    plain = workload_technique(w, model, draft, speculative=False)
    base = plain if plain.active else None
    spec = workload_technique(w, model, draft) if w.speculative is not None else None
    out = [_Variant("colocated", base, "", "", every, configs)]
    if spec is not None:
        out.append(_Variant("colocated", spec, "", "__spec", every, configs))
    if w.disaggregation == "allowed":
        rows = tuple(i for i, c in enumerate(chosen) if c.device.scaleout_nic_gbps_per_gpu)
        if rows:
            sub = configs.take(list(rows))
            nic = tuple(float(chosen[i].device.scaleout_nic_gbps_per_gpu) for i in rows)
            # one prefill variant per receive tier r of the decode candidates, budgeting the transfer at
            # min(send, r); the MILP pairs it only with decode replicas receiving at >= r (pairing_rows)
            tiers = receive_tiers(sub, nic)
            send = kv_link_bytes_s(sub, nic)
            steps = spec.tokens_per_step if spec is not None else 1.0
            for r in tiers:
                at = [j for j in range(len(rows)) if r in prefill_tiers(float(send[j]), tiers)]
                if at:
                    out.append(_Variant("prefill", base, "prefill__", "__" + tier_label(r),
                                        tuple(rows[j] for j in at), sub.take(at), tuple(nic[j] for j in at),
                                        DecodeSide(r, float(steps))))
            out.append(_Variant("decode", base, "decode__", "", rows, sub, nic))
            if spec is not None:
                out.append(_Variant("decode", spec, "decode__", "__spec", rows, sub, nic))
    return tuple(out)


def _prepare(w: Workload, plan: Plan, catalog: Catalog, units: dict[str, UnitSpec], params: CalibrationParams,
             n_buckets: int) -> _Prepared:
    """Enumerate, fit in memory (smallest pp that fits) and build the configs of one workload."""

    model = catalog.model(w.model)
    buckets = _bucket_specs(w, n_buckets, model.max_context_tokens)
    todo, pruned = _combos(w, model, catalog, units, plan, len(buckets))

    # pp: the smallest degree that fits; pp = 1 is kept (pruned, with the memory reason) when it does not.
    # Expert-parallel combos are tried at pp 1 only.
    grid: list[Combo] = []
    spans: list[range] = []
    for c in todo:
        degrees = PP_DEGREES if c.ep == 1 else (1,)
        spans.append(range(len(grid), len(grid) + len(degrees)))
        grid += [c._replace(pp=p) for p in degrees]
    fit = combo_configs(model, grid, params) if grid else None
    chosen: list[Combo] = []
    for rows in spans:
        first = next((i for i in rows if fit.runnable[i]), None)
        if first is None or grid[first].pp > 1:
            # Record the pp = 1 config (pp was needed), or the largest pp tried when nothing fits.
            i = rows[0] if first is not None else rows[-1]
            c = grid[i]
            pruned.append(Candidate(w.name, fit.keys[i], c.device.key, c.precision.key, c.tp, c.pp, c.gpus,
                                    tuple(0.0 for _ in buckets), tuple("memory" for _ in buckets),
                                    pruned_reason=fit.reason[i] or "does not fit in memory", ep=c.ep,
                                    engine=fit.engines[i]))
        if first is not None:
            chosen.append(grid[first])
    configs = combo_configs(model, chosen, params) if chosen else None
    variants = _variants(w, model, catalog, chosen, configs) if chosen else ()
    return _Prepared(model, buckets, pruned, chosen, configs, variants)


def _as_whole(w: Workload, prep: _Prepared) -> _Prepared | None:
    """The same configs with the workload as one bucket, when ``prep`` splits it (else None)."""
    if len(prep.buckets) < 2:
        return None
    pruned = [replace(c, capacity_qps=c.capacity_qps[:1], limited_by=c.limited_by[:1]) for c in prep.pruned]
    return replace(prep, buckets=_bucket_specs(w, 1, prep.model.max_context_tokens), pruned=pruned)


def _finish(w: Workload, prep: _Prepared, units: dict[str, UnitSpec], params: CalibrationParams, a: MoneyAssumptions,
            prune: bool, evaluated: Screened | None = None) -> WorkloadCandidates:
    """Capacities per bucket (``evaluated`` first, else ``bucket_capacity``), costs, pruning (the
    candidates ``evaluated`` screened keep its reason, ``optimizer.planning.screening``)."""
    kept: list[Candidate] = []
    for v in prep.variants:
        kept += _variant_candidates(w, prep, v, units, params, a, evaluated)
    if prune and kept:
        kept = prune_unpaired(prune_dominated(kept))
    predictor = _predictor(prep, params, w.slo) if prep.chosen else None
    return WorkloadCandidates(w, prep.model.key, prep.buckets, tuple(kept + prep.pruned), predictor)


def _variant_candidates(w: Workload, prep: _Prepared, v: _Variant, units: dict[str, UnitSpec], params: CalibrationParams,
                        a: MoneyAssumptions, evaluated: Screened | None) -> list[Candidate]:
    """The candidates of one variant: capacity in every bucket, cost per replica, a reason when none."""
    buckets, nb = prep.buckets, len(prep.buckets)
    chosen = [prep.chosen[i] for i in v.rows]
    caps = np.zeros((len(chosen), nb))
    limited = [["" for _ in range(nb)] for _ in chosen]
    floors: list[list[dict[str, float]]] = [[{} for _ in range(nb)] for _ in chosen]
    whys: list[str | None] = [None] * len(chosen)
    for b in buckets:
        job = variant_job(prep.chosen, v, b, w, params)
        ev = (evaluated.evaluations.get(job.cache_key) if evaluated is not None else None) or bucket_capacity(job)
        caps[:, b.index] = ev.capacity_qps
        for i in range(len(chosen)):
            limited[i][b.index] = ev.limited_by[i]
            floors[i][b.index] = ev.floor_p99_ms[i]
            whys[i] = whys[i] or ev.why[i]
    screened = evaluated.reasons if evaluated is not None else {}
    costs: dict[tuple[str, int], float] = {}  # by (device, GPUs): the same few figures for every row
    links = kv_link_bytes_s(v.configs, v.nic_gbps_per_gpu) if v.stage == "decode" else None
    out = []
    for i, combo in enumerate(chosen):
        d, q, t, p, e = combo.device, combo.precision, combo.tp, combo.pp, combo.ep
        capacity = tuple(finite_or_zero(x) for x in caps[i])
        reason = screened.get((w.name, nb, v.prefix + v.configs.keys[i] + v.suffix))
        if reason is None and not any(capacity):
            pool = f" as a {v.stage} pool" if v.stage != "colocated" else ""
            reason = f"no capacity at the SLO{pool} in any bucket" + (f": {whys[i]}" if whys[i] else "")
        out.append(Candidate(
            w.name, v.prefix + v.configs.keys[i] + v.suffix, d.key, q.key, t, p, combo.gpus, capacity, tuple(limited[i]),
            _cost(costs, units[d.key], combo.gpus, a), pruned_reason=reason, floor_p99_ms=tuple(floors[i]),
            stage=v.stage, technique=v.label, ep=e, engine=v.configs.engines[i],
            decode_receive_bytes_s=v.decode_side.receive_link_bytes_s if v.decode_side is not None else None,
            decode_tokens_per_step=v.decode_side.tokens_per_step if v.decode_side is not None else 1.0,
            receive_link_bytes_s=float(links[i]) if v.stage == "decode" else None,
            kv_bytes_per_request=(float(v.configs.kv_bytes_per_token[i]) * sent_tokens(w.prompt_tokens.mean_tokens,
                                                                                       v.technique)
                                  if v.stage != "colocated" else None),
        ))
    return out


def _cost(memo: dict[tuple[str, int], float], unit: UnitSpec, gpus: int, a: MoneyAssumptions) -> float:
    """``cost_per_replica_usd``, memoised in ``memo`` by (unit, GPUs)."""
    key = (unit.key, gpus)
    if key not in memo:
        memo[key] = cost_per_replica_usd(unit, gpus, a)
    return memo[key]


def _predictor(prep: _Prepared, params: CalibrationParams, slo: SLO) -> Predictor:
    """p99s (ms) of one candidate on one bucket at a rate per replica: ``serve_at_rate`` (colocated),
    ``disagg.pool_p99_ms`` (a pool's share: prefill TTFT with the KV transfer and the decode wait its
    ``DecodeSide`` budgets under ``slo``; decode TPOT and E2E)."""
    variants: dict[str, tuple[_Variant, int]] = {}
    for v in prep.variants:
        for j in range(len(v.rows)):  # v.configs holds the variant's rows in order, engine included
            variants[v.prefix + v.configs.keys[j] + v.suffix] = (v, j)
    cache: dict[str, Configs] = {}
    known: dict[tuple[str, int, float], tuple[float | None, float | None, float | None]] = {}

    def predict(key: str, bucket: int, qps: float) -> tuple[float | None, float | None, float | None]:
        """Memoised: verification and the result's deployment rows ask for the same (key, bucket, rate)."""
        if (key, bucket, qps) not in known:
            known[(key, bucket, qps)] = _predict(key, bucket, qps)
        return known[(key, bucket, qps)]

    def _predict(key: str, bucket: int, qps: float) -> tuple[float | None, float | None, float | None]:
        if qps <= 0 or key not in variants:
            return (None, None, None)
        v, j = variants[key]
        combo = prep.chosen[v.rows[j]]
        if key not in cache:
            cache[key] = v.configs.take([j])
        b = prep.buckets[bucket]
        with np.errstate(all="ignore"):
            if v.stage == "colocated":
                r = serving.serve_at_rate(cache[key], qps, b.prompt, b.output, params, technique=v.technique)
                return tuple(_finite(getattr(r, f"{m}_p99_ms")[0]) for m in ("ttft", "tpot", "e2e"))  # type: ignore[return-value]
            nic = float(combo.device.scaleout_nic_gbps_per_gpu)
            got = pool_p99_ms(v.stage, cache[key], qps, b.prompt, b.output, nic, v.technique, params,
                              slo=slo, decode=v.decode_side)
        return tuple(_finite(x) if x is not None else None for x in got)  # type: ignore[return-value]

    return predict


def _finite(x) -> float | None:
    x = float(x)
    return x if math.isfinite(x) else None


# Workload fields the candidates do not depend on: the rate (the buckets' qps) and the replica rules.
RATE_FIELDS = frozenset({"name", "qps", "tokens_per_day", "batch_window_hours", "min_replicas", "redundancy",
                         "peak_to_average_ratio"})


def shape_key(w: Workload) -> str:
    """Everything of ``w`` its candidates depend on: model, lengths, SLO, precisions, engines, serving
    techniques and whether it is a batch workload — not its name, rate or replica rules (``RATE_FIELDS``).
    Workloads of one shape are evaluated once (a replica's capacity at the SLO does not depend on the rate)."""
    return f"{w.is_batch}:{w.model_dump_json(exclude=set(RATE_FIELDS))}"


def for_workload(wc: WorkloadCandidates, w: Workload) -> WorkloadCandidates:
    """``wc`` (computed for a workload of ``w``'s shape) as ``w``'s: its workload, and each bucket's
    rate the bucket's fraction × ``w``'s rate (as ``_bucket_specs`` gives them); the candidates still
    name the workload they were computed for until ``renamed``."""
    if wc.workload is w:
        return wc
    rate = w.request_rate_qps
    return replace(wc, workload=w, buckets=tuple(replace(b, qps=b.fraction * rate) for b in wc.buckets))


def renamed(wc: WorkloadCandidates) -> WorkloadCandidates:
    """``wc`` with every candidate naming ``wc.workload``."""
    name = wc.workload.name
    if all(c.workload == name for c in wc.candidates):
        return wc
    return replace(wc, candidates=tuple(_named(c, name) for c in wc.candidates))


def _named(c: Candidate, name: str) -> Candidate:
    """``replace(c, workload=name)`` without re-running ``__init__`` (a 500-workload plan copies ~10⁶
    candidates: 0.1 s per workload through ``replace``); every other field is shared."""
    new = object.__new__(Candidate)
    new.__dict__.update(c.__dict__, workload=name)
    return new


def model_candidates(
    plan: Plan, catalog: Catalog, params: CalibrationParams | None = None, *, n_buckets: int = DEFAULT_N_BUCKETS,
    prune: bool = True, screen: bool | None = None,
) -> CandidateSet:
    """Candidates of every workload from the performance and serving models.

    ``prune=False`` keeps dominated candidates (for measuring what pruning buys). ``screen``: mark
    dominated without evaluating them the candidates a smaller evaluated one covers by their capacity
    bound (``optimizer.planning.screening``; the same kept set); default: when pruning.
    """
    screen = prune if screen is None else screen and prune

    params = params if params is not None else load_params(None)
    plan, _ = fit_plan_windows(plan, catalog)  # optimize_plan did (and kept the warnings); direct callers too
    units = catalog_units(plan, catalog)
    a = MoneyAssumptions.from_plan(plan)
    terms = {k: unit_terms(u, a) for k, u in units.items()}
    shapes: dict[str, list[int]] = {}  # workloads that differ only by rate and replica rules share candidates
    for i, w in enumerate(plan.workloads):
        shapes.setdefault(shape_key(w), []).append(i)
    groups = list(shapes.values())
    done: list[WorkloadCandidates | None] = [None] * len(plan.workloads)
    notes: list[Diagnostic | None] = [None] * len(plan.workloads)
    technique_notes: list[Diagnostic | None] = [None] * len(plan.workloads)
    alternatives: list[WorkloadCandidates | None] = [None] * len(plan.workloads)  # CandidateSet.split_alternatives
    for start in range(0, len(groups), WORKLOADS_PER_BATCH):  # bounded memory for large plans
        batch = groups[start:start + WORKLOADS_PER_BATCH]
        firsts = [plan.workloads[g[0]] for g in batch]
        prepared = [_prepare(w, plan, catalog, units, params, n_buckets) for w in firsts]
        wholes = [_as_whole(w, prep) for w, prep in zip(firsts, prepared, strict=True)]
        evaluated = evaluate_screened(list(zip(firsts, prepared, wholes, strict=True)), params, screen=screen)
        for g, w0, prep, whole in zip(batch, firsts, prepared, wholes, strict=True):
            split_wc = _finish(w0, prep, units, params, a, prune, evaluated)
            whole_wc = _finish(w0, whole, units, params, a, prune, evaluated) if whole is not None else None
            for i in g:
                w = plan.workloads[i]
                wc = for_workload(split_wc, w)
                if whole_wc is not None:  # split or whole: optimizer.planning.bucketing
                    split = wc
                    wc, notes[i], split_serves = choose_bucketing(split, for_workload(whole_wc, w), terms)
                    if wc is not split and split_serves:
                        alternatives[i] = renamed(split)
                technique_notes[i] = technique_note(wc, terms)
                done[i] = renamed(wc)
    workloads = tuple(wc for wc in done if wc is not None)
    diagnostics = fold_notes([n for n in notes if n]) + [n for n in technique_notes if n]
    lacking = sorted(k for k, u in units.items() if u.device is not None and u.allowed
                     and missing_figures(u.device, plan))
    if lacking:
        diagnostics.append(Diagnostic("info", "devices_missing_figures",
                                      f"{len(lacking)} devices lack a figure this plan needs and were not "
                                      f"considered: {', '.join(lacking)}"))
    if short := sorted(k for k, u in units.items() if u.device is not None and u.allowed and below_one_server(u)):
        diagnostics.append(Diagnostic(
            "warning", "inventory_below_server",
            "inventory less than one server, which is bought whole (a fixed-size board or rack, or "
            "allow_partial_servers: false), or than one cloud instance (cloud_gpus_per_instance), so not considered: "
            + ", ".join(f"{k} ({units[k].inventory_gpus} of {smallest_purchase_gpus(units[k])} GPUs)" for k in short)
            + "; raise the inventory to a whole server (instance) or allow partial servers"))
    diagnostics += cloud_limit_notes(plan)
    allowed = tuple(plan.allowed_devices) if plan.allowed_devices is not None else None
    alternatives = [a for a, wc in zip(alternatives, done, strict=True) if wc is not None]  # aligned with workloads
    split_alternatives = tuple(alternatives) if any(alternatives) else ()
    return CandidateSet(workloads, units, tuple(diagnostics), plan.objective, allowed, split_alternatives)
