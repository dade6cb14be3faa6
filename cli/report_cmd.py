"""`gpuplan report PLAN.json --out REPORT.xlsx`: the finance workbook from a saved plan result.

No re-solve: the workbook is rebuilt from the JSON that `gpuplan optimize --json` wrote
(docs/plan-json.md). A missing or malformed key is one line naming the file and the key.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from catalog.outputs import Output, plan_outputs


def report(
    plan_json: Annotated[Path, typer.Argument(help="A plan result JSON written by `gpuplan optimize --json`.")],
    out: Annotated[str, typer.Option("--out", help="The workbook to write (.xlsx).")],
) -> None:
    """Write the finance workbook (live formulas over named assumptions) from a saved plan result."""
    from reports.result import load_result
    from reports.workbook import workbook_bytes

    outputs = plan_outputs([Output("--out", out, (".xlsx",))], (plan_json,))
    data, _ = load_result(plan_json)
    notes: list[str] = []
    outputs.write({"--out": workbook_bytes(data, (plan_json,), str(plan_json), notes)})
    for note in notes:
        typer.echo(f"warning: {plan_json}: {note}", err=True)
    typer.echo(f"wrote {out}")


def register(app: typer.Typer) -> None:
    app.command("report")(report)
