"""Candidates: every way to serve each workload, with its capacity per bucket, cost and power.

A candidate k of workload w is (device, precision, tp, pp), keyed deterministically
(``h100_sxm__fp8__tp4__pp1``, the key of the MILP variable and of the workbook row).
Enumeration: every allowed device × every allowed precision the device runs × tp in
{1, 2, 4, 8} dividing gpus_per_node × pp in {1, 2, 4, 8} where needed to fit (the smallest
pp that fits at that tp, and none beyond). Each gets its capacity at the workload's SLO
(req/s per replica) in every request-size bucket — ``capacity_at_slo`` of the serving
model; for a batch workload the SLO-free throughput ``batch_throughput`` — its cost per
replica under the plan's objective and its power.

Pruned candidates keep their reason (``pruned_reason``):

- device not allowed by the plan, or missing a figure the objective or a limit needs
  (``Device.unusable_for``);
- precision not run natively, model does not fit (the perf model's reason);
- no capacity at the SLO in any bucket (``limited_by`` says which p99 binds);
- dominated: within one device, m = ⌊g_a/g_b⌋ ≥ 1 copies of another candidate b use no
  more GPUs than a and give at least a's capacity in every bucket. Such an a is never
  needed: replacing each replica of a by m replicas of b keeps every constraint (GPUs,
  servers, power, inventory, min_replicas, N+1) and the cost.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from catalog.load import Catalog
from catalog.schema import Device
from optimizer.milp import Demand, FleetProblem, Limits, Option, UnitTerms
from optimizer.money import (
    MoneyAssumptions,
    UnitPrice,
    annual_opex_terms,
    capex_terms,
    objective_terms,
    power_kw_terms,
)
from optimizer.plan import Diagnostic
from workloads.spec import LengthDist, Plan, Workload

TP_DEGREES = (1, 2, 4, 8)
PP_DEGREES = (1, 2, 4, 8)

# p99s (ttft, tpot, e2e) in ms of a candidate serving one bucket at a rate per replica.
Predictor = Callable[[str, int, float], tuple[float | None, float | None, float | None]]


@dataclass(frozen=True)
class BucketSpec:
    """One request-size bucket of a workload: its share of requests and its rate (req/s)."""

    index: int
    fraction: float
    qps: float
    label: str = ""
    prompt_tokens_mean: float | None = None
    output_tokens_mean: float | None = None
    prompt: LengthDist | None = None
    output: LengthDist | None = None


@dataclass(frozen=True)
class Candidate:
    """One way to serve a workload, with its capacity (req/s per replica) in every bucket."""

    workload: str
    key: str
    device: str
    precision: str
    tp: int
    pp: int
    gpus: int
    capacity_qps: tuple[float, ...]
    limited_by: tuple[str | None, ...]
    cost_per_replica_usd: float | None = None
    pruned_reason: str | None = None
    # Best p99 (ms) the candidate reaches at (near) zero load per bucket, where the serving
    # model gives it: {metric: value} — used to explain a workload no candidate can serve.
    floor_p99_ms: tuple[dict[str, float], ...] | None = None

    @property
    def kept(self) -> bool:
        return self.pruned_reason is None


@dataclass(frozen=True)
class UnitSpec:
    """A device (or capacity-table unit) with the figures money and the MILP need."""

    key: str
    gpus_per_node: int
    price: UnitPrice
    inventory_gpus: int | None = None
    allowed: bool = True
    device: Device | None = None


@dataclass(frozen=True)
class WorkloadCandidates:
    workload: Workload
    model: str
    buckets: tuple[BucketSpec, ...]
    candidates: tuple[Candidate, ...]
    predictor: Predictor | None = None

    @property
    def kind(self) -> str:
        return "batch" if self.workload.is_batch else "online"

    @property
    def kept(self) -> list[Candidate]:
        return [c for c in self.candidates if c.kept]


@dataclass(frozen=True)
class CandidateSet:
    workloads: tuple[WorkloadCandidates, ...]
    units: dict[str, UnitSpec]
    diagnostics: tuple[Diagnostic, ...] = field(default=())

    def workload(self, name: str) -> WorkloadCandidates:
        return next(wc for wc in self.workloads if wc.workload.name == name)


# ---------------------------------------------------------------------------------------
# Devices and money
# ---------------------------------------------------------------------------------------


def missing_figures(device: Device, plan: Plan) -> list[str]:
    """Figures this plan needs that ``device`` lacks, each with the field to add."""
    need = []
    if plan.objective in ("tco", "capex") and device.purchase_usd is None:
        need.append(f"purchase_usd (objective {plan.objective})")
    if plan.objective == "cloud" and device.cloud_usd_per_gpu_hour is None:
        need.append("cloud_usd_per_gpu_hour (objective cloud)")
    if device.tdp_w is None:
        if plan.objective == "tco":
            need.append("tdp_w (tco power cost)")
        elif plan.max_power_kw is not None:
            need.append("tdp_w (max_power_kw)")
    return need


def catalog_units(plan: Plan, catalog: Catalog) -> dict[str, UnitSpec]:
    """Every catalog device as a unit, with the plan's inventory and allowed-devices list."""
    allowed = {catalog.device(d).key for d in plan.allowed_devices} if plan.allowed_devices is not None else None
    inventory = {catalog.device(d).key: n for d, n in plan.inventory.items()}
    units = {}
    for key, dev in sorted(catalog.devices.items()):
        units[key] = UnitSpec(
            key=key, gpus_per_node=dev.gpus_per_node,
            price=UnitPrice(dev.purchase_usd, dev.cloud_usd_per_gpu_hour, dev.tdp_w),
            inventory_gpus=inventory.get(key), allowed=allowed is None or key in allowed, device=dev,
        )
    return units


