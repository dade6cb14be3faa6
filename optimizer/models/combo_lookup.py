"""Per-combo lookups of ``configs.build_configs``: every figure of a combo's device, precision or
calibration factors as an (N,) array, looked up once per distinct key and gathered.

Pure: no I/O. A combo is (device, precision, tp, pp) with an engine and an expert-parallel degree.
"""

from __future__ import annotations

import numpy as np

from catalog.errors import ModelError
from catalog.schema import Device, Model, Precision
from optimizer.models.params import CalibrationParams, DeviceFactors, check_engine


def per_combo(value, n: int, what: str) -> list:
    """``value`` (a scalar, None or a sequence of length n) as a list of n entries."""
    if value is None or isinstance(value, str | int | float | np.integer):
        return [value] * n
    out = list(value)
    if len(out) != n:
        raise ModelError(f"{what}: got {len(out)} values for {n} configurations")
    return out


def engines_and_ep(model: Model, devices: list[Device], default_of: dict[str, str], tp: np.ndarray,
                   pp: np.ndarray, engines, ep) -> tuple[list[str], np.ndarray]:
    """The engine (checked; None = the device's default) and expert-parallel degree of every combo."""
    n = len(devices)
    if engines is None:
        eng = [default_of[d.key] for d in devices]
    else:
        eng = [check_engine(e) if e is not None else default_of[d.key]
               for e, d in zip(per_combo(engines, n, "engines"), devices, strict=True)]
    epa = (np.ones(n, dtype=np.int64) if ep is None else
           np.array([1 if e is None else int(e) for e in per_combo(ep, n, "ep")], dtype=np.int64).reshape(n))
    if n and (tp.min() < 1 or pp.min() < 1 or epa.min() < 1):
        raise ModelError(f"tp, pp and ep must be >= 1 (got tp {tp.min()}, pp {pp.min()}, ep {epa.min()})")
    if n and epa.max() > 1 and not model.is_moe:
        raise ModelError(f"ep {epa.max()}: {model.key} is a dense model; expert parallelism needs an MoE model "
                         "(use --tp for a dense model)")
    return eng, epa


def gatherers(devices: list[Device], precs: list[Precision]):
    """(per_dev, per_prec): ``per_dev(f)`` is f of each combo's device as an (N,) array, evaluated
    once per distinct device and gathered (``per_prec`` likewise per precision)."""
    n = len(devices)
    dev_keys = sorted({d.key for d in devices})
    dev_by_key = {d.key: d for d in devices}
    dev_idx = np.array([dev_keys.index(d.key) for d in devices], dtype=np.int64) if n else np.zeros(0, int)
    prec_keys = sorted({q.key for q in precs})
    prec_by_key = {q.key: q for q in precs}
    prec_idx = np.array([prec_keys.index(q.key) for q in precs], dtype=np.int64) if n else np.zeros(0, int)

    def per_dev(f) -> np.ndarray:
        return np.array([f(dev_by_key[k]) for k in dev_keys], dtype=float)[dev_idx] if n else np.zeros(0)

    def per_prec(f) -> np.ndarray:
        return np.array([f(prec_by_key[k]) for k in prec_keys], dtype=float)[prec_idx] if n else np.zeros(0)

    return per_dev, per_prec


def peaks(devices: list[Device], precs: list[Precision]) -> tuple[np.ndarray, np.ndarray, list[str | None]]:
    """(GEMM peak FLOP/s, attention peak FLOP/s, why unsupported) per combo; NaN peaks where the
    device cannot compute in the precision. One lookup per distinct (device, precision)."""
    pair: dict[tuple[str, str], tuple[float, float, str | None]] = {}
    for d in {d.key: d for d in devices}.values():
        for q in {q.key: q for q in precs}.values():
            peak = q.compute_peak_tflops(d)
            attn = q.attention_peak_tflops(d)
            pair[(d.key, q.key)] = (np.nan if peak is None else peak * 1e12, attn * 1e12 if attn else np.nan,
                                    q.unsupported_reason(d))
    got = [pair[(d.key, q.key)] for d, q in zip(devices, precs, strict=True)]
    return (np.array([g[0] for g in got], dtype=float), np.array([g[1] for g in got], dtype=float),
            [g[2] for g in got])


def unmeasured_dtype_flops(devices: list[Device], precs: list[Precision], eng: list[str],
                           params: CalibrationParams) -> np.ndarray:
    """Per combo, the achieved GEMM FLOP/s an unmeasured compute dtype is held to
    (``CalibrationParams.unmeasured_dtype_bound``: cap × e·peak of the next wider measured dtype) where that
    bound is below the dtype's own e·peak; NaN elsewhere (measured or 16-bit dtype, weight-only precision,
    ``measured_compute_dtypes`` None). One lookup per distinct (device, engine, precision)."""
    n = len(devices)
    if not params.tracks_measured_dtypes or not n:
        return np.full(n, np.nan)
    seen: dict[tuple[str, str, str], float] = {}
    out = np.empty(n)
    for i, (d, q, e) in enumerate(zip(devices, precs, eng, strict=True)):
        k = (d.key, e, q.key)
        if k not in seen:
            bound = params.binding_dtype_bound(d, e, q)
            seen[k] = bound.bound_flops_s if bound is not None else np.nan
        out[i] = seen[k]
    return out


def factors_per_combo(devices: list[Device], precs: list[Precision], eng: list[str], params: CalibrationParams,
                      compute_dtype: str | None = None):
    """``fac(name)``: the :class:`DeviceFactors` field ``name`` of every combo as an (N,) array,
    the factors looked up once per distinct (device, engine, GEMM dtype, weight-only); with
    ``compute_dtype`` those of GEMMs in that dtype (not weight-only) whatever the precision."""
    n = len(devices)
    fac_index: dict[tuple[str, str, str, bool], int] = {}
    fac_list: list[DeviceFactors] = []
    idx = np.empty(n, dtype=np.int64)
    for i, (d, q, e) in enumerate(zip(devices, precs, eng, strict=True)):
        k = (d.key, e, compute_dtype or q.compute_dtype, q.weight_only and compute_dtype is None)
        j = fac_index.get(k)
        if j is None:
            j = fac_index[k] = len(fac_list)
            fac_list.append(params.factors_for(d, e, k[2], k[3]))
        idx[i] = j

    def fac(name: str) -> np.ndarray:
        values = [getattr(f, name) for f in fac_list]
        return np.array([np.nan if v is None else v for v in values], dtype=float)[idx] if n else np.zeros(0)

    return fac
