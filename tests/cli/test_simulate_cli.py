"""`gpuplan simulate` past a replica's capacity says so: the analytic column is empty there ("—") and the simulated
percentiles are those of a queue that never drains (they grow with --requests), not figures to plan with."""

from __future__ import annotations

import re

from tests.conftest import assert_no_traceback

BASE = ("simulate", "--model", "qwen3-32b", "--device", "h100-sxm", "--precision", "fp8",
        "--input-tokens", "1000", "--output-tokens", "200", "--requests", "2000")


def test_a_saturated_run_is_flagged(run_cli):
    # one h100-sxm replica of qwen3-32b fp8 completes ~12 req/s of 1,000 / 200-token requests; 30 req/s saturates it
    r = run_cli(*BASE, "--qps", "30")
    assert r.code == 0, r.stderr
    text = " ".join(r.stdout.split())
    m = re.search(r"saturated: 30 req/s is beyond this replica's capacity \(the simulated replica completed "
                  r"([\d.]+) req/s\); its queue grows without bound, so the simulated percentiles grow with "
                  r"--requests \(2,000 here\)", text)
    assert m, text
    assert 5 < float(m.group(1)) < 30


def test_a_run_within_capacity_has_no_note(run_cli):
    r = run_cli(*BASE, "--qps", "5")
    assert r.code == 0, r.stderr
    assert "saturated" not in r.stdout


def test_a_p99_beyond_any_lognormal_names_the_flag(run_cli):
    for command in ("simulate", "estimate"):
        r = run_cli(command, "--model", "llama-3.1-8b", "--device", "h100-sxm", "--precision", "fp8", "--qps", "1",
                    "--input-tokens", "100", "--input-p99", "10000", "--output-tokens", "100")
        assert r.code == 1, r.stderr
        assert_no_traceback(r.stderr)
        assert "--input-p99 10000 is 100× the mean --input-tokens 100, beyond any lognormal's (at most 14.97× the " \
               "mean); give --input-p99 <= 1,496" in r.stderr
