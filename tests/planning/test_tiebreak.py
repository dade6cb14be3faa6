"""The tie-break among optimal fleets (``milp.tiebreak``): the equally cheap plan with the fewest
configurations, then the one with the most headroom, then the one whose configurations sort first; never a dearer
plan. Optima worked out on paper."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace

import pytest

from catalog import load_catalog
from optimizer.optimize import optimize_plan, resize_solve
from optimizer.planning.milp import tiebreak
from optimizer.planning.milp.problem import (
    Demand,
    FleetProblem,
    FleetSolution,
    Option,
    fleet_servers,
)
from optimizer.planning.milp.resolve import is_feasible
from optimizer.planning.milp.routing import balanced_routing
from optimizer.planning.milp.solve import solve_fleet
from optimizer.planning.milp.tiebreak import (
    TIE_BREAK_MIN_S,
    TIE_BREAK_TOLERANCE_USD,
    busiest_shares,
    fewest_configurations,
)
from optimizer.planning.solver_options import SolverOptions
from optimizer.results.plan_result import SolveStatus
from tests.conftest import EXAMPLES, REPO
from tests.planning.test_disk_cache import VARYING
from tests.planning.test_milp import unit
from workloads import parse_plan, resolve_catalog


def server_problem(bucket_qps: tuple[float, ...], a_qps: tuple[float, ...]) -> FleetProblem:
    """One device d: $10 a GPU, $100 a server of 8 GPUs. Option a: 1 GPU serving ``a_qps``; option b: 2 GPUs,
    2 req/s in every bucket. Both cost $10 per GPU, so every plan of 8 GPUs costs 8·$10 + $100 = $180."""
    return FleetProblem(
        (Demand("w", bucket_qps),),
        (Option("w", "a", "d", 1, a_qps), Option("w", "b", "d", 2, (2.0,) * len(bucket_qps))),
        {"d": unit("d", 10, gpn=8, obj_node=100)},
    )


def plan_of(problem: FleetProblem, replicas: dict[tuple[str, str], int], routed: dict[tuple[str, int, str], float]
            ) -> FleetSolution:
    """A proven-optimal first plan given by hand (what a degenerate solve may return)."""
    gpus, nodes = fleet_servers(problem, replicas, {})
    cost = sum(problem.units[d].objective_usd.at(g, nodes[d]) for d, g in gpus.items())
    sol = FleetSolution(SolveStatus.OPTIMAL, "proven optimal", cost, 0.0, 0.01, 0.0, "highs", replicas, routed,
                        gpus, nodes, bound_usd=cost)
    assert is_feasible(problem, sol)
    return sol


def test_fewest_configurations_wins_over_the_first_key():
    """Buckets 4 + 4 req/s; a serves only bucket 0 (1 req/s a GPU). The first plan: 4 × a on bucket 0 and 2 × b on
    bucket 1 = 8 GPUs, $180, 2 configurations. Alone, b needs 4/2 + 4/2 = 4 replicas = 8 GPUs, $180: 1 configuration.
    a sorts first, but cannot serve bucket 1 alone, so the tie-break takes 4 × b (objective 1 + 1/2² = 1.25 against
    {a, b}: 2 + (0 + 1)/2² = 2.25)."""
    p = server_problem((4.0, 4.0), (1.0, 0.0))
    first = plan_of(p, {("w", "a"): 4, ("w", "b"): 2}, {("w", 0, "a"): 4.0, ("w", 1, "b"): 4.0})
    assert first.objective_usd == pytest.approx(180.0)
    out = fewest_configurations(p, first, time_limit_s=10.0)
    assert out.solution.replicas == {("w", "b"): 4}
    assert out.solution.objective_usd == pytest.approx(180.0, abs=TIE_BREAK_TOLERANCE_USD)
    assert (out.solution.gpus, out.solution.nodes) == ({"d": 8}, {"d": 1})
    assert out.solution.status == SolveStatus.OPTIMAL and out.solution.bound_usd == first.bound_usd
    assert is_feasible(p, out.solution)
    assert out.note is not None and out.note.code == "tie_break" and "2 configurations" in out.note.message


def test_among_the_fewest_the_first_key_wins():
    """One bucket of 8 req/s that a (1 req/s a GPU) and b (2 req/s on 2 GPUs) both serve: 8 × a and 4 × b both cost
    $180 with one configuration; from a mix of 2 × a + 3 × b the tie-break takes 8 × a, the first key."""
    p = server_problem((8.0,), (1.0,))
    first = plan_of(p, {("w", "a"): 2, ("w", "b"): 3}, {("w", 0, "a"): 2.0, ("w", 0, "b"): 6.0})
    out = fewest_configurations(p, first, time_limit_s=10.0)
    assert out.solution.replicas == {("w", "a"): 8}
    assert out.solution.objective_usd == pytest.approx(180.0, abs=TIE_BREAK_TOLERANCE_USD)


def test_a_mix_that_is_cheaper_stays_a_mix():
    """Buckets 2 + 2 req/s on 1-GPU options at $10: a serves (2, 0.5) req/s, b (0.5, 2). 1 × a + 1 × b = $20; a alone
    needs 2/2 + 2/0.5 = 5 replicas ($50), b alone as many: fewer configurations would cost more, so the plan stays."""
    p = FleetProblem((Demand("w", (2.0, 2.0)),),
                     (Option("w", "a", "c", 1, (2.0, 0.5)), Option("w", "b", "c", 1, (0.5, 2.0))),
                     {"c": unit("c", 10)})
    first = solve_fleet(p)
    assert first.replicas == {("w", "a"): 1, ("w", "b"): 1} and first.objective_usd == pytest.approx(20.0)
    out = fewest_configurations(p, first, time_limit_s=10.0)
    assert out.solution.replicas == first.replicas and out.note is None
    assert out.solution.objective_usd == pytest.approx(20.0)


def ep_problem(ep8_usd_per_gpu: float = 10.0) -> FleetProblem:
    """Review 24's N2 in small: one bucket of 8 req/s; "ep4" is 4 GPUs serving 6 req/s, "ep8" 8 GPUs serving
    17.1 req/s, on 8-GPU servers at $10 a GPU + $100 a server (ep8 on its own device e, at ``ep8_usd_per_gpu``).
    One ep4 (6 req/s) is too few, so the optimum is 8 GPUs on one server: 2 × ep4 or 1 × ep8, $180 each at $10, one
    configuration each. 2 × ep4 run at 8/12 = 66.7 % of their SLO-safe capacity, 1 × ep8 at 8/17.1 = 46.8 %."""
    return FleetProblem((Demand("w", (8.0,)),),
                        (Option("w", "ep4", "d", 4, (6.0,)), Option("w", "ep8", "e", 8, (17.1,))),
                        {"d": unit("d", 10, gpn=8, obj_node=100), "e": unit("e", ep8_usd_per_gpu, gpn=8, obj_node=100)})


def test_equal_cost_and_configurations_the_most_headroom_wins():
    """From 2 × ep4 (what the what-if base chose in review 24) the tie-break takes 1 × ep8: the same $180 and one
    configuration, the busiest deployment at 46.8 % of its capacity instead of 66.7 % (ep4 sorts first, so key
    order alone would keep 2 × ep4)."""
    p = ep_problem()
    first = plan_of(p, {("w", "ep4"): 2}, {("w", 0, "ep4"): 8.0})
    assert first.objective_usd == pytest.approx(180.0)
    out = fewest_configurations(p, first, time_limit_s=10.0)
    assert out.solution.replicas == {("w", "ep8"): 1}
    assert out.solution.objective_usd == pytest.approx(180.0, abs=TIE_BREAK_TOLERANCE_USD)
    assert out.solution.status == SolveStatus.OPTIMAL and out.solution.bound_usd == first.bound_usd
    assert is_feasible(p, out.solution)
    assert busiest_shares(p, out.solution) == {"w": pytest.approx(8 / 17.1, abs=1e-9)}
    assert out.note is not None and out.note.code == "tie_break"
    assert "with 1 configuration, the one with the most headroom" in out.note.message
    assert "66.7% of its SLO-safe capacity → 46.8%" in out.note.message
    # from 1 × ep8 it stays: no other $180 plan has as much headroom, and nothing is said
    again = fewest_configurations(p, out.solution, time_limit_s=10.0)
    assert again.solution.replicas == {("w", "ep8"): 1} and again.note is None


def test_optimize_and_the_whatif_base_choose_the_same_roomier_plan():
    """Planner review 24, N2: DeepSeek-R1 at 8 req/s on B200/B300 (its P01). `optimize` (from the one-device fleet)
    chose 1 × fp4 ep8 and the what-if base (no one-device comparison: ``compare_single_device=False``) 2 × fp4 ep4,
    both $471,198 on one 8-GPU board and one configuration; ep8 carries more (1 replica of 17.1 req/s against 2 of
    6.0 on this catalog), so both now give 1 × ep8 at the same cost."""
    plan = parse_plan({"name": "p01", "allowed_devices": ["b200", "b300"], "workloads": [{
        "name": "chat", "model": "deepseek-r1", "qps": 8, "prompt_tokens": {"mean": 2048, "p99": 8192},
        "output_tokens": {"mean": 1024, "p99": 4096}, "slo": {"ttft_p99_ms": 3000, "tpot_p99_ms": 50},
        "precisions": ["fp8", "fp4"], "engine": ["trtllm", "sglang"]}]}, "test")
    cat = resolve_catalog(plan, load_catalog(), "test")
    runs = [optimize_plan(plan, cat, compare_single_device=single) for single in (True, False)]
    for r in runs:
        assert r.status == SolveStatus.OPTIMAL
        assert [(d.key, d.replicas) for d in r.deployments] == [("b200__fp4__tp1__pp1__ep8", 1)]
        assert r.deployments[0].qps / r.deployments[0].capacity_qps < 0.5  # 8 of 17.1 req/s
    assert runs[0].objective_usd == pytest.approx(runs[1].objective_usd, abs=TIE_BREAK_TOLERANCE_USD)


def test_more_headroom_never_costs_more():
    """ep8 at $10.01 a GPU: 1 × ep8 costs 8 × $10.01 + $100 = $180.08, eight cents above 2 × ep4's $180: 2 × ep4
    stays, however much roomier ep8 is."""
    p = ep_problem(10.01)
    first = plan_of(p, {("w", "ep4"): 2}, {("w", 0, "ep4"): 8.0})
    out = fewest_configurations(p, first, time_limit_s=10.0)
    assert out.solution.replicas == {("w", "ep4"): 2} and out.note is None
    assert out.solution.objective_usd == pytest.approx(180.0)


def split_problem() -> FleetProblem:
    """Buckets 3 + 3 req/s on 2-GPU replicas, 8-GPU servers at $10 a GPU + $100 a server: a serves (2, 1) req/s,
    b (1, 2). Three replicas are too few (2a + 1b: a's rows need 1.5·x0 + 3·x1 ≤ 2 and b's 3·(1 − x0) + 1.5·(1 − x1)
    ≤ 1, i.e. x0 ≥ 1.11), so the optimum is four replicas on one server, $180, in two configurations {a, b} (a or b
    alone: 3/2 + 3/1 = 4.5 replicas' load > 4). Balanced, 2a + 2b run at 0.75 (bucket 0 on a, 1 on b: 1.5 of 2
    replicas each); 3a + 1b at 0.9 (b takes t = 1.8 req/s of bucket 1: t/2 = (1.5 + 3 − t)/3)."""
    return FleetProblem((Demand("w", (3.0, 3.0)),),
                        (Option("w", "a", "d", 2, (2.0, 1.0)), Option("w", "b", "d", 2, (1.0, 2.0))),
                        {"d": unit("d", 10, gpn=8, obj_node=100)})


def test_the_same_configurations_split_for_the_most_headroom():
    """Same GPUs, same configurations, same key order: 3a + 1b (busiest at 90 %) becomes 2a + 2b (75 %)."""
    p = split_problem()
    first = plan_of(p, {("w", "a"): 3, ("w", "b"): 1}, {("w", 0, "a"): 3.0, ("w", 1, "a"): 1.0, ("w", 1, "b"): 2.0})
    assert busiest_shares(p, balanced_routing(p, first)) == {"w": pytest.approx(0.9, abs=1e-6)}
    out = fewest_configurations(p, first, time_limit_s=10.0)
    assert out.solution.replicas == {("w", "a"): 2, ("w", "b"): 2}
    assert out.solution.objective_usd == pytest.approx(180.0, abs=TIE_BREAK_TOLERANCE_USD)
    assert (out.solution.gpus, out.solution.nodes) == ({"d": 8}, {"d": 1})
    assert busiest_shares(p, balanced_routing(p, out.solution)) == {"w": pytest.approx(0.75, abs=1e-6)}
    assert out.note is not None and "90.0% of its SLO-safe capacity → 75.0%" in out.note.message


def test_fewer_configurations_come_before_headroom():
    """Buckets 4 + 4 req/s, one 8-GPU server at $10 a GPU + $100: a (8 GPUs, 8.8 req/s in either bucket) alone runs
    at 4/8.8 + 4/8.8 = 90.9 %; b (4 GPUs, bucket 0 only, 8 req/s) + c (4 GPUs, bucket 1 only, 8 req/s) at 50 %,
    both $180 (nothing on 4 GPUs serves both buckets). From b + c the tie-break takes a: one configuration beats
    any headroom."""
    p = FleetProblem((Demand("w", (4.0, 4.0)),),
                     (Option("w", "a", "d", 8, (8.8, 8.8)), Option("w", "b", "d", 4, (8.0, 0.0)),
                      Option("w", "c", "d", 4, (0.0, 8.0))),
                     {"d": unit("d", 10, gpn=8, obj_node=100)})
    first = plan_of(p, {("w", "b"): 1, ("w", "c"): 1}, {("w", 0, "b"): 4.0, ("w", 1, "c"): 4.0})
    out = fewest_configurations(p, first, time_limit_s=10.0)
    assert out.solution.replicas == {("w", "a"): 1}
    assert out.solution.objective_usd == pytest.approx(180.0, abs=TIE_BREAK_TOLERANCE_USD)


def test_no_time_left_keeps_the_first_plan_and_says_so():
    p = server_problem((4.0, 4.0), (1.0, 0.0))
    first = plan_of(p, {("w", "a"): 4, ("w", "b"): 2}, {("w", 0, "a"): 4.0, ("w", 1, "b"): 4.0})
    out = fewest_configurations(p, first, time_limit_s=TIE_BREAK_MIN_S / 2)
    assert out.solution is first
    assert out.note is not None and out.note.code == "tie_break_skipped" and "2 configurations" in out.note.message


def test_a_plan_not_proven_optimal_is_left_alone():
    """A time-limited plan has no optimum to hold the cost to: no tie-break, an info note says so."""
    p = server_problem((4.0, 4.0), (1.0, 0.0))
    first = replace(plan_of(p, {("w", "a"): 4, ("w", "b"): 2}, {("w", 0, "a"): 4.0, ("w", 1, "b"): 4.0}),
                    status=SolveStatus.FEASIBLE, time_limited=True)
    out = fewest_configurations(p, first, time_limit_s=10.0)
    assert out.solution is first
    assert out.note is not None and (out.note.level, out.note.code) == ("info", "tie_break_skipped")


def test_tie_break_never_returns_a_dearer_plan():
    """The cost band is the optimum ± one cent. Beside the $20 mix of 1 × a + 1 × b above, option c (1 GPU of
    device e at $5.005) serves 1 req/s in both buckets: alone, 4 × c = $20.02, two cents dearer: the mix stays."""
    p = FleetProblem((Demand("w", (2.0, 2.0)),),
                     (Option("w", "a", "c", 1, (2.0, 0.5)), Option("w", "b", "c", 1, (0.5, 2.0)),
                      Option("w", "c", "e", 1, (1.0, 1.0))),
                     {"c": unit("c", 10), "e": unit("e", 5.005)})
    first = solve_fleet(p)
    assert first.replicas == {("w", "a"): 1, ("w", "b"): 1} and first.objective_usd == pytest.approx(20.0)
    out = fewest_configurations(p, first, time_limit_s=10.0)
    assert out.solution.replicas == first.replicas and out.note is None
    cheaper = replace(p, units={"c": unit("c", 10), "e": unit("e", 4.999)})  # 4 × c = $19.996: the optimum itself
    assert solve_fleet(cheaper).replicas == {("w", "c"): 4}


def test_the_rag_example_gives_byte_identical_json_twice(tmp_path):
    """`gpuplan optimize examples/rag-disaggregated.yaml` in two processes (different hash seeds): the same JSON bytes
    apart from the figures that vary between runs (docs/plan-json.md "Determinism and ties"), and 2 configurations
    (6 before the tie-break)."""
    texts = []
    for seed in ("1", "2"):
        out = tmp_path / f"rag-{seed}.json"
        subprocess.run([sys.executable, "-m", "cli.app", "optimize", str(EXAMPLES / "rag-disaggregated.yaml"),
                        "--no-sensitivity", "--no-verify", "--no-cache", "--json", str(out)],
                       check=True, capture_output=True, cwd=REPO, env={**os.environ, "PYTHONHASHSEED": seed})
        texts.append(VARYING.sub("null", out.read_text()))
    assert texts[0] == texts[1]
    result = json.loads(out.read_text())
    assert result["objective_usd"] == pytest.approx(7_477_187.936, rel=1e-9)
    assert len(result["deployments"]) == 2
    assert [d["code"] for d in result["diagnostics"]].count("tie_break") == 1


def test_a_re_size_solve_is_tie_broken_too():
    """The simulator's re-size rounds re-solve the MILP (``optimize.resize_solve``): their plan goes through the
    tie-break as the main solve's does. Devices p and q at $10 a GPU (1-GPU servers): a (on p) serves 1 req/s of
    bucket 0 only, b (on q) 2 req/s of either bucket on 2 GPUs. Every plan of buckets 4 + 4 costs 8 · $10 = $80; the
    main solve's term for devices that sort first (``build.tie_break``) puts 4 GPUs on p: 4 × a + 2 × b, 2
    configurations; the tie-break gives 4 × b, 1 configuration."""
    p = FleetProblem((Demand("w", (4.0, 4.0)),),
                     (Option("w", "a", "p", 1, (1.0, 0.0)), Option("w", "b", "q", 2, (2.0, 2.0))),
                     {"p": unit("p", 10), "q": unit("q", 10)})
    assert solve_fleet(p).replicas == {("w", "a"): 4, ("w", "b"): 2}
    resolved: list = []
    out = resize_solve(p, SolverOptions(), resolved)
    assert out.replicas == {("w", "b"): 4} and out.objective_usd == pytest.approx(80.0)
    assert len(resolved) == 1 and resolved[0][0] is out and resolved[0][1].code == "tie_break"


def test_in_a_child_process_the_same_plan(monkeypatch):
    """From CHILD_MIN_OPTIONS options on the tie-break runs in a forked child with a hard deadline (as the main solve):
    the same answer as in this process."""
    monkeypatch.setattr(tiebreak, "CHILD_MIN_OPTIONS", 0)
    p = server_problem((4.0, 4.0), (1.0, 0.0))
    first = plan_of(p, {("w", "a"): 4, ("w", "b"): 2}, {("w", 0, "a"): 4.0, ("w", 1, "b"): 4.0})
    assert fewest_configurations(p, first, time_limit_s=10.0).solution.replicas == {("w", "b"): 4}


def test_no_time_left_for_the_headroom_level_keeps_the_plan_and_says_so():
    """The third level in what is left of the limit: below TIE_BREAK_MIN_S the plan is kept, with a warning."""
    p = ep_problem()
    first = plan_of(p, {("w", "ep4"): 2}, {("w", 0, "ep4"): 8.0})
    out = tiebreak.most_headroom(p, first, time_limit_s=TIE_BREAK_MIN_S / 2)
    assert out.solution is first
    assert out.note is not None and (out.note.level, out.note.code) == ("warning", "tie_break_skipped")
    assert "most headroom" in out.note.message and "1 configuration " in out.note.message
    whole = fewest_configurations(p, first, time_limit_s=TIE_BREAK_MIN_S / 2)  # nothing left at all: the same
    assert whole.solution is first and whole.note is not None and "most headroom" in whole.note.message


def test_the_headroom_level_in_a_child_process_gives_the_same_plan(monkeypatch):
    """From CHILD_MIN_OPTIONS options on the third level too runs in a forked child with a hard deadline."""
    monkeypatch.setattr(tiebreak, "CHILD_MIN_OPTIONS", 0)
    p = split_problem()
    first = plan_of(p, {("w", "a"): 3, ("w", "b"): 1}, {("w", 0, "a"): 3.0, ("w", 1, "a"): 1.0, ("w", 1, "b"): 2.0})
    out = fewest_configurations(p, first, time_limit_s=10.0)
    assert out.solution.replicas == {("w", "a"): 2, ("w", "b"): 2} and is_feasible(p, out.solution)
