"""Warnings where a plan leans on a part of the model known to disagree with its simulator or its measurements.

``measured_configuration_notes``: a deployment on a configuration (device, engine, model, precision, tp, ep) whose
own calibration rows the fitted model misses by more than its class's band (``FitRecord.by_configuration``,
median measured / predicted output tokens/s of at least MIN_CONFIGURATION_ROWS rows; the deployment's band is
widened to contain that median, ``safeguards.candidate_fidelity``). Shipped: Llama-4-Maverick
FP8 DEP8 on H200 runs at 0.66× the prediction, DeepSeek-R1 FP4 DEP4 on B200 / B300 at 1.33× / 1.43×
(docs/model-accuracy.md, "Configurations the model misses").

``unmeasured_engine_notes``: a deployment served by an engine its device's generation was never measured with
(``optimizer.models.fidelity.engine_unmeasured``: vLLM on H100 when the calibration has Hopper under TensorRT-LLM
only). Its capacity rests on the other engine's fitted shares and host times, and a refit without an engine's rows
lands 14-41 % off (MI300X/vLLM held out, docs/model-accuracy.md "Finite benchmark runs"): rated datasheet-only,
with the host times it assumes next to those the fit gave that engine where it was measured.

``unmeasured_kernel_notes``: a deployment of a mixture-of-experts model, or of a weight-only precision (W4A16), on a
generation and engine never measured with one (``optimizer.models.fidelity.unmeasured_kernels``: any MoE model on
MI300X with the shipped calibration, whose AMD rows are dense Llama; int4 anywhere but Hopper). Its grouped or
dequantizing GEMMs run at a share no row of that hardware fitted (the fitted grouped-GEMM shares span 0.25-1.0 across
generations): rated datasheet-only, with the share it assumes.

``pipeline_notes``: a pipeline-parallel deployment (pp > 1): its stage hop and per-micro-batch host time are
defaults no fit sets and no row measured (``CalibrationParams.pp_hop_latency_us``, ``pp_microbatch_overhead_us``),
rated at most same-generation (``optimizer.models.fidelity.for_pipeline``).

``cross_stack_notes``: a disaggregated workload whose prefill and decode pools run different vendors or engines
(H100/TensorRT-LLM prefill, MI300X/vLLM decode in examples/rag-disaggregated.yaml). The model counts the KV hand-off
as bytes over the scale-out network; serving stacks hand KV off between pools of one engine, whose cache layout both
sides share, so such a pair may not be buildable: the plan says so instead of leaving it to a comment.

``long_prompt_tpot_notes``:

The analytic TPOT p99 of a replica whose prompts are long-tailed is optimistic: a rare prompt of tens of
thousands of tokens stalls every sequence decoding beside it for seconds, and the model's per-step noise does
not carry such stalls (docs/model-accuracy.md, "Dense TPOT p99 under long-tailed prompts (tpottail)").
Measured: llama-3.1-8b fp8 on h100-sxm, prompts lognormal mean 1,024 / p99 8,192 (p99/mean = 8), cut to the
context window, 20 simulator seeds pooled: analytic / simulated TPOT p99 0.926 / 0.880 / 0.824 / 0.753 at 0.3 /
0.5 / 0.7 / 0.8 of saturation (−7 … −25 %; −9 … −25 % before the decode contexts' drift and the dense drift's third
cumulant, poolbias; −12 … −32 % before a long prompt's chunks past the 4th were charged their own attention span,
planner-23: TPOT_OPTIMISM keeps the older, wider figure) (``tests/models/test_tpot_long_prompts.py``); at p99/mean ≈ 4
(``scripts/agreement.py``'s lognormal rows) within its ±15 % targets. The simulator's own p99 under such
prompts needs ~20 seeds of 20,000 requests to settle; the plan's verification runs 2-5 of 8,000.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from catalog.load import Catalog
from optimizer.models.fidelity import (
    engine_unmeasured,
    engines_measured_on,
    unmeasured_kernel_basis,
    unmeasured_kernels,
)
from optimizer.models.params import CalibrationParams, configuration_key
from optimizer.models.techniques import uncached_prompt_tokens
from optimizer.planning.headroom import FidelityKey, fidelity_key
from optimizer.results.plan_result import BucketRow, Deployment, Diagnostic, Route
from optimizer.results.provenance import Fidelity
from workloads.spec import LengthDist, Plan, PrefixCache

# prompt p99 / mean from which the TPOT p99 is known optimistic (the measured case above; 4 agrees)
LONG_TAIL_PROMPT_RATIO = 8.0
# the worst measured optimism of the TPOT p99 there (0.8 of saturation): a prediction above
# (1 − TPOT_OPTIMISM) × its SLO may in fact miss it
TPOT_OPTIMISM = 0.32


def prompt_mean_p99(prompt: LengthDist) -> tuple[float, float]:
    """The prompt law's stated mean and p99 (tokens; a law cut to the context window keeps them), else those of
    the law (a fixed length, a histogram)."""
    if prompt.mean and prompt.p99:
        return prompt.mean, prompt.p99
    return prompt.mean_tokens, prompt.p99_tokens


# prompts this long (p99, tokens: 8 prefill chunks of 2,048) stall every decoding sequence for L/C steps, which the
# per-step noise law misses even at a fixed length (tpottail's cause (1)). Measured, llama-3.1-8b fp8 on h100-sxm,
# fixed prompts, outputs 400, 3 seeds of 16,000 requests pooled, analytic / simulated TPOT p99 at 0.3 / 0.6 of
# saturation: 16,384 tokens 0.892 / 0.895, 32,768 tokens 0.838 / 0.806 (2026-12-07; docs/planner-review-23.md N2:
# −17 … −23 % at 32k on other seeds and loads); qwen3-32b fp8 on b200 at 24,000 tokens 0.892 / 0.932
LONG_PROMPT_TOKENS = 16_384
# the worst of those, rounded up: a prediction above (1 − LONG_PROMPT_OPTIMISM) × its SLO may in fact miss it
LONG_PROMPT_OPTIMISM = 0.25


def tpot_optimism(prompt: LengthDist, prefix_cache: PrefixCache | None = None) -> tuple[float, str] | None:
    """The known optimism (a fraction) of the analytic TPOT p99 under ``prompt`` and why, None where none is known:
    TPOT_OPTIMISM where its p99 is at least LONG_TAIL_PROMPT_RATIO × its mean (long-tailed), else
    LONG_PROMPT_OPTIMISM where its p99's uncached tokens are at least LONG_PROMPT_TOKENS (long, whatever the spread).

    The uncached tokens P = max(L·(1 − h) − min(N, L − 1), 1) of the p99 prompt L under ``prefix_cache``
    (``techniques.uncached_prompt_tokens``; L without one): only they run as prefill chunks, so a 32,768-token
    prompt with 30,000 tokens cached runs 2 chunks of 2,048 and stalls no decoding batch for long."""
    mean, p99 = prompt_mean_p99(prompt)
    if p99 >= LONG_TAIL_PROMPT_RATIO * mean:
        return TPOT_OPTIMISM, f"prompts with p99 {p99 / mean:.1f}× their mean ({mean:,.0f} / {p99:,.0f} tokens)"
    uncached = p99 if prefix_cache is None else float(uncached_prompt_tokens(
        p99, prefix_cache.hit_fraction or 0.0, prefix_cache.shared_prefix_tokens or 0.0))
    if uncached >= LONG_PROMPT_TOKENS:
        cached = f", {uncached:,.0f} of them not in the prefix cache" if uncached < p99 else ""
        return LONG_PROMPT_OPTIMISM, (f"prompts of {p99:,.0f} tokens at p99{cached} (≥ {LONG_PROMPT_TOKENS:,}: many "
                                      "prefill chunks each)")
    return None


def tpot_optimism_pct(prompt: LengthDist, prefix_cache: PrefixCache | None = None) -> float | None:
    """``tpot_optimism`` in %, None where none is known."""
    known = tpot_optimism(prompt, prefix_cache)
    return 100.0 * known[0] if known is not None else None


def long_prompt_tpot_notes(plan: Plan, deployments: Sequence[Deployment]) -> list[Diagnostic]:
    """A ``tpot_long_prompts`` warning per online workload whose prompts are long-tailed or long (``tpot_optimism``),
    with a TPOT SLO, and a colocated deployment whose predicted TPOT p99 is above (1 − the known optimism) × that SLO:
    within the model's known error of it. Names the prompt law, the deployment, its predicted (and simulated,
    where the plan's verification ran it) p99, and the fixes."""
    notes: list[Diagnostic] = []
    by_workload: dict[str, list[Deployment]] = {}
    for d in deployments:
        by_workload.setdefault(d.workload, []).append(d)
    for w in plan.workloads:
        slo_ms = w.slo.tpot_p99_ms
        known = tpot_optimism(w.prompt_tokens, w.prefix_cache) if not w.is_batch and slo_ms is not None else None
        if known is None:
            continue
        optimism, why = known
        # colocated replicas only: a disaggregated decode pool runs no prefill chunks, so it has no such stall
        near = [d for d in by_workload.get(w.name, ()) if d.stage == "colocated" and d.tpot_p99_ms is not None
                and d.tpot_p99_ms > (1.0 - optimism) * slo_ms]
        if not near:
            continue
        d = max(near, key=lambda x: x.tpot_p99_ms or 0.0)
        v = d.verification
        simulated = (f", simulated {v.simulated_ms:.1f} ms" if v is not None and v.metric == "tpot_p99_ms"
                     and v.simulated_ms is not None else "")
        notes.append(Diagnostic(
            "warning", "tpot_long_prompts",
            f"{w.name}: {why} "
            "stall the decoding batch in a way the model's TPOT p99 "
            f"misses: up to {100 * optimism:.0f} % optimistic near saturation (docs/model-accuracy.md, "
            f"tpottail). {d.key} is predicted at {d.tpot_p99_ms:.1f} ms{simulated} against the {slo_ms:g} ms SLO. "
            "Check it with `gpuplan simulate` at its routed rate and several seeds, or plan with a tighter "
            "tpot_p99_ms or target_utilization"))
    return notes


