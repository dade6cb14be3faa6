"""Checks of one configuration given on the command line (estimate, simulate, roofline).

The planner only enumerates configurations that can exist (``optimizer.planning.candidates``: tp in
{1, 2, 4, 8}, ep up to one server, the engine the device runs); a command that takes ``--tp``,
``--pp``, ``--ep``, ``--engine`` and request lengths from the user must refuse the ones that cannot,
instead of answering for them (``--tp 1000000`` gave 0 GB of weights per GPU and a 0 ms bound).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from catalog.errors import ModelError

if TYPE_CHECKING:
    from catalog.schema import Device, Model


def _divisors(n: int) -> str:
    return ", ".join(str(k) for k in range(1, n + 1) if n % k == 0)


def check_sharding(model: Model, device: Device, tp: int, pp: int, ep: int, engine: str | None,
                   tp_flag: str = "--tp") -> None:
    """Refuse a sharding or engine the model or device cannot run, naming the flag and the fix.

    - ``--tp t``: every GPU holds num_attention_heads / t whole heads, so t must divide the heads
      (vLLM and TensorRT-LLM refuse any other t);
    - ``--pp p``: the p stages hold whole layers, so p ≤ num_layers;
    - ``--ep e``: the e GPUs hold whole routed experts, so e ≤ num_experts (dense models are refused by
      the model itself);
    - ``--engine trtllm`` runs on NVIDIA GPUs only (``candidates.engine_reason``, the planner's rule).
    """
    heads = model.num_attention_heads
    if heads % tp:
        raise ModelError(f"{tp_flag} {tp}: {model.key} has {heads} attention heads, which do not split {tp} ways; "
                         f"use a tp that divides {heads} ({_divisors(heads)})")
    if pp > model.num_layers:
        raise ModelError(f"--pp {pp}: {model.key} has {model.num_layers} layers and each pipeline stage holds "
                         f"whole layers; use pp <= {model.num_layers}")
    if ep > 1 and model.num_experts and ep > model.num_experts:
        raise ModelError(f"--ep {ep}: {model.key} has {model.num_experts} routed experts and each expert-parallel "
                         f"GPU holds whole experts; use ep <= {model.num_experts}")
    if engine is not None:
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


def check_batch(batch: int | None, max_batch: int | None) -> None:
    """``--batch`` above ``--max-batch`` asks for more running sequences than the scheduler admits."""
    if batch is not None and max_batch is not None and batch > max_batch:
        raise ModelError(f"--batch {batch} is above --max-batch {max_batch} (the scheduler runs at most "
                         f"{max_batch} sequences); lower --batch or raise --max-batch")


def check_qps(qps: float | None) -> None:
    """``--qps`` above the plan file's bound (``workloads.spec.MAX_QPS``, ten million requests/s) is a unit
    slip; at 1e308 the queueing formulas overflowed into RuntimeWarnings on stderr."""
    from workloads.spec import MAX_QPS  # pydantic: not at `gpuplan --help`

    if qps is not None and qps > MAX_QPS:
        raise ModelError(f"--qps {qps:g} is above {MAX_QPS:,.0f} requests/s; give the rate of one replica "
                         "in requests per second")
