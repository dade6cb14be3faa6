"""Domain keys as name parts: the one slug rule for MILP variable names and workbook defined names."""

from __future__ import annotations

import re


def slug(text: str) -> str:
    """A domain key as a name part: lower case, runs of characters outside ``[a-z0-9_]`` become ``_``.

    Keys already in that alphabet (``h100_sxm__fp8__tp4__pp1``) pass through unchanged;
    ``h100-sxm`` → ``h100_sxm``; a key with no such character at all → ``x``.
    """
    out = re.sub(r"[^a-z0-9_]+", "_", text.lower()).strip("_")
    return out or "x"
