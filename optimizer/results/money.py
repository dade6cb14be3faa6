"""Money and power of a fleet: the formulas of ``docs/plan-json.md``, as pure functions.

Every total is linear in the fleet's installed GPUs and server counts, so each figure splits
into a per-GPU coefficient (the device) and a per-server coefficient (its platform: server
price and power, network, rack space). The MILP uses the coefficients; the result and the
workbook use the totals. ``gpus_d`` below are GPUs *installed* (bought, or rented): on a fixed-size
platform (HGX/OAM board, NVL72 rack) nodes_d · gpus_per_server_d, idle ones included; on a PCIe
chassis the cards in use. Under objective cloud a device is rented in instances of c_d =
``cloud_gpus_per_instance`` GPUs (``catalog.schema.cloud_instance_gpus``): c_d = gpus_per_server_d rents
the server whole as above; a smaller c_d rents gpus_d = c_d · ⌈GPUs in use / c_d⌉ (c_d = 1: the GPUs in use)::

    capex_usd              = Σ_d gpus_d·purchase_usd_d + nodes_d·(server_usd_d + network_usd_per_server)  (cloud: 0)
    power_kw               = Σ_d (gpus_d·tdp_w_d + nodes_d·server_power_w_d) / 1000
    annual_power_usd       = power_kw · power_utilization · pue · 8760 · electricity_usd_per_kwh  (cloud: 0)
    annual_maintenance_usd = capex_usd · maintenance_fraction_per_year
    annual_facility_usd    = 12 · (colocation_usd_per_kw_month · power_kw
                                   + colocation_usd_per_rack_month · Σ_d nodes_d·rack_units_d / rack_units_per_rack)
                                                                                          (cloud: 0)
    annual_cloud_usd       = Σ_d gpus_d · cloud_usd_per_gpu_hour_d · 8760                  (cloud only)
    annual_opex_usd        = annual_power_usd + annual_maintenance_usd + annual_facility_usd + annual_cloud_usd
    tco_usd                = capex_usd + horizon_years · annual_opex_usd
    npv_usd                = capex_usd + Σ_{y=1..H} annual_opex_usd / (1 + discount_rate)^y
    objective_usd          = tco_usd (tco) | capex_usd (capex) | horizon_years · annual_cloud_usd (cloud)

Finance (:func:`finance_figures`), with life L = depreciation_years (default H), lease rate r
and lease term n (default H)::

    annual_depreciation_usd  = capex_usd / L                                  (straight line)
    residual_value_usd       = capex_usd · max(0, 1 − H / L)                  (book value at the horizon)
    annual_lease_payment_usd = capex_usd · r / (1 − (1 + r)^−n)               (annuity; r = 0: capex_usd / n)
    lease_total_usd          = n · annual_lease_payment_usd

A plan's ``server_overhead_usd`` / ``server_power_w``, when given, replace every platform's
server_usd / server_power_w (the single figure of plans written before platforms existed);
they are also the figures of a unit with no platform (a user's device, a capacity-table unit).

A missing ``tdp_w`` counts as 0 W and a missing price as $0; the candidate generator prunes
devices whose missing figure the objective or a limit needs (``Device.unusable_for``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Annotated, Literal

from pydantic import BaseModel, Field

from catalog.constants import HOURS_PER_YEAR, MONTHS_PER_YEAR
from workloads.spec import Budget, Facility, Finance, Plan

# Per-server figures of a unit with no platform (a user's device, a capacity-table unit), and
# the single figure every server had before platforms: a chassis with CPUs, memory and NICs.
DEFAULT_SERVER_USD = 30000.0
DEFAULT_SERVER_POWER_W = 1500.0

Objective = Literal["tco", "capex", "cloud"]


NonNeg = Annotated[float, Field(ge=0, allow_inf_nan=False)]


def plan_default(field: str, part: type[BaseModel] = Plan):
    """The plan file's default of ``part.field`` (``workloads.spec``: Plan, Budget, Facility, Finance):
    the one place a money assumption's default is declared."""
    return part.model_fields[field].get_default()


