"""How far a configuration's predicted capacity can be trusted: its fidelity class and error band.

A class belongs to a configuration — a device served by an engine at an expert-parallel degree
(``fidelity_of(device, engine=, ep=)``) — not to a device alone. Three classes (DESIGN §5):

- **measured** — the calibration in use was fitted on rows of this device served by this engine
  (and with expert parallelism if ep > 1, where the params record it); a user's
  ``gpuplan calibrate`` output counts the same way;
- **same-generation** — not measured so, but a device of its ``generation`` was, served by this engine
  (where the params record ``coverage.generation_engines``);
- **datasheet-only** — nothing of its generation was measured, or only with other engines (an engine's
  host time and kernels are then as unknown as a new generation's: ``engine_unmeasured``).

A band is the 10th–90th percentile of true / predicted capacity (true capacity =
factor × predicted), from validation residuals:

- measured: the device's own fit record, p90 of |predicted/measured − 1| = e over its
  n rows gives [1/(1 + e), 1/(1 − e)] (covers ≥ 80 % of its rows, two-sided), widened to contain
  ``MEASURED_BAND_FLOOR`` (an in-sample error is no out-of-sample band);
- same-generation: ``SAME_GENERATION_BAND``, out-of-sample residuals of the shipped
  calibration on 49 H200 SXM throughput rows it was not fitted on (Hopper measured on
  H100 only), widened to contain the band of every measured device of that generation;
- datasheet-only: ``DATASHEET_ONLY_BAND``, out-of-sample residuals on 145 B200, B300 and
  MI300X rows, widened to contain the two better classes (a device known less is never
  trusted more).

The out-of-sample rows include MoE and FP4 models the calibration never saw, which is much
of their spread (the 15 newer H100 rows of the same tables, a measured device, give 0.42-1.19):
today the band says as much about the model family as about the device.

With parameters that carry leave-out bands (``CalibrationParams.error_bands`` and
``coverage``, written by ``gpuplan calibrate``: issue 14) the class and band come from them
instead, per (device, engine): measured = this device served by this engine is in the fit
(band of class ``a``: leave-one-source-group-out predictions whose device and engine stayed in
the fit), same-generation = its generation is (class ``b``: leave-one-device-out predictions),
datasheet-only = neither (class ``c``: leave-one-generation-out predictions); each band is
widened to contain the better classes' (nesting). The residual constants above stay the
fallback for parameter files without bands (``gpuplan calibrate --no-bands``, older files); its
class follows the engine and ep the same way (``fallback_letter``): from the ``coverage`` when the
file has one, else from ``fit.by_device``, whose rows count as the device's default engine.

A configuration the calibration has its own rows of (``fit.by_configuration``: device, engine, model,
precision, tp, ep) whose median measured / predicted lies outside its class band gets that band widened
to contain it (``with_measured_configuration``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from statistics import NormalDist

from catalog.schema import Device
from optimizer.models.params import CalibrationParams, ConfigurationRecord, default_engine
from optimizer.results.provenance import Fidelity

# z of the 90th percentile: the band [p10, p90] spans 2·Z90 standard deviations of log(factor).
Z90 = NormalDist().inv_cdf(0.9)

# Measured / predicted output tokens/s (p10, p90) of the shipped calibration (fitted on
# H100 SXM, A100 80GB SXM and L40S TensorRT-LLM rows) on rows it was not fitted on:
# `python scripts/fidelity_bands.py optimizer/calibration/data/measurements-2026.csv` on 2026-12-01
# (dense, MoE and FP4 models of the 2026 tables).
# 49 H200 SXM rows of the TensorRT-LLM performance overview
# (https://nvidia.github.io/TensorRT-LLM/1.2.0/developer-guide/perf-overview.html, 2026-03;
# https://github.com/NVIDIA/TensorRT-LLM/blob/585c756579dc4d01f21fc13c2f604cdb461ac4f0/docs/source/developer-guide/perf-overview.md, ~late 2025;
# the DeepSeek-R1 best-performance blog of the same repository).
SAME_GENERATION_BAND = (0.392, 1.417)
# 69 B200 and 28 B300 rows (same TensorRT-LLM pages) and 48 MI300X vLLM rows
# (https://www.amd.com/en/developer/resources/rocm-hub/dev-ai/performance-results.html, 2025-07-16..2025-11-03;
# https://github.com/ROCm/vllm/blob/documentation/docs/dev-docker/README.md, 2025-01..2025-11).
DATASHEET_ONLY_BAND = (0.539, 1.488)
# The narrowest band a measured device gets without a leave-out band of its own (a file from `gpuplan calibrate
# --no-bands`, or one whose data held nothing to hold out): the shipped calibration's class-a band, the 10th-90th
# percentile of 769 leave-one-source-group-out predictions of measured devices (the shipped fit). A fit's own
# in-sample p90 says how well it matches its rows, not how well it predicts the next run: six rows of one source
# group fitted to a p90 of 2.7 % rated their device ×0.97-1.03.
MEASURED_BAND_FLOOR = (0.767, 1.275)
# Fewer rows than this in a device's fit record do not make it "measured".
MIN_MEASURED_ROWS = 5
# A p90 |error| of 90 % or more leaves no upper bound worth stating; cap the band there.
MAX_HIGH_FACTOR = 10.0


def measured_band(p90_abs_pct_error: float) -> tuple[float, float]:
    """[1/(1 + e), 1/(1 − e)] for e = p90 |predicted/measured − 1|: the measured/predicted range
    of at least 90 % of the rows (so of their 10th–90th percentile)."""
    e = p90_abs_pct_error / 100.0
    return 1.0 / (1.0 + e), (1.0 / (1.0 - e) if e < 1.0 - 1.0 / MAX_HIGH_FACTOR else MAX_HIGH_FACTOR)


def _envelope(*bands: tuple[float, float]) -> tuple[float, float]:
    return min(b[0] for b in bands), max(b[1] for b in bands)


def classes_up_to(letter: str) -> str:
    """Class ``letter`` and the better ones ("a" -> "a", "c" -> "abc")."""
    return "abc"[: "abc".index(letter) + 1]


def class_envelope(params: CalibrationParams, letter: str) -> tuple[float, float]:
    """Class ``letter``'s leave-out band widened to contain the better classes' (``classes_up_to``): a class is
    never trusted more than a better one."""
    return _envelope(*((params.error_bands[k].low_factor, params.error_bands[k].high_factor)
                       for k in classes_up_to(letter)))


def measured_devices(params: CalibrationParams) -> dict[str, tuple[int, float]]:
    """Device key -> (rows, p90 |error| %) of the devices the calibration was fitted on."""
    fit = params.fit
    if fit is None:
        return {}
    out = {}
    for key, stats in fit.by_device.items():
        n, p90 = stats.get("n", 0), stats.get("p90_abs_pct_error")
        if isinstance(n, int | float) and n >= MIN_MEASURED_ROWS and isinstance(p90, int | float):
            out[key] = (int(n), float(p90))
    return out


# in the basis of a class-c rating whose generation was never measured (the workbook's Summary tells it apart from a
# class-c rating of a measured generation: another engine, a MoE model on a device measured with dense ones only)
GENERATION_UNMEASURED_MARK = "nothing of generation"

CLASS_BY_LETTER = {"a": "measured", "b": "same-generation", "c": "datasheet-only"}
LEAVE_OUT_MEANING = {
    "a": "{device} served by {engine} is in the fit",
    "b": "{device}/{engine} not measured; its generation {generation} is",
    "c": GENERATION_UNMEASURED_MARK + " {generation} measured: datasheet figures and factors fitted on other generations",
}


def fidelity_letter(device: Device, engine: str | None, params: CalibrationParams, ep: int = 1) -> str | None:
    """``a``, ``b`` or ``c`` from the parameters' ``coverage`` (None without one); an expert-parallel
    configuration (``ep`` > 1) of a measured device/engine that was never measured with ep is ``b``
    (``ep_unmeasured``); a device of a measured generation served by an engine never measured on that
    generation is ``c`` (``engine_unmeasured``)."""
    cov = params.coverage
    if cov is None:
        return None
    engine = engine or default_engine(device)
    if f"{device.key}/{engine}" in cov.device_engines:
        return "b" if ep_unmeasured(device, engine, params, ep) else "a"
    return "b" if device.generation in cov.generations and not engine_unmeasured(device, engine, params) else "c"


def generation_engine(device: Device, engine: str | None) -> str:
    """The 'generation/engine' key of ``device`` served by ``engine`` (None = its default), as the coverage lists it."""
    return f"{device.generation}/{engine or default_engine(device)}"


def engine_unmeasured(device: Device, engine: str | None, params: CalibrationParams) -> bool:
    """True when the coverage records generation/engine pairs and ``device``'s generation was measured, but
    never served by ``engine``: the engine's host time (scheduler, sampling: the fitted step and per-sequence
    overheads) and kernels on that hardware are then not in the fit, and a refit without an engine's rows
    misses by 14-41 % (MI300X/vLLM held out, docs/model-accuracy.md "Finite benchmark runs"), the
    datasheet-only class's evidence, not the same-generation one's."""
    cov = params.coverage
    if cov is None or cov.generation_engines is None or device.generation not in cov.generations:
        return False
    return generation_engine(device, engine) not in cov.generation_engines


def ep_unmeasured(device: Device, engine: str | None, params: CalibrationParams, ep: int) -> bool:
    """True for ep > 1 when the coverage records expert-parallel pairs and lacks this device/engine:
    its all-to-all and attention data-parallel terms were fitted on other devices' ep rows."""
    cov = params.coverage
    if ep <= 1 or cov is None or cov.expert_parallel_device_engines is None:
        return False
    return f"{device.key}/{engine or default_engine(device)}" not in cov.expert_parallel_device_engines


