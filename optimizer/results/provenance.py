"""What a plan rests on and how far it can move: fidelity, price basis, sensitivity, verification.

Plain records (a leaf like the rest of ``optimizer.results``): the models and the planning
code fill them, the JSON (``docs/plan-json.md``), the terminal and the workbook read them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

FidelityClass = Literal["measured", "same-generation", "datasheet-only"]
PriceBasis = Literal["quoted", "list", "estimated", "none"]


@dataclass(frozen=True)
class Fidelity:
    """How far a device's predicted capacity can be trusted.

    ``low_factor``/``high_factor``: the 10th and 90th percentile of true / predicted
    capacity (throughput) for devices of this class (an 80 % band; the true capacity is
    ``factor × predicted``). ``basis`` says which residuals the band comes from.
    """

    class_: FidelityClass
    basis: str
    low_factor: float
    high_factor: float


@dataclass(frozen=True)
class FleetDeviceGpus:
    """One device of an alternative fleet: GPUs in use, servers, and GPUs bought (``gpus_installed``: on a
    board or rack bought whole nodes · GPUs per server, idle ones included; None in results written before it)."""

    device: str
    gpus: int
    nodes: int
    gpus_installed: int | None = None


def fleet_text(rows: Iterable[tuple[str, int, int | None]]) -> str:
    """An alternative fleet in words from (device, GPUs in use, GPUs bought) rows: the GPUs bought, which its
    cost pays for and one orders, and those in use when fewer ("24 × mi355x (21 in use) + 8 × mi300x")."""
    parts = []
    for device, gpus, installed in rows:
        bought = gpus if installed is None else installed
        parts.append(f"{bought} × {device}" + (f" ({gpus} in use)" if bought != gpus else ""))
    return " + ".join(parts)


@dataclass(frozen=True)
class RunnerUp:
    """The cheapest plan that does not use ``excluded_device`` (the winning fleet's main device)."""

    excluded_device: str
    fleet: tuple[FleetDeviceGpus, ...]
    objective_usd: float | None  # None: no feasible fleet without that device
    difference_usd: float | None  # runner-up − winner


@dataclass(frozen=True)
class DeviceSensitivity:
    """Break-evens of one chosen device: the price above which, and the capacity factor below
    which, the optimal fleet changes (None: it does not change within the searched range)."""

    device: str
    price_field: str  # purchase_usd (tco, capex) | cloud_usd_per_gpu_hour (cloud)
    price: float | None
    break_even_price: float | None
    break_even_capacity_factor: float | None
    price_note: str = ""
    capacity_note: str = ""


@dataclass(frozen=True)
class TornadoRow:
    """The optimal objective ($) with one input at its low and at its high end, the others at base."""

    input: str
    low_label: str
    high_label: str
    low_usd: float | None
    high_usd: float | None

    @property
    def swing_usd(self) -> float:
        vals = [v for v in (self.low_usd, self.high_usd) if v is not None]
        return max(vals) - min(vals) if vals else 0.0


@dataclass(frozen=True)
class Sensitivity:
    """The decision's sensitivity: runner-up, per-device break-evens, tornado swings.

    Every figure is an optimizer output (a re-solve of the MILP on the same candidates with
    one input changed), not a formula over the workbook's inputs.
    """

    base_objective_usd: float
    runner_up: RunnerUp | None
    devices: tuple[DeviceSensitivity, ...]
    tornado: tuple[TornadoRow, ...]
    price_tolerance: float  # relative tolerance of the break-even prices
    capacity_tolerance: float  # absolute tolerance of the break-even capacity factors
    solves: int
    seconds: float


# A pooled simulated p99 this far over its SLO is a miss (re-sized) even when the runs' 95 % interval reaches
# below the SLO. Deployments planned at their SLO scatter around it by the runs' noise: their pooled p99s reached
# 1.036× the SLO on the shipped examples and the 20-workload benchmark (2026-12-07), the scatter the interval rule
# leaves alone. A Llama 4 Scout deployment at 0.98 of its capacity simulated 1,605 ms against an 800 ms TTFT SLO,
# its runs 474-1,820 ms (interval 467-1,794): near saturation the runs differ by factors, so the interval
# straddled the SLO and a 2× miss was planned as it stood.
SIMULATED_MISS_RATIO = 1.2


@dataclass(frozen=True)
class VerifiedDeployment:
    """One online deployment re-checked by the discrete-event simulator at its routed load."""

    workload: str
    key: str
    qps_per_replica: float
    metric: str  # the SLO metric with the least slack in simulation (ttft_p99_ms, ...)
    slo_ms: float
    predicted_ms: float | None  # the analytic model's p99 at the same load
    simulated_ms: float
    simulated_ci_low_ms: float
    simulated_ci_high_ms: float
    requests: int
    seed: int
    met: bool
    derate_factor: float = 1.0  # capacity factor applied to the candidate before the final solve

    @property
    def verdict(self) -> str:
        """``met``; ``missed`` when the simulated p99 is over the SLO beyond the simulation's noise (the 95 %
        CI's lower end above the SLO, or the pooled p99 over SIMULATED_MISS_RATIO × the SLO, or the analytic
        p99 at that load over it too: ``optimizer.planning.safeguards.confidently_missed``); else ``at_slo``:
        over the SLO, but the interval straddles it, so the p99 cannot be told from the SLO."""
        return simulated_verdict(self.met, self.slo_ms, self.predicted_ms, self.simulated_ms, self.simulated_ci_low_ms)


def simulated_verdict(met: bool, slo_ms: float, predicted_ms: float | None, simulated_ms: float,
                      ci_low_ms: float | None) -> str:
    """``VerifiedDeployment.verdict`` from its figures (also for a result JSON written before verdicts, whose
    ``met: false`` stood for both ``at_slo`` and ``missed``); an unknown interval low end counts as straddling."""
    if met:
        return "met"
    within_model = predicted_ms is not None and predicted_ms <= slo_ms * (1.0 + 1e-6)
    far_over = simulated_ms > slo_ms * SIMULATED_MISS_RATIO
    above = ci_low_ms is not None and ci_low_ms > slo_ms
    return "missed" if above or far_over or not within_model else "at_slo"


@dataclass(frozen=True)
class Verification:
    """The simulator's check of the final plan (``rounds`` re-solves after derating misses)."""

    deployments: tuple[VerifiedDeployment, ...]
    rounds: int
    seconds: float
    all_met: bool  # every simulated deployment met its SLOs (those in ``unsimulated`` are not among them)
    note: str = ""
    unsimulated: tuple[str, ...] = ()  # "<workload> on <key>: not simulated (why)", one per deployment left out

    @property
    def verdict(self) -> str:
        """The worst deployment's ``VerifiedDeployment.verdict`` (``met`` when none was simulated)."""
        verdicts = {d.verdict for d in self.deployments}
        return next((v for v in ("missed", "at_slo") if v in verdicts), "met")


@dataclass(frozen=True)
class HeadroomPolicy:
    """How the fleet was sized: model-error confidence, utilisation cap, demand quantile."""

    confidence: float | None  # None = point estimate of the models
    target_utilization: float
    demand_quantile: float
    demand_sigma: float
    demand_factor: float  # rate multiplier applied for demand_quantile
