"""What the sheet builders share: the workbook, the checked result and where things are."""

from __future__ import annotations

from dataclasses import dataclass, field

from openpyxl import Workbook

from reports import styles
from reports.result import FleetRow, PlanResult
from reports.xl import Sheet, name_fragment

FIRST_ROW = 5  # tables start their header on row 4, data on row 5
HEADER_ROW = 4

# Workbook-level names of the scalar inputs on the Assumptions sheet.
INPUT_NAMES = (
    "objective", "horizon_years", "discount_rate", "electricity_usd_per_kwh", "pue",
    "power_utilization", "maintenance_fraction_per_year", "server_overhead_usd",
    "server_power_w", "hours_per_year", "network_usd_per_server", "colocation_usd_per_kw_month",
    "colocation_usd_per_rack_month", "rack_units_per_rack", "depreciation_years", "lease_interest_rate",
    "lease_years",
)
BUDGET_NAMES = ("capex_budget_usd", "annual_budget_usd")
API_NAMES = ("api_usd_per_million_output_tokens", "api_usd_per_million_input_tokens")
# Names of the computed totals on the Summary sheet.
OUTPUT_NAMES = (
    "tco_usd", "npv_usd", "capex_usd", "annual_opex_usd", "annual_power_usd",
    "annual_maintenance_usd", "annual_facility_usd", "annual_cloud_usd", "objective_usd", "output_tokens_per_year",
    "input_tokens_per_year", "cost_per_million_output_tokens_usd", "gpus_total", "nodes_total",
    "power_kw",
)


@dataclass
class Ctx:
    """Shared state while the workbook is built.

    ``device_slug`` maps a device key to the unique fragment of its defined names
    (``purchase_usd_<slug>``, ``cloud_usd_per_gpu_hour_<slug>``, ``tdp_w_<slug>``) and
    ``platform_slug`` a platform key to its (``server_usd_<slug>``, ``server_power_w_<slug>``,
    ``rack_units_<slug>``); ``priced`` lists every device row whose prices are inputs (the
    plan's fleet, then the comparison fleet's other devices).
    ``fleet_row`` / ``deployment_rows`` / ``workload_row`` record rows for cross-references.
    """

    wb: Workbook
    result: PlanResult
    sheets: dict[str, Sheet] = field(default_factory=dict)
    device_slug: dict[str, str] = field(default_factory=dict)
    platform_slug: dict[str, str] = field(default_factory=dict)
    priced: list[FleetRow] = field(default_factory=list)
    cells: dict[str, str] = field(default_factory=dict)  # what drives a Summary line: name -> 'Sheet'!$B$7
    fleet_row: dict[str, int] = field(default_factory=dict)
    fleet_total_row: int = 0
    single_total_row: int = 0
    fleet_cost_usd: dict[str, float] = field(default_factory=dict)
    fleet_capex_usd: dict[str, float] = field(default_factory=dict)
    fleet_cols: dict[str, int] = field(default_factory=dict)
    deployment_rows: list[int] = field(default_factory=list)
    deployment_cols: dict[str, int] = field(default_factory=dict)
    deployment_cost_usd: list[float] = field(default_factory=list)
    workload_total_row: int = 0
    workload_cols: dict[str, int] = field(default_factory=dict)
    years_rows: tuple[int, int] = (0, 0)
    has_api: bool = False
    api_saving_usd: float = 0.0
    notes: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        single = self.result.single_device_best.fleet if self.result.single_device_best else []
        for row in [*self.result.fleet, *single]:
            if row.device not in self.device_slug:
                self.priced.append(row)
                self.device_slug[row.device] = _unique(name_fragment(row.device), set(self.device_slug.values()))
            if row.platform and row.platform not in self.platform_slug:
                self.platform_slug[row.platform] = _unique(name_fragment(row.platform), set(self.platform_slug.values()))
        self.has_api = self.result.assumptions.api_usd_per_million_output_tokens is not None

    def server_names(self, row: FleetRow) -> tuple[str, str, str]:
        """Defined names of a device row's server price, server power and rack units (its platform's,
        or the plan-wide fallbacks for a row without a platform)."""
        if row.platform and row.server_usd is not None:
            s = self.platform_slug[row.platform]
            return f"server_usd_{s}", f"server_power_w_{s}", f"rack_units_{s}"
        return "server_overhead_usd", "server_power_w", "0"

    @property
    def buy(self) -> bool:
        return self.result.objective != "cloud"


def _unique(base: str, taken: set[str]) -> str:
    name, i = base, 2
    while name in taken:
        name, i = f"{base}_{i}", i + 1
    return name


def title(sheet: Sheet, text: str, subtitle: str = "") -> None:
    """Row 1: the sheet's title; row 2: one line on what it shows."""
    sheet.put(1, 1, text, font=styles.TITLE_FONT, size=False)
    if subtitle:
        sheet.put(2, 1, subtitle, font=styles.SUBTITLE_FONT, size=False)
    sheet.ws.row_dimensions[1].height = 20
