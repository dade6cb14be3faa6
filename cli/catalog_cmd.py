"""`gpuplan catalog devices|models|precisions|show`."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from catalog import Catalog, Device
from catalog.errors import CatalogError, suggest
from cli.common import CatalogOpt, JsonOpt, ModelConfigOpt, fmt, load, print_json, stdout, table
from cli.config_check import catalog_model, catalog_precision

app = typer.Typer(help="List and inspect devices, models and precisions.", no_args_is_help=True,
                  rich_markup_mode=None)  # plain help, as the main app (start-up time)

DEVICE_SORTS = {
    "key": lambda r: r["key"],
    "memory": lambda r: -r["memory_gb"],
    "bandwidth": lambda r: -r["memory_bandwidth_tb_s"],
    "price": lambda r: r["purchase_usd"] if r["purchase_usd"] is not None else float("inf"),
    "cloud": lambda r: r["cloud_usd_per_gpu_hour"] if r["cloud_usd_per_gpu_hour"] is not None else float("inf"),
    "bw-per-dollar": lambda r: -(r["bandwidth_gb_s_per_1k_usd"] or 0),
    "bw-per-kw": lambda r: -(r["bandwidth_tb_s_per_kw"] or 0),
    "ridge": lambda r: r["ridge_flop_per_byte"],
    "tokens": lambda r: -(r.get("bound_tokens_per_s") or 0),
}


def device_row(device: Device, weight_bytes: float | None) -> dict:
    """A device's catalog fields plus what the physics says to buy by.

    bandwidth per $1k = memory_bandwidth (GB/s) / (purchase_usd / 1000);
    bandwidth per kW  = memory_bandwidth (TB/s) / (tdp_w / 1000);
    bound tokens/s    = memory_bandwidth / weight bytes (batch-1 decode ceiling of one model copy).
    """
    row = device.model_dump(mode="json")
    bw_bytes = device.memory_bandwidth_tb_s * 1e12
    row["ridge_flop_per_byte"] = round(device.ridge_flop_per_byte, 1)
    # 1e6 · TB/s / $ (not GB/s / ($/1000): a price of 5e-324 made $/1000 zero, a ZeroDivisionError); None when the
    # ratio is no finite number (a price of 1e-310 is $0 to the ratio, and JSON holds no inf)
    per_1k = device.memory_bandwidth_tb_s * 1e6 / device.purchase_usd if device.purchase_usd else None
    row["bandwidth_gb_s_per_1k_usd"] = round(per_1k, 2) if per_1k is not None and math.isfinite(per_1k) else None
    row["bandwidth_tb_s_per_kw"] = round(device.memory_bandwidth_tb_s / (device.tdp_w / 1000), 3) if device.tdp_w else None
    row["unusable_for"] = device.unusable_for()
    if weight_bytes is not None:
        row["bound_tokens_per_s"] = round(bw_bytes / weight_bytes, 3)
        row["model_fits_one_gpu"] = weight_bytes <= device.memory_gb * 1e9
    return row


@app.command("devices")
def devices(
    model: Annotated[str | None, typer.Option(help="Add the batch-1 bandwidth bound in tokens/s for this model.")] = None,
    precision: Annotated[str, typer.Option(help="Weight precision for --model's bound.")] = "bf16",
    sort: Annotated[str, typer.Option(help=f"Sort by one of: {', '.join(DEVICE_SORTS)}.")] = "key",
    catalog: CatalogOpt = None,
    model_config: ModelConfigOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """List devices with their figures, prices, and what the physics says to buy by."""
    cat = load(catalog, model_config)
    weight_bytes = None
    q = catalog_precision(cat, precision)  # checked without --model too: a typo must not pass silently
    if model is not None:
        m = catalog_model(cat, model)
        weight_bytes = m.total_params_b * 1e9 * q.weight_bytes_per_param
    if sort not in DEVICE_SORTS:
        raise CatalogError(f"--sort: unknown key '{sort}'{suggest(sort, DEVICE_SORTS)}; one of {', '.join(DEVICE_SORTS)}")
    if sort == "tokens" and model is None:
        raise CatalogError("--sort tokens needs --model MODEL")
    rows = sorted((device_row(d, weight_bytes) for d in cat.devices.values()), key=DEVICE_SORTS[sort])
    if json_out:
        print_json(rows)
        return
    cols = ["device", "vendor", "mem GB", "BW TB/s", "BF16 TF", "FP8 TF", "FP4 TF", "TDP W", "link",
            "buy $", "cloud $/h", "ridge F/B", "GB/s per $1k", "TB/s per kW"]
    if model:
        cols.append(f"tok/s bound ({model}, {precision})")
    cols.append("estimated / unusable for")
    out = []
    for r in rows:
        est = ", ".join(f"{k}*" for k in r["estimated"])
        flags = "; ".join(x for x in [est, "; ".join(r["unusable_for"])] if x)
        line = [r["key"], r["vendor"], fmt(r["memory_gb"]), fmt(r["memory_bandwidth_tb_s"], 2),
                fmt(r["bf16_tflops"] or r["fp16_tflops"]), fmt(r["fp8_tflops"]), fmt(r["fp4_tflops"]),
                fmt(r["tdp_w"]), f"{r['interconnect_kind']} {r['interconnect_gb_s']:g}",
                fmt(r["purchase_usd"]), fmt(r["cloud_usd_per_gpu_hour"], 2), fmt(r["ridge_flop_per_byte"]),
                fmt(r["bandwidth_gb_s_per_1k_usd"], 1), fmt(r["bandwidth_tb_s_per_kw"], 2)]
        if model:
            line.append(fmt(r["bound_tokens_per_s"], 1) + ("" if r["model_fits_one_gpu"] else " (needs >1 GPU)"))
        line.append(flags)
        out.append(line)
    stdout.print(table("Devices (dense peaks; * = estimated figure, see `catalog show KEY`)", cols, out,
                       right={c for c in cols if c not in {"device", "vendor", "link", "estimated / unusable for"}}))


def model_row(cat: Catalog, key: str) -> dict:
    m = cat.models[key]
    row = m.model_dump(mode="json")
    row["kv_cache_bytes_per_token_bf16"] = m.kv_bytes_per_token(2)
    row["weights_gb_bf16"] = round(m.total_params_b * 2, 1)
    return row


@app.command("models")
def models(catalog: CatalogOpt = None, model_config: ModelConfigOpt = None, json_out: JsonOpt = False) -> None:
    """List models with their shapes, weight size and KV-cache bytes per token."""
    cat = load(catalog, model_config)
    rows = [model_row(cat, k) for k in cat.models]
    if json_out:
        print_json(rows)
        return
    cols = ["model", "HF id", "aliases", "layers", "hidden", "heads/kv", "params B", "active B", "experts",
            "KV B/token (bf16)", "weights GB (bf16)"]
    out = [[r["key"], r["hf_id"], ", ".join(a for a in r["aliases"] if "/" not in a), r["num_layers"],
            r["hidden_size"], f"{r['num_attention_heads']}/{r['num_kv_heads']}", fmt(r["total_params_b"], 1),
            fmt(r["active_params_b"], 1),
            f"{r['experts_per_token']}/{r['num_experts']}" if r["num_experts"] else "",
            fmt(r["kv_cache_bytes_per_token_bf16"]), fmt(r["weights_gb_bf16"], 1)] for r in rows]
    stdout.print(table("Models", cols, out, right={"layers", "hidden", "params B", "active B",
                                                   "KV B/token (bf16)", "weights GB (bf16)"}))


@app.command("precisions")
def precisions(catalog: CatalogOpt = None, json_out: JsonOpt = False) -> None:
    """List precisions with bytes per weight, compute and KV dtypes, and the devices that run them."""
    cat = load(catalog)
    rows = []
    for p in cat.precisions.values():
        row = p.model_dump(mode="json")
        row["devices"] = [d.key for d in cat.devices.values() if p.unsupported_reason(d) is None]
        rows.append(row)
    if json_out:
        print_json(rows)
        return
    out = [[r["key"], f"{r['weight_bytes_per_param'] * 8:.4g}", r["compute_dtype"], r["attention_dtype"],
            r["kv_dtype"], "yes" if r["weight_only"] else "", ", ".join(r["devices"])] for r in rows]
    stdout.print(table("Precisions", ["precision", "bits/weight", "compute", "attention", "KV cache", "weight-only",
                                      "runs on"], out, right={"bits/weight"}))


@app.command("show")
def show(
    key: Annotated[str, typer.Argument(help="A device, model (or alias) or precision key.")],
    catalog: CatalogOpt = None,
    model_config: ModelConfigOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Show one device, model or precision with every figure and its source."""
    cat = load(catalog, model_config)
    low = key.lower()
    if low in cat.devices:
        obj = device_row(cat.devices[low], None)
    elif key in cat.model_aliases or low in cat.model_aliases:
        obj = model_row(cat, cat.model(key).key)
    elif low in cat.precisions:
        obj = cat.precisions[low].model_dump(mode="json")
    else:
        known = [*cat.devices, *cat.models, *cat.precisions]
        raise CatalogError(f"unknown catalog key '{key}'{suggest(low, known)}; see `gpuplan catalog devices|models|precisions`")
    if json_out:
        print_json(obj)
        return
    rows = [[k, _render(v)] for k, v in obj.items()]
    stdout.print(table(key, ["field", "value"], rows))


def _render(value) -> str:
    if isinstance(value, dict):
        return "\n".join(f"{k}: {_render(v)}" for k, v in value.items())
    if isinstance(value, list):
        return ", ".join(_render(v) for v in value)
    return "—" if value is None else str(value)
