"""Leave-out predictions and the error bands they give, by fidelity class.

A band must be honest about configurations the fit never saw, so it comes from
predictions of held-out rows, never from in-sample residuals:

- ``leave_out(rows, cat, start, by)`` refits the factors without one group at a time (by
  ``source_group``, ``device`` or ``generation``; the online rows outside the group at the full fit's
  weight, as the shipped fit) and predicts the held-out rows (every
  offline metric: max-throughput output tokens/s and one-batch e2e latency);
- ``error_bands(...)`` turns them into an 80 % interval of true/predicted capacity per fidelity
  class (``optimizer.models.fidelity``), each from the held-out predictions that stood in
  that class's situation: class a from leave-one-source-group-out predictions whose device and
  engine remained in the fit; class b from leave-one-device-out predictions whose generation
  remained (another device of it was measured); class c from leave-one-generation-out
  predictions (a device alone in its generation, e.g. the only CDNA 3 or Ampere part, held out
  is a datasheet-only device to the refit: the same refit as its generation's, counted once);
  low/high = the 10th/90th percentile of the capacity ratio (``HeldOut.ratio``: measured/predicted
  of a throughput, predicted/measured of a latency), each held-out group weighted equally
  (``group_weights``: a band speaks for the next unmeasured device, generation or source, not for
  the one with the most rows);
- ``coverage(rows, cat)`` records which device/engine pairs and generations a fit measured.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from catalog.load import Catalog
from optimizer.calibration.fit import engine_of, fit_params
from optimizer.calibration.measurements import Measurement
from optimizer.calibration.predict import is_online, latency_predictor, offline_predictor
from optimizer.models.constants import SHIPPED_ONLINE_WEIGHT
from optimizer.models.fidelity import generation_engine
from optimizer.models.params import CalibrationParams, Coverage, ErrorBand

LEAVE_OUT_SWEEPS = 3  # coordinate-search sweeps of each leave-out refit before its polish (the full fit uses 6)
CLASS_OF_GROUPING = {"source_group": "a", "device": "b", "generation": "c"}
BAND_LOW_Q, BAND_HIGH_Q = 10.0, 90.0
TIME_METRICS = frozenset({"e2e_latency_s"})  # held-out metrics where higher means slower (the others are rates)


@dataclass(frozen=True)
class HeldOut:
    """One prediction of a held-out row by a fit that did not see its group."""

    group: str  # the held-out group's key (a source group, device or generation)
    device: str
    engine: str
    generation: str
    source_group: str
    metric: str
    measured: float
    predicted: float
    fit_had_device_engine: bool  # the device/engine pair was still measured in the fit
    fit_had_generation: bool = False  # another device of its generation, served by its engine, was still in the fit

    @property
    def fidelity_class(self) -> str:
        """The class the refit would give this row: a (device/engine measured), b (generation), c."""
        return "a" if self.fit_had_device_engine else "b" if self.fit_had_generation else "c"

    @property
    def ratio(self) -> float:
        """True / predicted capacity: measured / predicted of a throughput, predicted / measured of a
        time (``TIME_METRICS``: one batch that takes 1.2× the predicted time serves 1/1.2 of the
        predicted tokens/s), so that every row says the same thing of the capacity the band scales."""
        if self.metric in TIME_METRICS:
            return self.predicted / self.measured
        return self.measured / self.predicted

    @property
    def abs_pct_error(self) -> float:
        return abs(self.predicted / self.measured - 1.0) * 100.0


def group_key(m: Measurement, cat: Catalog, by: str) -> str:
    """The group of ``m`` when leaving out by ``source_group``, ``device`` or ``generation``."""
    if by == "source_group":
        return m.source_group
    if by == "device":
        return m.device_key or ""
    if by == "generation":
        return cat.devices[m.device_key].generation if m.device_key else ""  # type: ignore[index]
    raise ValueError(f"unknown leave-out grouping {by!r}")


def coverage(rows: Sequence[Measurement], cat: Catalog) -> Coverage:
    """What ``rows`` measured: device/engine pairs (all, and with ep > 1), generations, generation/engine pairs
    (all, with a MoE model, with a weight-only precision), vendors (resolved rows only)."""
    ok = [m for m in rows if m.device_key and not m.unresolved]
    return Coverage(
        device_engines=sorted({f"{m.device_key}/{engine_of(m, cat)}" for m in ok}),
        generations=sorted({cat.devices[m.device_key].generation for m in ok}),  # type: ignore[index]
        vendors=sorted({cat.devices[m.device_key].vendor for m in ok}),  # type: ignore[index]
        expert_parallel_device_engines=sorted({f"{m.device_key}/{engine_of(m, cat)}" for m in ok if m.ep > 1}),
        generation_engines=sorted({_generation_engine(m, cat) for m in ok}),
        moe_generation_engines=sorted({_generation_engine(m, cat) for m in ok
                                       if cat.models[m.model_key].is_moe}),  # type: ignore[index]
        weight_only_generation_engines=sorted({_generation_engine(m, cat) for m in ok
                                               if cat.precisions[m.precision_key].weight_only}),  # type: ignore[index]
    )


def _generation_engine(m: Measurement, cat: Catalog) -> str:
    """The 'generation/engine' key of a resolved row (``fidelity.generation_engine``)."""
    return generation_engine(cat.devices[m.device_key], engine_of(m, cat))  # type: ignore[index]


def offline_predictions(rows: Sequence[Measurement], cat: Catalog, params: CalibrationParams):
    """Row index → the offline predictions of ``rows`` (max-throughput and one-batch latency)."""
    found = {}
    for predictor in (offline_predictor, latency_predictor):
        preds, _ = predictor(rows, cat, params)
        for i, ps in preds.items():
            found.setdefault(i, []).extend(ps)
    return found


def held_and_train(rows: Sequence[Measurement], cat: Catalog, by: str, key: str,
                   offline: Sequence[Measurement] | None = None) -> tuple[list[Measurement], list[Measurement]]:
    """(held, train) of leaving out group ``key`` of ``by``: its resolved offline rows (of ``offline``
    when given, those rows already picked out), and every row outside it (unresolved ones included)."""
    if offline is None:
        offline = [m for m in rows if not m.unresolved and m.device_key and not is_online(m)]
    held = [m for m in offline if group_key(m, cat, by) == key]
    train = [m for m in rows if m.unresolved or not m.device_key or group_key(m, cat, by) != key]
    return held, train


def leave_out(rows: Sequence[Measurement], cat: Catalog, start: CalibrationParams | None, by: str,
              sweeps: int = LEAVE_OUT_SWEEPS, groups: Sequence[str] | None = None,
              optimizer: str = "polish", online_weight: float = SHIPPED_ONLINE_WEIGHT) -> list[HeldOut]:
    """Refit without each group of ``by`` (or only ``groups``) and predict its offline rows; each refit is
    ``fit_params`` with ``sweeps``, ``optimizer`` (default: the coordinate search, then the polish) and the
    full fit's ``online_weight`` (the online rows outside the group stay in: without them nothing at small
    batch separates the step overhead from the all-reduce latency, and a refit without MI300X's latency rows
    put the pair at 0.02 ms and 63 µs)."""
    offline = [m for m in rows if not m.unresolved and m.device_key and not is_online(m)]
    keys = sorted({group_key(m, cat, by) for m in offline}) if groups is None else list(groups)
    out: list[HeldOut] = []
    for key in keys:
        held, train = held_and_train(rows, cat, by, key, offline)
        if not held or not any(not is_online(m) for m in train):
            continue
        params = fit_params(train, cat, start=start, sweeps=sweeps, optimizer=optimizer, online_weight=online_weight)
        seen = {f"{m.device_key}/{engine_of(m, cat)}" for m in train if m.device_key}
        gens = {_generation_engine(m, cat) for m in train if m.device_key}
        for i, ps in offline_predictions(held, cat, params).items():
            m = held[i]
            dev = cat.devices[m.device_key]  # type: ignore[index]
            eng = engine_of(m, cat)
            out.extend(HeldOut(key, dev.key, eng, dev.generation, m.source_group, p.metric, p.measured,
                               p.predicted, f"{dev.key}/{eng}" in seen, generation_engine(dev, eng) in gens)
                       for p in ps if p.predicted > 0)
    return out


def group_weights(held: Sequence[HeldOut]) -> np.ndarray:
    """1 / (rows of its held-out group) per prediction: every group weighs 1 in a band."""
    counts = Counter(h.group for h in held)
    return np.array([1.0 / counts[h.group] for h in held])


def weighted_percentile(values: np.ndarray, weights: np.ndarray, q: float) -> float:
    """The ``q``-th percentile of ``values`` weighted by ``weights``: linear between Hazen plotting
    positions p_i = (C_i − w_i/2) / W (C_i the cumulative weight of the sorted values, W the total),
    the first or last value outside [p_1, p_n]; with equal weights it is ``np.percentile(values, q,
    method="hazen")``."""
    order = np.argsort(values, kind="stable")
    v, w = values[order], weights[order]
    positions = (np.cumsum(w) - w / 2.0) / w.sum()
    return float(np.interp(q / 100.0, positions, v))


def band_of(held: Sequence[HeldOut], basis: str, weights: np.ndarray | None = None) -> ErrorBand | None:
    """The 80 % band of the capacity ratio over ``held`` (None when empty): its weighted 10th and 90th
    percentiles (``weights`` default: ``group_weights``), widened to contain 1."""
    if not held:
        return None
    r = np.array([h.ratio for h in held])
    w = group_weights(held) if weights is None else weights
    return ErrorBand(low_factor=min(weighted_percentile(r, w, BAND_LOW_Q), 1.0),
                     high_factor=max(weighted_percentile(r, w, BAND_HIGH_Q), 1.0), n=len(held), basis=basis)


def error_bands(by_source_group: Sequence[HeldOut], by_device: Sequence[HeldOut],
                by_generation: Sequence[HeldOut]) -> dict[str, ErrorBand]:
    """The band of each fidelity class from the three leave-out sets (module docstring), each held-out
    group weighing 1. A device alone in its generation held out by device is the same refit as its
    generation held out, so class c takes such predictions from ``by_device`` only for generations
    that ``by_generation`` lacks (no prediction counts twice)."""
    held_generations = {h.generation for h in by_generation}
    device_c = [h for h in by_device if h.fidelity_class == "c" and h.generation not in held_generations]
    sets = {
        "a": ([h for h in by_source_group if h.fidelity_class == "a"], None,
              "leave-one-source-group-out predictions (device and engine still measured)"),
        "b": ([h for h in by_device if h.fidelity_class == "b"], None,
              "leave-one-device-out predictions whose generation stayed measured"),
        "c": (list(by_generation) + device_c,
              np.concatenate([group_weights(by_generation), group_weights(device_c)]),
              "leave-one-generation-out predictions (a device alone in its generation, held out, is one)"),
    }
    out = {}
    for cls, (held, weights, basis) in sets.items():
        band = band_of(held, f"{basis}; each held-out group weighted equally", weights)
        if band is not None:
            out[cls] = band
    return out


def leave_out_summary(held: Sequence[HeldOut], band: ErrorBand | Mapping[str, ErrorBand] | None
                      ) -> dict[str, dict[str, float | int]]:
    """Per held-out group: n, median and p90 |error| %, and the % of its predictions inside ``band``
    (a mapping of bands by class: the band of each prediction's ``fidelity_class``)."""
    out: dict[str, dict[str, float | int]] = {}
    for g in sorted({h.group for h in held}):
        hs = [h for h in held if h.group == g]
        err = np.array([h.abs_pct_error for h in hs])
        row: dict[str, float | int] = {"n": len(hs), "median_abs_pct_error": round(float(np.median(err)), 2),
                                       "p90_abs_pct_error": round(float(np.percentile(err, 90)), 2)}
        if band is not None:
            row["in_band_pct"] = round(float(np.mean([inside(h, band_for(h, band)) for h in hs])) * 100, 1)
        out[g] = row
    return out


def inside(h: HeldOut, band: ErrorBand) -> bool:
    """The measured value of ``h`` lies within the band around its prediction."""
    return band.low_factor <= h.ratio <= band.high_factor


def band_for(h: HeldOut, bands: ErrorBand | Mapping[str, ErrorBand]) -> ErrorBand:
    """``bands`` itself, or from a mapping the band of ``h``'s class (the nearest wider one if absent)."""
    if isinstance(bands, ErrorBand):
        return bands
    for cls in {"a": "abc", "b": "bc", "c": "c"}[h.fidelity_class]:
        if cls in bands:
            return bands[cls]
    return next(iter(bands.values()))
