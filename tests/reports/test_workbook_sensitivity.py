"""The workbook's Sensitivity sheet and Summary warning (issue 15): values labelled as optimizer
outputs, today's prices as live formulas, a tornado bar chart; recalculated by LibreOffice."""

from __future__ import annotations

import zipfile

import openpyxl
import pytest

from catalog import load_catalog
from optimizer.optimize import optimize_plan
from reports.recalc import recalculate, soffice_path
from reports.workbook import write_workbook
from workloads import parse_plan, resolve_catalog

PLAN = {"name": "sens", "allowed_devices": ["h100-sxm", "mi300x", "mi355x", "l40s"],
        "workloads": [{"name": "chat8b", "model": "llama-3.1-8b", "qps": 90,
                       "prompt_tokens": {"mean": 1024, "p99": 4096}, "output_tokens": {"mean": 256, "p99": 1024},
                       "slo": {"ttft_p99_ms": 1000, "tpot_p99_ms": 100}, "precisions": ["bf16", "fp8"]}]}


@pytest.fixture(scope="module")
def result() -> dict:
    plan = parse_plan(PLAN, "t")
    return optimize_plan(plan, resolve_catalog(plan, load_catalog(), "t"), sensitivity=True).to_json()


@pytest.fixture(scope="module")
def xlsx(result, tmp_path_factory):
    return write_workbook(result, tmp_path_factory.mktemp("wb") / "sens.xlsx")


def _rows(ws) -> list[tuple]:
    return [r for r in ws.iter_rows(values_only=True)]


def test_sheet_labels_outputs_and_keeps_prices_live(result, xlsx):
    wb = openpyxl.load_workbook(xlsx)
    ws = wb["Sensitivity"]
    assert "Optimizer outputs" in ws["A2"].value
    formulas = [c.value for r in ws.iter_rows() for c in r if isinstance(c.value, str) and c.value.startswith("=")]
    device = result["sensitivity"]["devices"][0]["device"]
    assert f"=purchase_usd_{device.replace('-', '_')}" in formulas  # today's price: the Assumptions cell
    summary = wb["Summary"]["A3"].value
    estimated = [f["device"] for f in result["fleet"] if f["price_basis"] == "estimated"]
    assert estimated  # the recommended device's price is an estimate (L40S since boards are bought whole)
    for device in estimated:
        assert f"{device.upper()} price is an estimate; enter your quote in Assumptions" in summary
    with zipfile.ZipFile(xlsx) as z:
        charts = [z.read(n).decode() for n in z.namelist() if n.startswith("xl/charts/chart")]
    assert any('barDir val="bar"' in c and "Sensitivity" in c for c in charts)


@pytest.mark.skipif(soffice_path() is None, reason="LibreOffice (soffice) is not installed")
def test_sensitivity_sheet_recalculates(result, xlsx, tmp_path):
    """After LibreOffice recalculates: today's price = the plan's, room = break-even/price − 1,
    each change = the optimizer's objective at that end − the base; no error cells."""
    wb = openpyxl.load_workbook(recalculate(xlsx, tmp_path), data_only=True)
    ws = wb["Sensitivity"]
    rows = _rows(ws)
    s = result["sensitivity"]
    base = s["base_objective_usd"]
    for d in s["devices"]:
        row = next(r for r in rows if r[0] == d["device"])
        assert row[1] == pytest.approx(d["purchase_usd"])
        assert row[2] == pytest.approx(d["break_even_purchase_usd"])
        assert row[3] == pytest.approx(d["break_even_purchase_usd"] / d["purchase_usd"] - 1, rel=1e-6)
    for t in s["tornado"]:
        row = next(r for r in rows if r[0] == t["input"])
        for col, v in ((5, t["low_usd"]), (6, t["high_usd"])):
            assert row[col] == pytest.approx((v - base) if v is not None else 0.0, abs=1e-6)
    errors = [c.coordinate for w in wb.worksheets for r in w.iter_rows() for c in r
              if isinstance(c.value, str) and c.value.startswith(("#", "Err:"))]
    assert not errors