@dataclass(frozen=True)
class MoneyAssumptions:
    """The plan's money, facility and limit figures: what the formulas use and what the result
    states (``assumptions`` of the plan JSON, each a named input cell of the workbook).

    The one type for them: the optimizer builds it from the plan (:meth:`from_plan`), the JSON
    is its fields, and the workbook reads it back validated by the constraints annotated here
    (``reports.result``). ``hours_per_year`` is stated for the workbook's formulas (= HOURS_PER_YEAR);
    budgets, the power cap and the hosted-API prices are None when the plan has none.
    Defaults are the plan file's (:func:`plan_default`), so ``MoneyAssumptions()`` is what a plan
    that states none of them gives; the server figures default to the no-platform fallbacks.
    """

    objective: Objective = plan_default("objective")
    horizon_years: Annotated[int, Field(ge=1, le=100)] = plan_default("horizon_years")
    electricity_usd_per_kwh: NonNeg = plan_default("electricity_usd_per_kwh")
    pue: Annotated[float, Field(ge=1, allow_inf_nan=False)] = plan_default("pue")
    power_utilization: Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)] = plan_default("power_utilization")
    maintenance_fraction_per_year: NonNeg = plan_default("maintenance_fraction_per_year")
    discount_rate: Annotated[float, Field(gt=-1, allow_inf_nan=False)] = plan_default("discount_rate")
    server_overhead_usd: NonNeg = DEFAULT_SERVER_USD
    server_power_w: NonNeg = DEFAULT_SERVER_POWER_W
    hours_per_year: Annotated[float, Field(gt=0, allow_inf_nan=False)] = HOURS_PER_YEAR
    capex_budget_usd: NonNeg | None = plan_default("capex_usd", Budget)
    annual_budget_usd: NonNeg | None = plan_default("annual_usd", Budget)
    max_power_kw: NonNeg | None = plan_default("max_power_kw")
    api_usd_per_million_output_tokens: NonNeg | None = plan_default("api_usd_per_million_output_tokens")
    api_usd_per_million_input_tokens: NonNeg | None = plan_default("api_usd_per_million_input_tokens")
    colocation_usd_per_kw_month: NonNeg = plan_default("colocation_usd_per_kw_month", Facility)
    colocation_usd_per_rack_month: NonNeg = plan_default("colocation_usd_per_rack_month", Facility)
    rack_units_per_rack: Annotated[int, Field(ge=1)] = plan_default("rack_units_per_rack", Facility)
    network_usd_per_server: NonNeg = plan_default("network_usd_per_server", Facility)
    depreciation_years: Annotated[int, Field(ge=1)] | None = plan_default("depreciation_years", Finance)
    lease_interest_rate: NonNeg = plan_default("lease_interest_rate", Finance)
    lease_years: Annotated[int, Field(ge=1)] | None = plan_default("lease_years", Finance)
    allow_partial_servers: bool = plan_default("allow_partial_servers")

    @classmethod
    def from_plan(cls, plan) -> MoneyAssumptions:
        """The assumptions of a :class:`workloads.spec.Plan` (server figures: the plan's, else the fallbacks)."""
        return cls(
            objective=plan.objective, horizon_years=plan.horizon_years,
            electricity_usd_per_kwh=plan.electricity_usd_per_kwh, pue=plan.pue,
            power_utilization=plan.power_utilization,
            maintenance_fraction_per_year=plan.maintenance_fraction_per_year,
            discount_rate=plan.discount_rate,
            server_overhead_usd=DEFAULT_SERVER_USD if plan.server_overhead_usd is None else plan.server_overhead_usd,
            server_power_w=DEFAULT_SERVER_POWER_W if plan.server_power_w is None else plan.server_power_w,
            colocation_usd_per_kw_month=plan.facility.colocation_usd_per_kw_month,
            colocation_usd_per_rack_month=plan.facility.colocation_usd_per_rack_month,
            rack_units_per_rack=plan.facility.rack_units_per_rack,
            network_usd_per_server=plan.facility.network_usd_per_server,
            depreciation_years=plan.finance.depreciation_years,
            lease_interest_rate=plan.finance.lease_interest_rate,
            lease_years=plan.finance.lease_years,
            capex_budget_usd=plan.budget.capex_usd, annual_budget_usd=plan.budget.annual_usd,
            max_power_kw=plan.max_power_kw,
            api_usd_per_million_output_tokens=plan.api_usd_per_million_output_tokens,
            api_usd_per_million_input_tokens=plan.api_usd_per_million_input_tokens,
            allow_partial_servers=plan.allow_partial_servers,
        )

    @property
    def life_years(self) -> int:
        """Straight-line depreciation life: depreciation_years, default the horizon."""
        return self.depreciation_years or self.horizon_years

    @property
    def lease_term_years(self) -> int:
        return self.lease_years or self.horizon_years

    @property
    def is_cloud(self) -> bool:
        return self.objective == "cloud"


