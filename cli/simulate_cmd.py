"""`gpuplan simulate`: the discrete-event simulator next to the analytic serving model."""

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
    check_context,
    check_qps,
    check_sharding,
)
from cli.estimate_cmd import EngineOpt, EpOpt, MaxBatchOpt

MAX_REQUESTS = 2_000_000  # a bound on time and memory: the simulator holds per-request arrays


def simulate(
    model: Annotated[str, typer.Option("--model", help="Model key, alias or HF id.")],
    device: Annotated[str, typer.Option("--device", help="Device key.")],
    precision: Annotated[str, typer.Option("--precision", help="bf16, fp16, fp8, int8, int4, fp4, nvfp4 or mxfp4 (see gpuplan catalog precisions).")],
    qps: Annotated[float, typer.Option("--qps", help="Poisson arrival rate (requests/s).")],
    input_tokens: Annotated[int, typer.Option("--input-tokens", min=1, help="Prompt length (mean if --input-p99).")],
    output_tokens: Annotated[int, typer.Option("--output-tokens", min=1, help="Output length (mean if --output-p99).")],
    tp: Annotated[int, typer.Option("--tp", min=1, help="Tensor-parallel degree.")] = 1,
    pp: Annotated[int, typer.Option("--pp", min=1, help="Pipeline-parallel degree.")] = 1,
    input_p99: Annotated[int | None, typer.Option("--input-p99", min=1, help="p99 prompt length: lognormal prompts.")] = None,
    output_p99: Annotated[int | None, typer.Option("--output-p99", min=1, help="p99 output length: lognormal outputs.")] = None,
    requests: Annotated[int, typer.Option("--requests", min=100, max=MAX_REQUESTS, help="Requests to simulate (at most 2,000,000); the first 5 % warm the replica up and are not measured (JSON requests: those measured).")] = 20_000,
    seed: Annotated[int, typer.Option("--seed", min=0, help="Random seed (same seed, same result).")] = 0,
    engine: EngineOpt = None,
    ep: EpOpt = 1,
    max_batch: MaxBatchOpt = None,
    params: ParamsOpt = None,
    catalog: CatalogOpt = None,
    model_config: ModelConfigOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Simulate one replica at a request rate; print simulated percentiles (95 % CI) next to the analytic ones."""
    # the models (numpy, pydantic) load when the command runs, not at `gpuplan --help`
    from optimizer.models import perf, serving
    from optimizer.models.configs import build_configs
    from optimizer.models.lengths import length_from_flags
    from optimizer.models.simulate import simulate as run_simulation

    if not qps > 0:
        raise ModelError(f"--qps must be > 0 requests/s (got {qps:g})")
    prompt = length_from_flags(input_tokens, input_p99, "input")
    output = length_from_flags(output_tokens, output_p99, "output")
    check_qps(qps)
    cat = load(catalog, model_config)
    m, d = catalog_model(cat, model), catalog_device(cat, device)
    check_sharding(m, d, tp, pp, ep, engine)
    check_context(m, input_tokens, output_tokens, input_p99, output_p99)
    c = build_configs(m, [(d, catalog_precision(cat, precision), tp, pp)], load_calibration(params, cat), engines=engine, ep=ep,
                      max_batch=max_batch)
    if not bool(c.runnable[0]):
        raise ModelError(f"{c.keys[0]} cannot run: {c.reason[0]}")
    analytic = serving.serve_at_rate(c, qps, prompt, output)
    sim = run_simulation(c, 0, qps, prompt, output, requests=requests, seed=seed)
    rows = []
    result: dict = {"config": c.keys[0], "qps": qps, "requests": sim.requests, "seed": seed,
                    "max_batch_sequences": int(c.batch_cap[0]),
                    "preemptions": sim.preemptions, "steps": sim.steps,
                    "simulated_mean_batch": round(sim.mean_batch, 2),
                    "analytic_running_batch": perf.finite_round(analytic.running_batch[0], 3),
                    "analytic_utilization": perf.finite_round(analytic.utilization[0], 3),
                    "analytic_saturated": bool(analytic.saturated[0]),
                    "analytic_kv_fits": bool(analytic.kv_rank_p999_tokens[0] <= analytic.kv_rank_capacity_tokens[0]),
                    "analytic_batch_fits": bool(analytic.batch_rank_p999[0] <= analytic.batch_rank_cap[0]),
                    "simulated_output_tokens_per_s": round(sim.output_tokens_per_s, 1)}
    for metric, sim_pct in (("ttft", sim.ttft), ("tpot", sim.tpot), ("e2e", sim.e2e)):
        for q in (50.0, 90.0, 99.0):
            p = sim_pct[q]
            key = f"{metric}_p{int(q)}_ms"
            an = getattr(analytic, key, None)
            a = perf.finite_round(an[0], 3) if an is not None else None
            result[f"simulated_{key}"] = round(p.value_ms, 3)
            result[f"simulated_{key}_ci95"] = [round(p.ci_low_ms, 3), round(p.ci_high_ms, 3)]
            if a is not None:
                result[f"analytic_{key}"] = a
            rows.append([key, f"{p.value_ms:,.2f}", f"{p.ci_low_ms:,.2f} – {p.ci_high_ms:,.2f}",
                         "—" if a is None else f"{a:,.2f}"])
    if json_out:
        print_json(result)
        return
    stdout.print(table(f"{c.keys[0]} at {qps:g} req/s ({sim.requests:,} requests measured, seed {seed})",
                       ["percentile", "simulated", "95 % CI", "analytic"], rows,
                       right={"simulated", "95 % CI", "analytic"}))
    stdout.print(f"mean batch: simulated {sim.mean_batch:.1f}, analytic {analytic.running_batch[0]:.1f}; "
                 f"utilization {analytic.utilization[0]:.2f}; preemptions {sim.preemptions}", markup=False)
    if result["analytic_saturated"]:
        stdout.print(saturation_note(qps, sim.output_tokens_per_s / output.mean_tokens, requests), markup=False)
    else:
        full = [what for key, what in (("analytic_kv_fits", "the KV cache"),
                                       ("analytic_batch_fits", "the scheduler cap (--max-batch)")) if not result[key]]
        if full:
            stdout.print(f"slots: at {qps:g} req/s {' and '.join(full)} is full more than 0.1 % of the time in the "
                         "analytic model, whose p99s leave out the wait for a slot (the simulated ones include it; "
                         "the capacity at an SLO counts it)", markup=False)


def saturation_note(qps: float, completed_qps: float, requests: int) -> str:
    """The line under a saturated run's table: the analytic model has no p99 there (its column is "—"), and the
    simulated queue grows for as long as requests arrive, so its percentiles are those of this run's length."""
    return (f"saturated: {qps:g} req/s is beyond this replica's capacity (the simulated replica completed "
            f"{completed_qps:,.3g} req/s); its queue grows without bound, so the simulated percentiles grow with "
            f"--requests ({requests:,} here) and are no steady state, and the analytic column has none; "
            "lower --qps or add replicas")


def register(app: typer.Typer) -> None:
    app.command("simulate")(simulate)
