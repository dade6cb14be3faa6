"""What must be served: workloads with their rates, request sizes and SLOs, and the plan file.

The names below are imported on first use (PEP 562 ``__getattr__``), so importing a
submodule does not load the pydantic specs and the catalog with the package (CLI start-up).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from workloads.load import load_plan, parse_plan, resolve_catalog
    from workloads.spec import SLO, Budget, LengthDist, Plan, Workload

_WHERE = {
    "load_plan": "workloads.load", "parse_plan": "workloads.load", "resolve_catalog": "workloads.load",
    "SLO": "workloads.spec", "Budget": "workloads.spec", "LengthDist": "workloads.spec", "Plan": "workloads.spec",
    "Workload": "workloads.spec",
}

__all__ = ["SLO", "Budget", "LengthDist", "Plan", "Workload", "load_plan", "parse_plan", "resolve_catalog"]


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        value = getattr(importlib.import_module(_WHERE[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'workloads' has no attribute {name!r}")
