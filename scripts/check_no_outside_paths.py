"""CI guard: no file of the repository refers to a path outside it.

The product, its tests, scripts and docs must work in a fresh clone with nothing beside
it, and outputs (workbook, JSON) must not cite a local path. This script greps every text
file under the repository root (skipping .git, virtual environments, caches and build
folders) for the two ways such a path appeared: a sibling folder (``..`` + ``/shared``) and
the absolute workspace prefix (``/`` + ``work/``). A comment line that records where a file
was copied from is allowed when it says so: it starts with ``#`` and contains "copied from".

    python scripts/check_no_outside_paths.py [--root DIR]

Exit code 0 when clean; 1 with one ``path:line: text`` per offender.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

# Written in two pieces so that this file does not match itself.
PATTERNS = ("../" + "shared", "/" + "work/")
SKIP_DIRS = {".git", ".venv", "venv", "__pycache__", ".pytest_cache", ".ruff_cache", ".hypothesis",
             "build", "dist", "node_modules"}
ALLOWED_COMMENT = "copied from"
MAX_BYTES = 5_000_000


def _skip_dir(name: str) -> bool:
    return name in SKIP_DIRS or name.endswith(".egg-info")


def _allowed(line: str) -> bool:
    """A comment that explains where a file came from (``# copied from ...``)."""
    stripped = line.strip()
    return stripped.startswith("#") and ALLOWED_COMMENT in stripped.lower()


def offenders(root: Path) -> list[str]:
    """``path:line: text`` for every line under ``root`` that names a path outside the repository."""
    found: list[str] = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not _skip_dir(d))
        for name in sorted(files):
            if name == ".git":  # a worktree's pointer to its repository
                continue
            path = Path(folder) / name
            try:
                if path.stat().st_size > MAX_BYTES:
                    continue
                data = path.read_bytes()
            except OSError:
                continue
            if b"\x00" in data:  # binary (e.g. a workbook or an image)
                continue
            text = data.decode("utf-8", errors="replace")
            for number, line in enumerate(text.splitlines(), start=1):
                if any(p in line for p in PATTERNS) and not _allowed(line):
                    found.append(f"{path.relative_to(root)}:{number}: {line.strip()[:160]}")
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parent.parent,
                        help="repository root to check (default: this script's repository)")
    args = parser.parse_args(argv)
    found = offenders(args.root)
    if found:
        print(f"{len(found)} line(s) refer to a path outside the repository "
              f"(copy the file into the repository and cite its original URL and date):", file=sys.stderr)
        for line in found:
            print(f"  {line}", file=sys.stderr)
        return 1
    print(f"no path outside the repository under {args.root}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
