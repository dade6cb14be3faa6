"""Load and cross-check a plan file against the catalog."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import ValidationError

from catalog.errors import CatalogError, WorkloadError, suggest
from catalog.files import format_validation_error, read_yaml
from catalog.load import Catalog
from workloads.spec import Plan


def parse_plan(data: dict[str, Any], where: str) -> Plan:
    """Validate a plan mapping, or raise WorkloadError naming ``where`` and the field."""
    try:
        return Plan.model_validate(data)
    except ValidationError as exc:
        raise WorkloadError(format_validation_error(where, exc, Plan)) from None
    except RecursionError:
        raise WorkloadError(f"{where}: nesting too deep") from None


def load_plan(path: Path | str) -> Plan:
    path = Path(path)
    return parse_plan(read_yaml(path, "plan", WorkloadError), str(path))


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
            catalog.model(w.model)
        except CatalogError as exc:
            raise WorkloadError(f"{where}: workloads[{i}].model: {exc}") from None
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
