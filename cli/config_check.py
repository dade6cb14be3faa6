"""Checks of one configuration given on the command line (estimate, simulate, roofline).

The planner only enumerates configurations that can exist (``optimizer.planning.candidates``: tp in
{1, 2, 4, 8}, ep up to one server, the engine the device runs); a command that takes ``--tp``,
``--pp``, ``--ep``, ``--engine`` and request lengths from the user must refuse the ones that cannot,
instead of answering for them (``--tp 1000000`` gave 0 GB of weights per GPU and a 0 ms bound).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from catalog.errors import CatalogError, ModelError, suggest

if TYPE_CHECKING:
    from catalog.load import Catalog
    from catalog.schema import Device, Model, Precision

# the key a refusal of an empty --model / --device / --precision gives as an example, where the catalog has it
_EXAMPLE_KEYS = {"model": "llama-3.1-8b", "device": "h100-sxm", "precision": "fp8"}


def catalog_model(cat: Catalog, name: str, flag: str = "--model") -> Model:
    """``catalog_entry`` of a model."""
    return catalog_entry(cat, "model", name, flag)  # type: ignore[return-value]


def catalog_device(cat: Catalog, name: str, flag: str = "--device") -> Device:
    """``catalog_entry`` of a device."""
    return catalog_entry(cat, "device", name, flag)  # type: ignore[return-value]


def catalog_precision(cat: Catalog, name: str, flag: str = "--precision") -> Precision:
    """``catalog_entry`` of a precision."""
    return catalog_entry(cat, "precision", name, flag)  # type: ignore[return-value]


def catalog_entry(cat: Catalog, kind: str, name: str, flag: str) -> Model | Device | Precision:
    """The catalog's ``kind`` ("model", "device" or "precision") named by ``flag``'s value ``name``.

    An empty (or blank) value is refused naming the flag, an example key and the listing command
    (`--model ''` read "unknown model ''" with three unrelated suggestions); an unknown one keeps the catalog's
    message (did-you-mean and the fix), prefixed with the flag."""
    if not name.strip():
        known = {"model": cat.models, "device": cat.devices, "precision": cat.precisions}[kind]
        example = _EXAMPLE_KEYS[kind] if _EXAMPLE_KEYS[kind] in known else next(iter(known), "")
        raise CatalogError(f"{flag} {name!r}: empty; give a {kind} key, e.g. {flag} {example} "
                           f"(`gpuplan catalog {kind}s` lists them)")
    try:
        return getattr(cat, kind)(name)
    except CatalogError as e:
        raise CatalogError(f"{flag}: {e}") from None


def check_sharding(model: Model, device: Device, tp: int, pp: int, ep: int, engine: str | None,
                   tp_flag: str = "--tp") -> None:
    """Refuse a sharding (``Model.sharding_problem``: tp dividing the heads, pp ≤ layers, ep ≤ experts; tp
    within one server or its scale-up domain, ``Device.gpus_per_node``, ``interconnect_domain_gpus``) or
    an engine (``--engine trtllm`` runs on NVIDIA GPUs only: ``candidates.engine_reason``, the planner's
    rule) the model or device cannot run, naming the flag and the fix."""
    reach = max(device.gpus_per_node, device.interconnect_domain_gpus)
    if problem := model.sharding_problem(tp, pp, ep, max_tp=reach):
        degree, value, why = problem
        raise ModelError(f"{tp_flag if degree == 'tp' else '--' + degree} {value}: {why}")
    if tp > reach:
        # beyond one server and its scale-up domain (a GB200 NVL72 rack: 72) the all-reduce would cross the
        # scale-out network, which the model does not carry (it would take host PCIe, pcie_gb_s); the planner's
        # tensor parallelism stays within one server (candidates.tp_degrees)
        where = (f"one {device.key} server holds {device.gpus_per_node} GPUs" if reach == device.gpus_per_node
                 else f"{device.key}'s scale-up domain holds {reach} GPUs")
        raise ModelError(f"{tp_flag} {tp}: {where}, and tensor parallelism across servers is not modelled; use "
                         f"{tp_flag} <= {reach}, and --pp to spread the model over more GPUs")
    if engine is not None:
        from optimizer.models.params import ENGINES

        if engine not in ENGINES:
            raise ModelError(f"--engine {engine!r}: unknown engine{suggest(engine, ENGINES)}; use "
                             f"{', '.join(ENGINES[:-1])} or {ENGINES[-1]}")
        # the planner's rule, imported only when an engine is named (the planning package loads in ~0.5 s)
        from optimizer.planning.candidates import engine_reason

        if why := engine_reason(device, engine):
            raise ModelError(f"--engine {engine}: {why}")


def check_context(model: Model, input_tokens: float, output_tokens: float, input_p99: float | None = None,
                  output_p99: float | None = None) -> None:
    """A request of the p99 (else the given) prompt + output length must fit in the model's context,
    as a plan's workload must (``workloads.load._check_context``)."""
    prompt = input_p99 if input_p99 is not None else input_tokens
    output = output_p99 if output_p99 is not None else output_tokens
    if prompt + output > model.max_context_tokens:
        flag = ("--output" if output > prompt else "--input") + (
            "-p99" if (output_p99 if output > prompt else input_p99) is not None else "-tokens")
        raise ModelError(f"{flag}: {prompt:,.0f} prompt + {output:,.0f} output tokens are beyond the "
                         f"{model.max_context_tokens:,}-token context of {model.key}; shorten the requests or "
                         "choose a model with a longer context")


def check_batch(batch: int | None, max_batch: int | None, ep: int = 1) -> None:
    """``--batch`` (the replica's running sequences) above ``--max-batch`` × ``--ep`` asks for more running
    sequences than the schedulers admit: ``--max-batch`` is each attention data-parallel rank's cap
    (``configs.build_configs``), so an ep = e replica runs up to e of them."""
    if batch is None or max_batch is None or batch <= max_batch * ep:
        return
    if ep == 1:
        raise ModelError(f"--batch {batch} is above --max-batch {max_batch} (the scheduler runs at most "
                         f"{max_batch} sequences); lower --batch or raise --max-batch")
    raise ModelError(f"--batch {batch} is above --max-batch {max_batch} × --ep {ep} (each of the {ep} attention "
                     f"ranks' schedulers runs at most {max_batch} sequences, the replica {max_batch * ep}); lower "
                     "--batch or raise --max-batch")


def check_qps(qps: float | None) -> None:
    """``--qps`` above the plan file's bound (``workloads.spec.MAX_QPS``, ten million requests/s) is a unit
    slip; at 1e308 the queueing formulas overflowed into RuntimeWarnings on stderr."""
    from workloads.spec import MAX_QPS  # pydantic: not at `gpuplan --help`

    if qps is not None and not qps > 0:  # checked here, before any model runs: a pair's queues warned on stderr first
        raise ModelError(f"request rate must be a positive number of requests per second (got {qps:g}); give --qps > 0")
    if qps is not None and qps > MAX_QPS:
        raise ModelError(f"--qps {qps:g} is above {MAX_QPS:,.0f} requests/s; give the rate of one replica "
                         "in requests per second")
