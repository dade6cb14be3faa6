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
from optimizer.params import load_params
from optimizer.perf import estimate_config

# Row labels of the readable table, in order; keys absent from the result are skipped.
_LABELS = {
    "fits": "fits", "weights_gb_per_gpu": "weights per GPU (GB)",
    "kv_cache_bytes_per_token": "KV cache per token (bytes)", "max_concurrency": "max concurrent sequences",
    "tpot_bound_ms": "TPOT bandwidth bound, batch 1 (ms)", "batch": "batch", "tpot_ms": "TPOT (ms)",
    "ttft_ms": "TTFT, one prompt (ms)", "output_tokens_per_s": "output tokens/s", "bound": "bound",
}

ModelOpt = Annotated[str, typer.Option("--model", help="Model key, alias or HF id (see `gpuplan catalog models`).")]
DeviceOpt = Annotated[str, typer.Option("--device", help="Device key (see `gpuplan catalog devices`).")]
PrecisionOpt = Annotated[str, typer.Option("--precision", help="bf16, fp16, fp8, int8, int4 or fp4.")]
TpOpt = Annotated[int, typer.Option("--tp", min=1, help="Tensor-parallel degree.")]
PpOpt = Annotated[int, typer.Option("--pp", min=1, help="Pipeline-parallel degree.")]
InputOpt = Annotated[int, typer.Option("--input-tokens", min=1, help="Prompt length (tokens).")]
OutputOpt = Annotated[int, typer.Option("--output-tokens", min=1, help="Output length (tokens).")]


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
    params: ParamsOpt = None,
    catalog: CatalogOpt = None,
    model_config: ModelConfigOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Memory fit, latency and throughput of one (model, device, precision, tp, pp) configuration."""
    if batch is not None and max_throughput:
        raise ModelError("--batch and --max-throughput exclude each other; give one")
    cat = load(catalog, model_config)
    result = estimate_config(
        cat.model(model), cat.device(device), cat.precision(precision), tp, pp,
        input_tokens, output_tokens, load_params(params), batch=batch, max_throughput=max_throughput,
    )
    render(result, json_out)


def register(app: typer.Typer) -> None:
    app.command("estimate")(estimate)
