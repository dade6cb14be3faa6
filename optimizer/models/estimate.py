"""One configuration as a JSON-ready dict: what ``gpuplan estimate`` prints.

``estimate_config`` summarises the performance model (memory fit, step times, the bound,
offline throughput); ``estimate_serving`` adds the serving model (p99s at a rate, capacity
at an SLO). Both are pure.
"""

from __future__ import annotations

from collections.abc import Mapping

from catalog.schema import Device, Model, Precision
from optimizer.models.configs import Configs, build_configs
from optimizer.models.constants import DEFAULT_PREFILL_CHUNK_TOKENS
from optimizer.models.fidelity import (
    fidelity_of,
    structure_rating,
    with_measured_configuration,
)
from optimizer.models.params import CalibrationParams, ConfigurationRecord, configuration_key
from optimizer.models.perf import (
    bound_kind,
    decode_step_s,
    finite_round,
    max_sequences,
    offline_throughput_tokens_s,
    prefill_s,
    tpot_bound_ms,
)
from optimizer.models.serving import capacity_at_slo, check_rate, check_slo_floors, serve_at_rate
from optimizer.results.provenance import Fidelity
from workloads.spec import SLO, LengthDist


def estimate_config(
    model: Model,
    device: Device,
    precision: Precision,
    tp: int,
    pp: int,
    input_tokens: int,
    output_tokens: int,
    params: CalibrationParams,
    *,
    devices: Mapping[str, Device],
    batch: int | None = None,
    max_throughput: bool = False,
    engine: str | None = None,
    ep: int = 1,
    max_batch: int | None = None,
) -> dict:
    """Everything the model says about one configuration, as a JSON-ready dict.

    ``devices`` is the catalog's: the fidelity class sees the other measured devices of this one's
    generation when the parameters carry no leave-out bands (as the plan's fidelity does).

    Always: model, device, precision, engine, tp, pp, ep, fits, reason, weights_gb_per_gpu (1e9 bytes),
    kv_cache_bytes_per_token, max_concurrency (sequences of input+output tokens that fit),
    tpot_bound_ms. With ``batch``: tpot_ms (decode step at mean context input + output/2),
    ttft_ms (prefill of one prompt), output_tokens_per_s (= batch / tpot), bound. With
    ``max_throughput``: batch and output_tokens_per_s of an offline run (memory-limited batch;
    it reserves input + kv_reserved_output_fraction·output tokens per sequence, so it may exceed
    max_concurrency, which counts full input + output); ``max_batch`` caps that batch (the
    engine's ``max_num_seqs``/``max_batch_size``; None = the engine default of the params).
    Whenever output_tokens_per_s is given: output_tokens_per_s_low/_high, its 80 % band
    (× the band factors of the configuration's fidelity class), and fidelity
    ``{class, basis, band_low_factor, band_high_factor}`` (``optimizer.models.fidelity``); the basis
    also says when the GEMMs' dtype is unmeasured and held to the next wider one's FLOPS
    (``CalibrationParams.unmeasured_dtype_bound``).
    ``measured_configuration`` ``{key, n, median_measured_over_predicted}`` when the calibration was fitted on
    at least MIN_CONFIGURATION_ROWS offline rows of this device/engine/model/precision/tp/ep (in-sample: how far
    the model is off there; where it lies outside the class band the band is widened to contain it and the
    basis says so: ``optimizer.models.fidelity.with_measured_configuration``).
    With pp > 1: ``uncalibrated``, naming the pipeline terms no measurement has fitted.
    Times (tpot_ms, ttft_ms, output_tokens_per_s, bound) are None when the configuration cannot run: the device
    has no peak for the precision, the weights do not fit, or not one sequence's KV does.
    """
    c = build_configs(model, [(device, precision, tp, pp)], params, engines=engine, ep=ep, max_batch=max_batch)
    seq_tokens = input_tokens + output_tokens
    max_conc = int(max_sequences(c, seq_tokens)[0])
    reason = c.reason[0]
    if reason is None and max_conc < 1:
        reason = (f"KV cache holds {c.kv_capacity_tokens[0]:,.0f} tokens, less than one sequence of "
                  f"{seq_tokens:,} tokens; shorten the requests or raise tp/pp")
    if reason is None and batch is not None and batch > max_conc:
        reason = (f"batch {batch} needs KV for {batch * seq_tokens:,} tokens; only {max_conc} sequences "
                  f"of {seq_tokens:,} tokens fit; lower --batch or raise tp/pp")
    fits = reason is None
    out: dict = {
        "model": model.key, "device": device.key, "precision": precision.key, "engine": c.engines[0],
        "tp": int(tp), "pp": int(pp), "ep": int(ep), "fits": fits, "reason": reason,
        "weights_gb_per_gpu": round(float(c.weight_bytes_per_gpu[0]) / 1e9, 3),
        "kv_cache_bytes_per_token": int(round(float(c.kv_bytes_per_token[0]))),
        "max_concurrency": max_conc,
        "tpot_bound_ms": finite_round(tpot_bound_ms(c)[0]),
    }
    # the configuration runs at all: the device computes in the precision, the weights and one sequence's KV fit
    # (a batch beyond max_concurrency is a reason too, but the configuration runs at a smaller one)
    runs = bool(c.runnable[0]) and max_conc >= 1
    if batch is not None:
        ctx = input_tokens + output_tokens / 2.0
        step = float(decode_step_s(c, batch, ctx)[0]) if runs else float("nan")
        out["tpot_ms"] = finite_round(step * 1e3)
        out["ttft_ms"] = finite_round(float(prefill_s(c, input_tokens)[0]) * 1e3) if runs else None
        out["output_tokens_per_s"] = finite_round(batch / step, 2) if runs else None
        out["bound"] = str(bound_kind(c, batch, ctx)[0]) if runs else None
    if max_throughput:
        b, tput = offline_throughput_tokens_s(c, input_tokens, output_tokens)
        ok = runs and b[0] >= 1
        out["batch"] = int(b[0]) if ok else 0
        out["output_tokens_per_s"] = finite_round(tput[0], 2) if ok else None
    if pp > 1:
        out["uncalibrated"] = ("pipeline-parallel terms (stage hop, per-micro-batch host time) are defaults "
                               "(CalibrationParams.pp_hop_latency_us, pp_microbatch_overhead_us), not fitted: "
                               "no pipeline-parallel measurements")
    if "output_tokens_per_s" in out:
        fid, key, rec = configuration_fidelity(c, params, devices)
        value = out["output_tokens_per_s"]
        out["output_tokens_per_s_low"] = None if value is None else round(value * fid.low_factor, 2)
        out["output_tokens_per_s_high"] = None if value is None else round(value * fid.high_factor, 2)
        basis = fid.basis
        bound = params.binding_dtype_bound(device, c.engines[0], precision)
        if bound is not None:  # the prediction rests on the bound, not on a measured dtype
            basis += "; " + bound.note(params.unmeasured_dtype_speedup_cap)
        if rec is not None:
            out["measured_configuration"] = {"key": key, "n": rec.n,
                                             "median_measured_over_predicted": rec.median_measured_over_predicted}
        out["fidelity"] = {"class": fid.class_, "basis": basis, "band_low_factor": round(fid.low_factor, 4),
                           "band_high_factor": round(fid.high_factor, 4)}
    return out


