"""Properties of n+1-node plans (hypothesis): every plan survives losing any one server on the placement
it states, and offering the spread placement never makes a plan dearer than the shared placement alone.

Random fleet problems (one or two workloads, options of 1-8 GPUs on PCIe-like servers — cards and
chassis paid apart — or fixed-size boards of 4 or 8) are solved exactly (gap 0); the survival and the
servers are recomputed here from the solution alone, and the whole pipeline (capacity table →
optimize_plan) is checked by check_plan.
"""

from __future__ import annotations

import math
from unittest.mock import patch

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import optimizer.planning.milp.build as build
from catalog import load_catalog
from optimizer.optimize import optimize_plan
from optimizer.planning.capacity_table import parse_capacity_table
from optimizer.planning.milp.problem import Demand, FleetProblem, Option, UnitTerms
from optimizer.planning.milp.solve import solve_fleet
from optimizer.planning.solver_options import SolverOptions
from optimizer.results.check import check_plan
from optimizer.results.money import LinearTerms
from optimizer.results.plan_result import SolveStatus
from workloads import parse_plan

SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
ZERO = LinearTerms(0.0, 0.0)


@st.composite
def problems(draw):
    units = {}
    for name in ("a", "b"):
        size = draw(st.sampled_from([4, 8]))
        if draw(st.booleans()):  # a board: every GPU paid with its server
            t = LinearTerms(0.0, draw(st.floats(10, 400)))
            units[name] = UnitTerms(name, size, t, t, ZERO, ZERO, fixed_size=True)
        else:
            t = LinearTerms(draw(st.floats(1, 50)), draw(st.floats(0, 300)))
            units[name] = UnitTerms(name, size, t, t, ZERO, ZERO)
    demands, options = [], []
    for w in ("w", "v")[: draw(st.integers(1, 2))]:
        per_server = w == "w" or draw(st.booleans())
        demands.append(Demand(w, (draw(st.floats(0.05, 12)),), draw(st.integers(0, 3)), per_server or draw(st.booleans()),
                              per_server=per_server))
        options += [Option(w, f"{d}_{g}", d, g, (draw(st.floats(0.3, 6)),))
                    for d in units for g in (1, 2, 4) if g <= units[d].gpus_per_node]
    return FleetProblem(tuple(demands), tuple(options), units)


def survives_any_server(p: FleetProblem, s) -> bool:
    """Servers and survival recomputed from the solution: spread k on ⌈n/q⌉ servers of its own (q·g ≤ G),
    the rest on ⌈shared GPUs / G⌉ shared ones; losing a server leaves n − ⌈n/⌈n/q⌉⌉ (spread) or
    n − min(n, ⌊G/g⌋) (shared) replicas of each n+1-node option, at least its load in replicas."""
    opts = {(o.workload, o.key): o for o in p.options}
    per_server = {d.workload for d in p.demands if d.per_server}
    load: dict[tuple[str, str], float] = {}
    for (w, b, k), q in s.routed_qps.items():
        load[(w, k)] = load.get((w, k), 0.0) + q / opts[(w, k)].capacity_qps[b]
    own: dict[str, int] = {}
    shared: dict[str, int] = {}
    for idx, n in s.replicas.items():
        o, size = opts[idx], p.units[opts[idx].device].gpus_per_node
        q = s.replicas_per_server.get(idx)
        if q:
            y = math.ceil(n / q)
            own[o.device] = own.get(o.device, 0) + y
            if q * o.gpus > size or idx[0] not in per_server:
                return False
            lost = math.ceil(n / y)
        else:
            shared[o.device] = shared.get(o.device, 0) + n * o.gpus
            lost = min(n, max(1, size // o.gpus))
        if idx[0] in per_server and load.get(idx, 0.0) > 1e-9 and n - lost < load[idx] - 1e-6:
            return False
    return all(own.get(d, 0) + math.ceil(shared.get(d, 0) / p.units[d].gpus_per_node) <= s.nodes.get(d, 0)
               for d in set(own) | set(shared))


@SETTINGS
@given(p=problems())
def test_plan_survives_any_server_and_spread_never_costs_more(p):
    s = solve_fleet(p, gap=0.0)
    assert s.status == SolveStatus.OPTIMAL
    assert survives_any_server(p, s)
    with patch.object(build, "spread_packings", lambda *_: ()):  # the shared placement only (before)
        shared = solve_fleet(p, gap=0.0)
    assert shared.replicas_per_server == {}
    assert s.objective_usd <= shared.objective_usd * (1 + 1e-9) + 1e-9


HEADER = ("workload,unit,gpus,gpus_per_node,cost_usd_per_hour,input_bucket,output_bucket,max_request_rate_qps,"
          "bucket_fraction,total_request_rate_qps")


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rate=st.floats(0.2, 20.0), caps=st.lists(st.sampled_from([0.5, 1.0, 2.5, 4.0, 9.0]), min_size=3, max_size=3),
       sizes=st.lists(st.sampled_from([4, 8]), min_size=3, max_size=3))
def test_pipeline_plans_pass_check_plan(rate, caps, sizes):
    rows = [HEADER] + [f"w,U{i},{g},{size},{1.0 + i},0,0,{c},1.0,{rate!r}"
                       for i, (g, c, size) in enumerate(zip((1, 2, 4), caps, sizes, strict=True))]
    plan = parse_plan({"objective": "cloud", "workloads": [{
        "name": "w", "model": "llama-2-7b", "qps": rate, "prompt_tokens": 100, "output_tokens": 50,
        "slo": {"tpot_p99_ms": 100}, "redundancy": "n+1-node"}]}, "property")
    table = parse_capacity_table("\n".join(rows) + "\n", "property.csv")
    r = optimize_plan(plan, load_catalog(), capacity_table=table, options=SolverOptions(gap=0.0),
                      compare_single_device=False)
    assert r.status == SolveStatus.OPTIMAL
    assert check_plan(r, plan) == []
