"""Fit the performance model's efficiency factors to measured offline throughput.

Predicted offline throughput (``predict_offline_throughput``) is the steady state of
``optimizer.models.perf.offline_throughput_tokens_s``: all requests at once, the running batch
limited by the KV cache that fits (and the scheduler cap), fixed input/output lengths,
output tokens/s of the whole TP group.

The fit minimises Σ (log predicted − log measured)² (or, with a robust ``fit_loss``, Σ C²·ρ(((log pred −
log meas)/C)²), ``optimizer.calibration.lsq.robust_loss``) over the offline rows by cyclic
coordinate search on a log-spaced grid per parameter, shrinking the grid each sweep (robust
to the objective's kinks — max() and floor() — but it moves one knob at a time, so on ~40
correlated knobs it stops far from the minimum), then polishes every continuous knob at once
by bounded least squares on the residual vector (``optimizer.calibration.lsq``). Every source
group (software version) gets equal total weight, so the larger tables do not dominate.

Fitted: the global memory-bandwidth and compute efficiencies, the per-step overhead,
the usable memory fraction, the KV reservation of the output, and per-class overrides
(memory type for bandwidth, generation for compute) when the data hold devices of that
class. Never per device key. The GEMM dtypes of the rows are recorded
(``measured_compute_dtypes``): a dtype without rows gets no datasheet speed-up over the next
wider measured one (``CalibrationParams.unmeasured_dtype_bound``). With ``online_weight`` > 0
and online-serving rows, the serving model's mean TTFT and mean ITL enter the loss too, and the
per-request front-end time ``request_overhead_ms`` (which only TTFT and E2E see) is fitted with
the rest.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import date
from typing import Any

import numpy as np

from catalog.errors import ModelError
from catalog.load import Catalog
from optimizer.calibration.lsq import polish, residual_fn
from optimizer.calibration.measurements import Measurement
from optimizer.calibration.predict import (
    is_latency_row,
    is_online_rate,
    offline_skip_reason,
    predict_offline_throughput,
)
from optimizer.models.params import (
    FACTOR_FIELDS,
    CalibrationParams,
    ConfigurationRecord,
    FactorOverride,
    FitRecord,
    configuration_key,
    default_engine,
)

# ---------------------------------------------------------------------------------------
# Fitting


@dataclass(frozen=True)
class _Knob:
    """One fitted scalar: how to read it from and write it into the params."""

    name: str
    low: float
    high: float
    get: Callable[[CalibrationParams], float]
    set: Callable[[CalibrationParams, float], CalibrationParams]
    parent: Callable[[CalibrationParams], float] | None = None  # a class override's parent (global) value
    integer: bool = False  # an integer field: grid search only, never polished (lsq.polish)


def _field_knob(name: str, low: float, high: float, integer: bool = False) -> _Knob:
    return _Knob(name, low, high, lambda p: float(getattr(p, name)),
                 lambda p, v: p.model_copy(update={name: int(round(v)) if integer else v}), integer=integer)


def _override_knob(idx: int, field: str, low: float, high: float, shrunk: bool = True) -> _Knob:
    def get(p: CalibrationParams) -> float:
        value = getattr(p.overrides[idx], field)
        return float(value) if value is not None else float(getattr(p, field))

    def put(p: CalibrationParams, v: float) -> CalibrationParams:
        ovs = list(p.overrides)
        ovs[idx] = ovs[idx].model_copy(update={field: v})
        return p.model_copy(update={"overrides": ovs})

    return _Knob(f"overrides[{idx}].{field}", low, high, get, put,
                 (lambda p: parent_value(p, field)) if shrunk else None)


def parent_value(p: CalibrationParams, field: str) -> float:
    """The value a class override of ``field`` deviates from: the global field (the all-to-all time's
    parent is the all-reduce latency of the link, ``CalibrationParams.alltoall_latency_us``)."""
    if field == "alltoall_latency_us":
        return float(p.alltoall_latency_us or p.allreduce_latency_us)
    return float(getattr(p, field))


def shrinkage_penalty(p: CalibrationParams, knobs: Sequence[_Knob]) -> float:
    """``class_shrinkage · Σ_knobs (log(override / parent))²`` over the knobs that have a parent (the
    generation and memory-type overrides, ``class_overrides``): a Gaussian prior on each override's
    log-deviation from its parent value (``CalibrationParams.class_shrinkage``).
    The data term of a class grows with its rows' weight, so a class with few rows stays near its
    parent and a class with many is fitted nearly freely; 0 = unpenalised."""
    lam = p.class_shrinkage
    if lam <= 0:
        return 0.0
    return lam * sum(math.log(k.get(p) / k.parent(p)) ** 2 for k in knobs if k.parent is not None)


def prior_residuals(knobs: Sequence[_Knob]) -> Callable[[CalibrationParams], np.ndarray]:
    """``p → sqrt(class_shrinkage)·log(override/parent)`` over the shrunk knobs: the residuals whose
    squares sum to ``shrinkage_penalty``."""
    shrunk = [k for k in knobs if k.parent is not None]

    def prior(p: CalibrationParams) -> np.ndarray:
        if p.class_shrinkage <= 0 or not shrunk:
            return np.zeros(0)
        return math.sqrt(p.class_shrinkage) * np.array([math.log(k.get(p) / k.parent(p)) for k in shrunk])

    return prior


def abs_pct_errors(pred: np.ndarray, measured: np.ndarray) -> np.ndarray:
    return np.abs(pred / measured - 1.0) * 100.0


GRID_POINTS = 7  # log-spaced values per knob and sweep (the centre is the current value, not re-evaluated)
# Where the MoE glue knob starts (CalibrationParams.moe_glue_bytes_per_element, bytes per routed pair and hidden
# element): a hand count of the kernels around a grouped-GEMM MoE layer (TensorRT-LLM's CUTLASS path: expand
# input rows, the two GEMMs, finalize routing): the permute reads the token's BF16 row (2 B) and writes it in the
# GEMM's dtype (1 B FP8), the second GEMM writes its BF16 output (2 B), the finalize reads it (2 B) and writes the
# token once (2/k B): 7-9 B per pair and hidden element.
MOE_GLUE_START_BYTES = 8.0


def fit_params(rows: Sequence[Measurement], cat: Catalog, start: CalibrationParams | None = None,
               data_file: str = "", sweeps: int = 6, by_generation: bool = True,
               by_memory_type: bool = True, online_weight: float = 0.0,
               optimizer: str = "polish", where: str = "") -> CalibrationParams:
    """Fit the factors to the offline rows of ``rows``; returns params with a FitRecord.

    ``data_file`` is recorded in the FitRecord (the files' names); ``where`` names the data in errors (the
    paths as the user gave them; default ``data_file``).

    ``optimizer`` (``search``): "coordinate" = ``fit_rounds`` coordinate searches of ``sweeps`` sweeps;
    "polish" (default) = each search followed by a least-squares polish of the continuous knobs
    (``optimizer.calibration.lsq.polish``).

    ``online_weight`` = w > 0 adds, over the online-serving rows (``optimizer.calibration.report``:
    'online' in the scenario or source group, a finite request rate, a measured mean TTFT or
    mean ITL), ``w·mean_rows (log ITL_pred/ITL_meas)² + w·mean_rows (log TTFT_pred/TTFT_meas)²``
    (``online_predictor``, rows the serving model finds unsaturated; a metric with rows but
    no unsaturated prediction costs w·25): the offline rows are large-batch runs, and alone
    they let a low bandwidth efficiency and a high all-reduce latency absorb effects absent
    at batch ~1-50; the ITL rows pin the small-batch step time, the TTFT rows the front-end
    time ``request_overhead_ms`` (a knob only when TTFT rows exist; started at >= 1 ms, as
    the search is multiplicative).
    """
    usable = [m for m in rows if offline_skip_reason(m) is None]
    if not usable:
        raise ModelError(f"{where or data_file or 'measurements'}: no offline max-throughput rows to fit "
                         "(need scenario 'offline ...' rows with input_len, output_len, throughput_tok_s)")
    params = start or CalibrationParams()
    devices = [cat.devices[k] for k in sorted({m.device_key for m in usable})]  # type: ignore[index]
    overrides, override_knobs = class_overrides(usable, cat, devices, by_generation, by_memory_type,
                                                a2a_start_us=parent_value(params, "alltoall_latency_us"))
    overrides = warm_started(overrides, params.overrides, override_knobs)
    # alltoall_latency_us None: the default all-to-all time (a generation without EP rows) is the
    # all-reduce latency of the link
    online = online_fit_rows(rows) if online_weight > 0 else []
    params = params.model_copy(update={"alltoall_latency_us": None, "overrides": overrides, "prefill_attention_efficiency":
                                       params.prefill_attention_efficiency or params.attention_efficiency,
                                       "measured_compute_dtypes": measured_compute_dtypes([*usable, *online], cat),
                                       "measured_compute_dtypes_by_vendor":
                                           measured_compute_dtypes_by_vendor([*usable, *online], cat)})
    metrics = [k for k in ("tpot_mean_ms", "ttft_mean_ms") if any(getattr(m, k) for m in online)]
    params, knobs = _global_knobs(params, usable, cat, "ttft_mean_ms" in metrics)
    latency = [m for m in rows if is_latency_row(m)]
    residuals = residual_fn(usable, latency, online, metrics, online_weight, cat, prior_residuals(override_knobs))

    def loss(p: CalibrationParams) -> float:
        return float(np.sum(residuals(p) ** 2))

    params, best = search(params, knobs + override_knobs, loss, residuals, sweeps, optimizer)
    params = _without_unused_fields(params, [*usable, *latency, *online], cat, loss, best)
    params = _typical_generation_defaults(params, loss, best)
    record = fit_record(usable, cat, params, data_file, polished=optimizer == "polish")
    kind = "squared" if params.fit_loss == "squared" else f"{params.fit_loss} (scale {params.fit_loss_scale_log:g})"
    if latency:
        record = record.model_copy(update={"method": record.method + f"; plus the {kind} log error of "
                                           f"e2e_latency_s over {len(latency)} offline latency rows (one fixed "
                                           "batch), equal weight per source_group"})
    if online:
        names = " and ".join({"tpot_mean_ms": "mean ITL", "ttft_mean_ms": "mean TTFT"}[k] for k in metrics)
        record = record.model_copy(update={"method": record.method + f"; plus {online_weight:g} x mean "
                                           f"{kind} log error of {names} over {len(online)} online-serving rows"})
    return params.model_copy(update={"fit": record})


def _global_knobs(params: CalibrationParams, usable: Sequence[Measurement], cat: Catalog,
                  fit_request_overhead: bool) -> tuple[CalibrationParams, list[_Knob]]:
    """The knobs of the global (not per-class) fields and their bounds, and the params with
    the starts a multiplicative search needs (MoE tile >= 16 rows, MoE glue ``MOE_GLUE_START_BYTES`` when
    0, request overhead >= 1 ms)."""
    knobs = [
        _field_knob("memory_bandwidth_efficiency", 0.3, 1.0),
        _field_knob("compute_efficiency", 0.1, 1.0),
        _field_knob("attention_efficiency", 0.02, 1.0),
        _field_knob("prefill_attention_efficiency", 0.05, 1.0),
        _field_knob("smooth_max_exponent", 1.5, 64.0),
        _field_knob("step_overhead_ms", 0.02, 30.0),
        _field_knob("memory_usable_fraction", 0.7, 0.97),  # engines keep a reserve; 1.0 is not physical
        _field_knob("kv_reserved_output_fraction", 0.3, 1.0),
        _field_knob("sequence_overhead_us", 0.5, 200.0),
        _field_knob("link_efficiency", 0.1, 1.0),
        _field_knob("allreduce_latency_us", 1.0, 100.0),
        _field_knob("workspace_gb_per_gpu", 0.2, 20.0),
        _field_knob("max_batch_sequences", 64, 8192, integer=True),
    ]
    if any(cat.models[m.model_key].is_moe for m in usable):  # type: ignore[index]
        params = params.model_copy(update={"moe_tile_tokens": max(params.moe_tile_tokens, 16.0),
                                           "moe_glue_bytes_per_element": params.moe_glue_bytes_per_element
                                           or MOE_GLUE_START_BYTES})
        knobs.append(_field_knob("moe_tile_tokens", 1.0, 512.0))
        knobs.append(_field_knob("moe_efficiency", 0.05, 1.0))
        knobs.append(_field_knob("moe_glue_bytes_per_element", 0.5, 200.0))
    if any(m.tp * m.ep > cat.devices[m.device_key].interconnect_domain_gpus for m in usable):  # type: ignore[index]
        params = params.model_copy(update={"pcie_link_efficiency": params.pcie_link_efficiency or params.link_efficiency})
        knobs.append(_field_knob("pcie_link_efficiency", 0.05, 1.0))
    if fit_request_overhead:
        params = params.model_copy(update={"request_overhead_ms": max(params.request_overhead_ms, 1.0)})
        knobs.append(_field_knob("request_overhead_ms", 0.01, 50.0))
    return params, knobs


def search(params: CalibrationParams, knobs: Sequence[_Knob], loss: Callable[[CalibrationParams], float],
           residuals: Callable[[CalibrationParams], np.ndarray], sweeps: int,
           optimizer: str) -> tuple[CalibrationParams, float]:
    """``params.fit_rounds`` rounds, each a coordinate search of ``sweeps`` sweeps over every knob
    (restarting its grid span) and, with ``optimizer`` "polish", a least-squares polish of the
    continuous knobs from where the search ended (``lsq.polish``; integer knobs stay on the grid)."""
    if optimizer not in ("coordinate", "polish"):
        raise ValueError(f"unknown fit optimizer {optimizer!r}; known: coordinate, polish")
    best = loss(params)
    for _ in range(params.fit_rounds):
        params, best = coordinate_search(params, knobs, loss, sweeps)
        if optimizer == "polish":
            params, best = polish(params, [k for k in knobs if not k.integer], residuals)
    return params, best


def coordinate_search(params: CalibrationParams, knobs: Sequence[_Knob], loss: Callable[[CalibrationParams], float],
                      sweeps: int, span: float = 0.5, shrink: float = 0.6) -> tuple[CalibrationParams, float]:
    """Cyclic coordinate search: per sweep and knob, ``GRID_POINTS`` log-spaced values within
    ±``span`` (log) of the current one, clipped to the knob's bounds, keep the best; the span
    shrinks by ``shrink`` each sweep. The current value (the grid centre) is never re-evaluated."""
    best = loss(params)
    for _ in range(sweeps):
        for k in knobs:
            x0 = k.get(params)
            grid = np.clip(np.exp(np.linspace(math.log(x0) - span, math.log(x0) + span, GRID_POINTS)), k.low, k.high)
            for x in grid:
                if abs(x - x0) <= 1e-12 * abs(x0):
                    continue
                cand = k.set(params, float(x))
                val = loss(cand)
                if val < best - 1e-12:
                    best, params = val, cand
        span *= shrink
    return params, best


def _typical_generation_defaults(params: CalibrationParams, loss: Callable[[CalibrationParams], float],
                                 best: float) -> CalibrationParams:
    """The defaults of the factors that every fitted row takes from a generation override (so the
    data do not determine them) set to the median of those overrides: a generation nobody measured
    is assumed typical of the measured ones. Kept only where the loss is unchanged."""
    for name in ("memory_bandwidth_efficiency", "moe_efficiency"):
        values = [getattr(o, name) for o in params.overrides if o.generation is not None and getattr(o, name) is not None]
        if not values:
            continue
        cand = params.model_copy(update={name: float(np.median(values))})
        if abs(loss(cand) - best) <= 1e-9 * max(abs(best), 1.0):
            params = cand
    return params


def factor_lookups(rows: Sequence[Measurement], cat: Catalog) -> set[tuple[str, str, str, bool]]:
    """The (device, engine, GEMM dtype, weight-only) factor lookups a prediction of ``rows`` makes
    (``combo_lookup.factors_per_combo``): each row's precision, and the 16-bit GEMMs of a model whose dense
    weights stay unquantized (``Model.unquantized_dense``)."""
    out = set()
    for m in rows:
        if not m.device_key or m.unresolved:
            continue
        q = cat.precisions[m.precision_key]  # type: ignore[index]
        engine = engine_of(m, cat)
        out.add((m.device_key, engine, q.compute_dtype, q.weight_only))
        if cat.models[m.model_key].unquantized_dense:  # type: ignore[index]
            out.add((m.device_key, engine, "bf16", False))
    return out


def unused_override_fields(params: CalibrationParams, rows: Sequence[Measurement], cat: Catalog
                           ) -> list[tuple[int, str]]:
    """(override index, field) of every factor a class override of ``params`` sets that no prediction of
    ``rows`` takes: a lookup takes each field from the last matching override that sets it
    (``CalibrationParams.factors_for``), so a value that a later override replaces on every row the class
    holds (the memory type's bandwidth on a device whose generation sets its own) was never determined by
    the data, and it would reach only devices the data never saw."""
    taken: set[tuple[int, str]] = set()
    for device, engine, dtype, weight_only in factor_lookups(rows, cat):
        last: dict[str, int] = {}
        for i, o in enumerate(params.overrides):
            if o.matches(cat.devices[device], engine, dtype, weight_only):
                last.update({f: i for f in FACTOR_FIELDS if getattr(o, f) is not None})
        taken.update((i, f) for f, i in last.items())
    return [(i, f) for i, o in enumerate(params.overrides) for f in FACTOR_FIELDS
            if getattr(o, f) is not None and (i, f) not in taken]


def _without_unused_fields(params: CalibrationParams, rows: Sequence[Measurement], cat: Catalog,
                           loss: Callable[[CalibrationParams], float], best: float) -> CalibrationParams:
    """``params`` without the override values no row takes (``unused_override_fields``; an override left
    without a factor is dropped), so a device the data never saw falls through to a value the data fitted
    (shipped fit-v11: the GDDR bandwidth 0.30, at its knob's lower bound, that the Ada override replaces on
    L40S, its only GDDR device, would otherwise reach the T4), before the typical-generation defaults take the
    median of the values that remain. Kept only where the loss is unchanged."""
    unused = unused_override_fields(params, rows, cat)
    if not unused:
        return params
    overrides = [o.model_copy(update={f: None for j, f in unused if j == i}) for i, o in enumerate(params.overrides)]
    overrides = [o for o in overrides if any(getattr(o, f) is not None for f in FACTOR_FIELDS)]
    cand = params.model_copy(update={"overrides": overrides})
    return cand if abs(loss(cand) - best) <= 1e-9 * max(abs(best), 1.0) else params


def warm_started(overrides: Sequence[FactorOverride], start: Sequence[FactorOverride],
                 knobs: Sequence[_Knob]) -> list[FactorOverride]:
    """``overrides`` with each fitted field taken from the override of ``start`` with the same selectors
    (``FactorOverride.selector``), where it has one: a fit started from earlier parameters resumes
    their per-class factors instead of restarting them at the global values."""
    fitted = {(int(k.name[len("overrides["):k.name.index("]")]), k.name.split(".", 1)[1]) for k in knobs}
    by_selector = {o.selector: o for o in start}
    out = []
    for i, o in enumerate(overrides):
        old = by_selector.get(o.selector)
        if old is not None:
            o = o.model_copy(update={f: getattr(old, f) for j, f in fitted if j == i and getattr(old, f) is not None})
        out.append(o)
    return out


def class_overrides(rows: Sequence[Measurement], cat: Catalog, devices: Sequence, by_generation: bool,
                    by_memory_type: bool, *, a2a_start_us: float) -> tuple[list[FactorOverride], list[_Knob]]:
    """The class overrides a fit of ``rows`` can identify, and their knobs, in the order they apply:

    - memory type other than HBM (bandwidth efficiency), when the data hold HBM devices too;
    - each generation (bandwidth efficiency; grouped-GEMM efficiency with MoE rows; the time of one
      all-to-all with expert-parallel rows: the engines' MoE communication path differs by generation,
      e.g. 165-200 us per dispatch/combine on Hopper EP8 rows against the ~30 us of an all-reduce),
      when the data hold more than one;
    - each GEMM dtype other than the 16-bit ones (compute efficiency: FP4 GEMMs reach a smaller
      share of their peak than FP8 ones), when the data hold another dtype too;
    - weight-only precisions (compute and grouped-GEMM efficiency: a W4A16 GEMM dequantizes each
      weight tile to 16 bit inside the kernel), when the data hold other precisions too;
    - each engine other than trtllm (bandwidth and compute efficiency, step and per-sequence host
      time), when the data hold trtllm rows too (``engine_selectors``: an engine measured only on
      vendors TensorRT-LLM was not measured on selects every vendor but TensorRT-LLM's).
    Never per device key. ``a2a_start_us``: where a generation's all-to-all knob starts (``fit_params``:
    the start's ``alltoall_latency_us``, else its ``allreduce_latency_us``).
    """
    def names(pred) -> str:
        return ", ".join(sorted({d.key for d in devices if pred(d)}))

    overrides: list[FactorOverride] = []
    knobs: list[_Knob] = []

    def add(o: FactorOverride, fields: Sequence[tuple[str, float, float]]) -> None:
        # only the device classes are shrunk (class_shrinkage): their global value is a pure parent that no
        # row takes directly, where the global compute efficiency is the 16-bit GEMMs' own value and the
        # engine factors replace whole classes
        device_class = o.generation is not None or o.memory_type is not None
        overrides.append(o)
        knobs.extend(_override_knob(len(overrides) - 1, f, lo, hi, device_class) for f, lo, hi in fields)

    mem_types = sorted({d.memory_type for d in devices})
    gens = sorted({d.generation for d in devices})
    if by_memory_type and len(mem_types) > 1:
        for t in mem_types:
            if t != "hbm":
                add(FactorOverride(memory_type=t, note=f"fitted on {names(lambda d, t=t: d.memory_type == t)}"),
                    [("memory_bandwidth_efficiency", 0.3, 1.0)])
    if by_generation and len(gens) > 1:
        for g in gens:
            in_gen = [m for m in rows if cat.devices[m.device_key].generation == g]  # type: ignore[index]
            ep_rows = any(m.ep > 1 for m in in_gen)
            # a generation with EP rows fits its own all-to-all time, from the start's (or its all-reduce latency)
            add(FactorOverride(generation=g, note=f"fitted on {names(lambda d, g=g: d.generation == g)}",
                               alltoall_latency_us=a2a_start_us if ep_rows else None),
                [("memory_bandwidth_efficiency", 0.3, 1.0)]
                + ([("moe_efficiency", 0.05, 1.0)] if any(cat.models[m.model_key].is_moe for m in in_gen) else [])  # type: ignore[index]
                + ([("alltoall_latency_us", 1.0, 200.0)] if ep_rows else []))
    dtypes = sorted({cat.precisions[m.precision_key].compute_dtype for m in rows})  # type: ignore[index]
    if len(dtypes) > 1:
        for dt in dtypes:
            if dt not in ("bf16", "fp16"):
                on = sorted({m.device_key for m in rows if cat.precisions[m.precision_key].compute_dtype == dt})  # type: ignore[index]
                add(FactorOverride(compute_dtype=dt, note=f"GEMMs in {dt}, fitted on {', '.join(on)}"),
                    [("compute_efficiency", 0.05, 1.0)])
    weight_only = {cat.precisions[m.precision_key].weight_only for m in rows}  # type: ignore[index]
    if weight_only == {True, False}:
        on = sorted({m.device_key for m in rows if cat.precisions[m.precision_key].weight_only})  # type: ignore[index]
        add(FactorOverride(weight_only=True, note=f"weight-only GEMMs (dequantized in the kernel), fitted on {', '.join(on)}"),
            [("compute_efficiency", 0.05, 1.0), ("moe_efficiency", 0.05, 1.0)])
    engines = sorted({engine_of(m, cat) for m in rows})  # a row without an engine runs its device's default
    if len(engines) > 1:
        for e in engines:
            if e != "trtllm":
                on = sorted({m.device_key for m in rows if engine_of(m, cat) == e})
                # started at the defaults' values, so the engine's rows never fall through to (and drag)
                # the GEMM-dtype and generation overrides that the trtllm rows identify
                start = CalibrationParams()
                add(FactorOverride(**engine_selectors(rows, cat, e), note=f"{e}, fitted on {', '.join(on)}",
                                   memory_bandwidth_efficiency=start.memory_bandwidth_efficiency,
                                   compute_efficiency=start.compute_efficiency,
                                   step_overhead_ms=start.step_overhead_ms,
                                   sequence_overhead_us=start.sequence_overhead_us),
                    [("memory_bandwidth_efficiency", 0.3, 1.0), ("compute_efficiency", 0.05, 1.0),
                     ("step_overhead_ms", 0.02, 30.0), ("sequence_overhead_us", 0.5, 200.0)])
    return overrides, knobs


def measured_compute_dtypes(rows: Sequence[Measurement], cat: Catalog) -> list[str]:
    """The GEMM dtypes of ``rows``' precisions (``CalibrationParams.measured_compute_dtypes``): the dtypes whose
    compute efficiency the fit identifies. Any other dtype is held to the achieved FLOPS of the next wider one
    listed (``CalibrationParams.unmeasured_dtype_bound``): without FP4 rows, FP4 GEMMs run no faster than FP8."""
    return sorted(set().union(*measured_compute_dtypes_by_vendor(rows, cat).values()))


def measured_compute_dtypes_by_vendor(rows: Sequence[Measurement], cat: Catalog) -> dict[str, list[str]]:
    """``measured_compute_dtypes`` of each device vendor's rows (``CalibrationParams.measured_compute_dtypes_by_vendor``)."""
    by: dict[str, set[str]] = {}
    for m in rows:
        by.setdefault(cat.devices[m.device_key].vendor, set()).add(cat.precisions[m.precision_key].compute_dtype)  # type: ignore[index]
    return {v: sorted(d) for v, d in sorted(by.items())}


def engine_selectors(rows: Sequence[Measurement], cat: Catalog, engine: str) -> dict[str, Any]:
    """The selectors of the override fitted on ``engine``'s rows (``class_overrides``).

    When no vendor of ``engine``'s rows is measured with TensorRT-LLM as well, the rows cannot tell the
    engine from those vendors' hardware and kernel stacks (the shipped fit: vLLM is measured on MI300X
    alone, whose FP8 GEMMs under ROCm reach ~0.18 of the datasheet peak where H100's reach 0.76 under
    TensorRT-LLM). The override then selects every vendor but the TensorRT-LLM-measured ones
    (``exclude_vendors``), whatever the engine: an NVIDIA device served by vLLM keeps the NVIDIA classes'
    factors, an MI300X served by SGLang (the same ROCm GEMM and attention kernels) gets what was measured
    on MI300X, and a vendor nobody measured is assumed to reach what the measured non-NVIDIA stack
    reaches, not what TensorRT-LLM reaches on NVIDIA. Otherwise the engine alone is the selector."""
    def vendors(e: str) -> set[str]:
        return {cat.devices[m.device_key].vendor for m in rows if engine_of(m, cat) == e}  # type: ignore[index]

    reference = vendors("trtllm")
    if reference and not vendors(engine) & reference:
        return {"exclude_vendors": sorted(reference)}
    return {"engine": engine}


def engine_of(m: Measurement, cat: Catalog) -> str:
    """The engine of a resolved row: the one it states, else its device's default (``default_engine``)."""
    return m.engine or default_engine(cat.devices[m.device_key])  # type: ignore[index]


def online_fit_rows(rows: Sequence[Measurement]) -> list[Measurement]:
    """The online-serving rows a fit can use: online (``optimizer.calibration.report``), a finite
    request rate > 0, and a measured mean TTFT or mean ITL."""
    return [m for m in rows if is_online_rate(m) and (m.tpot_mean_ms or m.ttft_mean_ms) and m.request_rate_qps
            and math.isfinite(m.request_rate_qps) and m.request_rate_qps > 0]


def fit_record(rows: Sequence[Measurement], cat: Catalog, params: CalibrationParams,
               data_file: str, polished: bool = False) -> FitRecord:
    pred = predict_offline_throughput(rows, cat, params).predicted
    measured = np.array([m.throughput_tok_s for m in rows], dtype=float)
    ok = np.isfinite(pred)
    err = abs_pct_errors(pred[ok], measured[ok])

    def summary(mask: np.ndarray) -> dict[str, float]:
        e = abs_pct_errors(pred[mask & ok], measured[mask & ok])
        return {"n": int(e.size), "median_abs_pct_error": round(float(np.median(e)), 2) if e.size else 0.0,
                "p90_abs_pct_error": round(float(np.percentile(e, 90)), 2) if e.size else 0.0}

    groups = np.array([m.source_group for m in rows])
    devs = np.array([m.device_key for m in rows])
    return FitRecord(
        data_file=data_file, rows_used=int(ok.sum()),
        method="coordinate search on log-spaced grids"
               + (", then a trust-region least-squares polish of the continuous knobs (scipy least_squares, "
                  "log space)" if polished else "")
               + (", least squares of log(pred/measured)" if params.fit_loss == "squared" else
                  f", {params.fit_loss} loss of log(pred/measured) at scale {params.fit_loss_scale_log:g} (log), "
                  "sum of w*C^2*rho((e/C)^2)")
               + ", equal weight per source_group",
        median_abs_pct_error=round(float(np.median(err)), 2),
        p90_abs_pct_error=round(float(np.percentile(err, 90)), 2),
        by_source_group={g: summary(groups == g) for g in sorted(set(groups))},
        by_device={d: summary(devs == d) for d in sorted(set(devs))},
        by_configuration=by_configuration(rows, cat, pred),
        fitted_on=date.today().isoformat(),
    )


def by_configuration(rows: Sequence[Measurement], cat: Catalog, predicted: np.ndarray) -> dict[str, ConfigurationRecord]:
    """Per configuration (``configuration_key``) of the offline max-throughput ``rows``: n and the median of
    measured / ``predicted`` output tokens/s (the rows a prediction could not be made for left out)."""
    ratios: dict[str, list[float]] = {}
    for m, p in zip(rows, predicted, strict=True):
        if np.isfinite(p) and p > 0 and m.device_key and m.model_key and m.precision_key:
            key = configuration_key(m.device_key, engine_of(m, cat), m.model_key, m.precision_key, m.tp, m.ep)
            ratios.setdefault(key, []).append(float(m.throughput_tok_s) / float(p))  # type: ignore[arg-type]
    return {k: ConfigurationRecord(n=len(v), median_measured_over_predicted=round(float(np.median(v)), 4))
            for k, v in sorted(ratios.items())}
