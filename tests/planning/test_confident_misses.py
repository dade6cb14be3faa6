"""Verification re-sizes a deployment when the simulator's 95 % interval is above the SLO, or its pooled p99 is
more than 1.2× the SLO (``SIMULATED_MISS_RATIO``), or the analytic model misses too."""

from __future__ import annotations

from dataclasses import replace

from optimizer.planning.safeguards import _miss_notes, confidently_missed
from optimizer.results.provenance import Verification, VerifiedDeployment


def _v(simulated: float, low: float, high: float, slo: float = 500.0, predicted: float | None = 500.0
       ) -> VerifiedDeployment:
    return VerifiedDeployment(workload="w", key="k", qps_per_replica=1.0, metric="ttft_p99_ms", slo_ms=slo,
                              predicted_ms=predicted, simulated_ms=simulated, simulated_ci_low_ms=low,
                              simulated_ci_high_ms=high, requests=40_000, seed=0, met=simulated <= slo)


def test_met_is_never_a_miss():
    assert not confidently_missed(_v(480, 430, 530))
    assert not confidently_missed(_v(500, 500, 500))


def test_an_interval_above_the_slo_is_a_miss():
    assert confidently_missed(_v(541, 510, 572))


def test_an_interval_straddling_the_slo_is_not_resized():
    # 501 ms against 500: the runs' p99s cannot tell it from the SLO
    assert not confidently_missed(_v(501, 470, 532))
    assert not confidently_missed(_v(560, 500, 620))  # the lower end on the SLO itself


def test_a_pooled_p99_far_over_the_slo_is_resized_whatever_its_interval():
    """llama-4-scout nvfp4 ep4 on B200 at 0.98 of its capacity (review 2026-12-07): pooled TTFT p99 1,605 ms
    against 800, runs 474-1,820 ms, interval 467-1,794 — 2.0× the SLO, beyond the 1.2× the at-SLO scatter stays
    under (1.036× on the shipped examples), so it is re-sized although the interval straddles the SLO."""
    assert confidently_missed(_v(1605, 467, 1794, slo=800, predicted=601.6))
    assert confidently_missed(_v(601, 300, 900))  # 1.202× the SLO of 500
    assert not confidently_missed(_v(599, 300, 900))  # 1.198×: within the scatter the interval rule decides
    assert not confidently_missed(_v(1033.5, 977.3, 1101.4, slo=1000, predicted=999.6))  # rag-disaggregated's


def test_a_straddling_interval_is_resized_when_the_model_also_misses():
    # the analytic p99 at that load is itself over the SLO (856 > 800): nothing vouches for it
    assert confidently_missed(_v(824, 777, 878, slo=800, predicted=856))
    assert confidently_missed(_v(501, 470, 532, predicted=None))


def test_notes_name_each_kind_once():
    v = Verification((_v(541, 510, 572), _v(501, 470, 532), _v(480, 430, 530)), rounds=1, seconds=0.0,
                     all_met=False)
    notes = {d.code: d.message for d in _miss_notes(v)}
    assert set(notes) == {"simulation_misses_slo", "simulation_at_slo"}
    assert "541 ms, 95 % CI 510-572 ms, SLO 500 ms" in notes["simulation_misses_slo"]
    assert "501 ms" in notes["simulation_at_slo"] and "501 ms" not in notes["simulation_misses_slo"]
    assert "480 ms" not in notes["simulation_misses_slo"] + notes["simulation_at_slo"]


def test_verdicts_name_the_three_outcomes_and_the_plan_takes_the_worst():
    met, at_slo, missed = _v(480, 430, 530), _v(1033.5, 977.3, 1101.4, slo=1000, predicted=999.6), _v(541, 510, 572)
    met = replace(met, met=True)
    assert [v.verdict for v in (met, at_slo, missed)] == ["met", "at_slo", "missed"]
    assert [confidently_missed(v) for v in (met, at_slo, missed)] == [False, False, True]
    assert Verification((met, at_slo), 0, 0.0, False).verdict == "at_slo"
    assert Verification((at_slo, missed, met), 1, 0.0, False).verdict == "missed"
    assert Verification((), 0, 0.0, True).verdict == "met"