def measured_configuration_notes(plan: Plan, deployments: Sequence[Deployment], params: CalibrationParams | None,
                                 catalog: Catalog, fidelity: Mapping[FidelityKey, Fidelity]) -> list[Diagnostic]:
    """A ``measured_configuration_off`` warning per configuration of ``deployments`` whose calibration rows
    (``params.measured_configuration``: ``fit.by_configuration``, ≥ MIN_CONFIGURATION_ROWS) ran at a median
    measured / predicted r outside its class band [low, high] (``fidelity``, by ``fidelity_key``; the
    deployment's own band is already widened to contain r: ``safeguards.candidate_fidelity``). r < low: the
    point estimate counts on ~(1/r − 1) too much capacity; r > high: ~(1 − 1/r) too little (the plan may buy
    more than it needs). Names the deployments and workloads on it, the rows, r, the band and the fixes."""
    if params is None:
        return []
    models = {w.name: catalog.model(w.model).key for w in plan.workloads}
    on: dict[str, list[Deployment]] = {}
    for d in deployments:
        if fidelity_key(d) in fidelity and d.engine and d.precision is not None and d.workload in models:
            on.setdefault(configuration_key(d.device, d.engine, models[d.workload], d.precision, d.tp, d.ep),
                          []).append(d)
    notes: list[Diagnostic] = []
    for key, ds in on.items():
        rec = params.measured_configuration(key)
        band = fidelity[fidelity_key(ds[0])]  # one configuration, one class band
        if rec is None or band.low_factor <= rec.median_measured_over_predicted <= band.high_factor:
            continue
        r, lo, hi = rec.median_measured_over_predicted, band.low_factor, band.high_factor
        what = (f"the point estimate counts on ~{100 * (1 / r - 1):.0f} % too much capacity. Its band is widened to "
                f"×{r:.2f}–{hi:.2f}, so --confidence 0.9 sizes it at ×{r:.2f}; or plan with target_utilization "
                f"{plan.target_utilization * r:.2f} (× {r:.2f}; it derates every deployment), or calibrate on your "
                "own measurements (gpuplan calibrate) and plan with --params" if r < lo else
                f"the capacity is likely {100 * (1 - 1 / r):.0f} % understated (its band is widened to "
                f"×{lo:.2f}–{r:.2f}), so the plan may buy more than it needs; calibrate on your own measurements "
                "(gpuplan calibrate) and plan with --params")
        where = _named(ds)
        notes.append(Diagnostic(
            "warning", "measured_configuration_off",
            f"{where}: the calibration's {rec.n} measured offline rows of this configuration "
            f"({key}) ran at {r:.2f}× the model's throughput (median), outside its class's 80 % band "
            f"×{lo:.2f}–{hi:.2f}: {what} (docs/model-accuracy.md, 'Configurations the model misses')"))
    return notes


