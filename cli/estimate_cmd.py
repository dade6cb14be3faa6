"""`gpuplan estimate`: what the performance model says about one configuration."""

from __future__ import annotations

from typing import Annotated

import typer

from catalog.errors import ModelError
from cli.common import (
    CatalogOpt,
    JsonOpt,
    ModelConfigOpt,
    ParamsOpt,
    load,
    load_calibration,
    print_json,
    stdout,
    table,
)
from cli.config_check import (
    catalog_device,
    catalog_model,
    catalog_precision,
    check_batch,
    check_context,
    check_qps,
    check_sharding,
)

# Row labels of the readable table, in order; keys absent from the result are skipped.
_LABELS = {
    "fits": "fits", "weights_gb_per_gpu": "weights per GPU (GB)",
    "kv_cache_bytes_per_token": "KV cache per token (bytes)", "max_concurrency": "max concurrent sequences",
    "tpot_bound_ms": "TPOT bandwidth bound, batch 1 (ms)", "batch": "batch", "tpot_ms": "TPOT (ms)",
    "ttft_ms": "TTFT, one prompt (ms)", "output_tokens_per_s": "output tokens/s", "bound": "bound",
    "ttft_p50_ms": "TTFT p50 at --qps (ms)", "ttft_p99_ms": "TTFT p99 at --qps (ms)",
    "tpot_p50_ms": "TPOT p50 at --qps (ms)", "tpot_p99_ms": "TPOT p99 at --qps (ms)",
    "e2e_p99_ms": "E2E p99 at --qps (ms)", "utilization": "utilization", "saturated": "saturated",
    "kv_fits": "KV cache holds the p99.9 occupancy", "batch_fits": "scheduler cap holds the p99.9 batch",
    "max_qps_at_slo": "max req/s at the SLO", "output_tokens_per_s_at_slo": "output tokens/s at the SLO",
    "limited_by": "limited by", "why": "why",
    "output_tokens_per_s_low": "output tokens/s, 80 % band low", "output_tokens_per_s_high": "output tokens/s, 80 % band high",
    "capacity_qps_low": "max req/s at the SLO, band low", "capacity_qps_high": "max req/s at the SLO, band high",
}

ModelOpt = Annotated[str, typer.Option("--model", help="Model key, alias or HF id (see `gpuplan catalog models`).")]
DeviceOpt = Annotated[str | None, typer.Option("--device", help="Device key (see `gpuplan catalog devices`).")]
PrecisionOpt = Annotated[str, typer.Option("--precision", help="bf16, fp16, fp8, int8, int4, fp4, nvfp4 or mxfp4 (see gpuplan catalog precisions).")]
TpOpt = Annotated[int, typer.Option("--tp", min=1, help="Tensor-parallel degree.")]
PpOpt = Annotated[int, typer.Option("--pp", min=1, help="Pipeline-parallel degree.")]
InputOpt = Annotated[int, typer.Option("--input-tokens", min=1, help="Prompt length (tokens).")]
OutputOpt = Annotated[int, typer.Option("--output-tokens", min=1, help="Output length (tokens).")]
MsOpt = Annotated[float | None, typer.Option(help="p99 SLO (ms): report the max request rate that meets it.")]
EngineOpt = Annotated[str | None, typer.Option(
    "--engine", help="Serving engine: trtllm, vllm or sglang, any case (default: trtllm on NVIDIA, vllm elsewhere).",
    callback=lambda value: None if value is None else value.strip().lower())]  # TRTLLM is trtllm, as in a plan
EpOpt = Annotated[int, typer.Option(
    "--ep", min=1, help="Expert parallelism (MoE): attention data-parallel over N GPUs, experts split N ways, "
    "all-to-all over the link; the replica has tp·pp·ep GPUs.")]
MaxBatchOpt = Annotated[int | None, typer.Option(
    "--max-batch", min=1, help="Scheduler cap on running sequences (vLLM max_num_seqs, TensorRT-LLM "
    "max_batch_size); with --ep N, of each attention rank (the replica runs N times it); default: the engine's "
    "calibrated cap.")]


def _window_share_warned() -> float:
    from optimizer.models.lengths import WINDOW_SHARE_WARNED  # loaded already: the estimate ran

    return WINDOW_SHARE_WARNED


