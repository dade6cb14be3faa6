"""The simulated p99 column of ``gpuplan optimize`` (``cli.provenance_render``): a TPOT SLO under 10 ms keeps its
digits (``optimizer.results.latency_text.ms_text``), so 6.84 ms against 7.5 reads "6.84 (6.5–7.12) / 7.5", not
"7 (7–7) / 8" (which would look like a miss)."""

from cli.common import stdout
from cli.provenance_render import render_provenance


def test_a_sub_10_ms_simulated_p99_and_slo_keep_their_digits():
    data = {"fleet": [], "deployments": [{
        "workload": "w", "key": "h100-sxm__fp8__tp1__pp1", "fidelity": None,
        "verification": {"metric": "tpot_p99_ms", "simulated_ms": 6.84, "simulated_ci95_ms": [6.5, 7.12],
                         "slo_ms": 7.5, "met": True}}]}
    with stdout.capture() as cap:
        render_provenance(data)
    assert "tpot 6.84 (6.5–7.12) / 7.5" in cap.get()


def test_a_verification_that_simulated_nothing_does_not_say_every_slo_met():
    # speculative deployments are not simulated: the line said "simulation: every SLO met after 0 re-size round(s)"
    note = "r1 on b200__fp8__tp1__pp1__spec: not simulated (the simulator has no speculative decoding)"
    data = {"fleet": [], "deployments": [],
            "verification": {"all_met": True, "rounds": 0, "seconds": 0.0, "note": note, "deployments": []}}
    with stdout.capture() as cap:
        render_provenance(data)
    text = " ".join(cap.get().split())
    assert "simulation: no deployment simulated after 0 re-size round(s), 0.0 s; r1 on" in text
    assert "every SLO met" not in text
    data["verification"]["deployments"] = [{"workload": "w", "key": "k", "met": True}]
    with stdout.capture() as cap:
        render_provenance(data)
    assert "simulation: every SLO met" in cap.get()
