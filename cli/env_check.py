"""The ``GPUPLAN_*`` environment variables, checked once before any command runs.

The library reads them tolerantly (``optimizer.planning.evaluate.parallel_workers``,
``optimizer.planning.disk_cache.max_bytes``: an unreadable value means the default, since a
worker process must never fail on its environment); the CLI refuses a value it cannot read, so a
typo such as ``GPUPLAN_CACHE_MAX_MB=2O0`` is an error naming the variable, the value and the
fix instead of a run that silently ignores it.
"""

from __future__ import annotations

import difflib
import math
import os
from collections.abc import Mapping

from catalog.errors import GpuplanError

# name → (what a valid value is, the check of one stripped non-empty value)
_RULES = {
    "GPUPLAN_WORKERS": ("a whole number of worker processes >= 1 (1 = serial)",
                        lambda v: _whole_number(v) and int(v) >= 1),
    "GPUPLAN_CACHE_MAX_MB": ("a size in MB, a finite number >= 0",
                             lambda v: _finite_number(v) and float(v) >= 0),
}


KNOWN = (*_RULES, "GPUPLAN_CACHE_DIR")  # every variable gpuplan reads (GPUPLAN_CACHE_DIR: any path, empty = off)


def _whole_number(text: str) -> bool:
    """ASCII digits only, as ``int`` reads them: ``str.isdigit`` alone lets '²' through, which ``int`` refuses."""
    return text.isascii() and text.isdigit()


def _finite_number(text: str) -> bool:
    try:
        return math.isfinite(float(text))
    except ValueError:
        return False


def check_environment(env: Mapping[str, str] | None = None) -> None:
    """Raise a one-line GpuplanError for the first ``GPUPLAN_*`` variable whose value is unreadable.

    Unset or empty means the default and is never an error. A near miss of a known name
    (``GPUPLAN_WORKRES``, ``gpuplan_workers``, which would be ignored) is an error too, as a near-miss column of a
    measurements file is; an unrelated ``GPUPLAN_*`` name is left alone."""
    env = os.environ if env is None else env
    for name in sorted(env):  # case-blind: Linux reads gpuplan_workers and GPUPLAN_Workers as other names
        if name.upper().startswith("GPUPLAN_") and name not in KNOWN and (
                close := difflib.get_close_matches(name.upper(), KNOWN, n=1, cutoff=0.8)):
            raise GpuplanError(f"environment variable {name} is not one gpuplan reads (did you mean {close[0]}?); "
                               f"rename it to {close[0]}, or unset it")
    for name, (valid, ok) in _RULES.items():
        value = env.get(name)
        if value is None or not value.strip():
            continue
        if not ok(value.strip()):
            raise GpuplanError(f"environment variable {name}={value!r} is not {valid}; "
                               f"set it to such a value or unset it (unset = the default)")