def render(result: dict, json_out: bool) -> None:
    """Print an estimate dict as JSON or as a two-column table."""
    if json_out:
        print_json(result)
        return
    ep = result.get("ep", 1)
    title = (f"{result['model']} on {result['tp'] * result['pp'] * ep}× {result['device']} "
             f"({result['precision']}, {result.get('engine', '')}, tp{result['tp']} pp{result['pp']}"
             + (f" ep{ep}" if ep > 1 else "") + ")")
    rows = []
    for key, label in _LABELS.items():
        if key in result:
            value = result[key]
            rows.append([label, f"{value:,}" if isinstance(value, int | float) and not isinstance(value, bool)
                         else ("—" if value is None else str(value))])
    stdout.print(table(title, ["quantity", "value"], rows, right={"value"}))
    if result.get("fidelity"):
        f = result["fidelity"]
        band = f" (80 % band ×{f['band_low_factor']:.2f}–{f['band_high_factor']:.2f} of predicted)"
        stdout.print(f"fidelity class {f['class']}{band} for this device, engine and ep: {f['basis']}", markup=False)
    if result.get("uncalibrated"):
        stdout.print(f"uncalibrated: {result['uncalibrated']}", markup=False)
    if result.get("reason"):
        stdout.print(f"does not fit / cannot run: {result['reason']}", markup=False)
    full = [what for key, what in (("kv_fits", "the KV cache"), ("batch_fits", "the scheduler cap (--max-batch)"))
            if result.get(key) is False and not result.get("saturated")]
    if full:
        stdout.print(f"slots: at --qps {' and '.join(full)} is full more than 0.1 % of the time, so requests wait for "
                     "a slot or are preempted, which the p99s above leave out (the capacity at an SLO counts it: give "
                     "--ttft-p99-ms; `gpuplan simulate` shows the wait)", markup=False)
    if result.get("tpot_p99_optimistic_up_to_pct"):
        # loaded already: the estimate ran
        from optimizer.planning.known_limits import LONG_PROMPT_TOKENS, LONG_TAIL_PROMPT_RATIO
        stdout.print("long prompts: the TPOT p99 is known optimistic under prompts of p99 ≥ "
                     f"{LONG_TAIL_PROMPT_RATIO:g}× their mean or ≥ {LONG_PROMPT_TOKENS:,} tokens, by up to "
                     f"{result['tpot_p99_optimistic_up_to_pct']:.0f} % near saturation "
                     "(docs/model-accuracy.md, tpottail); check with `gpuplan simulate` over several seeds",
                     markup=False)
    share_cut = result.get("context_window_share_cut", 0.0)
    if share_cut > 0.0 and share_cut > _window_share_warned():
        stdout.print(f"context window: {result['context_window_share_cut']:.4%} of the requests (prompt + output "
                     "beyond the model's context) would be rejected by the engine; the serving figures are of the "
                     "others (lengths cut to the window)", markup=False)


