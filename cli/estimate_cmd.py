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
    print_json,
    stdout,
    table,
)
from optimizer.models.estimate import estimate_config, estimate_serving
from optimizer.models.lengths import length_from_flags
from optimizer.models.params import load_params
from optimizer.models.perf import build_configs
from workloads.spec import SLO

# Row labels of the readable table, in order; keys absent from the result are skipped.
_LABELS = {
    "fits": "fits", "weights_gb_per_gpu": "weights per GPU (GB)",
    "kv_cache_bytes_per_token": "KV cache per token (bytes)", "max_concurrency": "max concurrent sequences",
    "tpot_bound_ms": "TPOT bandwidth bound, batch 1 (ms)", "batch": "batch", "tpot_ms": "TPOT (ms)",
    "ttft_ms": "TTFT, one prompt (ms)", "output_tokens_per_s": "output tokens/s", "bound": "bound",
    "ttft_p50_ms": "TTFT p50 at --qps (ms)", "ttft_p99_ms": "TTFT p99 at --qps (ms)",
    "tpot_p50_ms": "TPOT p50 at --qps (ms)", "tpot_p99_ms": "TPOT p99 at --qps (ms)",
    "e2e_p99_ms": "E2E p99 at --qps (ms)", "utilization": "utilization", "saturated": "saturated",
    "kv_fits": "KV cache holds the p99 occupancy",
    "max_qps_at_slo": "max req/s at the SLO", "output_tokens_per_s_at_slo": "output tokens/s at the SLO",
    "limited_by": "limited by", "why": "why",
}

ModelOpt = Annotated[str, typer.Option("--model", help="Model key, alias or HF id (see `gpuplan catalog models`).")]
DeviceOpt = Annotated[str, typer.Option("--device", help="Device key (see `gpuplan catalog devices`).")]
PrecisionOpt = Annotated[str, typer.Option("--precision", help="bf16, fp16, fp8, int8, int4, fp4, nvfp4 or mxfp4 (see gpuplan catalog precisions).")]
TpOpt = Annotated[int, typer.Option("--tp", min=1, help="Tensor-parallel degree.")]
PpOpt = Annotated[int, typer.Option("--pp", min=1, help="Pipeline-parallel degree.")]
InputOpt = Annotated[int, typer.Option("--input-tokens", min=1, help="Prompt length (tokens).")]
OutputOpt = Annotated[int, typer.Option("--output-tokens", min=1, help="Output length (tokens).")]
MsOpt = Annotated[float | None, typer.Option(help="p99 SLO (ms): report the max request rate that meets it.")]


def render(result: dict, json_out: bool) -> None:
    """Print an estimate dict as JSON or as a two-column table."""
    if json_out:
        print_json(result)
        return
    title = (f"{result['model']} on {result['tp'] * result['pp']}× {result['device']} "
             f"({result['precision']}, tp{result['tp']} pp{result['pp']})")
    rows = []
    for key, label in _LABELS.items():
        if key in result:
            value = result[key]
            rows.append([label, f"{value:,}" if isinstance(value, int | float) and not isinstance(value, bool)
                         else ("—" if value is None else str(value))])
    stdout.print(table(title, ["quantity", "value"], rows, right={"value"}))
    if result.get("reason"):
        stdout.print(f"does not fit / cannot run: {result['reason']}", markup=False)


def estimate(
    model: ModelOpt,
    device: DeviceOpt,
    precision: PrecisionOpt,
    input_tokens: InputOpt,
    output_tokens: OutputOpt,
    tp: TpOpt = 1,
    pp: PpOpt = 1,
    batch: Annotated[int | None, typer.Option("--batch", min=1, help="Running sequences per decode step.")] = None,
    max_throughput: Annotated[bool, typer.Option(
        "--max-throughput", help="Offline throughput: all requests at once, batch limited by memory.")] = False,
    qps: Annotated[float | None, typer.Option(
        "--qps", help="Request rate (req/s, Poisson): p50/p99 TTFT, TPOT, E2E under load.")] = None,
    ttft_p99_ms: MsOpt = None,
    tpot_p99_ms: MsOpt = None,
    e2e_p99_ms: MsOpt = None,
    input_p99: Annotated[float | None, typer.Option(
        "--input-p99", help="p99 prompt length: --input-tokens becomes the mean of a lognormal.")] = None,
    output_p99: Annotated[float | None, typer.Option(
        "--output-p99", help="p99 output length: --output-tokens becomes the mean of a lognormal.")] = None,
    params: ParamsOpt = None,
    catalog: CatalogOpt = None,
    model_config: ModelConfigOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Memory fit, latency and throughput of one (model, device, precision, tp, pp) configuration."""
    if batch is not None and max_throughput:
        raise ModelError("--batch and --max-throughput exclude each other; give one")
    for flag, value in (("--ttft-p99-ms", ttft_p99_ms), ("--tpot-p99-ms", tpot_p99_ms), ("--e2e-p99-ms", e2e_p99_ms)):
        if value is not None and not value > 0:
            raise ModelError(f"{flag} must be a positive number of milliseconds (got {value:g})")
    cat = load(catalog, model_config)
    m, d, q, p = cat.model(model), cat.device(device), cat.precision(precision), load_params(params)
    prompt = length_from_flags(input_tokens, input_p99, "input")
    output = length_from_flags(output_tokens, output_p99, "output")
    result = estimate_config(m, d, q, tp, pp, input_tokens, output_tokens, p, batch=batch,
                             max_throughput=max_throughput)
    slo = SLO(ttft_p99_ms=ttft_p99_ms, tpot_p99_ms=tpot_p99_ms, e2e_p99_ms=e2e_p99_ms)
    if qps is not None or not slo.is_empty:
        result.update(estimate_serving(build_configs(m, [(d, q, tp, pp)], p), prompt, output, qps, slo))
    render(result, json_out)


def register(app: typer.Typer) -> None:
    app.command("estimate")(estimate)
