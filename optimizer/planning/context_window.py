"""Every workload's request lengths cut to its model's context window, and a warning where that leaves much out.

A request whose prompt + output exceeds the model's ``max_context_tokens`` is rejected by the engine (vLLM
``max_model_len``, TensorRT-LLM ``max_seq_len``) and loads no replica. ``optimizer.models.lengths.fit_window``
states the rule (each law cut so that every request fits; a bounded law kept whole); here it is applied to a
plan once, at the front door, so the candidates, the simulator's check and the per-year token volumes all see
the same laws. The fleet is still sized for the stated ``qps`` (conservative by the share left out).
"""

from __future__ import annotations

from catalog.errors import ModelError, WorkloadError
from catalog.load import Catalog
from optimizer.models.lengths import WINDOW_SHARE_WARNED, fit_window
from optimizer.results.plan_result import Diagnostic
from workloads.spec import Plan, Workload


def fit_plan_windows(plan: Plan, catalog: Catalog) -> tuple[Plan, list[Diagnostic]]:
    """``plan`` with each workload's ``prompt_tokens`` / ``output_tokens`` cut to its model's context window,
    and a ``context_window`` warning per workload whose cut leaves out more than ``WINDOW_SHARE_WARNED`` of its
    requests (naming the share, the window and the fix). Workloads that fit come back unchanged (the same
    objects), so a plan within its windows is planned exactly as before."""
    workloads: list[Workload] = []
    notes: list[Diagnostic] = []
    for w in plan.workloads:
        model = catalog.model(w.model)
        try:
            fit = fit_window(w.prompt_tokens, w.output_tokens, model.max_context_tokens)
        except ModelError as exc:
            raise WorkloadError(f"workload '{w.name}': {exc}") from None
        if fit.prompt is w.prompt_tokens and fit.output is w.output_tokens:
            workloads.append(w)
        else:
            workloads.append(w.model_copy(update={"prompt_tokens": fit.prompt, "output_tokens": fit.output}))
        if fit.share_cut > WINDOW_SHARE_WARNED:
            notes.append(Diagnostic(
                "warning", "context_window",
                f"{w.name}: {100 * fit.share_cut:.3g} % of its requests (prompt + output beyond the "
                f"{fit.window_tokens:,}-token context of {model.key}) would be rejected by the engine; the plan "
                f"serves its lengths cut at {fit.prompt_cut_tokens:,.0f} prompt / {fit.output_cut_tokens:,.0f} "
                "output tokens. If those requests must be served, choose a model with a longer context; "
                "otherwise lower the p99 of prompt_tokens / output_tokens, or state the cut with "
                "prompt_tokens: {mean, p99, max}"))
    if all(a is b for a, b in zip(workloads, plan.workloads, strict=True)):
        return plan, notes
    return plan.model_copy(update={"workloads": workloads}), notes
