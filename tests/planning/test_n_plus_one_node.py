"""redundancy n+1-node: the fleet survives losing any one server, with the replicas placed by the plan.

Paper figures. A PCIe server of G = 8 slots ($25,000, catalog `pcie-8`) holds ⌊8/4⌋ = 2 replicas of
4 GPUs. On shared servers, wherever the replicas land, one server can take 2 of them: load ≤ n − 2.
Spread one per server over servers of their own, one server takes 1: load ≤ n − 1 on n servers.
A load under one replica's capacity then needs 3 replicas (12 GPUs, 2 servers) shared, or 2 spread
(8 GPUs, 2 servers): at $5,000 per L40S (the catalog's estimate) $110,000 against $90,000.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import replace

import pytest

from catalog import load_catalog
from optimizer.optimize import optimize_plan
from optimizer.planning.milp.heuristic import WorkloadPlan, pooled_fleet
from optimizer.planning.milp.problem import Demand, FleetProblem, Option, UnitTerms
from optimizer.planning.milp.resolve import is_feasible
from optimizer.planning.milp.routing import balanced_routing
from optimizer.planning.milp.solve import solve_fleet
from optimizer.results.check import check_plan
from optimizer.results.money import LinearTerms
from optimizer.results.plan_result import SolveStatus
from reports.workbook import build_workbook
from workloads import parse_plan, resolve_catalog

ZERO = LinearTerms(0.0, 0.0)
GPU_USD, SERVER_USD = 5_000.0, 25_000.0


def pcie(gpus_per_node: int = 8, *, full: bool = False) -> UnitTerms:
    """A PCIe chassis: cards bought one by one ($5,000 each), $25,000 per server."""
    t = LinearTerms(GPU_USD, SERVER_USD)
    return UnitTerms("pcie", gpus_per_node, t, t, ZERO, ZERO, full_servers_only=full)


def solve_one(load: float, gpus: int, unit: UnitTerms, min_replicas: int = 0):
    """One n+1-node workload with one option of ``gpus`` GPUs and 1 req/s per replica at ``load`` req/s."""
    problem = FleetProblem((Demand("w", (load,), min_replicas, n_plus_one=True, per_server=True),),
                           (Option("w", "k", "pcie", gpus, (1.0,)),), {"pcie": unit})
    return problem, solve_fleet(problem)


def test_ep4_on_pcie_spreads_two_replicas_over_two_servers():
    # load 0.1 replicas' worth: spread 1 per server, n = ⌈0.1⌉ + 1 = 2 on 2 servers, 8 GPUs:
    # 8 × 5,000 + 2 × 25,000 = $90,000 (shared: n = 1 + 2 = 3, 12 GPUs on 2 servers, $110,000).
    problem, s = solve_one(0.1, 4, pcie())
    assert s.status == SolveStatus.OPTIMAL
    assert s.replicas[("w", "k")] == 2 and s.replicas_per_server == {("w", "k"): 1}
    assert (s.gpus["pcie"], s.nodes["pcie"]) == (8, 2)
    assert s.objective_usd == pytest.approx(8 * GPU_USD + 2 * SERVER_USD)  # $90,000
    assert balanced_routing(problem, s).routed_qps[("w", 0, "k")] == pytest.approx(0.1)


def test_whole_servers_only_keeps_the_shared_placement():
    # allow_partial_servers: false — a server of its own with 4 of 8 slots used is partly used, so only
    # the shared placement: n = 3 would leave a partly used server, n = 4 fills 2 servers (16 GPUs).
    _, s = solve_one(0.1, 4, pcie(full=True))
    assert s.replicas_per_server == {}
    assert (s.replicas[("w", "k")], s.gpus["pcie"], s.nodes["pcie"]) == (4, 16, 2)


def cheapest_by_enumeration(load: float, g: int, size: int, min_replicas: int = 0) -> float:
    """The cheapest fleet of one n+1-node option by brute force over (replicas R, servers y): shared
    servers (⌈R·g/G⌉ of them, one server losing ⌊G/g⌋), or R spread evenly over y servers of their own
    (R ≤ ⌊G/g⌋·y, the busiest holding ⌈R/y⌉), R − lost ≥ load and R ≥ min_replicas."""
    most = size // g
    best = math.inf
    for r in range(1, 40):
        if r < min_replicas:
            continue
        if r - min(r, most) >= load - 1e-9:
            best = min(best, r * g * GPU_USD + math.ceil(r * g / size) * SERVER_USD)
        for y in range(1, r + 1):
            if r <= most * y and r - math.ceil(r / y) >= load - 1e-9:
                best = min(best, r * g * GPU_USD + y * SERVER_USD)
    return best


@pytest.mark.parametrize(("load", "g", "size"), list(itertools.product((0.3, 1.0, 2.5, 5.0, 9.0), (1, 2, 4), (4, 8))))
def test_one_option_optimum_equals_enumeration(load, g, size):
    if g > size:
        pytest.skip("a replica larger than a server")
    _, s = solve_one(load, g, pcie(size))
    assert s.objective_usd == pytest.approx(cheapest_by_enumeration(load, g, size), rel=1e-9)


def cheapest_beside_plain_by_enumeration(load: float, g: int, size: int, plain: int) -> float:
    """The cheapest fleet of one n+1-node option (as :func:`cheapest_by_enumeration`) beside ``plain``
    1-GPU replicas of another workload on the same PCIe device: shared, the plain GPUs share the
    n+1-node replicas' servers (⌈(R·g + plain)/G⌉); spread, the n+1-node replicas' y servers are their
    own and the plain GPUs fill ⌈plain/G⌉ others."""
    most = size // g
    best = math.inf
    for r in range(1, 40):
        if r - min(r, most) >= load - 1e-9:
            best = min(best, (r * g + plain) * GPU_USD + math.ceil((r * g + plain) / size) * SERVER_USD)
        for y in range(1, r + 1):
            if r <= most * y and r - math.ceil(r / y) >= load - 1e-9:
                best = min(best, (r * g + plain) * GPU_USD + (y + math.ceil(plain / size)) * SERVER_USD)
    return best


@pytest.mark.parametrize(("load", "g", "plain"), list(itertools.product((0.3, 2.5), (1, 2, 4), (1, 2, 5))))
def test_optimum_beside_a_plain_workload_equals_enumeration(load, g, plain):
    # the servers' upper bound once ruled out a spread needing more servers than the shared placement
    problem = FleetProblem(
        (Demand("w", (load,), n_plus_one=True, per_server=True), Demand("v", (plain - 0.5,), plain)),
        (Option("w", "k", "pcie", g, (1.0,)), Option("v", "j", "pcie", 1, (1.0,))), {"pcie": pcie()})
    s = solve_fleet(problem, gap=0.0)
    assert s.objective_usd == pytest.approx(cheapest_beside_plain_by_enumeration(load, g, 8, plain), rel=1e-9)


# ---------------------------------------------------------------- end to end, checked without the solver


def _l40s_plan():
    return parse_plan({
        "name": "l40s-moe-n1node", "objective": "capex", "allowed_devices": ["l40s"],
        "workloads": [{"name": "moe-chat", "model": "mixtral-8x7b", "qps": 1, "prompt_tokens": 1024,
                       "output_tokens": 256, "slo": {"ttft_p99_ms": 2000, "tpot_p99_ms": 100},
                       "precisions": ["bf16"], "engine": "vllm", "redundancy": "n+1-node"}],
    }, "test")


@pytest.fixture(scope="module")
def l40s():
    plan = _l40s_plan()
    cat = load_catalog()
    return plan, optimize_plan(plan, resolve_catalog(plan, cat, "test"), compare_single_device=False)


def test_l40s_ep4_buys_two_replicas_not_three(l40s):
    plan, r = l40s
    assert r.status == SolveStatus.OPTIMAL
    (d,) = r.deployments
    (f,) = r.fleet
    assert (d.tp, d.pp, d.ep) == (1, 1, 4)
    assert d.qps < d.capacity_qps / d.replicas  # the load fits one replica: one spare server's worth is 1
    assert (d.replicas, d.replicas_per_server, d.dedicated_servers) == (2, 1, 2)
    assert (f.gpus, f.nodes, f.purchase_usd, f.server_usd) == (8, 2, GPU_USD, SERVER_USD)
    assert r.capex_usd == pytest.approx(90_000.0)  # 8 × 5,000 + 2 × 25,000; was 12 × 5,000 + 2 × 25,000
    assert check_plan(r, plan) == []
    row = r.to_json()["deployments"][0]
    assert (row["replicas_per_server"], row["dedicated_servers"]) == (1, 2)


def test_checker_finds_a_plan_that_does_not_survive_a_server(l40s):
    plan, r = l40s
    (d,) = r.deployments
    # the same 2 replicas on shared servers: one server may hold both
    shared = replace(r, deployments=(replace(d, replicas_per_server=None),))
    assert any(v.startswith("N+1 per server") for v in check_plan(shared, plan))
    # both on one server of their own: losing it loses both
    packed = replace(r, deployments=(replace(d, replicas_per_server=2),))
    assert any(v.startswith("N+1 per server") for v in check_plan(packed, plan))
    # spread one per server, but the fleet has one server
    (f,) = r.fleet
    short = replace(r, fleet=(replace(f, nodes=1),))
    assert any(v.startswith("placement l40s") for v in check_plan(short, plan))


def test_workbook_states_the_placement(l40s):
    _, r = l40s
    ws = build_workbook(r.to_json())["Deployments"]
    cells = [c.value for row in ws.iter_rows() for c in row if isinstance(c.value, str)]
    assert "Placement (n+1-node)" in cells
    assert "at most 1 per server, on 2 servers of their own" in cells


def test_spread_fleet_through_pooling_and_feasibility_checks():
    # The paper fleet (2 replicas of 4 GPUs, 1 per server of their own) beside a plain workload of 1-GPU
    # replicas. With 3 of them the shared placement is cheaper: 3 × 4 + 3 = 15 GPUs fill 2 servers,
    # $125,000, against 8 + 3 = 11 GPUs on 2 + 1 servers, $130,000. With 5: shared 12 + 5 = 17 GPUs on
    # 3 servers, $160,000; spread 8 + 5 = 13 GPUs on 2 + 1 servers, 13 × 5,000 + 3 × 25,000 = $140,000.
    def problem_of(load_v: float) -> FleetProblem:
        return FleetProblem(
            (Demand("w", (0.1,), n_plus_one=True, per_server=True), Demand("v", (load_v,))),
            (Option("w", "k", "pcie", 4, (1.0,)), Option("v", "j", "pcie", 1, (1.0,))), {"pcie": pcie()})

    s = solve_fleet(problem_of(3.0))
    assert s.replicas == {("w", "k"): 3, ("v", "j"): 3} and s.replicas_per_server == {}
    assert s.objective_usd == pytest.approx(15 * GPU_USD + 2 * SERVER_USD)
    problem = problem_of(5.0)
    s = solve_fleet(problem)
    assert s.replicas == {("w", "k"): 2, ("v", "j"): 5} and s.replicas_per_server == {("w", "k"): 1}
    assert (s.gpus["pcie"], s.nodes["pcie"]) == (13, 3)
    assert s.objective_usd == pytest.approx(13 * GPU_USD + 3 * SERVER_USD)
    plans = {"w": WorkloadPlan("w", {("w", "k"): 2}, {("w", 0, "k"): 0.1}, None, {("w", "k"): 1}),
             "v": WorkloadPlan("v", {("v", "j"): 5}, {("v", 0, "j"): 5.0}, None)}
    pooled = pooled_fleet(problem, plans)
    assert (pooled.nodes["pcie"], pooled.objective_usd) == (3, pytest.approx(s.objective_usd))
    assert is_feasible(problem, pooled)
    assert not is_feasible(problem, replace(pooled, replicas_per_server={}))  # shared: 2 − 2 < 0.1
    assert not is_feasible(problem, replace(pooled, nodes={"pcie": 2}))  # the spread needs its 2 servers


def test_spread_needs_more_servers_than_the_shared_placement():
    # w: 1-GPU replicas, load 0.1: shared needs 1 + ⌊8/1⌋ = 9 replicas; v: 2 plain 1-GPU replicas.
    # Shared: 11 GPUs on 2 servers, 11 × 5,000 + 2 × 25,000 = $105,000. Spread 1 per server: w on
    # 2 servers of its own, v on a third: 4 × 5,000 + 3 × 25,000 = $95,000. The servers' upper bound
    # ⌈Σ g·ub / G⌉ = ⌈11/8⌉ = 2 ruled the spread's 3 servers out (it returned $105,000 as optimal).
    problem = FleetProblem(
        (Demand("w", (0.1,), n_plus_one=True, per_server=True), Demand("v", (0.5,), 2)),
        (Option("w", "k", "pcie", 1, (1.0,)), Option("v", "j", "pcie", 1, (1.0,))), {"pcie": pcie()})
    s = solve_fleet(problem)
    assert s.status == SolveStatus.OPTIMAL
    assert s.replicas == {("w", "k"): 2, ("v", "j"): 2} and s.replicas_per_server == {("w", "k"): 1}
    assert (s.gpus["pcie"], s.nodes["pcie"]) == (4, 3)
    assert s.objective_usd == pytest.approx(4 * GPU_USD + 3 * SERVER_USD)  # $95,000
