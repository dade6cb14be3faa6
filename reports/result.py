"""The plan result (docs/plan-json.md) as the workbook reads it.

The optimizer writes this JSON; `gpuplan report PLAN.json` reads it back. The models
here check only what the workbook needs, ignore keys they do not know (the contract may
grow) and turn a missing or wrong key into one line naming the file and the key.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from catalog.errors import GpuplanError
from catalog.files import MAX_RESULT_BYTES, format_validation_error, read_json
from optimizer.results.money import MoneyAssumptions
from optimizer.results.plan_result import InstalledGpus
from optimizer.results.provenance import simulated_verdict

Num = Annotated[float, Field(allow_inf_nan=False)]
NonNeg = Annotated[float, Field(ge=0, allow_inf_nan=False)]
Count = Annotated[int, Field(ge=0)]


# The money inputs a plan result must state (``assumptions``; the others have defaults).
REQUIRED_ASSUMPTIONS = ("objective", "horizon_years", "electricity_usd_per_kwh", "pue", "power_utilization",
                        "maintenance_fraction_per_year", "discount_rate", "server_overhead_usd", "server_power_w")


class PlanResultError(GpuplanError):
    """A plan result JSON file (or dict) is missing a key or has a wrong value."""


class _Loose(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class FleetRow(_Loose, InstalledGpus):
    """A device of the fleet: GPUs in use and bought, servers, and the prices its money comes from.

    Results written before platforms existed have no ``gpus_installed`` (= gpus) and no
    per-server figures (= the assumptions' server_overhead_usd / server_power_w)."""

    device: str
    gpus: Count
    nodes: Count
    gpus_per_node: Annotated[int, Field(ge=1)]
    purchase_usd: NonNeg | None = None
    cloud_usd_per_gpu_hour: NonNeg | None = None
    tdp_w: NonNeg | None = None
    capex_usd: Num | None = None
    power_kw: Num | None = None
    price_basis: str = ""
    price_basis_detail: str = ""
    gpus_installed: Count | None = None
    device_name: str = ""
    platform: str = ""
    platform_name: str = ""
    fixed_size: bool = False
    gpus_per_instance: Annotated[int, Field(ge=1)] = 1
    server_usd: NonNeg | None = None
    server_power_w: NonNeg | None = None
    rack_units: NonNeg = 0.0
    nic_gb_s_per_gpu: NonNeg | None = None


class Fidelity(_Loose):
    class_: str = Field("", alias="class")
    basis: str = ""
    low_factor: Num
    high_factor: Num


class VerifiedDeployment(_Loose):
    metric: str
    slo_ms: NonNeg
    predicted_ms: NonNeg | None = None
    simulated_ms: NonNeg
    simulated_ci95_ms: list[NonNeg | None] = []
    met: bool
    verdict: Literal["met", "at_slo", "missed"] | None = None  # None: a result written before verdicts

    @property
    def outcome(self) -> str:
        """``verdict``; for a result written before verdicts, the same rule on its figures (``simulated_verdict``)."""
        low = self.simulated_ci95_ms[0] if self.simulated_ci95_ms else None
        return self.verdict or simulated_verdict(self.met, self.slo_ms, self.predicted_ms, self.simulated_ms, low)


class Deployment(_Loose):
    workload: str
    device: str
    precision: str | None = None
    tp: Annotated[int, Field(ge=1)]
    pp: Annotated[int, Field(ge=1)]
    replicas: Count
    qps: NonNeg
    capacity_qps: NonNeg | None = None
    ttft_p99_ms: NonNeg | None = None
    tpot_p99_ms: NonNeg | None = None
    e2e_p99_ms: NonNeg | None = None
    key: str = ""
    stage: Literal["colocated", "prefill", "decode"] = "colocated"
    technique: str = ""
    kv_link_gb_s: NonNeg | None = None
    pair_link_gb_s: NonNeg | None = None
    fidelity: Fidelity | None = None
    verification: VerifiedDeployment | None = None
    ep: Annotated[int, Field(ge=1)] = 1  # expert-parallel degree: a replica has tp·pp·ep GPUs
    engine: str = ""
    replicas_per_server: Annotated[int, Field(ge=1)] | None = None  # n+1-node spread: at most q per server
    dedicated_servers: Count | None = None  # ... on this many servers of their own

    @property
    def gpus(self) -> int:
        """GPUs the replicas use together: replicas · tp · pp · ep."""
        return self.replicas * self.tp * self.pp * self.ep


class Workload(_Loose):
    name: str
    model: str
    qps: NonNeg
    met: bool | None = None
    ttft_p99_ms: NonNeg | None = None
    tpot_p99_ms: NonNeg | None = None
    e2e_p99_ms: NonNeg | None = None
    slo_ttft_p99_ms: NonNeg | None = None
    slo_tpot_p99_ms: NonNeg | None = None
    slo_e2e_p99_ms: NonNeg | None = None
    kind: Literal["online", "batch"] = "online"
    output_tokens_per_year: NonNeg
    input_tokens_per_year: NonNeg = 0.0
    cost_per_million_output_tokens_usd: Num | None = None
    peak_to_average_ratio: Annotated[float, Field(ge=1, allow_inf_nan=False)] = 1.0


class SingleDeviceBest(_Loose):
    """The cheapest one-device fleet; ``fleet`` (its bill of materials) lets the workbook cost it by formula."""

    device: str
    objective_usd: Num
    gpus: Count
    nodes: Count = 0
    gpus_installed: Count | None = None
    fleet: list[FleetRow] = []


class Candidate(_Loose):
    workload: str
    bucket: str | int | None = None
    key: str
    device: str
    precision: str | None = None
    tp: Annotated[int, Field(ge=1)]
    pp: Annotated[int, Field(ge=1)]
    ep: Annotated[int, Field(ge=1)] = 1
    engine: str = ""
    gpus: Count | None = None
    capacity_qps: Num | None = None
    cost_per_replica_usd: Num | None = None
    cost_per_qps_usd: Num | None = None
    limited_by: str | None = None
    pruned_reason: str | None = None


class Diagnostic(_Loose):
    level: str = "info"
    code: str = ""
    message: str


class Source(_Loose):
    device: str = ""
    field: str = ""
    source: str = ""
    as_of: str | int | None = None
    estimated: bool = False


class RunnerUpDevice(_Loose):
    device: str
    gpus: Count
    nodes: Count
    gpus_installed: Count | None = None  # None: a result written before it (read as gpus)


class RunnerUp(_Loose):
    excluded_device: str
    fleet: list[RunnerUpDevice] = []
    objective_usd: Num | None = None
    difference_usd: Num | None = None


class DeviceSensitivity(_Loose):
    device: str
    price_field: str = "purchase_usd"
    purchase_usd: Num | None = None
    break_even_purchase_usd: Num | None = None
    cloud_usd_per_gpu_hour: Num | None = None
    break_even_cloud_usd_per_gpu_hour: Num | None = None
    break_even_capacity_factor: Num | None = None
    price_note: str = ""
    capacity_note: str = ""


class TornadoRow(_Loose):
    input: str
    low_usd: Num | None = None
    high_usd: Num | None = None
    low_label: str = ""
    high_label: str = ""


class Sensitivity(_Loose):
    base_objective_usd: Num
    runner_up: RunnerUp | None = None
    devices: list[DeviceSensitivity] = []
    tornado: list[TornadoRow] = []
    price_tolerance: Num = 0.0
    capacity_tolerance: Num = 0.0
    solves: Count = 0
    seconds: NonNeg = 0.0


class Headroom(_Loose):
    confidence: Num | None = None
    sized_for: str = "point estimate"
    target_utilization: Num = 1.0
    demand_quantile: Num = 0.5
    demand_factor: Num = 1.0


class PlanResult(_Loose):
    """The keys of the plan result JSON that the workbook uses (docs/plan-json.md)."""

    status: Literal["optimal", "feasible", "infeasible", "error"]
    status_detail: str = ""
    objective: Literal["tco", "capex", "cloud"]
    objective_usd: Num | None = None
    capex_usd: Num | None = None
    annual_opex_usd: Num | None = None
    annual_power_usd: Num | None = None
    annual_maintenance_usd: Num | None = None
    annual_cloud_usd: Num | None = None
    tco_usd: Num | None = None
    npv_usd: Num | None = None
    power_kw: Num | None = None
    annual_facility_usd: Num = 0.0
    annual_depreciation_usd: Num | None = None
    residual_value_usd: Num | None = None
    annual_lease_payment_usd: Num | None = None
    lease_total_usd: Num | None = None
    gpus_total: Count | None = None
    nodes_total: Count | None = None
    output_tokens_per_year: NonNeg | None = None
    cost_per_million_output_tokens_usd: Num | None = None
    solve_seconds: NonNeg | None = None
    gap: Num | None = None
    solver: str = ""
    plan_name: str = ""
    input_file: str = ""
    input_sha256: str = ""
    gpuplan_version: str = ""
    created_utc: str = ""
    assumptions: MoneyAssumptions
    fleet: list[FleetRow] = []
    deployments: list[Deployment] = []
    workloads: list[Workload] = []
    single_device_best: SingleDeviceBest | None = None
    candidates: list[Candidate] = []
    diagnostics: list[Diagnostic] = []
    sources: list[Source] = []
    headroom: Headroom | None = None
    sensitivity: Sensitivity | None = None


def parse_result(data: Any, where: str = "plan result") -> PlanResult:
    """Check a plan result dict; raise PlanResultError naming ``where`` and the key."""
    if not isinstance(data, dict):
        raise PlanResultError(f"{where}: expected a JSON object at the top level, got {type(data).__name__}")
    if "scenarios" in data and "status" not in data:
        raise PlanResultError(f"{where}: is a what-if result (`gpuplan whatif --json`), not a plan result; give "
                              "the JSON of `gpuplan optimize --json`, or rebuild the what-if workbook with "
                              "`gpuplan whatif ... --out X.xlsx`")
    stated = data.get("assumptions")
    if isinstance(stated, dict):  # MoneyAssumptions has defaults for these; a result must not lean on them
        for key in REQUIRED_ASSUMPTIONS:
            if key not in stated:
                raise PlanResultError(f"{where}: assumptions.{key}: required field is missing; add it")
    try:
        result = PlanResult.model_validate(data)
    except ValidationError as exc:
        raise PlanResultError(format_validation_error(where, exc, PlanResult)) from None
    _cross_check(result, where)
    return result


def _ascii(name: str) -> str:
    """``name`` with non-ASCII characters as ``\\uXXXX``: a fleet row 'a1о' (Cyrillic о) printed as 'a10'."""
    return name.encode("ascii", "backslashreplace").decode("ascii")


def _cross_check(result: PlanResult, where: str) -> None:
    """One fleet row per device; every deployment on a fleet device, for a known workload,
    and within the fleet's GPUs (Σ replicas · tp · pp per device ≤ its GPUs); an n+1-node placement
    both stated or neither, dedicated_servers = ⌈replicas / replicas_per_server⌉."""
    fleet: dict[str, int] = {}
    for i, row in enumerate(result.fleet):
        if row.device in fleet:
            raise PlanResultError(f"{where}: fleet[{i}].device: '{row.device}' has two fleet rows; "
                                  "keep one row per device")
        fleet[row.device] = row.gpus
        if row.gpus_installed is not None:
            # the workbook's Fleet sheet recomputes GPUs bought from these fields (whole servers of a fixed-size
            # product, else whole purchases of gpus_per_instance): a row they disagree with gave a workbook whose
            # formulas bought other GPUs than the file's totals, without a word (gpus edited to 1,000,000)
            unit = row.gpus_per_node if row.fixed_size else row.gpus_per_instance
            bought = row.nodes * row.gpus_per_node if row.fixed_size else math.ceil(row.gpus / unit) * unit
            if bought != row.gpus_installed or row.gpus > row.gpus_installed:
                rule = (f"nodes {row.nodes} × gpus_per_node {row.gpus_per_node}" if row.fixed_size else
                        f"gpus {row.gpus:,} in whole purchases of {unit}")
                raise PlanResultError(f"{where}: fleet[{i}]: gpus_installed {row.gpus_installed:,} is not the "
                                      f"{bought:,} GPUs bought by {rule}; fix the row (a hand-edited file?)")
    names = {w.name for w in result.workloads}
    used: dict[str, int] = {}
    for i, d in enumerate(result.deployments):
        if d.device not in fleet:
            raise PlanResultError(f"{where}: deployments[{i}].device: '{_ascii(d.device)}' is not in the fleet "
                                  f"({', '.join(_ascii(k) for k in sorted(fleet)) or 'empty'}); add its fleet row or "
                                  "remove the deployment")
        if names and d.workload not in names:
            raise PlanResultError(f"{where}: deployments[{i}].workload: '{d.workload}' is not one of the "
                                  f"workloads ({', '.join(sorted(names))})")
        if (d.replicas_per_server is None) != (d.dedicated_servers is None) or (
                d.replicas_per_server and d.dedicated_servers != math.ceil(d.replicas / d.replicas_per_server)):
            raise PlanResultError(
                f"{where}: deployments[{i}]: replicas_per_server {d.replicas_per_server} and dedicated_servers "
                f"{d.dedicated_servers} do not state a placement of its {d.replicas} replicas (both null, or "
                "dedicated_servers = ⌈replicas / replicas_per_server⌉); fix them")
        used[d.device] = used.get(d.device, 0) + d.gpus
    for device, gpus in used.items():
        if gpus > fleet[device]:
            raise PlanResultError(f"{where}: deployments on '{device}' use {gpus} GPUs but its fleet row has "
                                  f"{fleet[device]}; fix the fleet row or the replicas")


def load_result(path: Path | str) -> tuple[dict[str, Any], PlanResult]:
    """Read a plan result JSON file (strictly: no duplicate keys, no NaN): the raw dict and its checked form."""
    data = read_json(path, "plan result JSON", PlanResultError, MAX_RESULT_BYTES)
    return data, parse_result(data, str(path))
