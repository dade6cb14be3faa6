"""Accelerators, models and precisions: data files with their sources, strict loaders."""

from catalog.errors import CatalogError, GpuplanError
from catalog.load import Catalog, load_catalog
from catalog.schema import Device, Model, Precision

__all__ = [
    "Catalog",
    "CatalogError",
    "Device",
    "GpuplanError",
    "Model",
    "Precision",
    "load_catalog",
]
