"""Solving: the solver run (HiGHS, CBC fallback), status classification, extraction of the plan.

:func:`solve_fleet` is the orchestrator: build the model, solve it, extract the plan.
:func:`workload_lower_bounds` solves each workload alone for the cuts of
:func:`optimizer.planning.milp.build.define_workload_bounds`.
"""

from __future__ import annotations

import contextlib
import ctypes
import math
import os
import sys
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pulp

from catalog.errors import SolverError
from optimizer.planning.milp.build import TIE_BREAK_FRACTION, FleetModel, build_model
from optimizer.planning.milp.deadline import fork_available, run_with_deadline
from optimizer.planning.milp.problem import (
    BOUNDS_MIN_OPTIONS,
    PRESOLVE_MIN_OPTIONS,
    Demand,
    FleetProblem,
    FleetSolution,
    Limits,
    Minimise,
    Option,
    UnitTerms,
    amortised_units,
    fleet_servers,
    options_by_workload,
    uncovered_buckets,
)
from optimizer.results.plan_result import SolveStatus


def solve_alone(demand: Demand, options: tuple[Option, ...], units: Mapping[str, UnitTerms], *,
                time_limit_s: float, gap: float, solver: str = "highs",
                max_nodes: int | None = None) -> FleetSolution | None:
    """One workload on its own: servers amortised per GPU (``amortised_units``), budgets and power dropped.

    Every fleet's replicas of the workload are feasible here, so this optimum bounds the
    workload's share of any fleet's cost. None when some bucket has no option at all.
    """
    amortised = amortised_units({o.device: units[o.device] for o in options})
    sub = FleetProblem((demand,), options, amortised, Limits())
    if uncovered_buckets(sub):
        return None
    return solve_fleet(sub, time_limit_s=time_limit_s, gap=gap, solver=solver, bounds=False, max_nodes=max_nodes)


def workload_lower_bounds(problem: FleetProblem, *, time_limit_s: float, gap: float,
                          solver: str = "highs") -> dict[str, float]:
    """L[w]: each workload alone (:func:`solve_alone`).

    Every feasible fleet's replicas of w are feasible there, so the proven lower bound of
    that small MILP (its dual bound; the optimum when solved) bounds w's amortised cost.
    ``time_limit_s`` is the budget of all of them together.
    """
    per_workload_s = max(0.2, time_limit_s / max(len(problem.demands), 1))
    deadline = time.perf_counter() + time_limit_s
    by_workload = options_by_workload(problem)
    out = {}
    for dem in problem.demands:
        left = deadline - time.perf_counter()
        if left <= 0.01:  # the budget is spent: the other workloads go without a cut (cuts are optional)
            break
        sol = solve_alone(dem, by_workload.get(dem.workload, ()), problem.units,
                          time_limit_s=min(per_workload_s, left), gap=min(gap, 1e-6), solver=solver)
        bound = bound_of(sol) if sol is not None else None
        if bound is not None:
            out[dem.workload] = bound
    return out


def bound_of(sol: FleetSolution) -> float | None:
    """A one-workload solve's proven lower bound: HiGHS's dual bound (the optimum when proven),
    a hair below and below the sub-solve's tie-break term, so a cut from it never cuts off the
    optimum; None without one."""
    bound = sol.bound_usd if sol.bound_usd is not None else (
        sol.objective_usd if sol.status == SolveStatus.OPTIMAL else None)
    return None if bound is None else bound * (1 - TIE_BREAK_FRACTION - 1e-9) - 1e-6




# ---------------------------------------------------------------------------------------
# Solve
# ---------------------------------------------------------------------------------------


@contextlib.contextmanager
def stdout_silenced() -> Iterator[None]:
    """Point file descriptor 1 at /dev/null: HiGHS prints its banner from C++ even with msg=False."""
    try:
        sys.stdout.flush()
        saved = os.dup(1)
    except (OSError, ValueError):
        yield
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 1)
        yield
    finally:
        with contextlib.suppress(Exception):
            ctypes.CDLL(None).fflush(None)
        os.dup2(saved, 1)
        os.close(saved)
        os.close(devnull)


def solve_lp(prob: pulp.LpProblem) -> bool:
    """Solve ``prob`` (an LP of the sensitivity shortcuts) with HiGHS, silent and single-threaded as the
    MILPs run (one scheduler per process); False when the solver failed (its status is then not read)."""
    try:
        with stdout_silenced():
            prob.solve(pulp.HiGHS(msg=False, threads=1))
    except pulp.PulpSolverError:
        return False
    return True