def _size_by_band(confidence: float | None, band: str = "that band") -> str:
    """The first fix a rated-down deployment's warning offers: size by its band, or the plan's confidence that does."""
    if confidence is None:
        return f"plan with --confidence 0.9 to size by {band}"
    return f"keep the plan's confidence ({confidence:g}), which sizes it by {band}"


def unmeasured_engine_notes(deployments: Sequence[Deployment], params: CalibrationParams | None,
                            catalog: Catalog, confidence: float | None = None) -> list[Diagnostic]:
    """An ``engine_unmeasured`` warning per (device, engine) of ``deployments`` whose engine was never measured on
    the device's generation (``engine_unmeasured``): the host times the prediction assumes (the fitted step and
    per-sequence overheads of ``params.factors_for(device, engine)``), those the fit gave the engine where it was
    measured (the coverage's device/engine pairs of that engine), the class band and the fixes."""
    if params is None or params.coverage is None:
        return []
    on: dict[tuple[str, str], list[Deployment]] = {}
    for d in deployments:
        if d.engine and d.device in catalog.devices and engine_unmeasured(catalog.devices[d.device], d.engine, params):
            on.setdefault((d.device, d.engine), []).append(d)
    notes: list[Diagnostic] = []
    for (device_key, engine), ds in on.items():
        device = catalog.devices[device_key]
        here = params.factors_for(device, engine)
        served = engines_measured_on(device.generation, params)
        elsewhere = [(dev, params.factors_for(catalog.devices[dev], engine))
                     for dev, _, eng in (pair.partition("/") for pair in params.coverage.device_engines)
                     if eng == engine and dev in catalog.devices]
        measured = "; ".join(f"where {engine} was measured ({dev}) the fit gives it {f.step_overhead_ms:.2f} ms per step "
                             f"and {f.sequence_overhead_us:.1f} µs per running sequence" for dev, f in elsewhere)
        band = ds[0].fidelity
        notes.append(Diagnostic(
            "warning", "engine_unmeasured",
            f"{_named(ds)}: {engine} was never measured on {device.generation} "
            f"(its rows ran {', '.join(served)}), so this capacity uses {', '.join(served)}'s fitted shares and host "
            f"times ({here.step_overhead_ms:.2f} ms per step, {here.sequence_overhead_us:.1f} µs per running sequence)"
            + (f"; {measured}" if measured else "") +
            _rated_datasheet_only(band) +
            f": {_size_by_band(confidence)}, serve it with {', '.join(served)}, or measure {engine} "
            "on this device, fit the rows with `gpuplan calibrate` and plan with --params (docs/model-accuracy.md, "
            "'Finite benchmark runs')"))
    return notes


