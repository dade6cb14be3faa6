"""Workload fields that the planner would otherwise ignore or silently reinterpret are errors naming the field."""

from __future__ import annotations

import math
from statistics import NormalDist

import pytest
from pydantic import ValidationError

from catalog.errors import WorkloadError
from optimizer.whatif_demand import scaled
from workloads.load import load_plan, parse_plan
from workloads.spec import Plan, Workload

ONLINE = dict(name="w", model="llama-3.1-8b", qps=2, prompt_tokens=1000, output_tokens=200,
              slo={"ttft_p99_ms": 500})
BATCH = dict(name="b", model="llama-3.1-8b", tokens_per_day=1e6, batch_window_hours=8, prompt_tokens=1000,
             output_tokens=200)


def test_an_slo_on_a_batch_workload_is_an_error():
    # the batch throughput model sizes by tokens_per_day within the window; an slo there was silently dropped
    with pytest.raises(ValidationError, match="slo apply to online workloads"):
        Workload(**BATCH, slo={"ttft_p99_ms": 100})
    assert Workload(**BATCH, slo={}).is_batch  # an empty slo says nothing: accepted
    # nor does the yearly volume of a batch workload read a peak-to-average ratio (tokens_per_day · 365)
    with pytest.raises(ValidationError, match="peak_to_average_ratio apply to online workloads"):
        Workload(**BATCH, peak_to_average_ratio=2)
    assert Workload(**BATCH, peak_to_average_ratio=1).output_tokens_per_year == 1e6 * 365


def test_a_batch_window_on_an_online_workload_is_an_error():
    with pytest.raises(ValidationError, match=r"batch_window_hours \(8\) applies to batch workloads"):
        Workload(**ONLINE, batch_window_hours=8)
    assert Workload(**ONLINE, batch_window_hours=24).qps == 2  # the default, written out: harmless


def test_what_if_rescaling_still_validates_online_and_batch_workloads():
    plan = Plan(workloads=[ONLINE, BATCH])
    double = scaled(plan, 2.0)  # model_dump -> model_validate: every field written out, defaults included
    assert double.workload("w").qps == 4 and double.workload("b").tokens_per_day == 2e6


def test_a_cut_below_the_p99_is_an_error():
    # {mean 1000, p99 8000}: sigma = z - sqrt(z^2 - 2 ln 8) = 1.2074, mu = ln 1000 - sigma^2/2 = 6.1789;
    # max 500 keeps Phi((ln 500 - mu)/sigma) = Phi(0.0298) = 51.2 % (48.8 % left out), whose mean is
    # 1000 * Phi(0.0298 - 1.2074) / 0.512 = 1000 * 0.1194 / 0.512 = 233 tokens
    z = NormalDist().inv_cdf(0.99)
    sigma = z - math.sqrt(z * z - 2 * math.log(8))
    mu = math.log(1000) - sigma * sigma / 2
    zm = (math.log(500) - mu) / sigma
    kept = NormalDist().cdf(zm)
    assert round(100 * (1 - kept), 1) == 48.8 and round(1000 * NormalDist().cdf(zm - sigma) / kept) == 233
    with pytest.raises(ValidationError, match=r"prompt_tokens\.max \(500\) is below its p99 \(8000\): the cut would "
                                              r"leave out 48\.8 % of the requests and serve a mean of 233 tokens, "
                                              r"not 1000"):
        Workload(**{**ONLINE, "prompt_tokens": {"mean": 1000, "p99": 8000, "max": 500}})
    with pytest.raises(ValidationError, match=r"output_tokens\.max \(300\) is below its p99 \(800\)"):
        Workload(**{**ONLINE, "output_tokens": {"mean": 200, "p99": 800, "max": 300}})
    # a cut at or above the p99 cuts the tail only: accepted
    assert Workload(**{**ONLINE, "prompt_tokens": {"mean": 1000, "p99": 8000, "max": 8000}}).prompt_tokens.max == 8000
    assert Workload(**{**ONLINE, "prompt_tokens": {"mean": 1000, "p99": 8000, "max": 32768}}).prompt_tokens.max == 32768


@pytest.mark.parametrize(("change", "field"), [
    ({"qps": True}, "qps"),  # YAML `qps: yes` / `on` / `true` was read as 1 req/s
    ({"min_replicas": True}, "min_replicas"),
    ({"model": True}, "model"),
    ({"slo": {"ttft_p99_ms": True}}, "ttft_p99_ms"),
])
def test_a_yes_no_value_where_a_number_is_due_is_an_error(change, field):
    with pytest.raises(ValidationError, match=rf"{field}: true is a yes/no value, not a number or a name"):
        Workload(**{**ONLINE, **change})


def test_yes_no_fields_still_take_yes_no():
    plan = Plan(workloads=[ONLINE], allow_partial_servers=False, horizon_years=2)
    assert plan.allow_partial_servers is False and plan.horizon_years == 2
    with pytest.raises(ValidationError, match="horizon_years: false is a yes/no value"):
        Plan(workloads=[ONLINE], horizon_years=False)


def test_a_p99_beyond_any_lognormal_is_an_error():
    # p99/mean = exp(z·σ − σ²/2) peaks at σ = z: exp(2.3263² / 2) = exp(2.7059) = 14.97. A {mean 1000, p99 32000}
    # law was silently fitted at σ = z, a law whose p99 is 14,968 tokens, while the plan reported 32,000
    from workloads.spec import MAX_LOGNORMAL_P99_RATIO, LengthDist

    assert round(MAX_LOGNORMAL_P99_RATIO, 2) == 14.97
    with pytest.raises(ValidationError, match=r"prompt_tokens\n  Value error, p99 \(32000\) is 32× the mean \(1000\), beyond any "
                                              r"lognormal's \(at most 14\.97× the mean: 14,968 here\); give the "
                                              r"lengths as \{histogram"):
        Workload(**{**ONLINE, "prompt_tokens": {"mean": 1000, "p99": 32000}})
    law = LengthDist(mean=1000, p99=14_968)  # at the bound: its own p99
    assert abs(math.exp(law.lognormal_sigma() * 2.3263478740408408 - law.lognormal_sigma() ** 2 / 2) - 14.968) < 1e-3
    # a histogram's tail is its own: no bound
    assert LengthDist(histogram=[[100, 0.98], [32_000, 0.02]]).p99_tokens == 32_000


