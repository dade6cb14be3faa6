"""Money and power of a fleet: the formulas of ``docs/plan-json.md``, as pure functions.

Every total is linear in the fleet's GPU and server counts, so each figure splits into a
per-GPU coefficient (a property of the device) and a per-server coefficient (a property of
the plan). The MILP uses the coefficients; the result and the workbook use the totals::

    capex_usd              = Σ_d gpus_d·purchase_usd_d + nodes_d·server_overhead_usd       (cloud: 0)
    power_kw               = Σ_d (gpus_d·tdp_w_d + nodes_d·server_power_w) / 1000
    annual_power_usd       = power_kw · power_utilization · pue · 8760 · electricity_usd_per_kwh  (cloud: 0)
    annual_maintenance_usd = capex_usd · maintenance_fraction_per_year
    annual_cloud_usd       = Σ_d gpus_d · cloud_usd_per_gpu_hour_d · 8760                  (cloud only)
    annual_opex_usd        = annual_power_usd + annual_maintenance_usd + annual_cloud_usd
    tco_usd                = capex_usd + horizon_years · annual_opex_usd
    npv_usd                = capex_usd + Σ_{y=1..H} annual_opex_usd / (1 + discount_rate)^y
    objective_usd          = tco_usd (tco) | capex_usd (capex) | horizon_years · annual_cloud_usd (cloud)

A missing ``tdp_w`` counts as 0 W and a missing price as $0; the candidate generator prunes
devices whose missing figure the objective or a limit needs (``Device.unusable_for``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

HOURS_PER_YEAR = 8760.0

Objective = Literal["tco", "capex", "cloud"]


@dataclass(frozen=True)
class MoneyAssumptions:
    """The plan's money and facility figures that the formulas use."""

    objective: Objective = "tco"
    horizon_years: int = 3
    electricity_usd_per_kwh: float = 0.10
    pue: float = 1.3
    power_utilization: float = 0.7
    maintenance_fraction_per_year: float = 0.05
    discount_rate: float = 0.08
    server_overhead_usd: float = 30000.0
    server_power_w: float = 1500.0

    @classmethod
    def from_plan(cls, plan) -> MoneyAssumptions:
        """The assumptions of a :class:`workloads.spec.Plan`."""
        return cls(
            objective=plan.objective, horizon_years=plan.horizon_years,
            electricity_usd_per_kwh=plan.electricity_usd_per_kwh, pue=plan.pue,
            power_utilization=plan.power_utilization,
            maintenance_fraction_per_year=plan.maintenance_fraction_per_year,
            discount_rate=plan.discount_rate, server_overhead_usd=plan.server_overhead_usd,
            server_power_w=plan.server_power_w,
        )

    @property
    def is_cloud(self) -> bool:
        return self.objective == "cloud"


@dataclass(frozen=True)
class UnitPrice:
    """The per-GPU figures of one device (or capacity-table unit) that money depends on."""

    purchase_usd: float | None
    cloud_usd_per_gpu_hour: float | None
    tdp_w: float | None


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
    return LinearTerms((price.tdp_w or 0.0) / 1000.0, a.server_power_w / 1000.0)


def capex_terms(price: UnitPrice, a: MoneyAssumptions) -> LinearTerms:
    """Capex in $: purchase_usd per GPU, server_overhead_usd per server (cloud: 0 for both)."""
    if a.is_cloud:
        return LinearTerms(0.0, 0.0)
    return LinearTerms(price.purchase_usd or 0.0, a.server_overhead_usd)


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
    """Opex in $/year: power + maintenance + rental."""
    parts = (annual_power_terms(price, a), annual_maintenance_terms(price, a), annual_cloud_terms(price, a))
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


def fleet_money(rows: Iterable[tuple[UnitPrice, int, int]], a: MoneyAssumptions) -> FleetMoney:
    """Totals of a fleet given as ``(price, gpus, nodes)`` per device, by the formulas above."""
    rows = list(rows)

    def total(terms) -> float:
        return sum(terms(p, a).at(g, n) for p, g, n in rows)

    capex = total(capex_terms)
    power = total(power_kw_terms)
    annual_power = power * annual_power_usd_per_kw(a)
    maintenance = capex * a.maintenance_fraction_per_year
    cloud = total(annual_cloud_terms)
    opex = annual_power + maintenance + cloud
    tco = capex + a.horizon_years * opex
    objective = {"tco": tco, "capex": capex, "cloud": a.horizon_years * cloud}[a.objective]
    return FleetMoney(
        capex_usd=capex, power_kw=power, annual_power_usd=annual_power,
        annual_maintenance_usd=maintenance, annual_cloud_usd=cloud, annual_opex_usd=opex,
        tco_usd=tco, npv_usd=capex + opex * npv_factor(a), objective_usd=objective,
    )


def cost_per_million_output_tokens_usd(
    tco_usd: float, output_tokens_per_year: float, a: MoneyAssumptions
) -> float | None:
    """tco_usd / (horizon_years · output_tokens_per_year / 1e6); None without output tokens."""
    if output_tokens_per_year <= 0:
        return None
    return tco_usd / (a.horizon_years * output_tokens_per_year / 1e6)


def workload_tco_share_usd(
    workload_gpus_by_device: dict[str, int],
    fleet: dict[str, tuple[UnitPrice, int, int]],
    a: MoneyAssumptions,
) -> float:
    """A workload's share of tco_usd: its GPUs' own TCO plus their GPU-share of server TCO.

    share = Σ_d g_wd · tco_gpu_d + (g_wd / gpus_d) · nodes_d · tco_node,
    so the shares of all workloads sum to the fleet's tco_usd.
    """
    share = 0.0
    for device, g in workload_gpus_by_device.items():
        price, gpus, nodes = fleet[device]
        if g <= 0 or gpus <= 0:
            continue
        t = tco_terms(price, a)
        share += g * t.per_gpu + (g / gpus) * nodes * t.per_node
    return share
