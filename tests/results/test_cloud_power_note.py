"""Under objective cloud, power_kw counts each host server whole; an info line says so where instances rent part."""

from __future__ import annotations

import json

import pytest

from optimizer.assemble import cloud_host_power_note
from optimizer.results.money import MoneyAssumptions
from optimizer.results.plan_result import FleetRow


def _row(device: str, gpus: int, nodes: int, tdp_w: float, server_power_w: float) -> FleetRow:
    power_kw = (gpus * tdp_w + nodes * server_power_w) / 1000  # money.power_kw_terms: servers counted whole
    return FleetRow(device=device, gpus=gpus, nodes=nodes, gpus_per_node=8, purchase_usd=None,
                    cloud_usd_per_gpu_hour=2.0, tdp_w=tdp_w, capex_usd=0.0, power_kw=power_kw, gpus_installed=gpus,
                    server_power_w=server_power_w)


def test_the_note_gives_the_rented_share_of_the_hosts():
    # 1 H100 in a 1-GPU instance of an 8-GPU HGX host (700 W + 4,600 W): 5.3 kW counted, share 0.7 + 4.6/8 = 1.275;
    # 8 more on a host rented whole: 8·0.7 + 4.6 = 10.2 kW both ways. Total 15.5 kW, share 11.475 kW
    fleet = (_row("h100-sxm", 1, 1, 700.0, 4600.0), _row("h200-sxm", 8, 1, 700.0, 4600.0))
    note = cloud_host_power_note(fleet, MoneyAssumptions(objective="cloud"))
    assert note is not None and note.level == "info" and note.code == "cloud_power_whole_hosts"
    assert note.message.startswith("power 15.5 kW (nameplate) counts each host server's power whole, though the "
                                   "instances rent part of it (h100-sxm: 1 rented GPU on 1 host of 8); the rented "
                                   "share of the hosts is 11.5 kW. Under objective cloud this power is shown for "
                                   "information only")
    assert "h200-sxm" not in note.message  # its host is rented whole


@pytest.mark.parametrize("objective,gpus", [("tco", 1), ("cloud", 8)])
def test_no_note_when_the_hosts_are_bought_or_rented_whole(objective, gpus):
    fleet = (_row("h100-sxm", gpus, 1, 700.0, 4600.0),)
    assert cloud_host_power_note(fleet, MoneyAssumptions(objective=objective)) is None


def test_a_cloud_plan_of_one_gpu_instances_says_what_its_power_counts(run_cli, tmp_path):
    plan = tmp_path / "cloud.yaml"
    plan.write_text("""\
name: cloud-one
objective: cloud
allowed_devices: [h100-sxm]
devices: {h100-sxm: {cloud_gpus_per_instance: 1}}
workloads:
  - name: chat
    model: llama-3.1-8b
    qps: 5
    prompt_tokens: {mean: 512, p99: 2048}
    output_tokens: {mean: 128, p99: 512}
    slo: {ttft_p99_ms: 2000, tpot_p99_ms: 100}
""")
    r = run_cli("optimize", str(plan), "--no-sensitivity", "--json", str(tmp_path / "r.json"))
    assert r.code == 0, r.stderr
    data = json.loads((tmp_path / "r.json").read_text())
    assert [f["gpus_installed"] for f in data["fleet"]] == [1] and data["power_kw"] == pytest.approx(5.3, abs=1e-9)
    notes = [d["message"] for d in data["diagnostics"] if d["code"] == "cloud_power_whole_hosts"]
    assert len(notes) == 1 and "the rented share of the hosts is 1.3 kW" in notes[0]  # 0.7 + 4.6/8 = 1.275
    assert "power (nameplate, information only)" in r.stdout
