#!/usr/bin/env python3
"""Render a gpuplan workbook to PDF and PNG pages so a person can check the layout.

    python scripts/render_workbook.py REPORT.xlsx [--outdir DIR] [--dpi 80]
    python scripts/render_workbook.py --plan-json tests/data/sample_plan.json --outdir DIR

LibreOffice (``soffice``) prints every sheet with the workbook's page setup; ``pdftoppm``
turns the pages into PNGs. The script prints the paths of the PDF and the PNGs.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from catalog.errors import GpuplanError  # noqa: E402
from reports.recalc import pdf_to_png, to_pdf  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workbook", nargs="?", type=Path, help="an .xlsx written by gpuplan")
    parser.add_argument("--plan-json", type=Path, help="write the workbook from this plan result JSON first")
    parser.add_argument("--outdir", type=Path, default=None, help="where the PDF and PNGs go (default: a temp dir)")
    parser.add_argument("--dpi", type=int, default=80, help="PNG resolution (default 80)")
    args = parser.parse_args(argv)
    outdir = args.outdir or Path(tempfile.mkdtemp(prefix="gpuplan-render-"))
    outdir.mkdir(parents=True, exist_ok=True)
    try:
        workbook = args.workbook
        if args.plan_json is not None:
            from reports.result import load_result
            from reports.workbook import write_workbook

            data, _ = load_result(args.plan_json)
            workbook = write_workbook(data, outdir / (args.plan_json.stem + ".xlsx"), inputs=(args.plan_json,))
        if workbook is None:
            parser.error("give a workbook or --plan-json")
        pdf = to_pdf(workbook, outdir)
        pages = pdf_to_png(pdf, outdir, dpi=args.dpi)
    except GpuplanError as exc:
        sys.stderr.write(f"error: {exc}\n")
        return 1
    print(pdf)
    for page in pages:
        print(page)
    return 0


if __name__ == "__main__":
    sys.exit(main())