@dataclass(frozen=True)
class SolveRun:
    status: SolveStatus
    detail: str
    gap: float | None
    solve_seconds: float
    solver: str
    bound: float | None = None
    time_limited: bool = False  # stopped by the wall-clock limit: a rerun may stop elsewhere


class HiGHSWithHooks(pulp.HiGHS):
    """PuLP's HiGHS with two hooks between building the HiGHS model and running it:
    ``start`` (column values of a feasible solution, by PuLP variable, given to
    ``Highs.setSolution`` as the first incumbent) and ``on_incumbent`` (called with the column
    values of every improving MIP solution HiGHS finds, in the original model's columns)."""

    def __init__(self, *, on_incumbent: Callable[[Any, float, float], None] | None = None,
                 start: Mapping[pulp.LpVariable, float] | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.on_incumbent = on_incumbent
        self.first_incumbent = start  # LpSolver has a float 'start' of its own

    def callSolver(self, lp: pulp.LpProblem) -> None:  # noqa: N802 - PuLP's name
        h = lp.solverModel
        if self.first_incumbent:
            idx = np.array([v.index for v in self.first_incumbent], dtype=np.int32)
            h.setSolution(len(idx), idx, np.array(list(self.first_incumbent.values()), dtype=np.float64))
        if self.on_incumbent is not None:
            hook = self.on_incumbent
            h.cbMipImprovingSolution.subscribe(
                lambda e: hook(np.array(e.data_out.mip_solution), float(e.data_out.objective_function_value),
                               float(e.data_out.mip_dual_bound)))
        h.run()

    def findSolutionValues(self, lp: pulp.LpProblem) -> tuple[int, int]:  # noqa: N802 - PuLP's name
        """PuLP's, plus HiGHS's node and leaf limits (``kSolutionLimit``, which PuLP 3.3 does not map):
        read as its time limit is, status "Optimal" with an integer-feasible solution (the values are
        assigned before PuLP looks the status up; ``classify_run`` checks there is an incumbent)."""
        try:
            return super().findSolutionValues(lp)
        except KeyError:
            if _highs_status(lp) != "kSolutionLimit":
                raise
            return pulp.LpStatusOptimal, pulp.LpSolutionIntegerFeasible


def _highs(time_limit_s: float, gap: float, *, on_incumbent: Callable[[Any, float, float], None] | None = None,
           start: Mapping[pulp.LpVariable, float] | None = None, **options: Any) -> HiGHSWithHooks:
    """HiGHS single-threaded, silent, with the time limit, relative gap, hooks and extra HiGHS ``options``."""
    return HiGHSWithHooks(msg=False, timeLimit=time_limit_s, gapRel=gap, threads=1, on_incumbent=on_incumbent,
                          start=start, **options)


def _solver(name: str, time_limit_s: float, gap: float, presolve: bool = True,
            on_incumbent: Callable[[Any, float, float], None] | None = None,
            start: Mapping[pulp.LpVariable, float] | None = None, max_nodes: int | None = None) -> Any:
    if name == "highs":
        extra: dict[str, Any] = {} if presolve else {"presolve": "off"}
        if max_nodes is not None:  # a work limit: where HiGHS stops does not depend on the machine's load
            extra["mip_max_nodes"] = int(max_nodes)
        return _highs(time_limit_s, gap, on_incumbent=on_incumbent, start=start, **extra)
    with warnings.catch_warnings():
        # PuLP 3.3 flags its bundled CBC as going away in 4.0; it is only our fallback.
        warnings.simplefilter("ignore", DeprecationWarning)
        return pulp.PULP_CBC_CMD(msg=False, timeLimit=max(1, math.ceil(time_limit_s)), gapRel=gap)


def solve_model(model: FleetModel, *, time_limit_s: float, gap: float, solver: str = "highs",
                reported_limit_s: float | None = None, presolve: bool = True,
                on_incumbent: Callable[[Any, float, float], None] | None = None,
                start: Mapping[pulp.LpVariable, float] | None = None, max_nodes: int | None = None) -> SolveRun:
    """Solve with HiGHS (CBC if HiGHS is unavailable or fails) and classify the outcome.

    PuLP reports a solve stopped by the time limit as status "Optimal"; only
    ``prob.sol_status`` (integer-feasible vs optimal) tells them apart, so both are read.
    ``reported_limit_s`` is the limit the user gave, named in the messages (default
    ``time_limit_s``, which may be what is left of it after building the model).
    ``presolve=False`` skips HiGHS's presolve (faster on small models). ``on_incumbent`` and
    ``start`` are HiGHS's improving-solution callback and first incumbent (:class:`HiGHSWithHooks`).
    ``max_nodes``: HiGHS's branch-and-bound node limit (``mip_max_nodes``), a work limit that
    stops the solve at the same place on any machine (HiGHS runs single-threaded); the time
    limit stays as a guard. CBC (the fallback) has the time limit only.
    """
    names = [solver] + (["cbc"] if solver == "highs" else [])
    last_error = ""
    for name in names:
        if name == "highs" and not pulp.HiGHS(msg=False).available():
            last_error = "HiGHS (highspy) is not installed"
            continue
        t0 = time.perf_counter()
        try:
            with stdout_silenced():
                model.prob.solve(_solver(name, time_limit_s, gap, presolve, on_incumbent, start, max_nodes))
        except pulp.PulpSolverError as exc:
            last_error = f"{name}: {exc}"
            continue
        seconds = time.perf_counter() - t0
        return classify_run(model, name, seconds, reported_limit_s or time_limit_s)
    raise SolverError(f"no MILP solver could run ({last_error}); install highspy: pip install highspy")


def solve_tuned_highs(model: FleetModel, *, time_limit_s: float, gap: float, options: Mapping[str, Any],
                      start: Mapping[pulp.LpVariable, float] | None = None, presolve: bool = False,
                      on_incumbent: Callable[[Any, float, float], None] | None = None,
                      reported_limit_s: float | None = None) -> SolveRun | None:
    """One HiGHS solve with extra HiGHS ``options`` (the re-solves' and the tie-break's settings), classified as
    :func:`solve_model` does; None when HiGHS is not installed, PuLP raises, or the run ends in error (the caller
    falls back to :func:`solve_model` / ``solve_fleet``, HiGHS's defaults then CBC)."""
    if not pulp.HiGHS(msg=False).available():
        return None
    highs = _highs(time_limit_s, gap, on_incumbent=on_incumbent, start=start,
                   presolve="on" if presolve else "off", **options)
    t0 = time.perf_counter()
    try:
        with stdout_silenced():
            model.prob.solve(highs)
    except pulp.PulpSolverError:
        return None
    run = classify_run(model, "highs", time.perf_counter() - t0, reported_limit_s or time_limit_s)
    return None if run.status == SolveStatus.ERROR else run


def classify_run(model: FleetModel, solver: str, seconds: float, time_limit_s: float) -> SolveRun:
    """The :class:`SolveRun` of a finished solve of ``model``: its status from PuLP's ``status`` and
    ``sol_status`` (a HiGHS "Optimal" without an incumbent is no plan), with HiGHS's gap and bound;
    ``time_limit_s`` is the limit named in the messages. Shared with ``resolve.resolve_fleet``."""
    prob = model.prob
    status, sol = prob.status, prob.sol_status
    gap, bound = _highs_gap(prob) if solver == "highs" else (None, None)
    if status == pulp.LpStatusOptimal and solver == "highs" and not _highs_has_solution(prob):
        # PuLP maps a HiGHS stop without any incumbent (an interrupt) to "Optimal": no plan.
        status = pulp.LpStatusNotSolved
    if status == pulp.LpStatusOptimal and sol == pulp.LpSolutionOptimal:
        return SolveRun(SolveStatus.OPTIMAL, "proven optimal" + _gap_text(gap), gap if gap is not None else 0.0,
                        seconds, solver, bound)
    if status == pulp.LpStatusOptimal and sol == pulp.LpSolutionIntegerFeasible:
        if solver == "highs" and _highs_status(prob) == "kSolutionLimit":
            nodes = _highs_nodes(prob)
            return SolveRun(SolveStatus.FEASIBLE, "work limit reached" + (f" ({nodes:,} nodes)" if nodes else "")
                            + _gap_text(gap), gap, seconds, solver, bound)
        return SolveRun(SolveStatus.FEASIBLE, f"time limit ({time_limit_s:g} s) reached" + _gap_text(gap),
                        gap, seconds, solver, bound, time_limited=True)
    if status == pulp.LpStatusInfeasible or sol == pulp.LpSolutionInfeasible:
        return SolveRun(SolveStatus.INFEASIBLE, "no fleet satisfies every constraint", None, seconds, solver)
    if status == pulp.LpStatusNotSolved:
        stop = _highs_status(prob) if solver == "highs" else ""
        if stop not in _TIME_STOPS:
            # HiGHS gave up for another reason (numerical trouble, a work limit): naming the time limit sent users to
            # raise it, after 0.9 s of a 10 s limit (hostile round 26: a price of 1e300)
            return SolveRun(SolveStatus.ERROR, f"the solver stopped after {seconds:.2g} s of the {time_limit_s:g} s "
                            f"limit without a solution (HiGHS status {stop}); look for an extreme figure in the plan "
                            "(a price, power or rate many orders of magnitude from the rest)", None, seconds, solver)
        return SolveRun(SolveStatus.ERROR, f"no solution found in {time_limit_s:g} s (the time limit); "
                        "raise --time-limit-s", None, seconds, solver, time_limited=True)
    return SolveRun(SolveStatus.ERROR, f"solver status {pulp.LpStatus.get(status, status)}", None, seconds, solver)


# HiGHS's stops that are the time limit: its own, an interrupt (PuLP's mapping of a stop without an incumbent), or
# unknown (an older highspy, CBC): the message names the limit
_TIME_STOPS = frozenset({"", "kTimeLimit", "kInterrupt"})


def _highs_status(prob: pulp.LpProblem) -> str:
    """HiGHS's model status name (``kTimeLimit``, ``kSolutionLimit``: the node limit, ...); "" if unknown."""
    try:
        return prob.solverModel.getModelStatus().name
    except Exception:  # noqa: BLE001 - older highspy: the stop reason is only named in the detail
        return ""


def _highs_nodes(prob: pulp.LpProblem) -> int | None:
    """Branch-and-bound nodes HiGHS explored; None if it cannot tell."""
    try:
        return int(prob.solverModel.getInfo().mip_node_count)
    except Exception:  # noqa: BLE001 - a missing info field only loses the figure
        return None


def _highs_has_solution(prob: pulp.LpProblem) -> bool:
    """HiGHS holds a feasible primal solution (``primal_solution_status`` 2); True if it cannot tell."""
    try:
        return int(prob.solverModel.getInfo().primal_solution_status) == 2
    except Exception:  # noqa: BLE001 - older highspy: trust PuLP's status
        return True


def _highs_gap(prob: pulp.LpProblem) -> tuple[float | None, float | None]:
    """(relative MIP gap |primal − dual bound| / |primal|, dual bound) as HiGHS reports them."""
    try:
        info = prob.solverModel.getInfo()
        g, b = float(info.mip_gap), float(info.mip_dual_bound)
    except Exception:  # noqa: BLE001 - a missing info field only loses the gap figure
        return None, None
    return (g if math.isfinite(g) else None), (b if math.isfinite(b) else None)


def _gap_text(gap: float | None) -> str:
    return f"; gap {gap * 100:.3g} %" if gap is not None else ""


# ---------------------------------------------------------------------------------------
# Extract
# ---------------------------------------------------------------------------------------


def extract(model: FleetModel, run: SolveRun, build_seconds: float, values: Any = None) -> FleetSolution:
    """Integer replicas, routed loads (λ·x, req/s) and whole servers from the solved model.

    ``values``: column values of an incumbent (indexed by ``LpVariable.index``, as HiGHS's
    callback gives them) instead of the solved variables' values.
    Servers are recomputed as ⌈gpus[d] / gpus_per_node[d]⌉ — what the solver picks when a
    server costs anything, and never more than it picked — plus ⌈n/q⌉ servers of its own for
    each n+1-node option the solver spread at most q per server (z[w,k,q] = 1;
    :func:`~optimizer.planning.milp.problem.fleet_servers`).
    """
    stats = dict(n_variables=len(model.prob.variables()), n_constraints=len(model.prob.constraints()),
                 n_integer_variables=len(model.n) + len(model.m) + len(model.r) + len(model.u) + len(model.z)
                 + len(model.y))
    if not run.status.has_plan:
        return FleetSolution(run.status, run.detail, None, run.gap, run.solve_seconds, build_seconds, run.solver, **stats,
                             time_limited=run.time_limited)
    value = (lambda v: v.value() or 0.0) if values is None else (lambda v: float(values[v.index]))
    units = model.problem.units
    replicas = {idx: int(round(value(v))) for idx, v in model.n.items()}
    replicas = {idx: r for idx, r in replicas.items() if r > 0}
    routed = routed_loads(model.problem, replicas, {idx: value(v) for idx, v in model.x.items()},
                          {w: d.bucket_qps for w, d in model.demands.items()})
    spread = {(w, key): q for (w, key, q), z in model.z.items() if value(z) > 0.5 and replicas.get((w, key), 0) > 0}
    gpus, nodes = fleet_servers(model.problem, replicas, spread)
    objective = float(sum(units[d].figure("objective_usd", g, nodes[d]) for d, g in gpus.items()))
    return FleetSolution(run.status, run.detail, objective, run.gap, run.solve_seconds, build_seconds,
                         run.solver, replicas, routed, gpus, nodes, **stats, bound_usd=run.bound,
                         time_limited=run.time_limited, replicas_per_server=spread)


def routed_loads(problem: FleetProblem, replicas: Mapping[tuple[str, str], int],
                 shares_in: Mapping[tuple[str, int, str], float], bucket_qps: Mapping[str, Sequence[float]]
                 ) -> dict[tuple[str, int, str], float]:
    """Routed req/s of each (workload, bucket, option key) from the routing shares x of a solved
    model: shares of options left without replicas (solver tolerance: n ≈ 1e-7) are dropped and each
    bucket's remaining shares renormalised, so the routed load adds up to the bucket's rate (with
    disaggregated pools, colocated + prefill and colocated + decode shares each add to 1)."""
    shares: dict[tuple[str, int], dict[str, float]] = {}
    for (w, b, key), raw in shares_in.items():
        share = min(max(raw, 0.0), 1.0)
        if share > 1e-12 and (w, key) in replicas:
            shares.setdefault((w, b), {})[key] = share
    stage = {(o.workload, o.key): o.stage for o in problem.options}
    routed: dict[tuple[str, int, str], float] = {}
    for (w, b), by_key in shares.items():
        phases = {k: stage[(w, k)] for k in by_key}
        together = [v for k, v in by_key.items() if phases[k] == "colocated"]
        totals = {"colocated": sum(by_key.values())} if len(together) == len(by_key) else {
            p: sum(together) + sum(v for k, v in by_key.items() if phases[k] == p) for p in ("prefill", "decode")}
        for key, share in by_key.items():
            total = totals.get(phases[key]) or totals.get("prefill", 0.0)
            routed[(w, b, key)] = share / total * bucket_qps[w][b]
    return routed


def start_values(model: FleetModel, start: FleetSolution) -> dict[pulp.LpVariable, float]:
    """Every column's value in ``start`` (a feasible solution of the same problem, e.g. the
    one-device fleet): n from its replicas, x = routed λ / bucket λ, m from its servers,
    u = 1 where an N+1 candidate has replicas; 0 elsewhere."""
    out: dict[pulp.LpVariable, float] = {v: 0.0 for v in model.prob.variables()}
    for idx, v in model.n.items():
        out[v] = float(start.replicas.get(idx, 0))
    for (w, b, key), v in model.x.items():
        lam = model.demands[w].bucket_qps[b]
        out[v] = start.routed_qps.get((w, b, key), 0.0) / lam if lam > 0 else 0.0
    for d, v in model.m.items():
        out[v] = float(start.nodes.get(d, 0))
    for idx, v in model.u.items():
        out[v] = 1.0 if start.replicas.get(idx, 0) > 0 else 0.0
    for idx, v in model.a.items():  # spread: z = 1 at its q and ⌈n/q⌉ servers of its own; else a = n
        n, q = start.replicas.get(idx, 0), start.replicas_per_server.get(idx)
        if n > 0 and q in model.packings[idx]:
            out[model.z[(*idx, q)]] = 1.0
            out[model.y[(*idx, q)]] = float(math.ceil(n / q))
        else:
            out[v] = float(n)
    return out


# Problems with at least this many options solve in a child process with a hard deadline
# (``optimizer.planning.milp.deadline``): HiGHS overran its time limit on a 500-workload plan
# (hundreds of thousands of options). Below it a fork costs more than it protects.
CHILD_MIN_OPTIONS = 2_000
# Seconds past the time limit before the child is killed: building, extracting and sending
# the answer of a large model take a few seconds after HiGHS stops on time.
DEADLINE_GRACE_S = 3.0


def solve_fleet(
    problem: FleetProblem,
    *,
    time_limit_s: float = 10.0,
    gap: float = 1e-3,
    solver: str = "highs",
    minimise: Minimise = "objective",
    bounds: bool = True,
    start: FleetSolution | None = None,
    in_child: bool | None = None,
    cuts: Mapping[str, float] | None = None,
    max_nodes: int | None = None,
) -> FleetSolution:
    """Build → solve → extract. Buckets no option serves make the plan infeasible up front.

    With several workloads, ``bounds`` and a large problem (``BOUNDS_MIN_OPTIONS``), each
    workload is first solved alone for the cuts of :func:`define_workload_bounds` (their
    time counts as build time); small problems solve faster without them; ``cuts`` gives those
    bounds instead (computed already). ``start`` is a feasible solution given to HiGHS as its
    first incumbent. ``max_nodes``: HiGHS's node limit (:func:`solve_model`), the time limit then a guard.

    From CHILD_MIN_OPTIONS options on (or with ``in_child=True``) all of it runs in a child
    process killed ``time_limit_s`` + DEADLINE_GRACE_S seconds after the call: the answer is
    then the last incumbent the child reported (status feasible, with its gap against the
    last dual bound), or an error when it found none.
    """
    missing = uncovered_buckets(problem)
    if missing:
        where = ", ".join(f"{w} bucket {b}" for w, b in missing)
        return FleetSolution(SolveStatus.INFEASIBLE, f"no candidate can serve {where}", solver=solver)
    if in_child is None:
        in_child = len(problem.options) >= CHILD_MIN_OPTIONS
    if not (in_child and solver == "highs" and fork_available()):
        return _solve_fleet_here(problem, time_limit_s, gap, solver, minimise, bounds, start, cuts, max_nodes=max_nodes)

    def work(report: Callable[[Any], None]) -> FleetSolution:
        return _solve_fleet_here(problem, time_limit_s, gap, solver, minimise, bounds, start, cuts, report, max_nodes)

    out = run_with_deadline(work, time_limit_s + DEADLINE_GRACE_S)
    if out.finished:
        return out.value
    seconds = out.wall_seconds
    if not out.reports:  # the same words as a solve that stopped by itself without a plan
        detail = (f"no solution found in {time_limit_s:g} s (the time limit); raise --time-limit-s" if out.timed_out
                  else f"the solver process failed ({out.error}) before it found a plan")
        return FleetSolution(SolveStatus.ERROR, detail, solve_seconds=seconds, solver=solver, time_limited=out.timed_out)
    why = (f"time limit ({time_limit_s:g} s) reached; the solver was stopped" if out.timed_out
           else f"the solver process failed ({out.error})")
    last: FleetSolution = out.reports[-1]
    return replace(last, status=SolveStatus.FEASIBLE, detail=f"{why}; best plan found so far" + _gap_text(last.gap),
                   solve_seconds=max(seconds - last.build_seconds, 0.0), time_limited=out.timed_out)


def _solve_fleet_here(problem: FleetProblem, time_limit_s: float, gap: float, solver: str, minimise: Minimise,
                      bounds: bool, start: FleetSolution | None, cuts: Mapping[str, float] | None = None,
                      report: Callable[[FleetSolution], None] | None = None,
                      max_nodes: int | None = None) -> FleetSolution:
    """:func:`solve_fleet` in this process; ``report`` receives every improving incumbent as a plan."""
    t0 = time.perf_counter()
    if cuts is None and bounds and minimise == "objective" and len(problem.demands) > 1 and len(problem.options) >= BOUNDS_MIN_OPTIONS:
        cuts = workload_lower_bounds(problem, time_limit_s=0.25 * time_limit_s, gap=gap, solver=solver)
    model = build_model(problem, minimise, cuts)
    build_seconds = time.perf_counter() - t0
    remaining_s = max(time_limit_s - build_seconds, 0.1 * time_limit_s)
    on_incumbent = None
    if report is not None:
        def on_incumbent(values: Any, objective: float, bound: float) -> None:
            g = abs(objective - bound) / abs(objective) if math.isfinite(bound) and objective else None
            run = SolveRun(SolveStatus.FEASIBLE, "incumbent", g, time.perf_counter() - t0 - build_seconds,
                           solver, bound if math.isfinite(bound) else None)
            report(extract(model, run, build_seconds, values))
    run = solve_model(model, time_limit_s=remaining_s, gap=gap, solver=solver, reported_limit_s=time_limit_s,
                      presolve=len(problem.options) >= PRESOLVE_MIN_OPTIONS, on_incumbent=on_incumbent,
                      start=start_values(model, start) if start is not None and start.status.has_plan else None,
                      max_nodes=max_nodes)
    return extract(model, run, build_seconds)