@dataclass(frozen=True)
class UnitPrice:
    """The figures of one device (or capacity-table unit) and its platform that money depends on.

    ``server_usd`` / ``server_power_w`` None = the plan's fallback (MoneyAssumptions).
    ``fixed_size``: a server is bought (or, under objective cloud, rented) with all its ``gpus_per_server``
    GPUs (board, rack). ``gpus_per_instance``: otherwise, GPUs are bought or rented in multiples of it (a
    cloud instance smaller than the server; 1 = one by one).
    """

    purchase_usd: float | None
    cloud_usd_per_gpu_hour: float | None
    tdp_w: float | None
    server_usd: float | None = None
    server_power_w: float | None = None
    gpus_per_server: int = 1
    fixed_size: bool = False
    rack_units: float = 0.0
    gpus_per_instance: int = 1

    def server_usd_or(self, a: MoneyAssumptions) -> float:
        return a.server_overhead_usd if self.server_usd is None else self.server_usd

    def server_power_w_or(self, a: MoneyAssumptions) -> float:
        return a.server_power_w if self.server_power_w is None else self.server_power_w

    def installed_gpus(self, gpus_used: int, nodes: int) -> int:
        """GPUs bought: nodes · gpus_per_server on a fixed-size platform, else the GPUs in use rounded up to
        whole instances, gpus_per_instance · ⌈gpus_used / gpus_per_instance⌉ (cards: the GPUs in use)."""
        return installed_gpus(gpus_used, nodes, self.gpus_per_server, self.fixed_size, self.gpus_per_instance)


def installed_gpus(gpus_used: int, nodes: int, gpus_per_server: int, fixed_size: bool, gpus_per_instance: int) -> int:
    """GPUs bought or rented: nodes · gpus_per_server when the server comes whole (fixed size), else
    gpus_per_instance · ⌈gpus_used / gpus_per_instance⌉."""
    if fixed_size:
        return nodes * gpus_per_server
    return whole_instances_gpus(gpus_used, gpus_per_instance)


