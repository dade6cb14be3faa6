"""`gpuplan roofline`: throughput and time per token against batch size, with the roofs marked."""

from __future__ import annotations

import io
from typing import TYPE_CHECKING, Annotated

import typer

from catalog.errors import ModelError
from catalog.outputs import Output, plan_outputs
from cli.common import CatalogOpt, ModelConfigOpt, ParamsOpt, load, load_calibration, stdout
from cli.config_check import (
    catalog_device,
    catalog_model,
    catalog_precision,
    check_context,
    check_sharding,
)
from cli.estimate_cmd import DeviceOpt, InputOpt, ModelOpt, OutputOpt, PpOpt, PrecisionOpt, TpOpt

if TYPE_CHECKING:
    import numpy as np


def roofline_data(c, input_tokens: int, output_tokens: int, max_batch: int) -> dict[str, np.ndarray]:
    """Curves for config 0 of ``c``: batch, tokens/s, TPOT and the memory/compute roofs."""
    import numpy as np  # numpy and the models load when the command runs, not at `gpuplan --help`

    from optimizer.models.perf import decode_parts

    batch = np.unique(np.round(np.logspace(0, np.log10(max_batch), 200))).reshape(1, -1)
    ctx = input_tokens + output_tokens / 2.0
    parts = decode_parts(c, batch, ctx)
    p = float(c.pp[0])
    return {
        "batch": batch[0],
        "tokens_s": (batch / parts.step_s)[0],
        "tpot_ms": parts.step_s[0] * 1e3,
        "memory_roof_tokens_s": (batch / (p * parts.mem_s))[0],
        "compute_roof_tokens_s": (batch / (p * parts.compute_s))[0],
    }


def roofline(
    model: ModelOpt,
    device: DeviceOpt,
    precision: PrecisionOpt,
    input_tokens: InputOpt,
    output_tokens: OutputOpt,
    out: Annotated[str, typer.Option("--out", help="PNG file to write.")],
    tp: TpOpt = 1,
    pp: PpOpt = 1,
    params: ParamsOpt = None,
    catalog: CatalogOpt = None,
    model_config: ModelConfigOpt = None,
) -> None:
    """Plot output tokens/s and time per token against batch with memory/compute roofs and the KV limit."""
    # the models (numpy, pydantic) load when the command runs, not at `gpuplan --help`
    from optimizer.models.configs import build_configs
    from optimizer.models.perf import max_sequences, tpot_bound_ms

    outputs = plan_outputs([Output("--out", out, (".png",))], (params, catalog, model_config))
    cat = load(catalog, model_config)
    m, d, q = catalog_model(cat, model), catalog_device(cat, device), catalog_precision(cat, precision)
    check_sharding(m, d, tp, pp, 1, None)
    check_context(m, input_tokens, output_tokens)
    c = build_configs(m, [(d, q, tp, pp)], load_calibration(params, cat))
    if not c.runnable[0]:
        raise ModelError(f"{c.keys[0]}: cannot plot, {c.reason[0]}")
    max_conc = int(max_sequences(c, input_tokens + output_tokens)[0])
    data = roofline_data(c, input_tokens, output_tokens, max(2 * max_conc, 64))

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.8))
    ax1.plot(data["batch"], data["tokens_s"], label="model: output tokens/s", lw=2)
    ax1.plot(data["batch"], data["memory_roof_tokens_s"], "--", label="memory roof (weights + KV reads)")
    ax1.plot(data["batch"], data["compute_roof_tokens_s"], ":", label="compute roof")
    ax2.plot(data["batch"], data["tpot_ms"], label="model: time per output token", lw=2)
    ax2.axhline(float(tpot_bound_ms(c)[0]), color="grey", ls="--", label="bandwidth bound at batch 1 (peak)")
    for ax in (ax1, ax2):
        if max_conc >= 1:
            ax.axvline(max_conc, color="red", ls="-.", label=f"KV memory limit: {max_conc} sequences")
        ax.set_xscale("log")
        ax.set_xlabel("batch (running sequences)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    ax1.set_yscale("log")
    ax1.set_ylabel("output tokens/s per replica")
    ax2.set_ylabel("time per output token (ms)")
    fig.suptitle(f"{m.key} on {tp * pp}x {d.key} ({q.key}, tp{tp} pp{pp}), "
                 f"{input_tokens} in / {output_tokens} out")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    outputs.write({"--out": buf.getvalue()})
    stdout.print(f"wrote {out}", markup=False)


def register(app: typer.Typer) -> None:
    app.command("roofline")(roofline)