def cost_per_replica_usd(unit: UnitSpec, gpus: int, a: MoneyAssumptions) -> float:
    """Objective $ of one replica: gpus · (per-GPU cost + per-server cost / gpus_per_node)."""
    t = objective_terms(unit.price, a)
    return gpus * (t.per_gpu + t.per_node / unit.gpus_per_node)


# ---------------------------------------------------------------------------------------
# Pruning
# ---------------------------------------------------------------------------------------


def dominated_by(a: Candidate, b: Candidate) -> int:
    """m ≥ 1 when m = ⌊g_a/g_b⌋ copies of b give at least a's capacity in every bucket, else 0."""
    if a.device != b.device or a.key == b.key or b.gpus > a.gpus:
        return 0
    m = a.gpus // b.gpus
    if all(m * cb >= ca for ca, cb in zip(a.capacity_qps, b.capacity_qps, strict=True)):
        return m
    return 0


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
                    reasons[a.key] = (f"dominated by {m} × {b.key} ({m * b.gpus} GPUs, "
                                      f"at least its capacity in every bucket)")
                    break
    return [replace(c, pruned_reason=reasons[c.key]) if c.key in reasons else c for c in candidates]


# ---------------------------------------------------------------------------------------
# The MILP problem
# ---------------------------------------------------------------------------------------


def unit_terms(unit: UnitSpec, a: MoneyAssumptions) -> UnitTerms:
    return UnitTerms(
        device=unit.key, gpus_per_node=unit.gpus_per_node,
        objective_usd=objective_terms(unit.price, a), capex_usd=capex_terms(unit.price, a),
        annual_opex_usd=annual_opex_terms(unit.price, a), power_kw=power_kw_terms(unit.price, a),
        inventory_gpus=unit.inventory_gpus, allowed=unit.allowed,
    )


def fleet_problem(cset: CandidateSet, plan: Plan) -> FleetProblem:
    """The MILP data: demands per bucket, kept candidates with capacity, unit terms, limits."""
    a = MoneyAssumptions.from_plan(plan)
    demands, options = [], []
    for wc in cset.workloads:
        w = wc.workload
        demands.append(Demand(w.name, tuple(b.qps for b in wc.buckets), w.min_replicas, w.redundancy == "n+1"))
        for c in wc.kept:
            if any(mu > 0 for mu in c.capacity_qps):
                options.append(Option(w.name, c.key, c.device, c.gpus, c.capacity_qps))
    used = {o.device for o in options}
    units = {k: unit_terms(u, a) for k, u in cset.units.items() if k in used}
    limits = Limits(plan.budget.capex_usd, plan.budget.annual_usd, plan.max_power_kw)
    return FleetProblem(tuple(demands), tuple(options), units, limits)


# ---------------------------------------------------------------------------------------
# Model-based candidates
# ---------------------------------------------------------------------------------------


def tp_degrees(device: Device) -> list[int]:
    """Tensor-parallel degrees within one server: {1, 2, 4, 8} dividing gpus_per_node."""
    return [t for t in TP_DEGREES if t <= device.gpus_per_node and device.gpus_per_node % t == 0]


def finite_or_zero(x: float) -> float:
    return float(x) if math.isfinite(x) and x > 0 else 0.0
