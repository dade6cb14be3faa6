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
