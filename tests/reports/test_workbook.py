"""The finance workbook: structure, injection safety, safe writes, and recalculation.

Recalculation tests open the workbook in LibreOffice headless (which computes every
formula), read the values back with openpyxl and compare them with the plan result's
figures; they are skipped, with the reason in the summary, only where ``soffice`` is
missing. Inputs: tests/data/sample_plan.json (written by `gpuplan optimize
tests/data/sample_plan.yaml --json tests/data/sample_plan.json`: an HGX H100 board and PCIe L40S
servers, a capex budget, colocation, a 5-year life) and the chat-fleet example's real result.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import zipfile
from pathlib import Path

import openpyxl
import pytest

from catalog.errors import OutputError
from reports import styles
from reports.context import HEADER_ROW, INPUT_NAMES, OUTPUT_NAMES
from reports.recalc import pdf_to_png, recalculate, soffice_path, to_pdf
from reports.result import PlanResultError
from reports.workbook import SHEETS, build_workbook, write_workbook
from reports.xl import is_valid_name
from tests.conftest import EXAMPLES, REPO, TEST_DATA

DATA = TEST_DATA
SAMPLE = DATA / "sample_plan.json"
REL = 1e-4  # 0.01 %

needs_soffice = pytest.mark.skipif(
    soffice_path() is None,
    reason="LibreOffice (soffice) is not installed: workbook RECALCULATION NOT CHECKED; "
           "install libreoffice-calc-nogui (CI's .ci/run does)",
)

INJECTIONS = ['=HYPERLINK("http://x","y")', "+cmd|' /C calc'!A0", "@SUM(A1)", "-2+3", "\t=1+1", "\r=2+2"]


def load_sample() -> dict:
    return json.loads(SAMPLE.read_text(encoding="utf-8"))


def name_cell(wb, name: str):
    """The cell a workbook-level defined name points to."""
    ((sheet, coord),) = list(wb.defined_names[name].destinations)
    return wb[sheet][coord.replace("$", "")]


def named_values(path: Path) -> dict[str, object]:
    wb = openpyxl.load_workbook(path, data_only=True)
    try:
        return {n: name_cell(wb, n).value for n in wb.defined_names}
    finally:
        wb.close()


@pytest.fixture(scope="module")
def sample_xlsx(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wb") / "sample.xlsx"
    return write_workbook(load_sample(), out, inputs=(SAMPLE,))


@pytest.fixture(scope="module")
def sample_wb(sample_xlsx):
    wb = openpyxl.load_workbook(sample_xlsx)
    yield wb
    wb.close()


# ---------------------------------------------------------------- structure


def test_sheets_in_order(sample_wb):
    assert sample_wb.sheetnames == list(SHEETS)


def test_inputs_and_totals_are_defined_names(sample_wb):
    names = set(sample_wb.defined_names)
    devices = ("h100_sxm", "l40s")
    expected_inputs = set(INPUT_NAMES) | {"api_usd_per_million_output_tokens", "api_usd_per_million_input_tokens"}
    expected_inputs |= {f"{p}_{d}" for p in ("purchase_usd", "cloud_usd_per_gpu_hour", "tdp_w") for d in devices}
    assert expected_inputs <= names
    assert set(OUTPUT_NAMES) | {"api_cost_usd", "break_even_output_tokens_per_year"} <= names
    for n in expected_inputs:
        cell = name_cell(sample_wb, n)
        assert cell.parent.title == "Assumptions", n
        assert cell.data_type in ("n", "s") and cell.value is not None, n
    for n in OUTPUT_NAMES:
        assert name_cell(sample_wb, n).parent.title == "Summary", n
        assert name_cell(sample_wb, n).data_type == "f", n
    assert all(is_valid_name(n) for n in names)
    assert name_cell(sample_wb, "purchase_usd_h100_sxm").value == 27839.0
    assert name_cell(sample_wb, "pue").value == 1.3


@pytest.mark.parametrize("name,ok", [
    ("pue", True), ("horizon_years", True), ("purchase_usd_h100_sxm", True), ("A1", False), ("pue1", False),
    ("XFD1048576", False), ("R1C1", False), ("r", False), ("C", False), ("1abc", False), ("has space", False),
    ("TRUE", False),
])
def test_defined_name_validity(name, ok):
    assert is_valid_name(name) is ok


def test_money_figures_are_formulas(sample_wb):
    """Every currency cell on Summary, Fleet, Costs by year is a formula (or a structural 0)."""
    allowed_values = {("Summary", "Best single-device fleet")}  # the optimizer's figure for another fleet
    for title in ("Summary", "Fleet", "Costs by year"):
        ws = sample_wb[title]
        for row in ws.iter_rows():
            for cell in row:
                if "$" not in cell.number_format or cell.value is None:
                    continue
                label = str(ws.cell(row=cell.row, column=1).value or "")
                if any(title == t and label.startswith(p) for t, p in allowed_values):
                    continue
                assert cell.data_type == "f" or cell.value == 0, f"{title}!{cell.coordinate} = {cell.value!r}"


def test_fleet_formulas_reference_assumptions(sample_wb):
    ws = sample_wb["Fleet"]
    header = [c.value for c in ws[4]]
    row = {h: ws.cell(row=5, column=i + 1).value for i, h in enumerate(header)}
    assert row["Device"] == "h100-sxm"
    assert row["Unit price ($ per GPU)"] == "=purchase_usd_h100_sxm"
    # GPUs bought (D) × unit price (I); the HGX board's server price is its platform's named cell.
    assert row["GPU extended price ($)"] == '=IF(objective="cloud",0,D5*I5)'
    # GPUs bought: the board's servers (G) × its GPUs per purchase (F), a live formula
    assert row["GPUs bought"] == "=G5*F5" and row["GPUs per purchase (server or instance)"] == 8
    assert row["Server price ($ each)"] == "=server_usd_hgx_h100_8"
    assert "network_usd_per_server" in row["Servers and network ($)"]
    assert "tdp_w_h100_sxm" in row["IT power (kW)"] and "server_power_w_hgx_h100_8" in row["IT power (kW)"]
    for name in ("power_utilization", "pue", "hours_per_year", "electricity_usd_per_kwh"):
        assert name in row["Power per year ($)"]
    assert "maintenance_fraction_per_year" in row["Maintenance per year ($)"]
    summary = sample_wb["Summary"]
    assert name_cell(sample_wb, "tco_usd").value == "=capex_usd+horizon_years*annual_opex_usd"
    assert "discount_rate" in name_cell(sample_wb, "npv_usd").value
    assert summary.freeze_panes == "A5"


def test_number_formats(sample_wb):
    assert name_cell(sample_wb, "tco_usd").number_format == styles.USD
    assert name_cell(sample_wb, "cost_per_million_output_tokens_usd").number_format == styles.USD_CENTS
    assert name_cell(sample_wb, "discount_rate").number_format == styles.PCT
    assert name_cell(sample_wb, "maintenance_fraction_per_year").number_format == styles.PCT
    assert name_cell(sample_wb, "output_tokens_per_year").number_format == styles.THOUSANDS
    assert name_cell(sample_wb, "gpus_total").number_format == styles.THOUSANDS
    # numbers are stored as numbers, not text
    ws = sample_wb["Deployments"]
    assert isinstance(ws["F5"].value, int) and ws["F5"].data_type == "n"


EXPECTED_TABLES = {
    "Fleet": {"FleetTable"}, "Deployments": {"DeploymentsTable"}, "Workloads": {"WorkloadsTable"},
    "Costs by year": {"CostsByYearTable"}, "Assumptions": {"AssumptionsTable", "DevicePricesTable", "PlatformsTable"},
    "Candidates": {"CandidatesTable"}, "Method": {"ReconciliationTable", "DiagnosticsTable", "SourcesTable"},
}


def test_tables_frozen_headers_and_page_setup(sample_wb):
    seen: set[str] = set()
    for title, tables in EXPECTED_TABLES.items():
        ws = sample_wb[title]
        assert set(ws.tables) == tables, title
        for t in ws.tables.values():
            assert t.name not in seen
            seen.add(t.name)
            cells = ws[t.ref]
            headers = [c.value for c in cells[0]]
            assert all(isinstance(h, str) and h for h in headers) and len(set(headers)) == len(headers)
            assert len(cells) >= 2, f"{t.name} has no data row"
        if title != "Method":
            assert ws.freeze_panes in ("A5", "B5"), title
        assert ws.page_setup.orientation == "landscape"
        assert ws.page_setup.fitToWidth == 1 and ws.page_setup.fitToHeight == 0
        assert ws.sheet_properties.pageSetUpPr.fitToPage
    assert sample_wb["Fleet"].print_title_rows == "$4:$4"
    assert not any(ws.merged_cells.ranges for ws in sample_wb.worksheets)


def test_conditional_formatting_and_validation(sample_wb):
    ws = sample_wb["Deployments"]
    rules = [r for cf in ws.conditional_formatting for r in cf.rules]
    assert len(rules) == 6  # met / missed for TTFT, TPOT and E2E (the sample predicts E2E, with no E2E SLO)
    assert all("!" not in f for r in rules for f in r.formula)  # same-sheet references only
    dv = sample_wb["Assumptions"].data_validations.dataValidation
    assert len(dv) == 1 and dv[0].formula1 == '"tco,capex,cloud"'


def test_charts_present(sample_xlsx):
    wb = build_workbook(load_sample())
    charts = wb["Summary"]._charts
    assert [c.tagname for c in charts] == ["barChart", "lineChart"]
    with zipfile.ZipFile(sample_xlsx) as z:
        names = z.namelist()
    assert sum(n.startswith("xl/charts/chart") for n in names) == 2


def test_infeasible_result_still_writes(tmp_path):
    r = load_sample()
    r.update(status="infeasible", status_detail="workload 'chat' cannot meet ttft_p99_ms 2000 on any device",
             fleet=[], deployments=[], candidates=[], single_device_best=None)
    for w in r["workloads"]:
        w["met"] = False
    path = write_workbook(r, tmp_path / "inf.xlsx")
    wb = openpyxl.load_workbook(path)
    assert "FleetTable" not in wb["Fleet"].tables
    assert any(c.value == "infeasible" for row in wb["Summary"].iter_rows() for c in row)
    wb.close()


def test_infeasible_result_names_its_reasons_in_the_risks(tmp_path):
    # `gpuplan report` of an infeasible result: the answer in words said "Nothing to buy" and, under Risks,
    # "No estimated prices, idle GPUs or warnings in this plan" - not why there is no fleet. The error
    # diagnostics (the binding limit and the smallest value that makes the plan feasible) are the risks now.
    r = load_sample()
    binding = ("budget.capex_usd = $1 binds: the smallest value that makes the plan feasible (other limits kept) "
               "is $38,600")
    r.update(status="infeasible", status_detail="no fleet satisfies every constraint", fleet=[], deployments=[],
             candidates=[], single_device_best=None,
             diagnostics=[{"level": "error", "code": "binding_capex_budget", "message": binding}])
    for w in r["workloads"]:
        w["met"] = False
    wb = openpyxl.load_workbook(write_workbook(r, tmp_path / "inf.xlsx"))
    cells = [str(c.value) for row in wb["Summary"].iter_rows() for c in row if c.value is not None]
    risks = cells[cells.index("Risks") + 1:]
    assert risks[0].startswith("Error: budget.capex_usd = $1 binds") and "$38,600" in " ".join(risks[:3])
    assert not any("No errors" in c for c in cells)
    wb.close()


def test_sensitivity_sheet_says_why_it_was_skipped(tmp_path):
    """A plan not proven optimal has no sensitivity: the sheet quotes the warning, not --no-sensitivity."""
    r = load_sample()
    message = "sensitivity not computed: the plan is not proven optimal (gap 5.0 % to its lower bound)"
    r.update(status="feasible", sensitivity=None)
    r["diagnostics"].append({"level": "warning", "code": "sensitivity_skipped", "message": message})
    wb = openpyxl.load_workbook(write_workbook(r, tmp_path / "skipped.xlsx"))
    text = wb["Sensitivity"].cell(HEADER_ROW, 1).value
    wb.close()
    assert message in text and "--no-sensitivity" not in text


# ---------------------------------------------------------------- safety


def injected_result() -> dict:
    r = load_sample()
    bad_dev, bad_wl = INJECTIONS[0], INJECTIONS[1]
    r["plan_name"] = INJECTIONS[2]
    r["status_detail"] = INJECTIONS[4]
    r["input_file"] = INJECTIONS[5]
    for row in r["fleet"]:
        if row["device"] == "h100-sxm":
            row["device"] = bad_dev
    for coll in (r["deployments"], r["candidates"], r["sources"]):
        for row in coll:
            if row["device"] == "h100-sxm":
                row["device"] = bad_dev
    for coll, key in ((r["deployments"], "workload"), (r["candidates"], "workload"), (r["workloads"], "name")):
        for row in coll:
            if row[key] == "chat":
                row[key] = bad_wl
    r["workloads"][1]["model"] = INJECTIONS[3]
    r["diagnostics"].append({"level": "warning", "code": "x", "message": '=HYPERLINK("http://evil","click")'})
    r["single_device_best"]["device"] = bad_dev
    return r


def test_text_never_becomes_formula(tmp_path):
    path = write_workbook(injected_result(), tmp_path / "inj.xlsx")
    wb = openpyxl.load_workbook(path)
    found = set()
    for ws in wb.worksheets:
        for row in ws.iter_rows():
            for cell in row:
                if cell.data_type == "f":
                    text = str(cell.value)
                    assert "HYPERLINK" not in text and "cmd|" not in text and "SUM(A1)" not in text, cell.coordinate
                    continue
                if isinstance(cell.value, str):
                    for payload in INJECTIONS:
                        # XML turns a carriage return into a line feed; the text stays text
                        if cell.value.endswith(payload.replace("\r", "\n")):
                            found.add(payload)
                            assert cell.data_type == "s"
                            assert cell.quotePrefix or cell.value[:1] not in "=+-@\t\r\n"
    assert found == set(INJECTIONS)
    # defined names stay valid: the injected device key becomes a plain identifier
    assert all(is_valid_name(n) for n in wb.defined_names)
    assert "purchase_usd_hyperlink_http_x_y" in wb.defined_names
    wb.close()
    with zipfile.ZipFile(path) as z:
        for n in z.namelist():
            if n.startswith("xl/worksheets/sheet"):
                xml = z.read(n).decode()
                for chunk in xml.split("<f>")[1:]:
                    formula = chunk.split("</f>")[0]
                    assert "HYPERLINK" not in formula and "cmd|" not in formula
            assert "hyperlink" not in n.lower()  # no hyperlink relationships


def test_illegal_control_characters_are_dropped(tmp_path):
    r = load_sample()
    r["status_detail"] = "gap\x00 0.1\x07 %"
    path = write_workbook(r, tmp_path / "ctl.xlsx")
    wb = openpyxl.load_workbook(path)
    assert any(c.value == "gap 0.1 %" for row in wb["Method"].iter_rows() for c in row)
    wb.close()


def test_refuses_to_overwrite_input(tmp_path):
    src = tmp_path / "plan.xlsx"
    src.write_bytes(b"not really a workbook")
    with pytest.raises(OutputError, match="input file"):
        write_workbook(load_sample(), src, inputs=(src,))
    assert src.read_bytes() == b"not really a workbook"
    with pytest.raises(OutputError, match="input file"):
        write_workbook(load_sample(), tmp_path / "." / "plan.xlsx", inputs=(str(src),))


def test_rejects_non_xlsx_and_missing_directory(tmp_path):
    with pytest.raises(OutputError, match=".xlsx"):
        write_workbook(load_sample(), tmp_path / "report.json")
    with pytest.raises(OutputError, match="does not exist"):
        write_workbook(load_sample(), tmp_path / "nope" / "report.xlsx")


def test_failed_run_leaves_earlier_report_untouched(tmp_path, monkeypatch):
    out = tmp_path / "report.xlsx"
    write_workbook(load_sample(), out)
    before = out.read_bytes()
    bad = load_sample()
    del bad["assumptions"]["pue"]
    with pytest.raises(PlanResultError, match=r"assumptions\.pue"):
        write_workbook(bad, out)
    assert out.read_bytes() == before

    def broken_replace(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OutputError, match="No space left on device"):  # one line, not a traceback
        write_workbook(load_sample(), out)
    assert out.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.xlsx"]  # no temporary file left


# ---------------------------------------------------------------- CLI


def test_report_cli_writes_workbook(run_cli, tmp_path):
    out = tmp_path / "r.xlsx"
    r = run_cli("report", SAMPLE, "--out", out)
    assert r.code == 0, r.stderr
    assert out.is_file() and str(out) in r.stdout


def test_report_reads_a_result_beyond_the_input_limit_of_hand_written_files(run_cli, tmp_path):
    # hostile round 23: `optimize` wrote a 32,263,261-byte result for 10,000 workloads that `report` refused (over
    # the 20,000,000-byte limit of every input); a result is held to MAX_RESULT_BYTES (200 MB) instead. The sample
    # result padded with trailing whitespace (valid JSON) to just past 20 MB stands in for it
    big = tmp_path / "big.json"
    big.write_bytes(SAMPLE.read_bytes() + b" " * (20_000_001 - SAMPLE.stat().st_size))
    r = run_cli("report", big, "--out", tmp_path / "r.xlsx")
    assert r.code == 0, r.stderr
    assert (tmp_path / "r.xlsx").is_file()


def test_report_cli_warns_when_the_jsons_totals_are_not_its_rows(run_cli, tmp_path):
    # a hand-edited price: the workbook's formulas use the rows (8 × $17,839 + the rest = $382,712 of capex) while
    # the file still says $462,712; the report used to say only "wrote", the difference hidden on the Method sheet
    data = load_sample()
    data["fleet"][0]["purchase_usd"] = 17_839.0
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(data))
    out = tmp_path / "r.xlsx"
    r = run_cli("report", plan, "--out", out)
    assert r.code == 0 and out.is_file()
    lines = r.stderr.splitlines()
    assert lines[0] == (f"warning: {plan}: the plan result's capex_usd ($462,712) is not what its fleet rows and "
                        "assumptions give ($382,712); this workbook's formulas use the rows (a hand-edited file, or "
                        "one from another gpuplan version?)")
    assert "tco_usd ($709,375)" in lines[1]
    # objective tco: its objective_usd is the TCO, which the rows give otherwise as well (hostile round 26: an
    # objective_usd edited to -5 was printed on the Summary without a word)
    assert "objective_usd ($709,375)" in lines[2] and len(lines) == 3
    method = openpyxl.load_workbook(out)["Method"]
    assert any("capex_usd ($462,712)" in str(c.value) for row in method.iter_rows() for c in row)
    unedited = run_cli("report", SAMPLE, "--out", tmp_path / "s.xlsx")
    assert unedited.code == 0 and unedited.stderr == ""


def test_report_warns_of_an_objective_its_rows_do_not_give(run_cli, tmp_path):
    """Hostile round 26: objective_usd edited to -5 (capex and TCO untouched) was written without a word."""
    data = load_sample()
    data["objective_usd"] = -5.0
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(data))
    r = run_cli("report", plan, "--out", tmp_path / "r.xlsx")
    assert r.code == 0, r.stderr
    assert r.stderr.splitlines() == [f"warning: {plan}: the plan result's objective_usd ($-5) is not what its fleet "
                                     "rows and assumptions give ($709,375); this workbook's formulas use the rows (a "
                                     "hand-edited file, or one from another gpuplan version?)"]


def test_report_warning_names_a_huge_total_in_powers_of_ten(run_cli, tmp_path):
    """Hostile round 26: capex_usd edited to 1.7e308 was printed as its 309 digits (with separators, ~400
    characters); the rows still give $462,712."""
    data = load_sample()
    data["capex_usd"] = 1.7e308
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(data))
    r = run_cli("report", plan, "--out", tmp_path / "r.xlsx")
    assert r.code == 0, r.stderr
    assert r.stderr.splitlines()[0] == (f"warning: {plan}: the plan result's capex_usd ($1.7e+308) is not what its "
                                        "fleet rows and assumptions give ($462,712); this workbook's formulas use the "
                                        "rows (a hand-edited file, or one from another gpuplan version?)")


@pytest.mark.parametrize("mutate,needle", [
    (lambda d: d.pop("assumptions"), "assumptions: required field is missing"),
    (lambda d: d["fleet"][0].pop("gpus"), "fleet.0.gpus: required field is missing"),
    (lambda d: d["assumptions"].update(horizon_years="three"), "assumptions.horizon_years"),
    (lambda d: d.update(status="done"), "status"),
    (lambda d: d["deployments"][1].update(replicas=-1), "deployments.1.replicas"),
    # an n+1-node placement half stated: the workbook read 'at most 2 per server, on None servers of their own'
    (lambda d: d["deployments"][0].update(replicas_per_server=2), "deployments[0]: replicas_per_server 2 and "
     "dedicated_servers None do not state a placement of its 4 replicas"),
    (lambda d: d["deployments"][0].update(replicas_per_server=2, dedicated_servers=5), "dedicated_servers 5"),
])
def test_report_cli_bad_key_is_one_line(run_cli, tmp_path, mutate, needle):
    data = load_sample()
    mutate(data)
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(data))
    out = tmp_path / "r.xlsx"
    r = run_cli("report", plan, "--out", out)
    assert r.code == 1
    assert r.stderr.startswith(f"error: {plan}: ") and needle in r.stderr
    assert r.stderr.count("\n") == 1
    assert not out.exists()


@pytest.mark.parametrize("content,needle", [
    ("{", "not valid JSON"), ("[]", "expected a JSON object"), ('{"gpus_total": NaN}', "not valid JSON"),
])
def test_report_cli_bad_json(run_cli, tmp_path, content, needle):
    plan = tmp_path / "plan.json"
    plan.write_text(content)
    r = run_cli("report", plan, "--out", tmp_path / "r.xlsx")
    assert r.code == 1 and needle in r.stderr and str(plan) in r.stderr


def test_report_cli_missing_file_and_same_path(run_cli, tmp_path):
    r = run_cli("report", tmp_path / "none.json", "--out", tmp_path / "r.xlsx")
    assert r.code == 1 and "not found" in r.stderr
    plan = tmp_path / "plan.xlsx"
    plan.write_text(SAMPLE.read_text())
    r = run_cli("report", plan, "--out", plan)
    assert r.code == 1 and "input file" in r.stderr
    assert plan.read_text() == SAMPLE.read_text()


# ---------------------------------------------------------------- recalculation


def assert_totals_match(values: dict, result: dict) -> None:
    for key in ("capex_usd", "annual_opex_usd", "annual_power_usd", "annual_maintenance_usd", "annual_cloud_usd",
                "tco_usd", "npv_usd", "objective_usd", "cost_per_million_output_tokens_usd", "power_kw",
                "gpus_total", "nodes_total", "output_tokens_per_year"):
        if result.get(key) is None:
            continue
        assert values[key] == pytest.approx(result[key], rel=REL, abs=1e-6), key


def fleet_rows(path: Path) -> dict[str, dict]:
    wb = openpyxl.load_workbook(path, data_only=True)
    ws = wb["Fleet"]
    header = [c.value for c in ws[4]]
    rows = {}
    for r in ws.iter_rows(min_row=5, values_only=True):
        if r[0] in (None, "Total"):
            break
        rows[r[0]] = dict(zip(header, r, strict=True))
    wb.close()
    return rows


def workload_rows(path: Path) -> dict[str, dict]:
    wb = openpyxl.load_workbook(path, data_only=True)
    ws = wb["Workloads"]
    header = [c.value for c in ws[4]]
    rows = {r[0]: dict(zip(header, r, strict=True)) for r in ws.iter_rows(min_row=5, values_only=True)
            if r[0] not in (None, "Total")}
    wb.close()
    return rows


def check_recalculated(recalced: Path, result: dict) -> None:
    values = named_values(recalced)
    assert_totals_match(values, result)
    fleet = fleet_rows(recalced)
    for f in result["fleet"]:
        row = fleet[f["device"]]
        if result["objective"] != "cloud":
            bought = f.get("gpus_installed", f["gpus"])  # whole boards: idle GPUs are bought too
            assert row["GPU extended price ($)"] == pytest.approx(bought * f["purchase_usd"], rel=REL)
        assert row["Capex ($)"] == pytest.approx(f["capex_usd"], rel=REL, abs=1e-6)
        assert row["IT power (kW)"] == pytest.approx(f["power_kw"], rel=REL)
    workloads = workload_rows(recalced)
    for w in result["workloads"]:
        if w.get("cost_per_million_output_tokens_usd") is not None:
            got = workloads[w["name"]]["Cost per million output tokens ($)"]
            assert got == pytest.approx(w["cost_per_million_output_tokens_usd"], rel=REL), w["name"]
    # Costs by year: the last cumulative figures are the TCO and the NPV
    wb = openpyxl.load_workbook(recalced, data_only=True)
    ws = wb["Costs by year"]
    last = 5 + result["assumptions"]["horizon_years"]
    assert ws.cell(row=last, column=8).value == pytest.approx(result["tco_usd"], rel=REL)
    assert ws.cell(row=last, column=11).value == pytest.approx(result["npv_usd"], rel=REL)
    # Method's reconciliation shows no difference
    for row in wb["Method"].iter_rows(values_only=True):
        if row[0] in ("TCO", "Capex", "NPV") and isinstance(row[3], float):
            assert abs(row[3]) < REL
    errors = [f"{ws.title}!{c.coordinate}={c.value}" for ws in wb.worksheets for r in ws.iter_rows() for c in r
              if isinstance(c.value, str) and c.value.startswith(("#", "Err:"))]
    assert not errors
    wb.close()


@pytest.fixture(scope="module")
def sample_recalc(sample_xlsx, tmp_path_factory) -> Path:
    if soffice_path() is None:
        pytest.skip(needs_soffice.kwargs["reason"])
    return recalculate(sample_xlsx, tmp_path_factory.mktemp("recalc"))


@needs_soffice
def test_recalculated_totals_equal_plan_figures(sample_recalc):
    check_recalculated(sample_recalc, load_sample())


@needs_soffice
def test_recalculated_api_comparison(sample_recalc):
    """API cost = 3 × out × $2/M (no input price); break-even = TCO / API cost × volume."""
    r = load_sample()
    v = named_values(sample_recalc)
    api = 3 * r["output_tokens_per_year"] * 2.0 / 1e6
    assert v["api_cost_usd"] == pytest.approx(api, rel=REL)
    assert v["break_even_output_tokens_per_year"] == pytest.approx(r["tco_usd"] / api * r["output_tokens_per_year"],
                                                                   rel=REL)


@needs_soffice
def test_no_hash_marks(sample_recalc):
    """Every number fits its column: formatted width below the column width (no #####)."""
    from reports.xl import _display_width

    wb = openpyxl.load_workbook(sample_recalc, data_only=True)
    src = openpyxl.load_workbook(sample_recalc)
    for ws in wb.worksheets:
        for row in ws.iter_rows():
            for cell in row:
                if isinstance(cell.value, int | float) and not isinstance(cell.value, bool):
                    letter = cell.column_letter
                    width = ws.column_dimensions[letter].width or 8.43
                    need = _display_width(cell.value, src[ws.title][cell.coordinate].number_format)
                    assert need <= width, f"{ws.title}!{cell.coordinate} {cell.value} needs {need} > {width}"
    wb.close()
    src.close()


def edit_and_recalc(src: Path, tmp: Path, edits: dict[str, object]) -> Path:
    """Change named input cells with openpyxl, save, recalculate with LibreOffice."""
    wb = openpyxl.load_workbook(src)
    for name, value in edits.items():
        name_cell(wb, name).value = value
    tmp.mkdir(parents=True, exist_ok=True)
    edited = tmp / "edited.xlsx"
    wb.save(edited)
    wb.close()
    return recalculate(edited, tmp / "out")


@needs_soffice
def test_price_change_recalculates(sample_xlsx, sample_recalc, tmp_path):
    """H100 $27,839 → $30,000 on the 8 GPUs of one HGX board: capex +$17,288; maintenance 5 %/yr
    (+$864.40) over 3 years → TCO +$19,881.20 (colocation is per kW: unchanged)."""
    before = named_values(sample_recalc)
    after = named_values(edit_and_recalc(sample_xlsx, tmp_path, {"purchase_usd_h100_sxm": 30000.0}))
    d_capex = 8 * (30000 - 27839)
    assert d_capex == 17_288
    assert after["capex_usd"] - before["capex_usd"] == pytest.approx(d_capex, rel=1e-9)
    assert after["annual_maintenance_usd"] - before["annual_maintenance_usd"] == pytest.approx(864.4, rel=1e-9)
    assert after["annual_power_usd"] == pytest.approx(before["annual_power_usd"], rel=1e-12)
    assert after["annual_facility_usd"] == pytest.approx(before["annual_facility_usd"], rel=1e-12)
    assert after["tco_usd"] - before["tco_usd"] == pytest.approx(19_881.2, rel=1e-9)
    npv_delta = d_capex + 864.4 * sum(1 / 1.08 ** y for y in (1, 2, 3))
    assert after["npv_usd"] - before["npv_usd"] == pytest.approx(npv_delta, rel=1e-9)
    tokens_m = 3 * before["output_tokens_per_year"] / 1e6
    assert after["cost_per_million_output_tokens_usd"] - before["cost_per_million_output_tokens_usd"] == (
        pytest.approx(19_881.2 / tokens_m, rel=1e-6))
    assert after["break_even_output_tokens_per_year"] > before["break_even_output_tokens_per_year"]


def _fleet_tco_usd(rows: list[dict], prices: dict[str, float], a: dict) -> float:
    """TCO of a fleet recomputed from its bill of materials (docs/plan-json.md), independently of the workbook."""
    capex = kw = racks = 0.0
    for f in rows:
        g = f["gpus_installed"]
        capex += g * prices.get(f["device"], f["purchase_usd"]) + f["nodes"] * (f["server_usd"] + a["network_usd_per_server"])
        kw += (g * f["tdp_w"] + f["nodes"] * f["server_power_w"]) / 1000
        racks += f["nodes"] * f["rack_units"] / a["rack_units_per_rack"]
    power = kw * a["power_utilization"] * a["pue"] * 8760 * a["electricity_usd_per_kwh"]
    facility = 12 * (a["colocation_usd_per_kw_month"] * kw + a["colocation_usd_per_rack_month"] * racks)
    opex = power + capex * a["maintenance_fraction_per_year"] + facility
    return capex + a["horizon_years"] * opex


@needs_soffice
def test_price_edit_keeps_every_saving_consistent(sample_xlsx, sample_recalc, tmp_path):
    """Edit the H100 price (the best one-device fleet is all H100): that fleet, the mixing saving, the API saving and
    every sentence that quotes them follow, each equal to a recomputation from the bills of materials."""
    result = load_sample()
    a = result["assumptions"]
    single = result["single_device_best"]
    before = named_values(sample_recalc)
    assert before["one_device_usd"] == pytest.approx(single["objective_usd"], rel=REL)
    for price in (20_000.0, 45_000.0):
        got = named_values(edit_and_recalc(sample_xlsx, tmp_path / f"p{price:.0f}", {"purchase_usd_h100_sxm": price}))
        plan_tco = _fleet_tco_usd(result["fleet"], {"h100-sxm": price}, a)
        single_tco = _fleet_tco_usd(single["fleet"], {"h100-sxm": price}, a)
        assert got["tco_usd"] == pytest.approx(plan_tco, rel=1e-9)
        assert got["one_device_usd"] == pytest.approx(single_tco, rel=1e-9)
        assert got["mixing_saving_usd"] == pytest.approx(single_tco - plan_tco, rel=1e-9)
        assert got["mixing_saving_fraction"] == pytest.approx((single_tco - plan_tco) / single_tco, rel=1e-9)
        api = 3 * result["output_tokens_per_year"] * 2.0 / 1e6
        assert got["api_saving_usd"] == pytest.approx(api - plan_tco, rel=1e-9)
        # a lease at the discount rate (8 %) is worth the capex in present value: no saving either way
        assert got["buy_vs_lease_saving_usd"] == pytest.approx(
            got["annual_lease_payment_usd"] * sum(1.08 ** -y for y in (1, 2, 3)) - got["capex_usd"], abs=1e-3)
        assert got["buy_vs_lease_saving_usd"] == pytest.approx(0.0, abs=1e-3)
    # the sentences quote the live figures
    wb = openpyxl.load_workbook(sample_recalc, data_only=True)
    words = [str(c.value) for c in wb["Summary"]["A"] if c.value]
    wb.close()
    one_device = next(t for t in words if t.startswith("Best one-device fleet") and "costs" in t)
    assert f"${before['one_device_usd']:,.0f}" in one_device and "more than this plan" in one_device
    assert any(t.startswith("It costs ") and f"${before['capex_usd']:,.0f}" in t for t in words)
    assert any(f"{before['capex_usd'] / 1_500_000:.1%}" in t and "capex budget" in t for t in words)
    assert any("the fleet saves" in t for t in words) == (before["api_saving_usd"] >= 0)


@needs_soffice
def test_depreciation_and_residual_value_on_paper(sample_xlsx, tmp_path):
    """Capex edited to a round figure: H100 price set so the fleet's capex is known on paper, life 5 years,
    horizon 3: depreciation = capex/5, book value = capex × (1 − 3/5), lease at 8 % over 3 years = capex ×
    0.08 / (1 − 1.08^−3) = capex × 0.388034; at 0 %: capex / 3."""
    result = load_sample()
    other = result["capex_usd"] - 8 * result["fleet"][0]["purchase_usd"]  # everything but the H100 GPUs
    price = (1_000_000 - other) / 8  # capex = $1,000,000
    v = named_values(edit_and_recalc(sample_xlsx, tmp_path / "a", {"purchase_usd_h100_sxm": price}))
    assert v["capex_usd"] == pytest.approx(1_000_000, rel=1e-12)
    assert v["annual_depreciation_usd"] == pytest.approx(200_000, rel=1e-12)
    assert v["residual_value_usd"] == pytest.approx(400_000, rel=1e-12)
    assert v["annual_lease_payment_usd"] == pytest.approx(388_033.5, abs=0.1)
    assert v["lease_total_usd"] == pytest.approx(3 * 388_033.5, abs=0.3)
    z = named_values(edit_and_recalc(sample_xlsx, tmp_path / "b", {"purchase_usd_h100_sxm": price,
                                                                    "lease_interest_rate": 0.0,
                                                                    "depreciation_years": 3}))
    assert z["annual_lease_payment_usd"] == pytest.approx(1_000_000 / 3, rel=1e-12)
    assert z["residual_value_usd"] == pytest.approx(0.0, abs=1e-6)


@needs_soffice
def test_electricity_horizon_and_cloud_changes_recalculate(sample_xlsx, sample_recalc, tmp_path):
    """Electricity $0.10 → $0.15 on 22.75 kW (HGX H100: 8 × 700 + 4,600 W; 3 PCIe servers: 23 × 350 +
    3 × 1,500 W): +22.75 × 0.7 × 1.3 × 8760 × 0.05 = +$9,067.695 per year."""
    before = named_values(sample_recalc)
    after = named_values(edit_and_recalc(sample_xlsx, tmp_path / "a", {"electricity_usd_per_kwh": 0.15}))
    assert after["annual_power_usd"] - before["annual_power_usd"] == pytest.approx(9_067.695, rel=1e-9)
    assert after["tco_usd"] - before["tco_usd"] == pytest.approx(3 * 9_067.695, rel=1e-9)

    # Horizon 3 → 2 years: one year of opex less, and the Costs table's year 3 becomes 0.
    shorter = edit_and_recalc(sample_xlsx, tmp_path / "b", {"horizon_years": 2})
    v = named_values(shorter)
    assert v["tco_usd"] == pytest.approx(before["tco_usd"] - before["annual_opex_usd"], rel=1e-9)
    wb = openpyxl.load_workbook(shorter, data_only=True)
    assert wb["Costs by year"]["H8"].value == pytest.approx(v["tco_usd"], rel=1e-9)
    wb.close()

    # Rent the same fleet instead: capex 0, rental = (8 × $2.49 + 23 × $1.40) × 8,760 h per year.
    cloud = named_values(edit_and_recalc(sample_xlsx, tmp_path / "c", {"objective": "cloud"}))
    rental = (8 * 2.49 + 23 * 1.4) * 8760
    assert cloud["capex_usd"] == 0 and cloud["annual_power_usd"] == 0 and cloud["annual_maintenance_usd"] == 0
    assert cloud["annual_facility_usd"] == 0
    assert cloud["annual_cloud_usd"] == pytest.approx(rental, rel=1e-9)
    assert cloud["objective_usd"] == pytest.approx(3 * rental, rel=1e-9)


@needs_soffice
def test_injected_text_survives_libreoffice(tmp_path):
    """LibreOffice reads injected names back as text, and the totals still recalculate."""
    r = injected_result()
    path = write_workbook(r, tmp_path / "inj.xlsx")
    recalced = recalculate(path, tmp_path / "out")
    wb = openpyxl.load_workbook(recalced, data_only=True)
    texts = {c.value for ws in wb.worksheets for row in ws.iter_rows() for c in row if isinstance(c.value, str)}
    wb.close()
    assert INJECTIONS[0] in texts and INJECTIONS[1] in texts and INJECTIONS[3] in texts
    assert "y" not in texts  # the HYPERLINK was not evaluated to its label
    assert_totals_match(named_values(recalced), r)


@needs_soffice
@pytest.mark.skipif(shutil.which("pdftoppm") is None, reason="pdftoppm (poppler-utils) is not installed")
def test_renders_to_pdf_and_png(sample_xlsx, tmp_path):
    pdf = to_pdf(sample_xlsx, tmp_path)
    pages = pdf_to_png(pdf, tmp_path / "png", dpi=40)
    assert len(pages) >= len(SHEETS)
    assert all(p.stat().st_size > 1000 for p in pages)


# ---------------------------------------------------------------- the real optimizer


@pytest.fixture(scope="module")
def chat_fleet_json(tmp_path_factory) -> Path:
    import subprocess
    import sys

    out = tmp_path_factory.mktemp("opt") / "chat-fleet.json"
    proc = subprocess.run([sys.executable, "-m", "cli.app", "optimize", str(EXAMPLES / "chat-fleet.yaml"),
                           "--json", str(out)], capture_output=True, text=True, timeout=900,
                          cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    return out


def test_chat_fleet_report(chat_fleet_json, run_cli, tmp_path):
    out = tmp_path / "chat-fleet.xlsx"
    r = run_cli("report", chat_fleet_json, "--out", out)
    assert r.code == 0, r.stderr
    wb = openpyxl.load_workbook(out)
    assert wb.sheetnames == list(SHEETS)
    wb.close()


@needs_soffice
def test_chat_fleet_recalculates_to_optimizer_totals(chat_fleet_json, tmp_path):
    result = json.loads(chat_fleet_json.read_text())
    assert result["status"] in ("optimal", "feasible"), result["status_detail"]
    path = write_workbook(copy.deepcopy(result), tmp_path / "chat-fleet.xlsx", inputs=(chat_fleet_json,))
    check_recalculated(recalculate(path, tmp_path / "out"), result)


@pytest.fixture(scope="module")
def melange_json(tmp_path_factory) -> Path:
    """A real optimizer result today: the Mélange example (cloud objective, measured capacity table)."""
    from catalog import load_catalog
    from optimizer.optimize import optimize_plan
    from optimizer.results.plan_result import Provenance
    from workloads import load_plan, resolve_catalog

    plan = load_plan(EXAMPLES / "melange-example.yaml")
    cat = resolve_catalog(plan, load_catalog(), "melange-example.yaml")
    result = optimize_plan(plan, cat, capacity_table=EXAMPLES / "melange-example.csv",
                           source=Provenance("examples/melange-example.yaml"))
    out = tmp_path_factory.mktemp("melange") / "melange.json"
    out.write_text(json.dumps(result.to_json(), allow_nan=False))
    return out


def test_melange_report_from_real_optimizer(melange_json, run_cli, tmp_path):
    out = tmp_path / "melange.xlsx"
    r = run_cli("report", melange_json, "--out", out)
    assert r.code == 0, r.stderr


@needs_soffice
def test_melange_recalculates_to_optimizer_totals(melange_json, tmp_path):
    result = json.loads(melange_json.read_text())
    assert result["objective"] == "cloud" and result["status"] == "optimal"
    path = write_workbook(result, tmp_path / "melange.xlsx", inputs=(melange_json,))
    check_recalculated(recalculate(path, tmp_path / "out"), result)


def test_long_sentences_continue_on_the_next_row_uncut(tmp_path):
    """A warning longer than columns A..D can show (the "Driven by" column cut the old sheet's text mid-word,
    and risks were truncated at 160 characters) fills as many rows as it needs, broken between words, and the
    key figures still start below the last row of the answer in words."""
    from reports.sheets_summary import WORDS_WIDTH_CHARS

    result = load_sample()
    message = ("the simulated p99 is above the SLO but within the simulation's 95 % confidence interval, so it "
               "cannot be told from the SLO (not re-sized; the plan's target_utilization or confidence adds "
               "headroom): chat on h100_sxm__fp8__tp2__pp1 (tpot_p99_ms 201 ms, 95 % CI 190-214 ms, SLO 200 ms)")
    assert len(message) > 2 * WORDS_WIDTH_CHARS - 20
    result["diagnostics"].append({"level": "warning", "code": "simulated_p99_near_slo", "message": message})
    out = write_workbook(result, tmp_path / "long.xlsx", inputs=(SAMPLE,))
    wb = openpyxl.load_workbook(out)
    try:
        ws = wb["Summary"]
        texts = [(c.row, str(c.value)) for c in ws["A"] if isinstance(c.value, str)]
        figures_row = next(r for r, t in texts if t == "Key figures")
        words = [(r, t) for r, t in texts if HEADER_ROW < r < figures_row]
        assert all(len(t) <= WORDS_WIDTH_CHARS for _, t in words if not t.startswith("="))  # formulas: short sentences
        start = next(i for i, (_, t) in enumerate(words) if t.startswith("Warning: "))
        rows = [t for _, t in words[start:start + 3]]
        assert " ".join(rows) == f"Warning: {message}"
        assert [r for r, _ in words[start:start + 3]] == list(range(words[start][0], words[start][0] + 3))
        assert words[start + 2][0] < figures_row - 1  # a blank row before the key figures: nothing overlaps
    finally:
        wb.close()


def test_wrapped_row_height_counts_word_wrapped_lines():
    """The Fleet sheet's product "AMD Instinct MI300X/MI325X 8-GPU (OAM) server" (45 characters) in a column 24
    digits wide wraps between words into 3 lines of at most 22 characters ("AMD Instinct" / "MI300X/MI325X 8-GPU" /
    "(OAM) server"); the old estimate (45 / (24 × 1.15 − 1) → 2 lines) cut the third line off in LibreOffice.
    Height = 14 pt per line + 2."""
    from openpyxl import Workbook

    from reports.xl import Sheet

    wb = Workbook()
    sheet = Sheet(wb.active)
    sheet.put(2, 2, "AMD Instinct MI300X/MI325X 8-GPU (OAM) server", wrap=True)
    sheet.width(2, 24)  # capped: the column is exactly 24 wide
    sheet.finish()
    assert wb.active.column_dimensions["B"].width == 24
    assert wb.active.row_dimensions[2].height == 3 * 14 + 2


def test_estimated_price_is_one_risk_line_not_two(tmp_path):
    """A fleet device priced by an estimate gets the risk line "Estimated price, not a quote: ..." and the optimizer's
    ``price_estimated`` warning about the same price is not repeated under it (the chat fleet's B200 said it twice)."""
    result = load_sample()
    device = result["fleet"][0]["device"]
    result["sources"] = [s for s in result["sources"] if s.get("field") != "purchase_usd" or s.get("device") != device]
    result["sources"].append({"device": device, "field": "purchase_usd", "source": "estimate: public reporting",
                              "date": "2025", "estimated": True})
    result["diagnostics"].append({"level": "warning", "code": "price_estimated",
                                  "message": f"the recommended {device} price (purchase_usd) is an estimate"})
    wb = openpyxl.load_workbook(write_workbook(result, tmp_path / "est.xlsx", inputs=(SAMPLE,)))
    try:
        texts = [str(c.value) for c in wb["Summary"]["A"] if isinstance(c.value, str)]
    finally:
        wb.close()
    assert sum(t.startswith("Estimated price, not a quote") and device in t for t in texts) == 1
    assert not any(t.startswith("Warning:") and "is an estimate" in t for t in texts)


def test_deployments_state_the_kv_pairing_link():
    """A prefill pool's receive tier (pair_link_gb_s: it may feed only decode pools receiving at least this
    fast) and a decode pool's link were in the JSON only: the workbook showed the tier inside the key. Now a
    column states each pool's figure as the JSON does."""
    data = load_sample()
    first, second = data["deployments"][:2]  # chat: h100-sxm tp2 as the prefill pool, l40s as the decode pool
    pre = {**first, "stage": "prefill", "key": "prefill__" + first["key"] + "__rx1600gbps",
           "kv_link_gb_s": 157.3, "pair_link_gb_s": 1360.0}
    dec = {**second, "stage": "decode", "key": "decode__" + second["key"], "kv_link_gb_s": 157.3,
           "pair_link_gb_s": 1700.0}
    data["deployments"] = [pre, dec, *data["deployments"][2:]]
    ws = build_workbook(data)["Deployments"]
    header = [c.value for c in ws[HEADER_ROW]]
    col = header.index("KV pairing link (Gb/s; a prefill pool feeds decode pools at or above it)")
    by_key = {row[header.index("Configuration key")]: row[col]
              for row in ws.iter_rows(min_row=HEADER_ROW + 1, values_only=True)}
    assert by_key[pre["key"]] == 1360.0 and by_key[dec["key"]] == 1700.0


def test_melange_summary_says_its_capacities_are_the_users_table(melange_json):
    # Planner review 23b: a capacity-table plan's Summary said "the p99s are the analytic model's alone (batch or
    # speculative deployments, or --no-verify ...)": the plan has no analytic p99 at all; its capacities are the
    # user's measured table.
    from reports.workbook import build_workbook

    wb = build_workbook(json.loads(melange_json.read_text()))
    row = next(r for r in wb["Summary"].iter_rows(values_only=True) if r[0] == "Simulator check")
    assert row[1] == "not simulated"
    note = next(v for v in row[2:] if v)
    assert "capacity table" in note and "analytic" not in note


@pytest.mark.parametrize(("edit", "note"), [
    # a deployment routed beyond its capacity: the sample's chat h100 row carries exactly its 27.37 req/s
    (lambda d: d["deployments"][0].update(qps=30.0, capacity_qps=27.0),
     "deployment chat/h100_sxm__fp8__tp2__pp1: 30 req/s routed to a capacity of 27 req/s"),
    (lambda d: d["deployments"][1].update(replicas=0), "deployment chat/l40s__fp8__tp1__pp2: 12.6303 req/s routed to 0 replicas"),
    (lambda d: d["workloads"][1].update(qps=300.0), "workload code-completion: its deployments carry 200 req/s of its 300"),
])
def test_report_cli_warns_when_the_fleet_does_not_carry_the_load(run_cli, tmp_path, edit, note):
    # round 24: the report re-checked money only; an overloaded or unrouted hand-edited result gave a workbook
    # without a word (as check_plan would say of the solver's own result)
    data = load_sample()
    edit(data)
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(data))
    r = run_cli("report", plan, "--out", tmp_path / "r.xlsx")
    assert r.code == 0 and (tmp_path / "r.xlsx").is_file()
    assert any(line.startswith(f"warning: {plan}: {note}") for line in r.stderr.splitlines()), r.stderr
