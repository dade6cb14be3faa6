"""Load and cross-check a plan file against the catalog."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import ValidationError

from catalog.constants import MAX_WORKLOADS
from catalog.errors import CatalogError, WorkloadError, suggest
from catalog.files import MAX_PLAN_BYTES, format_validation_error, read_yaml, too_deep
from catalog.load import Catalog
from catalog.schema import Model
from workloads.spec import LengthDist, Plan, Workload


def parse_plan(data: dict[str, Any], where: str) -> Plan:
    """Validate a plan mapping, or raise WorkloadError naming ``where`` and the field. A what-if file
    (``base:``/``variants:``/``sweeps:``/``uncertainty:`` and no ``workloads:``) is named as such."""
    if isinstance(data, dict) and "workloads" not in data:
        found = [k for k in ("base", "variants", "sweeps", "uncertainty") if k in data]
        if found:
            raise WorkloadError(f"{where}: is a what-if file (it has {found[0]}:), not a plan; "
                                "run it with `gpuplan whatif`, or give a plan file")
    if isinstance(data, dict) and isinstance(data.get("workloads"), list) and len(data["workloads"]) > MAX_WORKLOADS:
        # before validating them: validation alone takes ~2 ms a workload
        raise WorkloadError(f"{where}: workloads: {len(data['workloads']):,} workloads, over the limit of "
                            f"{MAX_WORKLOADS:,}; split the plan into several")
    try:
        return Plan.model_validate(data)
    except ValidationError as exc:
        raise WorkloadError(format_validation_error(where, exc, Plan)) from None
    except RecursionError:
        raise WorkloadError(f"{where}: {too_deep('field', 'plan')}") from None


def load_plan(path: Path | str) -> Plan:
    path = Path(path)
    return parse_plan(read_yaml(path, "plan", WorkloadError, MAX_PLAN_BYTES), str(path))


def _longest(dist: LengthDist) -> float:
    """The length checked against the context: the p99 (fixed: the value; histogram: its largest bin)."""
    if dist.histogram is not None:
        return max(t for t, _ in dist.histogram)
    return dist.p99_tokens


def _check_draft(draft: Model, target: Model, where: str) -> None:
    """A draft model proposes token ids the target verifies: it must share the target's vocabulary (same size),
    and be smaller (fewer active parameters) to propose faster than the target decodes."""
    if draft.vocab_size != target.vocab_size:
        raise WorkloadError(f"{where}: {draft.key} has a vocabulary of {draft.vocab_size:,} tokens and {target.key} "
                            f"of {target.vocab_size:,}: a draft must use its target's tokenizer; pick a smaller model "
                            "of the target's family")
    if draft.active_params_b >= target.active_params_b:
        raise WorkloadError(f"{where}: {draft.key} ({draft.active_params_b:g}B active parameters) is no smaller than "
                            f"{target.key} ({target.active_params_b:g}B): a draft must be smaller than its target to "
                            "propose tokens faster than it decodes them")


def _check_context(w: Workload, i: int, model: str, context: int, where: str) -> None:
    """A p99 request (p99 prompt + p99 output tokens) must fit in the model's context window."""
    prompt, output = _longest(w.prompt_tokens), _longest(w.output_tokens)
    if prompt + output > context:
        field = "output_tokens" if output > prompt else "prompt_tokens"
        raise WorkloadError(
            f"{where}: workloads[{i}].{field}: '{w.name}' asks for {prompt:,.0f} prompt + {output:,.0f} output "
            f"tokens at p99, beyond the {context:,}-token context of {model}; shorten the requests or "
            "choose a model with a longer context"
        )


def resolve_catalog(plan: Plan, catalog: Catalog, where: str) -> Catalog:
    """Check every name in ``plan`` against ``catalog`` and apply the plan's device and platform overrides.

    Raises WorkloadError naming the field and suggesting the closest known name.
    """
    try:
        if plan.devices:
            catalog = catalog.with_device_overrides(plan.devices, where)
        if plan.platforms:
            catalog = catalog.with_platform_overrides(plan.platforms, where)
    except CatalogError as exc:
        raise WorkloadError(str(exc) if str(exc).startswith(where) else f"{where}: {exc}") from None
    for i, w in enumerate(plan.workloads):
        try:
            model = catalog.model(w.model)
        except CatalogError as exc:
            raise WorkloadError(f"{where}: workloads[{i}].model: {exc}") from None
        _check_context(w, i, model.key, model.max_context_tokens, where)
        if w.speculative is not None and w.speculative.method == "mtp" and catalog.model(w.model).mtp_layers == 0:
            raise WorkloadError(f"{where}: workloads[{i}].speculative.method: '{w.model}' has no multi-token-prediction "
                                "layers (mtp_layers 0, config.json num_nextn_predict_layers); use method eagle or draft")
        if w.speculative is not None and w.speculative.draft_model is not None:
            try:
                draft = catalog.model(w.speculative.draft_model)
            except CatalogError as exc:
                raise WorkloadError(f"{where}: workloads[{i}].speculative.draft_model: {exc}") from None
            _check_draft(draft, model, f"{where}: workloads[{i}].speculative.draft_model")
        for j, p in enumerate(w.precisions):
            if p not in catalog.precisions:
                raise WorkloadError(
                    f"{where}: workloads[{i}].precisions[{j}]: unknown precision '{p}'"
                    f"{suggest(p, catalog.precisions)}; known: {', '.join(catalog.precisions)}"
                )
    for field, names in (("allowed_devices", plan.allowed_devices or []), ("inventory", list(plan.inventory))):
        for name in names:
            key = name.lower()
            if key not in catalog.devices:
                raise WorkloadError(
                    f"{where}: {field}: unknown device '{name}'{suggest(key, catalog.devices)}; "
                    "see `gpuplan catalog devices`"
                )
    return catalog