def fidelity_of(device: Device, params: CalibrationParams, devices: Mapping[str, Device],
                engine: str | None = None, ep: int = 1) -> Fidelity:
    """The fidelity class of ``device`` (served by ``engine``; None = its default engine; ``ep`` its
    expert-parallel degree) under the calibration ``params`` and its band.

    ``devices`` is the catalog (to find the generation of each measured device); it is not needed
    when the params carry leave-out bands.
    """
    engine = engine or default_engine(device)
    letter = fidelity_letter(device, engine, params, ep)
    if letter is not None and all(k in params.error_bands for k in classes_up_to(letter)):
        low, high = class_envelope(params, letter)
        band = params.error_bands[letter]  # type: ignore[index]
        # the ep wording only where this device/engine was measured (class a at ep 1, as the fallback asks): an
        # unmeasured device or engine is rated, and described, by its generation or its engine, whatever its ep
        if ep_unmeasured(device, engine, params, ep) and fidelity_letter(device, engine, params) == "a":
            what = f"{device.key}/{engine} measured, but never with expert parallelism (ep {ep}); rated as its generation"
        elif engine_unmeasured(device, engine, params):
            what = unmeasured_engine_basis(device, engine, params)
        else:
            what = LEAVE_OUT_MEANING[letter].format(device=device.key, engine=engine, generation=device.generation)
        return Fidelity(CLASS_BY_LETTER[letter], f"{what}; 80 % band from {band.n} {band.basis}",  # type: ignore[arg-type]
                        low, high)
    return _fallback_fidelity(device, engine, params, devices, ep)


