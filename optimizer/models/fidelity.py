"""How sure a prediction is: its fidelity class and the 80 % band that goes with it.

A configuration's prediction rests on measurements of

- class ``a``: this device served by this engine;
- class ``b``: this device's generation (another device of it, or this device with another engine);
- class ``c``: nothing of its generation — datasheet figures and factors fitted on other
  generations (and vendors) only.

``CalibrationParams.coverage`` records what the fit measured; ``CalibrationParams.error_bands``
holds, per class, the 10th and 90th percentiles of measured/predicted over *leave-out*
predictions (``optimizer.calibration.bands``): class a from leave-one-source-group-out
predictions whose device and engine stayed in the fit, class b from leave-one-device-out,
class c from leave-one-generation-out. The band of a predicted value v is
``[v·low_factor, v·high_factor]``: the measured value should fall inside about 8 times in 10.
"""

from __future__ import annotations

from dataclasses import dataclass

from catalog.schema import Device
from optimizer.models.params import CalibrationParams, default_engine

CLASS_MEANING = {
    "a": "this device measured with this engine",
    "b": "this device's generation measured (another device or engine)",
    "c": "datasheet only: no measurement of this generation",
}


@dataclass(frozen=True)
class Fidelity:
    """Fidelity class of a configuration's prediction and its 80 % band factors."""

    fidelity_class: str  # "a", "b" or "c"
    basis: str  # what the prediction and the band rest on
    low_factor: float  # the 10th percentile of measured/predicted (1.0 when the params have no bands)
    high_factor: float  # the 90th percentile of measured/predicted

    def as_json(self) -> dict:
        """``{"class", "basis", "band_low_factor", "band_high_factor"}`` for JSON output."""
        return {"class": self.fidelity_class, "basis": self.basis,
                "band_low_factor": round(self.low_factor, 4), "band_high_factor": round(self.high_factor, 4)}


def fidelity_class(device: Device, engine: str | None, params: CalibrationParams) -> str:
    """``a``, ``b`` or ``c`` for ``device`` served by ``engine`` (None = its default engine)."""
    cov = params.coverage
    if cov is None:
        return "c"
    engine = engine or default_engine(device)
    if f"{device.key}/{engine}" in cov.device_engines:
        return "a"
    if device.generation in cov.generations:
        return "b"
    return "c"


def fidelity_of(device: Device, engine: str | None, params: CalibrationParams) -> Fidelity:
    """The fidelity class of ``device``/``engine`` under ``params`` and its band factors.

    Without bands in the params (a parameter file fitted before bands existed) the factors
    are 1.0 and the basis says so.
    """
    cls = fidelity_class(device, engine, params)
    band = params.error_bands.get(cls)  # type: ignore[call-overload]
    basis = CLASS_MEANING[cls]
    if band is None:
        return Fidelity(cls, basis + "; no error band in these parameters (re-run `gpuplan calibrate`)", 1.0, 1.0)
    return Fidelity(cls, f"{basis}; 80 % band from {band.n} {band.basis}", band.low_factor, band.high_factor)