def unmeasured_kernel_notes(plan: Plan, deployments: Sequence[Deployment], params: CalibrationParams | None,
                            catalog: Catalog) -> list[Diagnostic]:
    """A ``moe_unmeasured`` / ``weight_only_unmeasured`` warning per (device, engine) of ``deployments`` whose
    mixture-of-experts model / weight-only precision was never measured on that generation and engine
    (``unmeasured_kernels``): what the capacity assumes there (``unmeasured_kernel_basis``), the band and the fixes."""
    if params is None or params.coverage is None:
        return []
    moe = {w.name for w in plan.workloads if catalog.model(w.model).is_moe}
    on: dict[tuple[str, str, str], list[Deployment]] = {}
    for d in deployments:
        if not d.engine or d.device not in catalog.devices:
            continue
        weight_only = d.precision in catalog.precisions and catalog.precisions[d.precision].weight_only
        for family in unmeasured_kernels(catalog.devices[d.device], d.engine, params, moe=d.workload in moe,
                                         weight_only=weight_only):
            on.setdefault((family, d.device, d.engine), []).append(d)
    notes: list[Diagnostic] = []
    for (family, device_key, engine), ds in on.items():
        what = "a MoE model" if family == "moe" else "a weight-only precision"
        band = ds[0].fidelity
        notes.append(Diagnostic(
            "warning", f"{family}_unmeasured",
            f"{_named(ds)}: "
            f"{unmeasured_kernel_basis(family, catalog.devices[device_key], engine, params)}"
            + _rated_datasheet_only(band)
            + f": {_size_by_band(plan.confidence)}, or measure {what} on this device, fit the rows "
            "with `gpuplan calibrate` and plan with --params"))
    return notes