def fallback_letter(device: Device, engine: str, params: CalibrationParams, devices: Mapping[str, Device],
                    ep: int = 1) -> str:
    """The class without leave-out bands, from the same inputs as the banded path: the coverage's
    (``fidelity_letter``: this device/engine pair, its ep) when the params carry one, else the fit's
    per-device records (``measured_devices``), whose rows are taken as served by the device's
    default engine (the fit records no engine per device, and before ``engine`` existed every
    configuration ran it), so a measured device served by another engine is ``b``. Class ``a``
    needs the device's own fit record for its band: with fewer than MIN_MEASURED_ROWS rows it is ``b``.
    """
    measured = measured_devices(params)
    letter = fidelity_letter(device, engine, params, ep)
    if letter is None:
        if device.key in measured:
            return "a" if engine == default_engine(device) else "b"
        same = any(devices[k].generation == device.generation for k in measured if k in devices)
        return "b" if same else "c"
    return "b" if letter == "a" and device.key not in measured else letter


def _fallback_fidelity(device: Device, engine: str, params: CalibrationParams, devices: Mapping[str, Device],
                       ep: int) -> Fidelity:
    """``fallback_letter``'s class with the residual-constant bands of the module docstring, each widened to
    contain the leave-out bands the file does carry for the better classes (``gpuplan calibrate`` on data with
    two source groups but one device writes class a only): a class is never trusted more than a better one."""
    measured = measured_devices(params)
    bands = {k: _envelope(measured_band(p90), MEASURED_BAND_FLOOR) for k, (_, p90) in measured.items()}
    letter = fallback_letter(device, engine, params, devices, ep)
    better = [(b.low_factor, b.high_factor) for k, b in params.error_bands.items() if k in classes_up_to(letter)[:-1]]
    if letter == "a":
        n, p90 = measured[device.key]
        low, high = bands[device.key]
        when = f" on {params.fit.fitted_on}" if params.fit and params.fit.fitted_on else ""
        return Fidelity("measured", f"calibration fitted{when} on {n} rows of {device.key} ({engine}); "
                        f"in-sample p90 |error| {p90:.1f} % (the file has no leave-out band: `gpuplan calibrate` "
                        "with bands, on rows of two or more source groups, writes one)", low, high)
    if letter == "b":
        same = sorted(k for k in measured if k in devices and devices[k].generation == device.generation)
        low, high = _envelope(SAME_GENERATION_BAND, *(bands[k] for k in same), *better)
        on = f" on {', '.join(same)}" if same else ""
        if ep_unmeasured(device, engine, params, ep) and fidelity_letter(device, engine, params) == "a":
            why = f"{device.key}/{engine} measured, but never with expert parallelism (ep {ep}); rated as its generation"
        elif device.key in measured:
            why = f"{device.key} measured, but not served by {engine}; rated as its generation {device.generation}{on}"
        elif fidelity_letter(device, engine, params) == "a":
            why = (f"{device.key}/{engine} measured on fewer than {MIN_MEASURED_ROWS} rows; rated as its generation "
                   f"{device.generation}{on}")
        else:
            why = f"not measured; {device.generation} measured{on}"
        return Fidelity("same-generation", f"{why}; band from out-of-sample H200 residuals", low, high)
    low, high = _envelope(DATASHEET_ONLY_BAND, SAME_GENERATION_BAND, *bands.values(), *better)
    why = (unmeasured_engine_basis(device, engine, params) if engine_unmeasured(device, engine, params)
           else f"{GENERATION_UNMEASURED_MARK} {device.generation} measured")
    return Fidelity("datasheet-only", f"{why}; band from out-of-sample B200, B300 and MI300X residuals", low, high)