def whole_instances_gpus(gpus_used: int, gpus_per_instance: int) -> int:
    """gpus_per_instance · ⌈gpus_used / gpus_per_instance⌉: the GPUs of the whole instances that hold gpus_used."""
    return gpus_per_instance * -(-gpus_used // gpus_per_instance)


@dataclass(frozen=True)
class LinearTerms:
    """A money or power figure as ``per_gpu_usd · gpus + per_node_usd · nodes`` (units: the figure's)."""

    per_gpu: float
    per_node: float

    def at(self, gpus: float, nodes: float) -> float:
        return self.per_gpu * gpus + self.per_node * nodes


def annual_power_usd_per_kw(a: MoneyAssumptions) -> float:
    """$ per year per kW of nameplate IT power: power_utilization · pue · 8760 · $/kWh (cloud: 0)."""
    if a.is_cloud:
        return 0.0
    return a.power_utilization * a.pue * HOURS_PER_YEAR * a.electricity_usd_per_kwh


def power_kw_terms(price: UnitPrice, a: MoneyAssumptions) -> LinearTerms:
    """Nameplate power in kW: tdp_w/1000 per GPU, server_power_w/1000 per server."""
    return LinearTerms((price.tdp_w or 0.0) / 1000.0, price.server_power_w_or(a) / 1000.0)


def capex_terms(price: UnitPrice, a: MoneyAssumptions) -> LinearTerms:
    """Capex in $: purchase_usd per GPU, server_usd + network_usd_per_server per server (cloud: 0 for both)."""
    if a.is_cloud:
        return LinearTerms(0.0, 0.0)
    return LinearTerms(price.purchase_usd or 0.0, price.server_usd_or(a) + a.network_usd_per_server)


def annual_facility_terms(price: UnitPrice, a: MoneyAssumptions) -> LinearTerms:
    """Colocation in $/year: 12 · ($/kW-month · power_kw + $/rack-month · rack_units / rack_units_per_rack)
    (cloud: 0)."""
    if a.is_cloud:
        return LinearTerms(0.0, 0.0)
    p = power_kw_terms(price, a)
    kw, rack = a.colocation_usd_per_kw_month * MONTHS_PER_YEAR, a.colocation_usd_per_rack_month * MONTHS_PER_YEAR
    return LinearTerms(p.per_gpu * kw, p.per_node * kw + rack * price.rack_units / a.rack_units_per_rack)


def annual_power_terms(price: UnitPrice, a: MoneyAssumptions) -> LinearTerms:
    """Electricity in $/year: power_kw · annual_power_usd_per_kw."""
    p, k = power_kw_terms(price, a), annual_power_usd_per_kw(a)
    return LinearTerms(p.per_gpu * k, p.per_node * k)


def annual_maintenance_terms(price: UnitPrice, a: MoneyAssumptions) -> LinearTerms:
    """Maintenance in $/year: capex · maintenance_fraction_per_year."""
    c = capex_terms(price, a)
    f = a.maintenance_fraction_per_year
    return LinearTerms(c.per_gpu * f, c.per_node * f)


def annual_cloud_terms(price: UnitPrice, a: MoneyAssumptions) -> LinearTerms:
    """Rental in $/year: cloud_usd_per_gpu_hour · 8760 per GPU (objective cloud only; servers free)."""
    if not a.is_cloud:
        return LinearTerms(0.0, 0.0)
    return LinearTerms((price.cloud_usd_per_gpu_hour or 0.0) * HOURS_PER_YEAR, 0.0)


def annual_opex_terms(price: UnitPrice, a: MoneyAssumptions) -> LinearTerms:
    """Opex in $/year: power + maintenance + facility + rental."""
    parts = (annual_power_terms(price, a), annual_maintenance_terms(price, a), annual_facility_terms(price, a),
             annual_cloud_terms(price, a))
    return LinearTerms(sum(p.per_gpu for p in parts), sum(p.per_node for p in parts))


def tco_terms(price: UnitPrice, a: MoneyAssumptions) -> LinearTerms:
    """TCO in $: capex + horizon_years · annual opex."""
    c, o = capex_terms(price, a), annual_opex_terms(price, a)
    h = a.horizon_years
    return LinearTerms(c.per_gpu + h * o.per_gpu, c.per_node + h * o.per_node)


def objective_terms(price: UnitPrice, a: MoneyAssumptions) -> LinearTerms:
    """The objective in $: tco | capex | horizon_years · annual rental."""
    if a.objective == "tco":
        return tco_terms(price, a)
    if a.objective == "capex":
        return capex_terms(price, a)
    r = annual_cloud_terms(price, a)
    return LinearTerms(a.horizon_years * r.per_gpu, a.horizon_years * r.per_node)


def bought_terms(terms: LinearTerms, price: UnitPrice) -> LinearTerms:
    """The terms per GPU *in use* and per server as the MILP counts them.

    Fixed-size platform: every server carries its gpus_per_server GPUs whether used or idle,
    so the per-GPU figure moves into the server's: (0, per_node + gpus_per_server · per_gpu).
    Otherwise unchanged: the per-GPU figure applies to the GPUs bought, one by one (PCIe, cloud hosts) or in
    instances of gpus_per_instance (the MILP's instance count, ``milp.build.gpus_bought``).
    """
    if not price.fixed_size:
        return terms
    return LinearTerms(0.0, terms.per_node + price.gpus_per_server * terms.per_gpu)


def npv_factor(a: MoneyAssumptions) -> float:
    """Σ_{y=1..H} 1/(1+discount_rate)^y: present value of $1 of opex in each year of the horizon."""
    return sum(1.0 / (1.0 + a.discount_rate) ** y for y in range(1, a.horizon_years + 1))


@dataclass(frozen=True)
class FleetMoney:
    """The money and power totals of a fleet (USD, kW)."""

    capex_usd: float
    power_kw: float
    annual_power_usd: float
    annual_maintenance_usd: float
    annual_cloud_usd: float
    annual_opex_usd: float
    tco_usd: float
    npv_usd: float
    objective_usd: float
    annual_facility_usd: float = 0.0


def fleet_money(rows: Iterable[tuple[UnitPrice, int, int]], a: MoneyAssumptions) -> FleetMoney:
    """Totals of a fleet given as ``(price, installed gpus, nodes)`` per device, by the formulas above."""
    rows = list(rows)

    def total(terms) -> float:
        return sum(terms(p, a).at(g, n) for p, g, n in rows)

    capex = total(capex_terms)
    power = total(power_kw_terms)
    annual_power = power * annual_power_usd_per_kw(a)
    maintenance = capex * a.maintenance_fraction_per_year
    facility = total(annual_facility_terms)
    cloud = total(annual_cloud_terms)
    opex = annual_power + maintenance + facility + cloud
    tco = capex + a.horizon_years * opex
    objective = {"tco": tco, "capex": capex, "cloud": a.horizon_years * cloud}[a.objective]
    return FleetMoney(
        capex_usd=capex, power_kw=power, annual_power_usd=annual_power,
        annual_maintenance_usd=maintenance, annual_cloud_usd=cloud, annual_opex_usd=opex,
        tco_usd=tco, npv_usd=capex + opex * npv_factor(a), objective_usd=objective,
        annual_facility_usd=facility,
    )


@dataclass(frozen=True)
class FinanceFigures:
    """How finance books a purchase of ``capex_usd`` (see the module docstring for the formulas)."""

    life_years: int
    annual_depreciation_usd: float
    residual_value_usd: float
    lease_interest_rate: float
    lease_years: int
    annual_lease_payment_usd: float
    lease_total_usd: float


def annuity_payment_usd(principal_usd: float, rate: float, years: int) -> float:
    """Equal yearly payment repaying ``principal_usd`` over ``years`` at ``rate``: P·r / (1 − (1+r)^−n); r = 0: P/n.

    The denominator is computed as −expm1(−n·log1p(r)): written as 1 − (1+r)^−n it is 0 for r below the float
    spacing at 1 (2.2e-16; 1 + r rounds to 1: a division by zero) and loses digits for r up to ~1e-8."""
    if rate == 0:
        return principal_usd / years
    return principal_usd * (rate / -math.expm1(-years * math.log1p(rate)))


def finance_figures(capex_usd: float, a: MoneyAssumptions) -> FinanceFigures:
    """Straight-line depreciation, book value at the horizon, and the lease alternative of a purchase."""
    life, n = a.life_years, a.lease_term_years
    payment = annuity_payment_usd(capex_usd, a.lease_interest_rate, n)
    return FinanceFigures(
        life_years=life, annual_depreciation_usd=capex_usd / life,
        residual_value_usd=capex_usd * max(0.0, 1.0 - a.horizon_years / life),
        lease_interest_rate=a.lease_interest_rate, lease_years=n,
        annual_lease_payment_usd=payment, lease_total_usd=n * payment,
    )


def cost_per_million_output_tokens_usd(
    tco_usd: float, output_tokens_per_year: float, a: MoneyAssumptions
) -> float | None:
    """tco_usd / (horizon_years · output_tokens_per_year / 1e6); None without output tokens (or too few for a
    finite figure: a volume of 1e-300 tokens a year is none to a float).

    ``output_tokens_per_year`` is the average volume (qps / peak_to_average_ratio), so a fleet
    sized for a peak it sees a fraction of the time costs more per token."""
    millions = a.horizon_years * output_tokens_per_year / 1e6
    if millions <= 0:  # none, or so few that the count underflows (tokens_per_day 5e-324)
        return None
    cost = tco_usd / millions
    return cost if math.isfinite(cost) else None


def workload_tco_share_usd(
    workload_gpus_by_device: dict[str, int],
    fleet: dict[str, tuple[UnitPrice, int, int]],
    a: MoneyAssumptions,
) -> float:
    """A workload's share of tco_usd: its share of the GPUs in use of each device times that device's TCO.

    ``fleet`` maps a device to (price, GPUs in use, servers). share = Σ_d (g_wd / used_d) ·
    (installed_d · tco_gpu_d + nodes_d · tco_node_d), idle GPUs of a board included, so the
    shares of all workloads sum to the fleet's tco_usd.
    """
    share = 0.0
    for device, g in workload_gpus_by_device.items():
        price, gpus, nodes = fleet[device]
        if g <= 0 or gpus <= 0:
            continue
        share += (g / gpus) * tco_terms(price, a).at(price.installed_gpus(gpus, nodes), nodes)
    return share
