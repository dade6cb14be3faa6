"""The candidate records and what the MILP needs from them: units (devices with prices), unit terms, the problem.

A candidate k of workload w is (device, precision, tp, pp, ep, engine) (a :class:`Combo`), keyed
deterministically (``h100_sxm__fp8__tp4__pp1``; ``__ep8`` when expert-parallel, ``__vllm`` when the engine
is not the device's default: ``configs.config_key``), the key of the MILP variable and of the workbook row, with
its capacity at the SLO (req/s per replica) in every request-size bucket. How candidates are
enumerated and pruned: :mod:`optimizer.planning.candidates`; how capacities are evaluated:
:mod:`optimizer.planning.evaluate`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import NamedTuple

from catalog.load import Catalog
from catalog.schema import Device, Model, Platform, Precision, cloud_instance_gpus, server_gpus
from optimizer.models.configs import Configs, build_configs
from optimizer.models.params import CalibrationParams
from optimizer.planning.bucketing import problem_parts
from optimizer.planning.milp.problem import FleetProblem, Limits, UnitTerms
from optimizer.results.money import (
    MoneyAssumptions,
    UnitPrice,
    annual_opex_terms,
    bought_terms,
    capex_terms,
    objective_terms,
    power_kw_terms,
)
from optimizer.results.plan_result import Diagnostic
from workloads.spec import LengthDist, Plan, Workload

TP_DEGREES = (1, 2, 4, 8)
PP_DEGREES = (1, 2, 4, 8)

class Combo(NamedTuple):
    """One configuration to evaluate: device, precision, tp, pp, expert-parallel degree (1 = none;
    > 1 only for MoE models: attention data-parallel over ep ranks of tp GPUs, experts split ep ways)
    and engine (None = the device's default). A replica has tp·pp·ep GPUs."""

    device: Device
    precision: Precision
    tp: int
    pp: int
    ep: int = 1
    engine: str | None = None

    @property
    def gpus(self) -> int:
        return self.tp * self.pp * self.ep


def combo_configs(model: Model, combos: Sequence[Combo], params: CalibrationParams) -> Configs:
    """``build_configs`` of ``combos``, each with its engine and expert-parallel degree."""
    return build_configs(model, [(c.device, c.precision, c.tp, c.pp) for c in combos], params,
                         engines=[c.engine for c in combos], ep=[c.ep for c in combos])


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
    # "colocated" serves whole requests; "prefill" / "decode" one phase of them in a
    # disaggregated pair of pools (optimizer.models.disagg)
    stage: str = "colocated"
    technique: str = ""  # the serving technique it uses, e.g. "eagle k3 a0.8" ("" = none)
    kv_bytes_per_request: float | None = None  # pools: mean KV bytes a request sends over the scale-out link
    ep: int = 1  # expert-parallel degree (gpus = tp·pp·ep)
    engine: str = ""  # serving engine it was evaluated with ("" = not known: a capacity-table unit)
    # prefill pools: the receive tier (B/s: the slowest decode replica it may feed) and the most tokens a decode
    # step emits, which its TTFT budgets for (``optimizer.models.disagg.DecodeSide``); None otherwise
    decode_receive_bytes_s: float | None = None
    decode_tokens_per_step: float = 1.0
    receive_link_bytes_s: float | None = None  # decode pools: the link (B/s) they receive KV at

    @property
    def pair_link_bytes_s(self) -> float | None:
        """The pairing rule's link (``milp.problem.pairing_rows``): a prefill pool's receive tier (the
        slowest receiver it may feed), a decode pool's own receive link; None when colocated."""
        return {"prefill": self.decode_receive_bytes_s, "decode": self.receive_link_bytes_s}.get(self.stage)

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
    platform: Platform | None = None  # the server it is bought in (None: a capacity-table unit, a user device)
    full_servers_only: bool = False  # the plan forbids partly used servers


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
    objective: str = ""  # the plan objective the set was computed for ("" = any)
    allowed_devices: tuple[str, ...] | None = None
    # per workload (the order of ``workloads``), its candidates split into request-size buckets where it is planned
    # whole and split can serve it alone, else None; () = none has (``split_everywhere``, ``optimize_plan``)
    split_alternatives: tuple[WorkloadCandidates | None, ...] = ()

    def workload(self, name: str) -> WorkloadCandidates:
        return next(wc for wc in self.workloads if wc.workload.name == name)


def split_everywhere(cset: CandidateSet, only: frozenset[str] | None = None
                     ) -> tuple[CandidateSet, tuple[str, ...]] | None:
    """``cset`` with every workload that has a split alternative (of ``only``, when given) split into its
    request-size buckets, and the names of those workloads; None when none has.

    Whole or split is chosen per workload alone (``bucketing.choose_bucketing``: servers amortised per GPU, a tie
    served whole), which cannot see a fleet's whole servers: a split workload's buckets can fill GPUs a board
    bought for other workloads leaves idle. ``optimize_plan`` solves the fleet this way too and keeps the cheaper.
    The ``planned_whole`` notes of the workloads split here are dropped (a folded note naming one of them too).
    """
    alternatives = tuple(None if alt is None or only is not None and alt.workload.name not in only else alt
                         for alt in cset.split_alternatives)
    if not any(alternatives):
        return None
    names = tuple(alt.workload.name for alt in alternatives if alt is not None)
    workloads = tuple(wc if alt is None else alt for wc, alt in zip(cset.workloads, alternatives, strict=True))

    def stale(d: Diagnostic) -> bool:
        return d.code == "planned_whole" and any(
            d.message.startswith(f"{n} is planned as one bucket") or f" {n}," in f" {d.message}," for n in names)

    diagnostics = tuple(d for d in cset.diagnostics if not stale(d))
    return replace(cset, workloads=workloads, diagnostics=diagnostics, split_alternatives=()), names


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
        elif plan.room_power_cap_kw is not None:
            need.append("tdp_w (max_power_kw)")
    return need


def unit_price(dev: Device, platform: Platform | None, plan: Plan) -> UnitPrice:
    """A device's money figures: its own per GPU, its platform's per server.

    The plan's ``server_overhead_usd`` / ``server_power_w``, when given, replace the
    platform's server price / power (plans written before platforms); a device with no
    platform takes them or the defaults (``MoneyAssumptions``) and is sized by its own
    ``gpus_per_node``, cards bought one by one.

    Under objective cloud the rental unit is the device's cloud instance, c =
    ``catalog.schema.cloud_instance_gpus`` (default: as bought): c = the server's GPUs rents the server
    whole (``fixed_size``); a smaller c rents GPUs in multiples of c (``gpus_per_instance``).
    """
    whole = platform is not None and platform.fixed_size
    instance = 1
    if plan.objective == "cloud":
        c = cloud_instance_gpus(dev, platform)
        whole = c == server_gpus(dev, platform)
        instance = 1 if whole else c
    if platform is None:
        return UnitPrice(dev.purchase_usd, dev.cloud_usd_per_gpu_hour, dev.tdp_w, gpus_per_server=dev.gpus_per_node,
                         fixed_size=whole and dev.gpus_per_node > 1, gpus_per_instance=instance)
    server_usd = platform.server_usd if plan.server_overhead_usd is None else plan.server_overhead_usd
    server_w = platform.server_power_w if plan.server_power_w is None else plan.server_power_w
    return UnitPrice(dev.purchase_usd, dev.cloud_usd_per_gpu_hour, dev.tdp_w, server_usd=server_usd,
                     server_power_w=server_w, gpus_per_server=platform.gpus_per_server,
                     fixed_size=whole, rack_units=platform.rack_units, gpus_per_instance=instance)


def catalog_units(plan: Plan, catalog: Catalog) -> dict[str, UnitSpec]:
    """Every catalog device as a unit on its platform, with the plan's inventory and allowed-devices list.

    A unit's server size is its platform's ``gpus_per_server`` (8 for an HGX/OAM board, 72 for
    an NVL72 rack, the slots of a PCIe chassis). Without an ``allowed_devices`` list every
    datacenter device is allowed; consumer cards (``Device.consumer``, e.g. GeForce, whose
    licence restricts datacenter use) only when listed.
    """
    if plan.allowed_devices is not None:
        allowed = {catalog.device(d).key for d in plan.allowed_devices}
    else:
        allowed = {k for k, d in catalog.devices.items() if not d.consumer}
    inventory = {catalog.device(d).key: n for d, n in plan.inventory.items()}
    units = {}
    for key, dev in sorted(catalog.devices.items()):
        platform = catalog.platform_of(key)
        units[key] = UnitSpec(
            key=key, gpus_per_node=platform.gpus_per_server if platform else dev.gpus_per_node,
            price=unit_price(dev, platform, plan),
            inventory_gpus=inventory.get(key), allowed=key in allowed, device=dev, platform=platform,
            full_servers_only=not plan.allow_partial_servers,
        )
    return units


def cost_per_replica_usd(unit: UnitSpec, gpus: int, a: MoneyAssumptions) -> float:
    """Objective $ of one replica: gpus · (per-GPU cost + per-server cost / gpus_per_node)."""
    t = objective_terms(unit.price, a)
    return gpus * (t.per_gpu + t.per_node / unit.gpus_per_node)



# ---------------------------------------------------------------------------------------
# The MILP problem
# ---------------------------------------------------------------------------------------


def unit_terms(unit: UnitSpec, a: MoneyAssumptions) -> UnitTerms:
    """The unit as the MILP sees it: money and power per GPU in use and per server
    (:func:`~optimizer.results.money.bought_terms`: a fixed-size server carries all its GPUs)."""
    p = unit.price

    def terms(f):
        return bought_terms(f(p, a), p)

    return UnitTerms(
        device=unit.key, gpus_per_node=unit.gpus_per_node,
        objective_usd=terms(objective_terms), capex_usd=terms(capex_terms),
        annual_opex_usd=terms(annual_opex_terms), power_kw=terms(power_kw_terms),
        inventory_gpus=unit.inventory_gpus, allowed=unit.allowed,
        fixed_size=p.fixed_size, full_servers_only=unit.full_servers_only, gpus_per_instance=p.gpus_per_instance,
    )


def cloud_limit_notes(plan: Plan) -> tuple[Diagnostic, ...]:
    """Info lines for the plan limits objective cloud does not apply (``Plan.room_power_cap_kw``; rented GPUs
    cost no capex), whichever way the candidates were made (models or a capacity table)."""
    if plan.objective != "cloud":
        return ()
    notes = []
    if plan.max_power_kw is not None:
        notes.append(Diagnostic("info", "power_cap_not_applied",
                                f"max_power_kw ({plan.max_power_kw:,g} kW) is not applied under objective "
                                "cloud: rented GPUs draw power in the provider's facility, not yours "
                                "(inventory still caps the GPUs of each device)"))
    if plan.budget.capex_usd is not None:
        notes.append(Diagnostic("info", "capex_budget_not_applied",
                                f"budget.capex_usd (${plan.budget.capex_usd:,.0f}) limits nothing under "
                                "objective cloud: rented GPUs cost no capex; budget.annual_usd caps the rental"))
    return tuple(notes)


def fleet_problem(cset: CandidateSet, plan: Plan) -> FleetProblem:
    """The MILP data: demands per bucket, kept candidates with capacity, unit terms, limits."""
    a = MoneyAssumptions.from_plan(plan)
    demands, options = [], []
    for wc in cset.workloads:
        demand, opts = problem_parts(wc)
        demands.append(demand)
        options += opts
    used = {o.device for o in options}
    units = {k: unit_terms(u, a) for k, u in cset.units.items() if k in used}
    limits = Limits(plan.budget.capex_usd, plan.budget.annual_usd, plan.room_power_cap_kw)
    return FleetProblem(tuple(demands), tuple(options), units, limits)


def rebase_candidates(cset: CandidateSet, plan: Plan) -> CandidateSet:
    """A candidate set with the workload rates, replica rules, inventory and server figures of ``plan``
    (its server_overhead_usd / server_power_w over the units' platforms, allow_partial_servers).

    The workloads' models, lengths, SLOs and precisions, the objective and the allowed
    devices must be those the set was computed for (they decide capacities and pruning).
    """
    if cset.objective and cset.objective != plan.objective:
        raise ValueError(f"candidates were computed for objective '{cset.objective}', not '{plan.objective}'")
    if cset.allowed_devices != (tuple(plan.allowed_devices) if plan.allowed_devices is not None else None):
        raise ValueError("candidates were computed for other allowed_devices; recompute them")
    inventory = {k.lower(): v for k, v in plan.inventory.items()}
    units = {k: (replace(u, inventory_gpus=inventory.get(k), price=unit_price(u.device, u.platform, plan),
                         full_servers_only=not plan.allow_partial_servers) if u.device is not None else u)
             for k, u in cset.units.items()}
    workloads = []
    for wc in cset.workloads:
        w = plan.workload(wc.workload.name)
        old = wc.workload
        if (w.model, w.prompt_tokens, w.output_tokens, w.slo, w.precisions, w.engine, w.prefix_cache, w.speculative,
                w.disaggregation) != (old.model, old.prompt_tokens, old.output_tokens, old.slo, old.precisions,
                                      old.engine, old.prefix_cache, old.speculative, old.disaggregation):
            raise ValueError(f"workload '{w.name}' changed its model, lengths, SLO, precisions, engine or serving "
                             "techniques; recompute the candidates")
        workloads.append(_at_rate(wc, w))
    alternatives = tuple(None if alt is None else _at_rate(alt, plan.workload(alt.workload.name))
                         for alt in cset.split_alternatives)
    return replace(cset, workloads=tuple(workloads), units=units, split_alternatives=alternatives)


def _at_rate(wc: WorkloadCandidates, w: Workload) -> WorkloadCandidates:
    """``wc`` as workload ``w``'s: each bucket's rate its fraction × ``w``'s rate."""
    rate = w.request_rate_qps
    return replace(wc, workload=w, buckets=tuple(replace(b, qps=b.fraction * rate) for b in wc.buckets))