def engines_measured_on(generation: str, params: CalibrationParams) -> list[str]:
    """The engines ``generation`` was measured with (``coverage.generation_engines``)."""
    cov = params.coverage
    return sorted(e.partition("/")[2] for e in (cov.generation_engines or [] if cov else []) if e.startswith(f"{generation}/"))


def unmeasured_engine_basis(device: Device, engine: str, params: CalibrationParams) -> str:
    """What a class-c rating of a measured generation served by an unmeasured engine rests on."""
    served = engines_measured_on(device.generation, params)
    return (f"generation {device.generation} measured only with {', '.join(served)}, never served by "
            f"{engine}: its shares and host times are {', '.join(served)}'s; rated datasheet-only")


def with_measured_configuration(fidelity: Fidelity, record: ConfigurationRecord | None) -> Fidelity:
    """``fidelity`` widened to contain r = the configuration's own median measured / predicted
    (``CalibrationParams.measured_configuration``) when r lies outside it: [min(low, r), max(high, r)],
    the basis saying so. A class band is a statement about configurations like this one; where this one's
    own rows say otherwise, the band that is reported, sized at a confidence level and swung in the
    sensitivity must contain what they say. Unchanged without a record or with r inside."""
    if record is None:
        return fidelity
    r = record.median_measured_over_predicted
    if fidelity.low_factor <= r <= fidelity.high_factor:
        return fidelity
    return Fidelity(fidelity.class_, f"{fidelity.basis}; widened to ×{r:.2f}: the calibration's {record.n} measured "
                    f"offline rows of this configuration ran at {r:.2f}× the prediction (median)",
                    min(fidelity.low_factor, r), max(fidelity.high_factor, r))