def estimate(
    model: ModelOpt,
    precision: PrecisionOpt,
    input_tokens: InputOpt,
    output_tokens: OutputOpt,
    device: DeviceOpt = None,
    tp: TpOpt = 1,
    pp: PpOpt = 1,
    batch: Annotated[int | None, typer.Option("--batch", min=1, help="Running sequences per decode step.")] = None,
    max_throughput: Annotated[bool, typer.Option(
        "--max-throughput", help="Offline throughput: all requests at once, batch limited by memory.")] = False,
    qps: Annotated[float | None, typer.Option(
        "--qps", help="Request rate (req/s, Poisson): p50/p99 TTFT and TPOT, p99 E2E under load.")] = None,
    ttft_p99_ms: MsOpt = None,
    tpot_p99_ms: MsOpt = None,
    e2e_p99_ms: MsOpt = None,
    input_p99: Annotated[float | None, typer.Option(
        "--input-p99", help="p99 prompt length: --input-tokens becomes the mean of a lognormal.")] = None,
    output_p99: Annotated[float | None, typer.Option(
        "--output-p99", help="p99 output length: --output-tokens becomes the mean of a lognormal.")] = None,
    engine: EngineOpt = None,
    ep: EpOpt = 1,
    max_batch: MaxBatchOpt = None,
    prefill_device: Annotated[str | None, typer.Option(
        "--prefill-device", help="Disaggregated pair: the prefill pool's device (with --decode-device).")] = None,
    decode_device: Annotated[str | None, typer.Option(
        "--decode-device", help="Disaggregated pair: the decode pool's device (with --prefill-device).")] = None,
    prefill_tp: Annotated[int | None, typer.Option("--prefill-tp", min=1, help="Prefill pool tp (default --tp).")] = None,
    decode_tp: Annotated[int | None, typer.Option("--decode-tp", min=1, help="Decode pool tp (default --tp).")] = None,
    params: ParamsOpt = None,
    catalog: CatalogOpt = None,
    model_config: ModelConfigOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Memory fit, latency and throughput of one (model, device, precision, tp, pp, ep, engine) configuration,
    or of one disaggregated prefill/decode pair (--prefill-device and --decode-device)."""
    # the models (numpy, pydantic) load when the command runs, not at `gpuplan --help`
    from optimizer.models.configs import build_configs
    from optimizer.models.estimate import estimate_config, estimate_serving
    from optimizer.models.lengths import fit_window, length_from_flags
    from workloads.spec import SLO

    check_qps(qps)
    for flag, value in (("--ttft-p99-ms", ttft_p99_ms), ("--tpot-p99-ms", tpot_p99_ms), ("--e2e-p99-ms", e2e_p99_ms)):
        if value is not None and not value > 0:  # before the pair's SLO is built (a pydantic traceback there)
            raise ModelError(f"{flag} must be a positive number of milliseconds (got {value:g})")
    if (prefill_device is None) != (decode_device is None):
        raise ModelError("give both --prefill-device and --decode-device for a disaggregated pair")
    if prefill_device is not None:
        single = [flag for flag, given in (("--device", device is not None), ("--ep", ep > 1),
                                           ("--max-batch", max_batch is not None), ("--batch", batch is not None),
                                           ("--max-throughput", max_throughput)) if given]
        if single:
            them = ("it", "applies") if len(single) == 1 else ("them", "apply")
            raise ModelError(f"{' and '.join(single)} {them[1]} to one configuration (--device), not to a "
                             f"disaggregated pair: drop {them[0]}, or estimate each pool with --device")
        if tp != 1 and prefill_tp is not None and decode_tp is not None:  # --tp is each pool's default only
            raise ModelError(f"--tp {tp} applies to no pool: --prefill-tp and --decode-tp set both; drop --tp (or "
                             "the pool tp that should take it)")
        _estimate_pair(model, precision, input_tokens, output_tokens, prefill_device, decode_device,
                       prefill_tp or tp, decode_tp or tp, pp, qps, SLO(ttft_p99_ms=ttft_p99_ms, tpot_p99_ms=tpot_p99_ms,
                                                                        e2e_p99_ms=e2e_p99_ms),
                       input_p99, output_p99, params, catalog, model_config, json_out, engine)
        return
    if device is None:
        raise ModelError("give --device (one configuration) or --prefill-device and --decode-device (a pair)")
    if pair_only := [flag for flag, given in (("--prefill-tp", prefill_tp), ("--decode-tp", decode_tp)) if given]:
        raise ModelError(f"{' and '.join(pair_only)} {'applies' if len(pair_only) == 1 else 'apply'} to a "
                         "disaggregated pair (--prefill-device and --decode-device), which this is not: "
                         "use --tp for one configuration")
    if batch is not None and max_throughput:
        raise ModelError("--batch and --max-throughput exclude each other; give one")
    cat = load(catalog, model_config)
    m, d, q = catalog_model(cat, model), catalog_device(cat, device), catalog_precision(cat, precision)
    p = load_calibration(params, cat)
    check_sharding(m, d, tp, pp, ep, engine)
    check_context(m, input_tokens, output_tokens, input_p99, output_p99)
    check_batch(batch, max_batch, ep)
    prompt = length_from_flags(input_tokens, input_p99, "input")
    output = length_from_flags(output_tokens, output_p99, "output")
    result = estimate_config(m, d, q, tp, pp, input_tokens, output_tokens, p, batch=batch,
                             max_throughput=max_throughput, engine=engine, ep=ep, max_batch=max_batch, devices=cat.devices)
    slo = SLO(ttft_p99_ms=ttft_p99_ms, tpot_p99_ms=tpot_p99_ms, e2e_p99_ms=e2e_p99_ms)
    if qps is not None or not slo.is_empty:
        c = build_configs(m, [(d, q, tp, pp)], p, engines=engine, ep=ep, max_batch=max_batch)
        result.update(estimate_serving(c, prompt, output, qps, slo, params=p, devices=cat.devices))
        # the serving figures are of the laws cut to the window (lengths.fit_window): say how much that leaves out
        result["context_window_share_cut"] = fit_window(prompt, output, m.max_context_tokens).share_cut
        if "tpot_p99_ms" in result or result.get("limited_by") == "tpot":  # a TPOT figure is reported
            from optimizer.planning.known_limits import tpot_optimism_pct
            result["tpot_p99_optimistic_up_to_pct"] = tpot_optimism_pct(prompt)
    render(result, json_out)


def _estimate_pair(model, precision, input_tokens, output_tokens, prefill_device, decode_device, prefill_tp,
                   decode_tp, pp, qps, slo, input_p99, output_p99, params, catalog, model_config, json_out,
                   engine) -> None:
    """`gpuplan estimate --prefill-device/--decode-device`: one disaggregated pair (``estimate_pair``)."""
    from optimizer.models.configs import build_configs
    from optimizer.models.disagg import (
        estimate_pair,  # numpy and the models: not at `gpuplan --help`
    )
    from optimizer.models.lengths import length_from_flags
    if slo.ttft_p99_ms is None or (slo.tpot_p99_ms is None and slo.e2e_p99_ms is None):
        raise ModelError("a disaggregated pair needs --ttft-p99-ms and --tpot-p99-ms (or --e2e-p99-ms) "
                         "to split between its pools")
    cat = load(catalog, model_config)
    m, q, p = catalog_model(cat, model), catalog_precision(cat, precision), load_calibration(params, cat)
    dp, dd = catalog_device(cat, prefill_device, "--prefill-device"), catalog_device(cat, decode_device, "--decode-device")
    check_sharding(m, dp, prefill_tp, pp, 1, engine, "--prefill-tp")
    check_sharding(m, dd, decode_tp, pp, 1, engine, "--decode-tp")
    check_context(m, input_tokens, output_tokens, input_p99, output_p99)
    for d in (dp, dd):
        if d.scaleout_nic_gbps_per_gpu is None:
            raise ModelError(f"{d.key} has no scaleout_nic_gbps_per_gpu (scale-out network per GPU, Gb/s); "
                             "add it with --catalog or the plan's devices section")
    prompt = length_from_flags(input_tokens, input_p99, "input")
    output = length_from_flags(output_tokens, output_p99, "output")
    result = estimate_pair(build_configs(m, [(dp, q, prefill_tp, pp)], p, engines=engine),
                           build_configs(m, [(dd, q, decode_tp, pp)], p, engines=engine),
                           prompt, output, slo, dp.scaleout_nic_gbps_per_gpu, dd.scaleout_nic_gbps_per_gpu, qps,
                           params=p)
    if json_out:
        print_json(result)
        return
    rows = []
    for pool in ("prefill", "decode"):
        r = result[pool]
        rows.append([pool, r["key"], f"{r['max_qps_at_slo']:,}", r["limited_by"], "—" if r.get(
            "kv_transfer_p99_ms") is None else f"{r['kv_transfer_p99_ms']:,}"])
    stdout.print(table(f"{m.key}: prefill on {dp.key}, decode on {dd.key} ({q.key})",
                       ["pool", "configuration", "max req/s per replica at the SLO", "limited by", "KV transfer p99 ms"],
                       rows, right={"max req/s per replica at the SLO", "KV transfer p99 ms"}))
    stdout.print(f"KV traffic: {result['kv_link_gb_s_per_qps']:,} Gb/s per req/s; prefill replicas per decode "
                 f"replica: {result['prefill_replicas_per_decode_replica']}", markup=False, highlight=False)
    for key in ("ttft_p99_ms", "tpot_p99_ms", "e2e_p99_ms"):
        if key in result:
            stdout.print(f"{key} at {qps:g} req/s per replica: {result[key]}", markup=False, highlight=False)
    if result.get("saturated_pools"):
        pools = result["saturated_pools"]
        stdout.print(f"saturated: the {' and '.join(pools)} replica{'s' if len(pools) > 1 else ''} cannot keep up "
                     f"with {qps:g} req/s (the queue grows without bound: no p99); lower --qps to the capacity above, "
                     "or plan more replicas", markup=False, highlight=False)
    for pool in ("prefill", "decode"):
        if result[pool].get("why"):
            stdout.print(f"{pool}: {result[pool]['why']}", markup=False, highlight=False)


def register(app: typer.Typer) -> None:
    app.command("estimate")(estimate)
