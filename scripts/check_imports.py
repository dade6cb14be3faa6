"""Print the import graph of optimizer/ and fail on a cycle or on an import against the layering.

Layers (a module may import only its own layer's siblings and layers below it):

    results  <  models  <  calibration
    results, models, workers  <  planning  <  assemble  <  optimize  <  whatif

``workers`` (the process pool) is a leaf like ``results``: standard library only. The what-if
layer is ``whatif.py`` and its ``whatif_*.py`` siblings (max-demand MILP, Monte Carlo).

``results/`` imports nothing else in ``optimizer/``; ``catalog/`` and ``workloads/`` import nothing
of ``optimizer/``, ``reports/`` or ``cli/``; ``optimizer/`` imports neither ``reports/`` nor ``cli/``;
``reports/`` does not import ``cli/``. Every import counts, function-local ones too.

Usage: ``python scripts/check_imports.py [--graph]`` (exit 1 on a violation).
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("catalog", "workloads", "optimizer", "reports", "cli")
# what each layer of optimizer/ may import from optimizer/ (besides itself)
ALLOWED = {
    "results": set(),
    "workers": set(),
    "models": {"results"},
    "calibration": {"results", "models"},
    "planning": {"results", "models", "workers"},
    "assemble": {"results", "models", "planning", "workers"},
    "optimize": {"results", "models", "planning", "assemble", "workers"},
    "whatif": {"results", "models", "planning", "assemble", "optimize", "workers"},
}
FORBIDDEN_TOP = {"catalog": {"optimizer", "reports", "cli"}, "workloads": {"optimizer", "reports", "cli"},
                 "optimizer": {"reports", "cli"}, "reports": {"cli"}}


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path, name: str) -> set[str]:
    """Project modules imported anywhere in the file (absolute names)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative import
                base = name.split(".")[: -node.level] if not path.name == "__init__.py" else name.split(".")
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            out.add(mod)
            out |= {f"{mod}.{a.name}" for a in node.names}
    return {m for m in out if m.split(".")[0] in PACKAGES}


def layer(mod: str) -> str | None:
    """The layer of an optimizer/ module: its first name under optimizer/ (``whatif_*`` modules are ``whatif``)."""
    parts = mod.split(".")
    if parts[0] != "optimizer" or len(parts) < 2:
        return None
    return "whatif" if parts[1].startswith("whatif_") else parts[1]


def main(argv: list[str]) -> int:
    files = {module_name(p): p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))}
    graph = {m: {i for i in imports_of(p, m) if i in files and i != m} for m, p in files.items()}
    problems: list[str] = []
    for m, deps in sorted(graph.items()):
        top = m.split(".")[0]
        for d in sorted(deps):
            if d.split(".")[0] in FORBIDDEN_TOP.get(top, set()):
                problems.append(f"{m} imports {d}: {top}/ must not import {d.split('.')[0]}/")
            lm, ld = layer(m), layer(d)
            if lm in ALLOWED and ld is not None and ld != lm and ld not in ALLOWED[lm]:
                problems.append(f"{m} imports {d}: optimizer/{lm} may import only {sorted(ALLOWED[lm]) or 'nothing'}")
    # cycles between modules (a package's __init__ re-exporting its children is not a cycle)
    def edges(m: str) -> set[str]:
        return {d for d in graph[m] if not (m.startswith(d + ".") and files[d].name == "__init__.py")}
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for d in sorted(edges(m)):
            if state.get(d) == 1:
                problems.append("import cycle: " + " → ".join(stack[stack.index(d):] + [d]))
            elif d not in state:
                visit(d)
        stack.pop()
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m)
    if "--graph" in argv:
        for m in sorted(g for g in graph if g.startswith("optimizer")):
            deps = sorted(d for d in graph[m] if d.startswith("optimizer"))
            print(f"{m}: {', '.join(deps) if deps else '—'}")
    for p in problems:
        print(p, file=sys.stderr)
    print(f"{len(files)} modules, {sum(len(v) for v in graph.values())} project imports, "
          f"{len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