@pytest.mark.parametrize(("section", "entries", "message"), [
    # the catalog looks devices up by case and '_' / '-' alike: two spellings kept whichever came last
    ("inventory", {"H100-SXM": 0, "h100-sxm": 16}, "'H100-SXM' and 'h100-sxm' name the same device h100-sxm"),
    ("devices", {"h100_sxm": {"purchase_usd": 1000}, "h100-sxm": {"purchase_usd": 50000}},
     "'h100_sxm' and 'h100-sxm' name the same device h100-sxm"),
    ("platforms", {"PCIE-8": {"server_usd": 1}, "pcie-8": {"server_usd": 2}},
     "'PCIE-8' and 'pcie-8' name the same platform pcie-8"),
])
def test_two_spellings_of_one_device_are_an_error(section, entries, message):
    with pytest.raises(ValidationError, match=message):
        Plan(workloads=[ONLINE], **{section: entries})


def test_device_keys_are_stored_as_the_catalog_reads_them():
    # a capacity table's units look the inventory up by the device key: 'H100-SXM: 8' was no limit there
    plan = Plan(workloads=[ONLINE], inventory={"H100-SXM": 8}, devices={"H200_SXM": {"purchase_usd": 24000}},
                platforms={"PCIE-8": {"server_usd": 1}})
    assert plan.inventory == {"h100-sxm": 8} and plan.devices == {"h200-sxm": {"purchase_usd": 24000}}
    assert plan.platforms == {"pcie-8": {"server_usd": 1}}


def test_allowed_devices_are_stored_as_keys():
    # 'H100_SXM' was refused in allowed_devices ("unknown device") though the catalog and inventory read it as h100-sxm
    plan = Plan(workloads=[ONLINE], allowed_devices=["H100_SXM", "h100-sxm", "B200"])
    assert plan.allowed_devices == ["h100-sxm", "b200"]


def test_names_of_closed_sets_are_read_in_any_case():
    # hostile round 23: device keys and model names were case-insensitive, yet `precisions: [FP8]` was an error
    # with a did-you-mean, `engine: TRTLLM` an error without one, and `gpuplan estimate --precision FP8` accepted:
    # one rule now, any case, stored as the catalog spells it
    w = Workload(**ONLINE, precisions=["FP8", " Bf16"], engine=["VLLM", "SGLang"], redundancy="N+1",
                 disaggregation="Allowed")
    assert w.precisions == ["fp8", "bf16"] and w.engines == ("vllm", "sglang")
    assert (w.redundancy, w.disaggregation) == ("n+1", "allowed")
    assert Workload(**ONLINE, engine="TRTLLM").engines == ("trtllm",)
    assert Plan(workloads=[ONLINE], objective="CAPEX").objective == "capex"
    with pytest.raises(ValidationError, match="lists 'fp8' twice"):
        Workload(**ONLINE, precisions=["FP8", "fp8"])  # one precision in two spellings is still a repeat
    with pytest.raises(ValidationError, match=r"\(did you mean 'trtllm'"):
        Workload(**ONLINE, engine="trt-llm")


def test_a_plan_of_too_many_workloads_fails_fast():
    # hostile round 23: a 10 MB plan (57,000 workloads) took 150 s and 1.2 GB only to be validated, and would have
    # taken far longer to plan (10,000 workloads: 300 s, 2.3 GB). The count is refused before any validation, and
    # a file over 4.5 MB (2.5x a 10,000-workload plan) before it is parsed
    workloads = [{**ONLINE, "name": f"w{i}"} for i in range(10_001)]
    with pytest.raises(WorkloadError, match="workloads: 10,001 workloads, over the limit of 10,000; split the plan"):
        parse_plan({"workloads": workloads}, "p.yaml")
    with pytest.raises(ValidationError, match="at most 10000 items"):
        Plan(workloads=workloads)  # the library's door too


def test_a_plan_file_over_its_size_limit_fails_before_it_is_parsed(tmp_path):
    path = tmp_path / "big.yaml"
    path.write_text("# padding\n" * 450_001 + "workloads: []\n")  # 4,500,024 bytes
    with pytest.raises(WorkloadError, match=r"plan file is 4,500,024 bytes, over the 4,500,000-byte limit; a plan "
                                            r"holds at most 10,000 workloads: split it into several plans"):
        load_plan(path)


def test_a_plan_over_its_size_limit_by_its_histograms_is_told_so(tmp_path):
    # one workload whose prompt histogram has 400,000 rows (a trace's every length) is 5.4 MB: the fix is not only
    # "split it into several plans" (it has one workload), it is also coarser histograms
    rows = ",".join(f"[{i + 1},0.5]" for i in range(400_000))
    path = tmp_path / "trace.yaml"
    path.write_text(f"workloads:\n  - {{name: w, model: llama-3.1-8b, qps: 1, output_tokens: 100, "
                    f"prompt_tokens: {{histogram: [{rows}]}}}}\n")
    assert path.stat().st_size > 4_500_000
    with pytest.raises(WorkloadError, match=r"over the 4,500,000-byte limit; .*split it into several plans, or bin "
                                            r"long histograms coarser"):
        load_plan(path)