def pipeline_notes(deployments: Sequence[Deployment], params: CalibrationParams | None,
                   confidence: float | None = None) -> list[Diagnostic]:
    """One ``pipeline_uncalibrated`` warning naming the pipeline-parallel deployments (pp > 1) and the default
    pipeline terms their capacity rests on."""
    pp = [d for d in deployments if d.pp > 1]
    if params is None or not pp:
        return []
    return [Diagnostic(
        "warning", "pipeline_uncalibrated",
        f"{_named(pp)}: pipeline-parallel; the stage hop "
        f"({params.pp_hop_latency_us:g} µs) and the host time per micro-batch ({params.pp_microbatch_overhead_us:g} µs "
        "per step) are defaults that no measurement fitted (gpuplan calibrate does not fit them), so the capacity is "
        f"rated same-generation at best: {_size_by_band(confidence, 'its band')}, or allow a device or "
        "precision on which the model fits one pipeline stage (pp 1)")]


def cross_stack_notes(deployments: Sequence[Deployment], catalog: Catalog) -> list[Diagnostic]:
    """A ``disaggregated_cross_stack`` warning per workload whose prefill and decode pools do not all run one
    (vendor, engine): the pools on each side and what to check or change."""
    pools: dict[str, dict[str, list[Deployment]]] = {}
    for d in deployments:
        if d.stage in ("prefill", "decode"):
            pools.setdefault(d.workload, {}).setdefault(d.stage, []).append(d)

    def vendor(d: Deployment) -> str:
        return catalog.devices[d.device].vendor if d.device in catalog.devices else "?"

    notes = []
    for workload, by_stage in pools.items():
        sides = {stage: sorted({f"{d.device} ({vendor(d)}, {d.engine or 'engine not known'})" for d in ds})
                 for stage, ds in by_stage.items()}
        if len({(vendor(d), d.engine) for ds in by_stage.values() for d in ds}) > 1:
            notes.append(Diagnostic(
                "warning", "disaggregated_cross_stack",
                f"{workload}: prefill on {', '.join(sides.get('prefill', []))}, decode on "
                f"{', '.join(sides.get('decode', []))}: the KV cache crosses vendors or engines. The model counts the "
                "hand-off as bytes over the scale-out network, but serving stacks hand KV off between pools of one "
                "engine (whose cache layout both sides share): check that yours supports this pair, or keep one "
                "vendor's devices in allowed_devices (or disaggregation: never)"))
    return notes


def _named(deployments: Sequence[Deployment]) -> str:
    """"key (workload), ..." of ``deployments``, as every note here names them."""
    return ", ".join(f"{d.key} ({d.workload})" for d in deployments)


def _rated_datasheet_only(band: Fidelity | None) -> str:
    """The sentence a note gives a datasheet-only deployment's band (nothing without one)."""
    return f". Rated datasheet-only (80 % band ×{band.low_factor:.2f}–{band.high_factor:.2f})" if band else ""


def size_routing_notes(buckets: Sequence[BucketRow], routing: Sequence[Route]) -> list[Diagnostic]:
    """One ``size_aware_routing`` note naming the workloads whose request-size buckets go to different deployments:
    the buckets are cut by prompt + output tokens (``lengths.split_buckets``, as Mélange cuts them), so serving the
    plan needs a router that tells a request's size before its output exists (an output-length estimate); one that
    routes by the prompt alone sends some long answers to the short-request deployments, which the plan does not
    model."""
    split = {b.workload for b in buckets if b.label != "all"}
    targets: dict[str, set[tuple[str, str]]] = {}
    for r in routing:
        if r.workload in split and r.qps > 0:
            targets.setdefault(r.workload, set()).add((r.key, r.stage))
    names = sorted(w for w, t in targets.items() if len(t) > 1)
    if not names:
        return []
    return [Diagnostic("info", "size_aware_routing",
                       f"{', '.join(names)}: request sizes go to different deployments (the Request-size routing "
                       "table); the buckets are cut by prompt + output tokens, so the router needs an estimate of "
                       "each request's output length: routed by the prompt alone, long answers can land on the "
                       "short-request deployments and their p99s are not what the plan predicts")]
