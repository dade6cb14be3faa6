"""Valid inputs at the limits of a float (hostile round 26): each ran into a division by zero or an empty list
(exit 70, "internal error") where the figure underflowed to 0. They must plan, or simulate, like their limit."""

from __future__ import annotations

import json

from tests.conftest import SMALL_PLAN, assert_no_traceback


def _optimize(run_cli, tmp_path, plan: str) -> dict:
    path, out = tmp_path / "p.yaml", tmp_path / "o.json"
    path.write_text(plan)
    r = run_cli("optimize", path, "--no-sensitivity", "--json", out)
    assert r.code == 0, r.stderr
    assert_no_traceback(r.stderr)
    return json.loads(out.read_text())


def test_a_lease_rate_below_the_float_spacing_plans_as_rate_zero(run_cli, tmp_path):
    """lease_interest_rate 5e-324: 1 + r rounds to 1; the payment is capex / lease years (3, the horizon)."""
    result = _optimize(run_cli, tmp_path, SMALL_PLAN + "finance: {lease_interest_rate: 4.9e-324}\n")
    assert result["annual_lease_payment_usd"] == result["capex_usd"] / 3


def test_a_batch_volume_that_underflows_has_no_cost_per_token(run_cli, tmp_path):
    """tokens_per_day 5e-324: 5e-324 × 365 × 3 years / 1e6 is 0 million tokens; the cost per million is
    undefined (None, as with no tokens), not a division by zero."""
    plan = SMALL_PLAN.replace("    qps: 2\n", "    tokens_per_day: 4.9e-324\n").replace(
        "    slo: {ttft_p99_ms: 3000}\n", "")
    result = _optimize(run_cli, tmp_path, plan)
    assert result["workloads"][0]["cost_per_million_output_tokens_usd"] is None
    assert result["status"] == "optimal"


def test_simulate_at_a_rate_whose_gaps_are_inf_says_so(run_cli):
    """--qps 4.9e-324: 1/qps is inf, every arrival inf, and the event loop ran past its sentinel (IndexError)."""
    r = run_cli("simulate", "--model", "llama-3.1-8b", "--device", "h100-sxm", "--precision", "fp8",
                "--input-tokens", "512", "--output-tokens", "128", "--requests", "100", "--qps", "4.9e-324")
    assert r.code == 1, r.stderr
    assert_no_traceback(r.stderr)
    assert r.stderr.strip() == ("error: request rate 4.94066e-324 req/s is so low that 100 arrivals pass the largest "
                                "time a float holds (1.8e308 s); give a rate of at least 1e-300 req/s")


def test_catalog_devices_lists_a_device_priced_near_zero(run_cli, tmp_path):
    """purchase_usd 5e-324 in a --catalog: `catalog devices` divided by purchase_usd / 1000, which is 0
    (ZeroDivisionError); 1e-310 gave an inf ratio, which JSON cannot hold. The ratio is then none; at $3,200 the
    A10's 600 GB/s is 187.5 GB/s per $1,000."""
    for price, expected in (("4.9e-324", None), ("1.0e-310", None), ("3200", 187.5)):
        cat = tmp_path / "c.yaml"
        cat.write_text(f"devices:\n  - key: a10\n    purchase_usd: {price}\n")
        r = run_cli("catalog", "devices", "--catalog", cat, "--json")
        assert r.code == 0, r.stderr
        row = next(d for d in json.loads(r.stdout) if d["key"] == "a10")
        assert row["bandwidth_gb_s_per_1k_usd"] == expected
