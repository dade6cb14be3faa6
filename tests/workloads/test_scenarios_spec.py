"""Scenario files: dotted-path overrides, sweeps, and errors that list the valid fields."""

from __future__ import annotations

import pytest
import yaml

from catalog import load_catalog
from catalog.errors import WorkloadError
from tests.conftest import EXAMPLES
from workloads.scenarios import load_scenarios, with_price_multipliers


def _write(tmp_path, body: dict):
    path = tmp_path / "s.yaml"
    body = {"base": str(EXAMPLES / "chat-fleet.yaml"), **body}
    path.write_text(yaml.safe_dump(body))
    return path


def test_variants_and_sweeps_expand_in_order(tmp_path):
    path = _write(tmp_path, {
        "variants": [{"name": "traffic-2x", "set": {"workloads.chat.qps": 80}},
                     {"name": "cheap-h200", "set": {"devices.h200-sxm.purchase_usd": 24000,
                                                     "electricity_usd_per_kwh": 0.2,
                                                     "budget.capex_usd": 2e6}}],
        "sweeps": [{"name": "budget", "kind": "budget", "from": 1e6, "to": 3e6, "steps": 3},
                   {"name": "growth", "kind": "demand", "multipliers": [1, 2]},
                   {"name": "h200", "kind": "price", "device": "h200-sxm", "from": 20000, "to": 30000, "steps": 2}],
    })
    _, _, scenarios = load_scenarios(path, load_catalog())
    names = [s.name for s in scenarios]
    assert names == ["base", "traffic-2x", "cheap-h200", "budget @ $1,000,000", "budget @ $2,000,000",
                     "budget @ $3,000,000", "growth @ 1x", "growth @ 2x", "h200 @ $20,000", "h200 @ $30,000"]
    by = {s.name: s for s in scenarios}
    assert by["traffic-2x"].plan.workload("chat").qps == 80
    assert by["base"].plan.workload("chat").qps == 40
    assert by["cheap-h200"].plan.devices["h200-sxm"]["purchase_usd"] == 24000
    assert by["cheap-h200"].plan.electricity_usd_per_kwh == 0.2
    assert by["cheap-h200"].plan.budget.capex_usd == 2e6
    assert by["budget @ $2,000,000"].mode == "max_demand"
    assert by["growth @ 2x"].plan.workload("code-completion").qps == 400
    assert by["growth @ 2x"].plan.workload("nightly-summaries").tokens_per_day == 1e8


@pytest.mark.parametrize("path,pattern", [
    ("workloads.chta.qps", r"no workload 'chta' \(did you mean 'chat'"),
    ("workloads.chat.qsp", r"unknown workload field 'qsp' \(did you mean 'qps'"),
    ("devices.h200-sxn.purchase_usd", r"unknown device 'h200-sxn' \(did you mean 'h200-sxm'"),
    ("devices.h200-sxm.purchase", r"unknown device field 'purchase' \(did you mean 'purchase_usd'"),
    ("electricity_usd_per_kw", r"unknown plan field 'electricity_usd_per_kw' \(did you mean 'electricity_usd_per_kwh'"),
    ("budget.capex", r"unknown budget field 'capex' \(did you mean 'capex_usd'"),
    ("facility.colocation", r"unknown facility field 'colocation' \(did you mean 'colocation_usd_per_kw_month'"),
    ("finance.lease_rate", r"unknown finance field 'lease_rate' \(did you mean 'lease_interest_rate'"),
    ("platforms.hgx-b200-9.server_usd", r"unknown platform 'hgx-b200-9' \(did you mean 'hgx-b200-8'"),
    ("platforms.hgx-b200-8.server", r"unknown platform field 'server' \(did you mean 'server_usd'"),
])
def test_bad_paths_list_valid_fields(tmp_path, path, pattern):
    file = _write(tmp_path, {"variants": [{"name": "v", "set": {path: 1}}]})
    with pytest.raises(WorkloadError, match=pattern):
        load_scenarios(file, load_catalog())


def test_override_value_validated_like_plan(tmp_path):
    file = _write(tmp_path, {"variants": [{"name": "v", "set": {"workloads.chat.qps": -3}}]})
    # the path as the set wrote it, by the workload's name (planner review 26; it said workloads.0.qps)
    with pytest.raises(WorkloadError, match=r"scenario 'v'.*workloads\.chat\.qps: input should be greater than 0"):
        load_scenarios(file, load_catalog())


