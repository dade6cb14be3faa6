"""What the sheet builders share: the workbook, the checked result and where things are."""

from __future__ import annotations

from dataclasses import dataclass, field

from openpyxl import Workbook

from reports import styles
from reports.result import PlanResult
from reports.xl import Sheet, slug

FIRST_ROW = 5  # tables start their header on row 4, data on row 5
HEADER_ROW = 4

# Workbook-level names of the scalar inputs on the Assumptions sheet.
INPUT_NAMES = (
    "objective", "horizon_years", "discount_rate", "electricity_usd_per_kwh", "pue",
    "power_utilization", "maintenance_fraction_per_year", "server_overhead_usd",
    "server_power_w", "hours_per_year",
)
API_NAMES = ("api_usd_per_million_output_tokens", "api_usd_per_million_input_tokens")
# Names of the computed totals on the Summary sheet.
OUTPUT_NAMES = (
    "tco_usd", "npv_usd", "capex_usd", "annual_opex_usd", "annual_power_usd",
    "annual_maintenance_usd", "annual_cloud_usd", "objective_usd", "output_tokens_per_year",
    "input_tokens_per_year", "cost_per_million_output_tokens_usd", "gpus_total", "nodes_total",
    "power_kw",
)


@dataclass
class Ctx:
    """Shared state while the workbook is built.

    ``device_slug`` maps a device key to the unique fragment of its defined names
    (``purchase_usd_<slug>``, ``cloud_usd_per_gpu_hour_<slug>``, ``tdp_w_<slug>``);
    ``fleet_row`` / ``deployment_rows`` / ``workload_row`` record rows for cross-references.
    """

    wb: Workbook
    result: PlanResult
    sheets: dict[str, Sheet] = field(default_factory=dict)
    device_slug: dict[str, str] = field(default_factory=dict)
    fleet_row: dict[str, int] = field(default_factory=dict)
    fleet_total_row: int = 0
    fleet_cost_usd: dict[str, float] = field(default_factory=dict)
    fleet_cols: dict[str, int] = field(default_factory=dict)
    deployment_rows: list[int] = field(default_factory=list)
    deployment_cols: dict[str, int] = field(default_factory=dict)
    deployment_cost_usd: list[float] = field(default_factory=list)
    workload_total_row: int = 0
    workload_cols: dict[str, int] = field(default_factory=dict)
    years_rows: tuple[int, int] = (0, 0)
    has_api: bool = False
    notes: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        taken: set[str] = set()
        for row in self.result.fleet:
            base = slug(row.device)
            name, i = base, 2
            while name in taken:
                name, i = f"{base}_{i}", i + 1
            taken.add(name)
            self.device_slug.setdefault(row.device, name)
        self.has_api = self.result.assumptions.api_usd_per_million_output_tokens is not None

    @property
    def buy(self) -> bool:
        return self.result.objective != "cloud"


def title(sheet: Sheet, text: str, subtitle: str = "") -> None:
    """Row 1: the sheet's title; row 2: one line on what it shows."""
    sheet.put(1, 1, text, font=styles.TITLE_FONT, size=False)
    if subtitle:
        sheet.put(2, 1, subtitle, font=styles.SUBTITLE_FONT, size=False)
    sheet.ws.row_dimensions[1].height = 20
