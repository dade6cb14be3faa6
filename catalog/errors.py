"""The project's error hierarchy.

Every error a user can cause is a :class:`GpuplanError` whose message names the
file, the field, the bad value and the fix. The CLI prints ``str(error)`` on one
line and exits with code 1; anything else is a bug and shows a traceback.
"""

from __future__ import annotations

import difflib
import unicodedata
from collections.abc import Iterable


def figure(value: float) -> str:
    """A figure for a message: 85,000,000 (whole, with separators) from 1,000 up, else 3.35; from 10^15 up
    in powers of ten (1e+308, not 309 digits); a negative value likewise, with its sign."""
    if value < 0:
        return "-" + figure(-value)
    if value >= 1e15:
        return f"{value:.3g}"
    return f"{value:,.0f}" if value >= 1000 else f"{value:g}"


class GpuplanError(Exception):
    """Base class of every error caused by user input or by the environment."""


class CatalogError(GpuplanError):
    """A device, model or precision is unknown, or a catalog file is invalid."""


class WorkloadError(GpuplanError):
    """A plan or workload file is invalid."""


class ModelError(GpuplanError):
    """The performance or serving model cannot evaluate a configuration."""


class SolverError(GpuplanError):
    """The MILP solver failed or is missing."""


class OutputError(GpuplanError):
    """An output file cannot be written safely."""


def suggest(name: str, known: Iterable[str], n: int = 3) -> str:
    """Return ``" (did you mean 'a', 'b'?)"`` for the closest known names, or ``""``."""
    known = list(known)
    close = difflib.get_close_matches(name, known, n=n, cutoff=0.5)
    if not close:
        lowered = name.lower()
        close = [k for k in known if lowered in k.lower() or k.lower() in lowered][:n]
    # a look-alike letter (Cyrillic 'х' in 'h100-sхm') prints the same as the key it misses: name it
    foreign = next(((i, ch) for i, ch in enumerate(name) if not ch.isascii()), None)
    note = (f"{'; ' if close else ''}its character {foreign[0] + 1} is U+{ord(foreign[1]):04X} "
            f"{unicodedata.name(foreign[1], 'unnamed')}, not ASCII" if foreign else "")
    if not close and not note:
        return ""
    return " (" + ("did you mean " + ", ".join(f"'{c}'" for c in close) + "?" if close else "") + note + ")"