def configuration_fidelity(c: Configs, params: CalibrationParams, devices: Mapping[str, Device]
                           ) -> tuple[Fidelity, str, ConfigurationRecord | None]:
    """(fidelity, configuration key, its fit record) of the first configuration of ``c``: the class band of
    its device, engine and ep, lowered where its model, precision or pipeline was never measured on its hardware
    (``structure_rating``), widened to contain its own rows' median measured / predicted where the calibration
    has them (``with_measured_configuration``)."""
    key = configuration_key(c.devices[0].key, c.engines[0], c.model.key, c.precisions[0].key, int(c.tp[0]),
                            int(c.ep[0]))
    rec = params.measured_configuration(key)
    fid = fidelity_of(c.devices[0], params, devices, engine=c.engines[0], ep=int(c.ep[0]))
    fid = structure_rating(fid, c.devices[0], c.engines[0], params, moe=c.model.is_moe,
                           weight_only=c.precisions[0].weight_only, pp=int(c.pp[0]))
    return with_measured_configuration(fid, rec), key, rec


def estimate_serving(
    c: Configs,
    prompt: LengthDist,
    output: LengthDist,
    qps: float | None = None,
    slo: SLO | None = None,
    prefill_chunk_tokens: int = DEFAULT_PREFILL_CHUNK_TOKENS,
    params: CalibrationParams | None = None,
    *,
    devices: Mapping[str, Device],
) -> dict:
    """JSON-ready serving figures of configuration 0 (what `gpuplan estimate --qps/--*-p99-ms` adds).

    With ``qps`` (req/s, > 0): ``ttft_p50_ms, ttft_p99_ms, tpot_p50_ms, tpot_p99_ms,
    e2e_p99_ms, utilization, saturated, kv_fits, batch_fits`` from ``serve_at_rate`` (``kv_fits`` False:
    the p99.9 KV occupancy of an attention rank exceeds its cache; ``batch_fits`` False: the p99.9 running
    batch of a rank exceeds the scheduler cap; either way requests would wait for a slot or be preempted,
    which the percentiles do not include — the capacity at an SLO counts both). With a non-empty ``slo``:
    ``max_qps_at_slo`` (req/s), ``output_tokens_per_s_at_slo`` (= max_qps·E[O]) and
    ``limited_by`` from ``capacity_at_slo`` (plus ``why`` when unservable). An SLO below
    the physical floor (``slo_floor_ms``) raises ModelError. A configuration that cannot
    run gets the same keys with null values (``limited_by`` 'unservable'). With ``params``:
    ``capacity_qps_low``/``capacity_qps_high``, the 80 % band of max_qps_at_slo (× the band
    factors of the fidelity class: capacity scales with the replica's speed).
    """
    out: dict = {}
    runs = bool(c.runnable[0])
    if qps is not None:
        lam = float(check_rate(qps))
        keys = ("ttft_p50_ms", "ttft_p99_ms", "tpot_p50_ms", "tpot_p99_ms", "e2e_p99_ms", "utilization", "saturated",
                "kv_fits", "batch_fits")
        if runs:
            r = serve_at_rate(c, lam, prompt, output, prefill_chunk_tokens=prefill_chunk_tokens)
            for k in keys[:5]:
                out[k] = finite_round(getattr(r, k)[0], 3)
            out["utilization"] = finite_round(r.utilization[0], 4)
            out["saturated"] = bool(r.saturated[0])
            out["kv_fits"] = bool(r.kv_rank_p999_tokens[0] <= r.kv_rank_capacity_tokens[0])
            out["batch_fits"] = bool(r.batch_rank_p999[0] <= r.batch_rank_cap[0])
        else:
            out.update(dict.fromkeys(keys))
    if slo is not None and not slo.is_empty:
        if runs:
            check_slo_floors(c, slo, prompt, output)
            cap = capacity_at_slo(c, prompt, output, slo, prefill_chunk_tokens=prefill_chunk_tokens)
            out["max_qps_at_slo"] = finite_round(cap.max_qps[0], 4)
            out["output_tokens_per_s_at_slo"] = finite_round(cap.output_tokens_per_s[0], 2)
            out["limited_by"] = cap.limited_by[0]
            if params is not None and out["max_qps_at_slo"] is not None:
                fid = configuration_fidelity(c, params, devices)[0]
                out["capacity_qps_low"] = round(out["max_qps_at_slo"] * fid.low_factor, 4)
                out["capacity_qps_high"] = round(out["max_qps_at_slo"] * fid.high_factor, 4)
            if cap.why[0]:
                out["why"] = cap.why[0]
        else:
            out.update({"max_qps_at_slo": None, "output_tokens_per_s_at_slo": None, "limited_by": "unservable"})
    return out