def capacity_factor_at(fidelity: Fidelity, confidence: float) -> float:
    """The capacity factor exceeded with probability ``confidence`` (never above 1).

    log(factor) is taken normal with p10 = ln(low_factor), p90 = ln(high_factor):
    μ = (ln low + ln high)/2, σ = (ln high − ln low)/(2·Z90); factor = exp(μ + σ·Φ⁻¹(1 − confidence)),
    capped at 1 so planning at a confidence level never trusts a device more than its point
    estimate. At confidence 0.9 this is low_factor (when below 1).
    """
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1) (got {confidence}); e.g. --confidence 0.9")
    lo, hi = math.log(fidelity.low_factor), math.log(fidelity.high_factor)
    mu, sigma = (lo + hi) / 2.0, (hi - lo) / (2.0 * Z90)
    return min(1.0, math.exp(mu + sigma * NormalDist().inv_cdf(1.0 - confidence)))


def unmeasured_kernels(device: Device, engine: str | None, params: CalibrationParams, *, moe: bool = False,
                       weight_only: bool = False) -> list[str]:
    """The kernel families of a configuration that no row of its generation and engine measured, where the coverage
    records them (None = not recorded: none): ``moe`` — the routed experts' grouped GEMMs of a mixture-of-experts
    model, whose fitted share (``moe_efficiency``) spans ~0.36 (Blackwell) to 1.0 (Ada) across the shipped
    generations; ``weight_only`` — the dequantizing GEMMs of a weight-only precision (W4A16), whose share was fitted
    where they ran (Hopper in the shipped fit) and is taken everywhere else."""
    cov = params.coverage
    if cov is None:
        return []
    pair = generation_engine(device, engine)
    return [family for family, asked, measured in (("moe", moe, cov.moe_generation_engines),
                                                    ("weight_only", weight_only, cov.weight_only_generation_engines))
            if asked and measured is not None and pair not in measured]


def moe_share_span(params: CalibrationParams) -> tuple[float, float] | None:
    """(least, greatest) grouped-GEMM share (``moe_efficiency``) the fit gave a generation; None: no generation has one."""
    fitted = [o.moe_efficiency for o in params.overrides if o.generation is not None and o.moe_efficiency is not None]
    return (min(fitted), max(fitted)) if fitted else None


def unmeasured_kernel_basis(family: str, device: Device, engine: str, params: CalibrationParams) -> str:
    """What a configuration's ``family`` of kernels (``unmeasured_kernels``) assumes where it was never measured."""
    where = f"generation {device.generation} never measured with"
    if family == "moe":
        fitted = moe_share_span(params)
        span = f"; the generations measured with MoE fitted {fitted[0]:.2f}-{fitted[1]:.2f}" if fitted else ""
        return (f"{where} a mixture-of-experts model served by {engine}: its grouped-GEMM share "
                f"{params.factors_for(device, engine).moe_efficiency:.2f} is not fitted on it{span}")
    on = sorted((params.coverage.weight_only_generation_engines or []) if params.coverage else [])
    return (f"{where} a weight-only precision served by {engine}: its dequantizing GEMMs take the share "
            f"{params.factors_for(device, engine, weight_only=True).compute_efficiency:.2f} fitted on "
            f"{', '.join(on) or 'no generation'}")


