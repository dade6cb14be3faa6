"""Calibration parameters of the performance model: efficiency factors, overheads, memory.

The performance model (``optimizer.models.perf``) turns datasheet figures into times; these
parameters say how much of each datasheet peak real serving software reaches. They are
fitted by ``optimizer.calibration.fit`` to measured throughput and shipped in
``optimizer/models/data/calibration.yaml``; a user replaces them with ``--params FILE``.

A factor applies to a device through its *class* — vendor, generation or memory type —
never through its key, so the model predicts devices it has no measurements for.
``overrides`` are applied in order; an override matches a device when every selector it
gives (``vendor``, ``generation``, ``memory_type``) equals the device's; later matches win.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from catalog.errors import ModelError
from catalog.files import format_validation_error, parse_yaml_text, read_yaml
from catalog.schema import Device

Fraction = Annotated[float, Field(gt=0, le=1, allow_inf_nan=False)]
NonNeg = Annotated[float, Field(ge=0, allow_inf_nan=False)]
PARAMS_FILE = "calibration.yaml"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class FactorOverride(_Strict):
    """Factors for one class of devices; ``None`` keeps the value from the defaults."""

    vendor: str | None = None
    generation: str | None = None
    memory_type: str | None = None
    memory_bandwidth_efficiency: Fraction | None = None
    compute_efficiency: Fraction | None = None
    step_overhead_ms: NonNeg | None = None
    note: str = ""

    @model_validator(mode="after")
    def _has_selector(self) -> FactorOverride:
        if self.vendor is None and self.generation is None and self.memory_type is None:
            raise ValueError("an override needs at least one of vendor, generation, memory_type "
                             "(factors never depend on a single device key)")
        return self

    def matches(self, device: Device) -> bool:
        return all(
            want is None or want == have
            for want, have in ((self.vendor, device.vendor), (self.generation, device.generation),
                               (self.memory_type, device.memory_type))
        )


class FitRecord(_Strict):
    """Where fitted parameters came from and how well they fit (never hidden)."""

    data_file: str
    data_sha256: str = ""
    rows_used: int = Field(ge=0)
    method: str
    median_abs_pct_error: NonNeg
    p90_abs_pct_error: NonNeg
    by_source_group: dict[str, dict[str, float | int]] = Field(default_factory=dict)
    by_device: dict[str, dict[str, float | int]] = Field(default_factory=dict)
    fitted_on: str = ""


class CalibrationParams(_Strict):
    """Efficiency factors and overheads of the replica model (see ``optimizer.models.perf``)."""

    memory_bandwidth_efficiency: Fraction = Field(
        0.8, description="achieved / peak memory bandwidth for decode reads (weights + KV)")
    compute_efficiency: Fraction = Field(
        0.6, description="achieved / dense peak tensor FLOPS of the compute dtype")
    step_overhead_ms: NonNeg = Field(
        1.0, description="fixed time per scheduler step (launches, sampling, scheduling)")
    sequence_overhead_us: NonNeg = Field(
        1.0, description="host time per running sequence per step (sampling, scheduling, detokenising)")
    request_overhead_ms: NonNeg = Field(
        0.0, description="front-end time per request outside the scheduler's steps (tokenising, "
        "queueing into the engine, first-token detokenising and HTTP), added once to TTFT and to "
        "E2E, not to TPOT; fitted to the online-serving TTFT rows (0 = parameter files fitted "
        "before it existed)")
    link_efficiency: Fraction = Field(
        0.7, description="achieved / peak per-direction link bandwidth in all-reduce")
    allreduce_latency_us: NonNeg = Field(
        8.0, description="fixed latency of one all-reduce inside the scale-up domain")
    pcie_allreduce_latency_us: NonNeg = Field(
        25.0, description="fixed latency of one all-reduce over host PCIe")
    memory_usable_fraction: Fraction = Field(
        0.92, description="share of device memory (memory_gb GiB) the serving engine may use "
        "for weights, workspace and KV cache")
    workspace_gb_per_gpu: NonNeg = Field(
        1.5, description="activation/workspace memory per GPU (GiB) outside weights and KV")
    max_batch_sequences: int = Field(
        2048, gt=0, description="scheduler cap on running sequences in the offline benchmarks")
    kv_reserved_output_fraction: Fraction = Field(
        1.0, description="share of the output length whose KV is reserved per running sequence "
        "when the batch is limited by memory (1 = guaranteed-no-evict scheduling)")
    overrides: list[FactorOverride] = Field(default_factory=list)
    fit: FitRecord | None = None

    def factors_for(self, device: Device) -> DeviceFactors:
        """Factors for ``device``: the defaults, then every matching override in order."""
        bw, fl, oh = self.memory_bandwidth_efficiency, self.compute_efficiency, self.step_overhead_ms
        for o in self.overrides:
            if o.matches(device):
                bw = o.memory_bandwidth_efficiency if o.memory_bandwidth_efficiency is not None else bw
                fl = o.compute_efficiency if o.compute_efficiency is not None else fl
                oh = o.step_overhead_ms if o.step_overhead_ms is not None else oh
        return DeviceFactors(bw, fl, oh)


@dataclass(frozen=True)
class DeviceFactors:
    memory_bandwidth_efficiency: float
    compute_efficiency: float
    step_overhead_ms: float


def shipped_params_path() -> Path:
    return Path(str(resources.files("optimizer.models").joinpath("data", PARAMS_FILE)))


def parse_params(data: dict[str, Any], where: str) -> CalibrationParams:
    try:
        return CalibrationParams.model_validate(data)
    except ValidationError as exc:
        raise ModelError(format_validation_error(where, exc, CalibrationParams)
                         + "; fix the file or re-run `gpuplan calibrate`") from None


def load_params(path: Path | str | None = None) -> CalibrationParams:
    """Calibration parameters from ``path``; ``None`` = the shipped ``optimizer/models/data/calibration.yaml``.

    Falls back to the built-in defaults only when the shipped file is absent (a source
    checkout before the first calibration).
    """
    if path is None:
        shipped = shipped_params_path()
        if not shipped.exists():
            return CalibrationParams()
        return parse_params(parse_yaml_text(shipped.read_text("utf-8"), f"built-in {PARAMS_FILE}", ModelError),
                            f"built-in {PARAMS_FILE}")
    data = read_yaml(path, "calibration parameters", ModelError)
    return parse_params(data, str(path))


def params_to_yaml(params: CalibrationParams, header: str = "") -> str:
    """YAML text of ``params`` (None fields dropped), with an optional comment header."""
    data = params.model_dump(mode="json", exclude_none=True)
    text = yaml.safe_dump(data, sort_keys=False, width=100)
    if header:
        text = "".join(f"# {line}\n" if line else "#\n" for line in header.splitlines()) + text
    return text
