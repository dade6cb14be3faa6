"""Where each chosen device's price and performance figures come from.

Price basis of the objective's price field (purchase_usd; objective cloud:
cloud_usd_per_gpu_hour):

- ``quoted``: the user's figure — the plan's ``devices:`` section or a ``--catalog`` file set
  it (it differs from the shipped catalog, or the device is not in the shipped catalog);
- ``estimated``: the shipped catalog's estimate, with the basis under ``estimated``;
- ``list``: a sourced catalog price (``sources``);
- ``none``: the device has no such price.
"""

from __future__ import annotations

from catalog.load import builtin_devices
from catalog.schema import Device
from optimizer.results.provenance import PriceBasis


def price_basis(device: Device, field: str) -> tuple[PriceBasis, str]:
    """(basis, where it comes from) of ``device``'s ``field``."""
    value = getattr(device, field)
    if value is None:
        return "none", f"no {field}"
    shipped = builtin_devices().get(device.key)
    if shipped is None or getattr(shipped, field) != value:
        return "quoted", "your figure (plan devices: section or --catalog file)"
    if field in device.estimated:
        return "estimated", device.estimated[field]
    src = device.sources.get(field)
    if src is not None:
        return "list", f"{src.source} ({src.as_of})"
    return "list", "catalog"
