"""The measurements shipped inside the package (``optimizer/calibration/data/``).

``calibration.csv`` (TensorRT-LLM tables on H100/A100/L40S) and ``measurements-2026.csv``
(TensorRT-LLM on B200/B300/H200/H100, vLLM on MI300X, NIM), with their sources in
``data/SOURCES.md``. Located with ``importlib.resources``, so the same call works in a
clone, an editable install and an installed wheel; from the repository root the shell
command is ``gpuplan validate optimizer/calibration/data/calibration.csv``.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from catalog.errors import GpuplanError, suggest

SHIPPED_MEASUREMENT_FILES = ("calibration.csv", "measurements-2026.csv")


def shipped_data_dir() -> Path:
    """The folder holding the shipped measurement CSVs and their SOURCES.md."""
    return Path(str(resources.files("optimizer.calibration").joinpath("data")))


def shipped_measurements(name: str = "calibration.csv") -> Path:
    """Path of one shipped measurements CSV (default: the one the shipped parameters were fitted on)."""
    if name not in SHIPPED_MEASUREMENT_FILES:
        raise GpuplanError(f"no shipped measurements file '{name}'{suggest(name, SHIPPED_MEASUREMENT_FILES)}; "
                           f"shipped: {', '.join(SHIPPED_MEASUREMENT_FILES)}")
    path = shipped_data_dir() / name
    if not path.is_file():
        raise GpuplanError(f"{path}: shipped measurements file is missing from the installation; reinstall gpuplan")
    return path
