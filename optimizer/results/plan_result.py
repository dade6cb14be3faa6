"""The typed result of a fleet optimization, and its JSON form (``docs/plan-json.md``).

A solve always returns a :class:`PlanResult` with a :class:`SolveStatus`, never ``None``:
an infeasible plan carries empty fleet/deployments and diagnostics saying why.
``PlanResult.to_json()`` produces exactly the keys of the contract, plus two tables that
make the plan checkable without the solver: ``buckets[]`` (each workload's request-size
buckets and their rates) and ``routing[]`` (the load of each bucket routed to each
deployment).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields, is_dataclass
from enum import StrEnum
from typing import Any

from optimizer.results.money import MoneyAssumptions
from optimizer.results.provenance import (
    Fidelity,
    HeadroomPolicy,
    Sensitivity,
    Verification,
    VerifiedDeployment,
)


class SolveStatus(StrEnum):
    """Outcome of a solve: proven optimal, feasible (time limit hit, with a gap), infeasible, error."""

    OPTIMAL = "optimal"
    FEASIBLE = "feasible"
    INFEASIBLE = "infeasible"
    ERROR = "error"

    @property
    def has_plan(self) -> bool:
        return self in (SolveStatus.OPTIMAL, SolveStatus.FEASIBLE)


@dataclass(frozen=True)
class Provenance:
    """Where a plan came from: the input file as given and the sha256 of its bytes ("" = in-memory plan)."""

    input_file: str = ""
    input_sha256: str = ""


class InstalledGpus:
    """GPUs bought vs in use, for any fleet record with ``gpus`` and ``gpus_installed`` (the result
    written here and the one the workbook reads back): installed = gpus_installed, or gpus when the
    record predates platforms; idle = installed − in use."""

    gpus: int
    gpus_installed: int | None

    @property
    def installed(self) -> int:
        return self.gpus if self.gpus_installed is None else self.gpus_installed

    @property
    def idle_gpus(self) -> int:
        return self.installed - self.gpus


@dataclass(frozen=True)
class FleetRow(InstalledGpus):
    """GPUs and servers of one device in the fleet, with the figures its money comes from.

    ``gpus`` are the GPUs the deployments use; ``gpus_installed`` those bought or rented (on a
    fixed-size platform nodes · gpus_per_node, idle ones included; otherwise, in instances of
    ``gpus_per_instance``, gpus_per_instance · ⌈gpus / gpus_per_instance⌉: a cloud instance smaller than the
    server under objective cloud, 1 for cards bought one by one). Money counts installed GPUs and each
    server at its platform's ``server_usd`` / ``server_power_w``.
    """

    device: str
    gpus: int
    nodes: int
    gpus_per_node: int
    purchase_usd: float | None
    cloud_usd_per_gpu_hour: float | None
    tdp_w: float | None
    capex_usd: float
    power_kw: float
    price_basis: str = ""  # quoted | list | estimated | none (optimizer.planning.provenance)
    price_basis_detail: str = ""
    gpus_installed: int | None = None  # None (results written before platforms): = gpus
    device_name: str = ""
    platform: str = ""
    platform_name: str = ""
    fixed_size: bool = False
    gpus_per_instance: int = 1  # not fixed size: GPUs bought or rented in multiples of it
    server_usd: float | None = None  # None: assumptions.server_overhead_usd
    server_power_w: float | None = None  # None: assumptions.server_power_w
    rack_units: float = 0.0
    nic_gb_s_per_gpu: float | None = None


@dataclass(frozen=True)
class Deployment:
    """Replicas of one candidate serving one workload, with the load routed to them."""

    workload: str
    key: str
    device: str
    precision: str | None
    tp: int
    pp: int
    replicas: int
    qps: float
    capacity_qps: float
    ttft_p99_ms: float | None = None
    tpot_p99_ms: float | None = None
    e2e_p99_ms: float | None = None
    # "colocated", or the pool of a disaggregated workload: "prefill" (its TTFT includes the KV
    # transfer and the wait for a decode step, ``optimizer.models.disagg.DecodeSide``) or "decode" (its E2E
    # counts from arrival, the prefill pools' worst TTFT included: the wait twice, an upper bound)
    stage: str = "colocated"
    technique: str = ""  # prefix cache / speculative decoding it uses ("" = none)
    kv_link_gb_s: float | None = None  # pools: KV-cache traffic the replicas send or receive, Gb/s
    # pools: the pairing rule's link, Gb/s (``milp.problem.pairing_rows``): a prefill pool's receive tier (the
    # slowest decode receive link it may feed; its TTFT budgets the KV transfer at min(its send link, this)), a
    # decode pool's own receive link; every request's decode pool receives at least its prefill pool's tier
    pair_link_gb_s: float | None = None
    fidelity: Fidelity | None = None
    verification: VerifiedDeployment | None = None
    ep: int = 1  # expert-parallel degree: a replica has tp·pp·ep GPUs
    engine: str = ""  # serving engine the replicas run ("" = not known: a capacity-table unit)
    # redundancy n+1-node, spread: the replicas run on dedicated_servers = ⌈replicas / q⌉ servers of their
    # own, evenly, at most q = replicas_per_server on each (losing one server loses at most q); None: on
    # the device's shared servers, any placement (losing one loses at most ⌊gpus_per_node / gpus_per_replica⌋)
    replicas_per_server: int | None = None

    @property
    def dedicated_servers(self) -> int | None:
        """Servers of their own a spread deployment runs on: ⌈replicas / replicas_per_server⌉ (None: shared)."""
        return -(-self.replicas // self.replicas_per_server) if self.replicas_per_server else None

    @property
    def gpus_per_replica(self) -> int:
        return self.tp * self.pp * self.ep

    @property
    def gpus(self) -> int:
        return self.replicas * self.gpus_per_replica


@dataclass(frozen=True)
class WorkloadResult:
    name: str
    model: str
    qps: float
    met: bool
    kind: str
    ttft_p99_ms: float | None
    tpot_p99_ms: float | None
    e2e_p99_ms: float | None
    slo_ttft_p99_ms: float | None
    slo_tpot_p99_ms: float | None
    slo_e2e_p99_ms: float | None
    output_tokens_per_year: float
    input_tokens_per_year: float
    cost_per_million_output_tokens_usd: float | None
    min_replicas: int = 0
    redundancy: str = "none"
    peak_to_average_ratio: float = 1.0


@dataclass(frozen=True)
class BucketRow:
    """One request-size bucket of a workload: its share of requests and its rate."""

    workload: str
    bucket: int
    fraction: float
    qps: float
    prompt_tokens_mean: float | None = None
    output_tokens_mean: float | None = None
    label: str = ""


@dataclass(frozen=True)
class Route:
    """Load of one bucket of one workload routed to one deployment (req/s)."""

    workload: str
    bucket: int
    key: str
    qps: float
    stage: str = "colocated"


@dataclass(frozen=True)
class CandidateRow:
    """One candidate of one workload in one bucket, kept or pruned (with its reason)."""

    workload: str
    bucket: int
    key: str
    device: str
    precision: str | None
    tp: int
    pp: int
    gpus: int
    capacity_qps: float
    cost_per_replica_usd: float | None
    cost_per_qps_usd: float | None
    limited_by: str | None
    pruned_reason: str | None = None
    power_kw: float | None = None  # one replica: its GPUs' TDP plus their share of server power
    ep: int = 1  # expert-parallel degree (gpus = tp·pp·ep)
    engine: str = ""  # serving engine ("" = not known: a capacity-table unit)


@dataclass(frozen=True)
class Diagnostic:
    level: str  # "info" | "warning" | "error"
    code: str
    message: str


@dataclass(frozen=True)
class BindingNote(Diagnostic):
    """A ``binding_<limit>`` error (``diagnose.binding_limits``) with the smallest feasible value of the limit its
    message names, kept as a number for comparing two solves' notes; its JSON is a Diagnostic's."""

    needed: float = 0.0


@dataclass(frozen=True)
class SourceRow:
    device: str
    field: str
    source: str
    as_of: str
    estimated: bool


@dataclass(frozen=True)
class SingleDeviceBest(InstalledGpus):
    """The cheapest fleet of one device type (the comparison of the Summary): its counts are facts,
    its money is recomputed from them wherever prices change (the workbook's formulas)."""

    device: str
    objective_usd: float
    gpus: int
    nodes: int = 0
    gpus_installed: int | None = None
    fleet: tuple[FleetRow, ...] = ()  # its bill of materials, for the workbook's formulas


@dataclass(frozen=True)
class PlanResult:
    """Everything a solve found: status, money, fleet, deployments, per-workload outcome."""

    status: SolveStatus
    status_detail: str
    objective: str
    objective_usd: float = 0.0
    capex_usd: float = 0.0
    annual_opex_usd: float = 0.0
    annual_power_usd: float = 0.0
    annual_maintenance_usd: float = 0.0
    annual_cloud_usd: float = 0.0
    tco_usd: float = 0.0
    npv_usd: float = 0.0
    power_kw: float = 0.0
    gpus_total: int = 0
    nodes_total: int = 0
    output_tokens_per_year: float = 0.0
    cost_per_million_output_tokens_usd: float | None = None
    solve_seconds: float = 0.0
    gap: float = 0.0
    solver: str = "highs"
    plan_name: str = ""
    input_file: str = ""
    input_sha256: str = ""
    gpuplan_version: str = ""
    created_utc: str = ""
    assumptions: MoneyAssumptions | None = None
    fleet: tuple[FleetRow, ...] = ()
    deployments: tuple[Deployment, ...] = ()
    workloads: tuple[WorkloadResult, ...] = ()
    single_device_best: SingleDeviceBest | None = None
    annual_facility_usd: float = 0.0
    annual_depreciation_usd: float = 0.0
    residual_value_usd: float = 0.0
    annual_lease_payment_usd: float = 0.0
    lease_total_usd: float = 0.0
    candidates: tuple[CandidateRow, ...] = ()
    diagnostics: tuple[Diagnostic, ...] = ()
    sources: tuple[SourceRow, ...] = field(default=())
    buckets: tuple[BucketRow, ...] = ()
    routing: tuple[Route, ...] = ()
    # wall seconds by stage: candidates, solve (MILP + one-device fleets + diagnostics), verification
    # (simulator check, assembling the result, p99s of each deployment), sensitivity (0 when not
    # asked), total (optimizer.optimize.StageClock)
    timings_s: dict[str, float] = field(default_factory=dict)
    # the disk cache of this run (optimizer.planning.disk_cache): {"dir": folder or None (off),
    # "hits": entries read, "misses": entries computed}; like timings_s, it varies between runs
    cache: dict[str, Any] | None = None
    headroom: HeadroomPolicy | None = None
    sensitivity: Sensitivity | None = None
    verification: Verification | None = None

    def no_fleet_reason(self) -> str | None:
        """Why there is no fleet, on one line: the status detail, then each error diagnostic it does not already
        say (the binding limit and the smallest value that makes the plan feasible, or the workload no
        configuration serves); None when there is a fleet. What ``gpuplan optimize`` says on stderr and a what-if
        row's ``no_fleet_reason``."""
        if self.status.has_plan:
            return None
        parts = [self.status_detail] + [d.message for d in self.diagnostics
                                        if d.level == "error" and d.message not in self.status_detail]
        return "; ".join(" ".join(p.split()) for p in parts if p)

    def to_json(self) -> dict[str, Any]:
        """The plan as a JSON-ready dict with the keys of ``docs/plan-json.md`` (finite floats)."""
        out: dict[str, Any] = {
            "status": str(self.status),
            "status_detail": self.status_detail,
            "objective": self.objective,
        }
        for name in ("objective_usd", "capex_usd", "annual_opex_usd", "annual_power_usd",
                     "annual_maintenance_usd", "annual_cloud_usd", "tco_usd", "npv_usd", "power_kw",
                     "annual_facility_usd", "annual_depreciation_usd", "residual_value_usd",
                     "annual_lease_payment_usd", "lease_total_usd"):
            out[name] = _num(getattr(self, name))
        out["gpus_total"] = int(self.gpus_total)
        out["nodes_total"] = int(self.nodes_total)
        out["output_tokens_per_year"] = _num(self.output_tokens_per_year)
        out["cost_per_million_output_tokens_usd"] = _num(self.cost_per_million_output_tokens_usd)
        out["solve_seconds"] = _num(self.solve_seconds)
        out["timings_s"] = {k: _num(v) for k, v in self.timings_s.items()}
        out["cache"] = dict(self.cache) if self.cache is not None else None
        out["gap"] = _num(self.gap)
        for name in ("solver", "plan_name", "input_file", "input_sha256", "gpuplan_version", "created_utc"):
            out[name] = getattr(self, name)
        out["assumptions"] = record_json(self.assumptions) if self.assumptions else None
        out["fleet"] = [record_json(r) for r in self.fleet]
        out["deployments"] = [_deployment_json(d) for d in self.deployments]
        out["disaggregated"] = disaggregated_json(self.deployments)
        out["workloads"] = [record_json(w, _WORKLOAD_KEYS) for w in self.workloads]
        out["single_device_best"] = record_json(self.single_device_best) if self.single_device_best else None
        out["candidates"] = [record_json(c) for c in self.candidates]
        out["diagnostics"] = [record_json(d) for d in self.diagnostics]
        out["sources"] = [record_json(r) for r in self.sources]
        out["buckets"] = [record_json(b) for b in self.buckets]
        out["routing"] = [record_json(r) for r in self.routing]
        out["headroom"] = _headroom_json(self.headroom) if self.headroom else None
        out["sensitivity"] = _sensitivity_json(self.sensitivity) if self.sensitivity else None
        out["verification"] = _verification_json(self.verification) if self.verification else None
        return out


_DEPLOYMENT_KEYS = ("workload", "device", "precision", "tp", "pp", "ep", "engine", "replicas", "qps", "capacity_qps",
                    "ttft_p99_ms", "tpot_p99_ms", "e2e_p99_ms", "key", "stage", "technique", "kv_link_gb_s",
                    "pair_link_gb_s")
_POOL_KEYS = ("device", "precision", "tp", "pp", "ep", "engine", "replicas", "qps", "capacity_qps", "key", "technique",
              "kv_link_gb_s", "pair_link_gb_s")


def disaggregated_json(deployments: tuple[Deployment, ...]) -> list[dict[str, Any]]:
    """One entry per workload served (partly) by disaggregated pools: ``{workload, prefill: [...],
    decode: [...], ttft_p99_ms, tpot_p99_ms, e2e_p99_ms, kv_link_gb_s}`` — each pool a deployment's
    figures; the p99s are the worst over the workload's pools (end to end)."""
    out = []
    for w in dict.fromkeys(d.workload for d in deployments if d.stage != "colocated"):
        pools = {stage: [d for d in deployments if d.workload == w and d.stage == stage] for stage in ("prefill", "decode")}
        worst = {m: max((getattr(d, m) for d in pools["prefill"] + pools["decode"] if getattr(d, m) is not None),
                        default=None) for m in ("ttft_p99_ms", "tpot_p99_ms", "e2e_p99_ms")}
        out.append(_clean({
            "workload": w,
            "prefill": [record_json(d, _POOL_KEYS) for d in pools["prefill"]],
            "decode": [record_json(d, _POOL_KEYS) for d in pools["decode"]],
            **worst,
            "kv_link_gb_s": sum(d.kv_link_gb_s or 0.0 for d in pools["prefill"]),
        }))
    return out
_WORKLOAD_KEYS = ("name", "model", "qps", "met", "ttft_p99_ms", "tpot_p99_ms", "e2e_p99_ms",
                  "slo_ttft_p99_ms", "slo_tpot_p99_ms", "slo_e2e_p99_ms", "kind",
                  "output_tokens_per_year", "input_tokens_per_year",
                  "cost_per_million_output_tokens_usd", "min_replicas", "redundancy", "peak_to_average_ratio")


def _deployment_json(d: Deployment) -> dict[str, Any]:
    out = record_json(d, _DEPLOYMENT_KEYS)
    out["replicas_per_server"] = d.replicas_per_server
    out["dedicated_servers"] = d.dedicated_servers
    out["fidelity"] = record_json(d.fidelity) if d.fidelity else None
    out["verification"] = _verified_json(d.verification) if d.verification else None
    return out


def _verified_json(v: VerifiedDeployment) -> dict[str, Any]:
    return {"metric": v.metric, "slo_ms": _num(v.slo_ms), "predicted_ms": _num(v.predicted_ms),
            "simulated_ms": _num(v.simulated_ms),
            "simulated_ci95_ms": [_num(v.simulated_ci_low_ms), _num(v.simulated_ci_high_ms)],
            "qps_per_replica": _num(v.qps_per_replica), "requests": v.requests, "seed": v.seed, "met": v.met,
            "verdict": v.verdict, "derate_factor": _num(v.derate_factor)}


def _headroom_json(h: HeadroomPolicy) -> dict[str, Any]:
    return {"confidence": h.confidence, "sized_for": "point estimate" if h.confidence is None
            else f"confidence {h.confidence:g} of the performance band",
            "target_utilization": h.target_utilization, "demand_quantile": h.demand_quantile,
            "demand_sigma": h.demand_sigma, "demand_factor": _num(h.demand_factor)}


def _sensitivity_json(s: Sensitivity) -> dict[str, Any]:
    ru = s.runner_up
    devices = []
    for d in s.devices:
        row: dict[str, Any] = {"device": d.device}
        if d.price_field == "purchase_usd":
            row.update(purchase_usd=_num(d.price), break_even_purchase_usd=_num(d.break_even_price))
        else:
            row.update(cloud_usd_per_gpu_hour=_num(d.price), break_even_cloud_usd_per_gpu_hour=_num(d.break_even_price))
        row.update(break_even_capacity_factor=_num(d.break_even_capacity_factor), price_field=d.price_field,
                   price_note=d.price_note, capacity_note=d.capacity_note)
        devices.append(row)
    return {
        "base_objective_usd": _num(s.base_objective_usd),
        "runner_up": None if ru is None else {
            "excluded_device": ru.excluded_device, "fleet": [record_json(f) for f in ru.fleet],
            "objective_usd": _num(ru.objective_usd), "difference_usd": _num(ru.difference_usd)},
        "devices": devices,
        "tornado": [{"input": t.input, "low_usd": _num(t.low_usd), "high_usd": _num(t.high_usd),
                     "low_label": t.low_label, "high_label": t.high_label} for t in s.tornado],
        "price_tolerance": s.price_tolerance, "capacity_tolerance": s.capacity_tolerance,
        "solves": s.solves, "seconds": _num(s.seconds),
        "method": "optimizer outputs: each figure re-solves the fleet MILP on the same candidates",
    }


def _verification_json(v: Verification) -> dict[str, Any]:
    return {"all_met": v.all_met, "verdict": v.verdict, "rounds": v.rounds, "seconds": _num(v.seconds), "note": v.note,
            "deployments": [{"workload": d.workload, "key": d.key, **_verified_json(d)} for d in v.deployments]}


def _num(value: float | None) -> float | None:
    """A finite float, or None (JSON has no inf/nan)."""
    if value is None:
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def _clean(row: dict[str, Any]) -> dict[str, Any]:
    return {k: (_num(v) if isinstance(v, float) else v) for k, v in row.items()}


_FIELDS: dict[type, tuple[str, ...]] = {BindingNote: ("level", "code", "message")}


def record_json(record: Any, keys: tuple[str, ...] | None = None) -> dict[str, Any]:
    """The one JSON mapping of a result record (a dataclass of this package or ``results.provenance``,
    or the money assumptions): its fields — or ``keys``, in that order — with floats finite or None,
    nested records, tuples and mappings mapped alike, and a trailing ``_`` dropped from a field
    name (``Fidelity.class_`` → ``class``). Records whose JSON adds computed keys (headroom,
    sensitivity, verification) start from their own mappers below."""
    if keys is None:
        keys = _FIELDS.get(type(record)) or _FIELDS.setdefault(type(record),
                                                               tuple(f.name for f in fields(record)))
    return {k.removesuffix("_"): _json_value(getattr(record, k)) for k in keys}


def _json_value(value: Any) -> Any:
    if isinstance(value, float):
        return _num(value)
    if isinstance(value, tuple | list):
        return [_json_value(v) for v in value]
    if isinstance(value, dict):
        return {k: _json_value(v) for k, v in value.items()}
    if is_dataclass(value) and not isinstance(value, type):
        return record_json(value)
    return value