def test_an_override_error_names_the_workload_the_set_named(tmp_path):
    """Planner review 26: `workloads.llama70-chat.redundancy: null` said "workloads.0.redundancy: Input should be
    'none', 'n+1' or 'n+1-node'": the index of the workload in the base file, a name the set never wrote. The chat
    fleet's workloads are chat, code-completion, nightly-summaries: code-completion is the second."""
    file = _write(tmp_path, {"variants": [{"name": "v", "set": {"workloads.code-completion.redundancy": None}}]})
    with pytest.raises(WorkloadError, match=r"scenario 'v': workloads\.code-completion\.redundancy: None is not a "
                                            r"choice here; use 'none', 'n\+1' or 'n\+1-node'"):
        load_scenarios(file, load_catalog())


def test_device_override_validated(tmp_path):
    file = _write(tmp_path, {"variants": [{"name": "v", "set": {"devices.h200-sxm.memory_gb": 0}}]})
    with pytest.raises(WorkloadError, match=r"devices.h200-sxm.*memory_gb"):
        load_scenarios(file, load_catalog())


def test_facility_finance_and_platform_fields_by_dotted_path(tmp_path):
    # 'facility.colocation_usd_per_kw_month' and 'platforms.KEY.FIELD' were refused ("facility (Facility) has no
    # sub-field path"), though the plan takes both sections and 'devices.KEY.FIELD' / 'budget.FIELD' worked
    file = _write(tmp_path, {"variants": [
        {"name": "coloc", "set": {"facility.colocation_usd_per_kw_month": 200, "facility.rack_units_per_rack": 48}},
        {"name": "lease", "set": {"finance.lease_interest_rate": 0.15}},
        {"name": "server", "set": {"platforms.hgx-b200-8.server_usd": 20000}}]})
    by = {s.name: s for s in load_scenarios(file, load_catalog())[2]}
    coloc = by["coloc"].plan.facility
    assert coloc.colocation_usd_per_kw_month == 200 and coloc.rack_units_per_rack == 48
    assert coloc.network_usd_per_server == 0.0  # the rest of the section as before
    assert by["lease"].plan.finance.lease_interest_rate == 0.15 and by["base"].plan.finance.lease_interest_rate == 0.08
    assert by["server"].plan.platforms == {"hgx-b200-8": {"server_usd": 20000}} and by["base"].plan.platforms == {}


def test_a_variant_overrides_the_base_entry_spelled_otherwise(tmp_path):
    # the base plan writes H200-SXM / H100-SXM; a variant's devices.h200-sxm... / inventory.h100-sxm replace those
    # entries (one per device) instead of adding a second spelling
    base = yaml.safe_load((EXAMPLES / "chat-fleet.yaml").read_text())
    base["devices"] = {"H200-SXM": {"purchase_usd": 30000, "cloud_usd_per_gpu_hour": 3.0}}
    base["inventory"] = {"H100-SXM": 4}
    (tmp_path / "base.yaml").write_text(yaml.safe_dump(base))
    file = tmp_path / "s.yaml"
    file.write_text(yaml.safe_dump({"base": "base.yaml", "variants": [
        {"name": "v", "set": {"devices.h200-sxm.purchase_usd": 24000, "inventory.h100-sxm": 16}}]}))
    by = {s.name: s for s in load_scenarios(file, load_catalog())[2]}
    assert by["v"].plan.devices == {"h200-sxm": {"purchase_usd": 24000, "cloud_usd_per_gpu_hour": 3.0}}
    assert by["v"].plan.inventory == {"h100-sxm": 16} and by["base"].plan.inventory == {"h100-sxm": 4}


def test_a_set_path_reads_the_device_name_as_a_plan_does(tmp_path):
    """`devices.H100_SXM.purchase_usd` names h100-sxm (case and '_' for '-' do not matter, as in a plan and in the
    check that two spellings set one field); it said "unknown device 'h100_sxm'"."""
    file = _write(tmp_path, {"variants": [{"name": "v", "set": {"devices.H100_SXM.purchase_usd": 20000}}]})
    by = {s.name: s for s in load_scenarios(file, load_catalog())[2]}
    assert by["v"].plan.devices["h100-sxm"]["purchase_usd"] == 20000