def for_kernels(fidelity: Fidelity, device: Device, engine: str | None, params: CalibrationParams, *,
                moe: bool = False, weight_only: bool = False) -> Fidelity:
    """The fidelity of a configuration with those kernel families: ``fidelity`` where each was measured on this
    generation and engine (or the coverage does not record it, or it is datasheet-only already); else the
    datasheet-only class with its band (class c widened to contain a and b; without leave-out bands the residual
    constants' envelope with ``fidelity``'s own band), the basis naming what each unmeasured family assumes."""
    families = unmeasured_kernels(device, engine, params, moe=moe, weight_only=weight_only)
    if fidelity.class_ == "datasheet-only" or not families:
        return fidelity
    engine = engine or default_engine(device)
    basis = "; ".join(unmeasured_kernel_basis(f, device, engine, params) for f in families)
    return _rated("c", f"{basis}; rated datasheet-only", fidelity, params)


def for_pipeline(fidelity: Fidelity, pp: int, params: CalibrationParams) -> Fidelity:
    """The fidelity of a pipeline-parallel configuration (``pp`` > 1): ``fidelity`` capped at same-generation.
    The pipeline terms (``pp_hop_latency_us``, ``pp_microbatch_overhead_us``) are defaults no fit sets and no
    pipeline-parallel row measured, so a measured device's band (of pp = 1 rows) does not cover them; the class
    is that of an unmeasured structure on known hardware, as an unmeasured ep is (``ep_unmeasured``). Band: b
    widened to contain a (without leave-out bands: the residual constant's envelope with ``fidelity``'s)."""
    if pp <= 1 or fidelity.class_ != "measured":
        return fidelity
    return _rated("b", f"pipeline-parallel (pp {pp}): its stage hop ({params.pp_hop_latency_us:g} µs) and "
                  f"per-micro-batch host time ({params.pp_microbatch_overhead_us:g} µs) are defaults, never fitted "
                  "(no pipeline-parallel measurements); rated same-generation", fidelity, params)


def _rated(letter: str, basis: str, fidelity: Fidelity, params: CalibrationParams) -> Fidelity:
    """``fidelity`` re-rated as class ``letter`` (b or c): the leave-out band of that class widened to contain the
    better classes' (``class_envelope``), or without leave-out bands the residual constants' envelope (same-generation;
    datasheet-only with it) widened to contain ``fidelity``'s own band."""
    if all(k in params.error_bands for k in classes_up_to(letter)):
        low, high = class_envelope(params, letter)
    else:
        residual = (SAME_GENERATION_BAND,) if letter == "b" else (DATASHEET_ONLY_BAND, SAME_GENERATION_BAND)
        low, high = _envelope(*residual, (fidelity.low_factor, fidelity.high_factor))
    return Fidelity(CLASS_BY_LETTER[letter], basis, low, high)  # type: ignore[arg-type]


def structure_rating(fidelity: Fidelity, device: Device, engine: str | None, params: CalibrationParams, *,
                     moe: bool, weight_only: bool, pp: int) -> Fidelity:
    """A configuration's class band (``fidelity_of``) lowered for what its model, precision and pipeline add that
    was never measured on its hardware: ``for_kernels`` (MoE, weight-only GEMMs), then ``for_pipeline`` (pp > 1).
    What the planner (``safeguards.candidate_fidelity``) and ``gpuplan estimate`` both rate by."""
    return for_pipeline(for_kernels(fidelity, device, engine, params, moe=moe, weight_only=weight_only), pp, params)
