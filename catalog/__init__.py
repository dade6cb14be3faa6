"""Accelerators, models and precisions: data files with their sources, strict loaders.

The names below are imported on first use (PEP 562 ``__getattr__``), not with the package:
``catalog.errors`` is needed by every CLI start-up, the pydantic schema only by commands that
load a catalog (it would add ~0.2 s to ``gpuplan --help``).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from catalog.errors import CatalogError, GpuplanError
    from catalog.load import Catalog, load_catalog
    from catalog.schema import Device, Model, Precision

_WHERE = {
    "Catalog": "catalog.load", "load_catalog": "catalog.load",
    "CatalogError": "catalog.errors", "GpuplanError": "catalog.errors",
    "Device": "catalog.schema", "Model": "catalog.schema", "Precision": "catalog.schema",
}

__all__ = [
    "Catalog",
    "CatalogError",
    "Device",
    "GpuplanError",
    "Model",
    "Precision",
    "load_catalog",
]


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        value = getattr(importlib.import_module(_WHERE[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'catalog' has no attribute {name!r}")