def test_a_budget_sweep_on_a_cloud_plan_is_an_error(tmp_path):
    # objective cloud has capex 0 at any fleet size: every budget level "served" the search's ceiling, 1024x the
    # demand with a $834M rental under a $100,000 budget
    plan = yaml.safe_load((EXAMPLES / "chat-fleet.yaml").read_text())
    plan["objective"] = "cloud"
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({"plan": plan, "sweeps": [
        {"name": "b", "kind": "budget", "from": 1e5, "to": 2e5, "steps": 2}]}))
    with pytest.raises(WorkloadError, match=r"sweeps\.b: a budget sweep caps capex .* objective cloud .* "
                                            r"set objective: tco or capex"):
        load_scenarios(path, load_catalog())
    plan["objective"] = "capex"
    path.write_text(yaml.safe_dump({"plan": plan, "sweeps": [
        {"name": "b", "kind": "budget", "from": 1e5, "to": 2e5, "steps": 2}]}))
    assert [s.mode for s in load_scenarios(path, load_catalog())[2]] == ["min_cost", "max_demand", "max_demand"]


def test_uncertainty_prices_name_each_device_once(tmp_path):
    # two spellings of one device passed the existence check (each lower-cased is a key) and then each drew its own
    # multiplier, applied one over the other (workloads.scenarios.with_price_multipliers): h100-sxm's price drawn
    # as the product of two uniforms, not one (H100-SXM at 0.85-1.15 and h100-sxm at 0.85-1.15: 0.72-1.32)
    path = _write(tmp_path, {"uncertainty": {"prices": {"H100-SXM": {"low": 0.85, "high": 1.15},
                                                        "h100-sxm": {"low": 0.85, "high": 1.15}}}})
    with pytest.raises(WorkloadError, match=r"uncertainty.prices: 'H100-SXM' and 'h100-sxm' name the same device "
                                            r"h100-sxm; keep one entry"):
        load_scenarios(path, load_catalog())


def test_uncertainty_prices_read_device_names_as_plans_do(tmp_path):
    # a plan's devices: and catalog.device read h100_sxm as h100-sxm; uncertainty.prices called it an unknown device
    cat = load_catalog()
    path = _write(tmp_path, {"uncertainty": {"prices": {"h100_sxm": {"low": 0.5, "high": 0.5}}}})
    _, _, scenarios = load_scenarios(path, cat)
    drawn = with_price_multipliers(scenarios[0].plan, {"h100_sxm": 0.5}, cat)
    assert drawn.devices["h100-sxm"]["purchase_usd"] == pytest.approx(0.5 * cat.devices["h100-sxm"].purchase_usd,
                                                                      rel=1e-12)
    both = _write(tmp_path, {"uncertainty": {"prices": {"h100_sxm": {"low": 0.85, "high": 1.15},
                                                        "h100-sxm": {"low": 0.85, "high": 1.15}}}})
    with pytest.raises(WorkloadError, match=r"uncertainty.prices: 'h100-sxm' and 'h100_sxm' name the same device "
                                            r"h100-sxm; keep one entry"):
        load_scenarios(both, cat)


def test_a_base_under_the_home_folder_is_read_as_a_shell_reads_it(tmp_path, monkeypatch):
    """``base: ~/plans/chat.yaml`` is the home folder's plans/chat.yaml (Path.expanduser, as a shell expands an
    unquoted ``~``); it was read as a folder named ``~`` beside the scenario file: 'plan file not found'."""
    home = tmp_path / "home"
    (home / "plans").mkdir(parents=True)
    (home / "plans" / "chat.yaml").write_text((EXAMPLES / "chat-fleet.yaml").read_text())
    monkeypatch.setenv("HOME", str(home))
    where = tmp_path / "elsewhere"
    where.mkdir()
    path = where / "w.yaml"
    path.write_text("base: ~/plans/chat.yaml\nvariants:\n  - {name: v, set: {workloads.chat.qps: 80}}\n")
    _, _, scenarios = load_scenarios(path, load_catalog())
    assert [s.name for s in scenarios] == ["base", "v"]
    assert scenarios[0].plan.name == "chat-fleet"
