"""The fleet MILP: the cheapest whole-server fleet whose replicas carry every bucket's load.

Indices: workloads w, request-size buckets b of w (rate λ[w,b] req/s), candidates k of w
(a device d(k) with g[k] = tp·pp GPUs per replica and capacity μ[w,b,k] req/s per replica
at the SLO), devices d (gpus_per_node G[d]). Variables::

    n[w,k] ∈ Z≥0      replicas of candidate k serving workload w
    x[w,b,k] ∈ [0,1]  share of bucket b of w routed to k      (only where μ[w,b,k] > 0)
    m[d] ∈ Z≥0        servers of device d
    u[w,k] ∈ {0,1}    k carries load of w                     (only for N+1 workloads)

and the GPUs of a device, gpus[d] = Σ_{w,k: d(k)=d} g[k]·n[w,k]. Every money and power
figure is linear in (gpus[d], m[d]) — see :mod:`optimizer.money` — so the objective is
Σ_d c_gpu[d]·gpus[d] + c_node[d]·m[d]. Each constraint family has its builder below,
documenting its maths; constraint names are built from domain keys in ``[a-z0-9_]`` joined
by ``__`` (``capacity__chat__h100_sxm__fp8__tp4__pp1``).

Large multi-workload problems also get valid cuts from each workload solved alone
(:func:`define_workload_bounds`), which lift the LP bound to about the sum of the
one-workload optima; dominated candidates are pruned before (``optimizer.candidates``).

The orchestrator is :func:`solve_fleet`: build the model, solve it, extract the plan.
The solver is HiGHS (highspy via ``pulp.HiGHS``), or CBC when HiGHS is unavailable.

Determinism: the same problem gives the same fleet. Variables and constraints are created
in a fixed order (workloads and candidates in plan order, devices in sorted key order),
HiGHS runs single-threaded (``threads=1``) and deterministically, and exact ties between
fleets of equal cost are broken by :func:`tie_break` (GPUs go to the device whose key sorts
first). Near-ties closer than the relative gap (``--gap``, default 0.1 %) are not ties: the
solver may stop at either, and the same input still gives the same one.
"""

from __future__ import annotations

import contextlib
import ctypes
import math
import os
import re
import sys
import time
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import pulp

from catalog.errors import SolverError
from optimizer.money import LinearTerms
from optimizer.plan import SolveStatus

# ---------------------------------------------------------------------------------------
# Problem data (solver-independent)
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class UnitTerms:
    """A device (or capacity-table unit) as the MILP sees it: linear money/power terms."""

    device: str
    gpus_per_node: int
    objective_usd: LinearTerms
    capex_usd: LinearTerms
    annual_opex_usd: LinearTerms
    power_kw: LinearTerms
    inventory_gpus: int | None = None
    allowed: bool = True


@dataclass(frozen=True)
class Option:
    """A candidate k of workload w: device, GPUs per replica, capacity per bucket (req/s)."""

    workload: str
    key: str
    device: str
    gpus: int
    capacity_qps: tuple[float, ...]


@dataclass(frozen=True)
class Demand:
    """The load of workload w per bucket (req/s) and its replica rules."""

    workload: str
    bucket_qps: tuple[float, ...]
    min_replicas: int = 0
    n_plus_one: bool = False


@dataclass(frozen=True)
class Limits:
    """Plan-wide caps; None = no cap."""

    capex_usd: float | None = None
    annual_opex_usd: float | None = None
    power_kw: float | None = None


@dataclass(frozen=True)
class FleetProblem:
    demands: tuple[Demand, ...]
    options: tuple[Option, ...]
    units: Mapping[str, UnitTerms]
    limits: Limits = Limits()


# Below this many options the per-workload bound cuts cost more time than they save
# (chat fleet, ~100 options: 0.33 s without, 0.74 s with; 20-workload benchmark, ~1,000
# options: not proven in 60 s without, 11-30 s with).
BOUNDS_MIN_OPTIONS = 300
# Below this many options HiGHS's presolve (which reduces nothing here) and its restarts cost
# more than they save (chat fleet, ~100 options: median 0.23 s CPU without, 0.32 s with).
PRESOLVE_MIN_OPTIONS = 300

Minimise = Literal["objective", "capex", "annual_opex", "power"] | tuple[Literal["gpus"], str]


@dataclass(frozen=True)
class FleetSolution:
    """What the solver found, in domain terms."""

    status: SolveStatus
    detail: str
    objective_usd: float | None = None
    gap: float | None = None
    solve_seconds: float = 0.0
    build_seconds: float = 0.0
    solver: str = "highs"
    replicas: dict[tuple[str, str], int] = field(default_factory=dict)
    routed_qps: dict[tuple[str, int, str], float] = field(default_factory=dict)
    gpus: dict[str, int] = field(default_factory=dict)
    nodes: dict[str, int] = field(default_factory=dict)
    n_variables: int = 0
    n_integer_variables: int = 0
    n_constraints: int = 0
    bound_usd: float | None = None  # the solver's proven lower bound on the minimised figure


# ---------------------------------------------------------------------------------------
# Names
# ---------------------------------------------------------------------------------------


def slug(text: str) -> str:
    """A domain key as a name part: lower case, runs of characters outside ``[a-z0-9_]`` become ``_``.

    Keys already in that alphabet (``h100_sxm__fp8__tp4__pp1``) pass through unchanged.
    """
    out = re.sub(r"[^a-z0-9_]+", "_", text.lower()).strip("_")
    return out or "x"


def _unique_slugs(names: list[str]) -> dict[str, str]:
    """Slug of each name, with ``_2``, ``_3`` … added where two names collide (``Chat``/``chat``)."""
    out: dict[str, str] = {}
    used: set[str] = set()
    for name in names:
        base = s = slug(name)
        i = 2
        while s in used:
            s = f"{base}_{i}"
            i += 1
        used.add(s)
        out[name] = s
    return out


# ---------------------------------------------------------------------------------------
# Model
# ---------------------------------------------------------------------------------------


@dataclass
class FleetModel:
    """The PuLP problem with its variables indexed by domain keys."""

    problem: FleetProblem
    prob: pulp.LpProblem
    w_name: dict[str, str]
    d_name: dict[str, str]
    k_name: dict[tuple[str, str], str] = field(default_factory=dict)
    demands: dict[str, Demand] = field(default_factory=dict)
    n: dict[tuple[str, str], pulp.LpVariable] = field(default_factory=dict)
    x: dict[tuple[str, int, str], pulp.LpVariable] = field(default_factory=dict)
    m: dict[str, pulp.LpVariable] = field(default_factory=dict)
    u: dict[tuple[str, str], pulp.LpVariable] = field(default_factory=dict)
    gpus: dict[str, pulp.LpAffineExpression] = field(default_factory=dict)

    def total(self, which: str) -> pulp.LpAffineExpression:
        """Σ_d terms[d].per_gpu·gpus[d] + terms[d].per_node·m[d] for a UnitTerms field."""
        units = self.problem.units
        return pulp.lpSum(
            getattr(units[d], which).per_gpu * self.gpus[d] + getattr(units[d], which).per_node * self.m[d]
            for d in self.m
        )


def replica_upper_bound(demand: Demand, option: Option) -> int:
    """Most replicas of k that an optimal plan can need.

    max(min_replicas, ⌈Σ_b λ[b]/μ[b,k]⌉) (+1 for N+1): one replica more than carrying all
    the load k can carry, or than the replica minimum, is never cheaper, so the bound cuts
    off no optimum and tightens the relaxation.
    """
    load = sum(lam / mu for lam, mu in zip(demand.bucket_qps, option.capacity_qps, strict=True)
               if lam > 0 and mu > 0)
    spare = 1 if demand.n_plus_one else 0
    return max(demand.min_replicas, math.ceil(load - 1e-9)) + spare


def define_variables(problem: FleetProblem) -> FleetModel:
    """n[w,k] integer, x[w,b,k] ∈ [0,1] where μ[w,b,k] > 0 and λ[w,b] > 0, m[d] integer, u[w,k] binary (N+1)."""
    prob = pulp.LpProblem("gpuplan_fleet", pulp.LpMinimize)
    devices = sorted({o.device for o in problem.options})
    model = FleetModel(problem, prob, _unique_slugs([d.workload for d in problem.demands]), _unique_slugs(devices))
    model.demands = {d.workload: d for d in problem.demands}
    by_workload = options_by_workload(problem)
    for w in model.demands:
        keys = _unique_slugs([o.key for o in by_workload.get(w, ())])
        model.k_name.update({(w, key): s for key, s in keys.items()})
    gpu_terms: dict[str, list[tuple[int, pulp.LpVariable]]] = {d: [] for d in devices}
    gpu_ub: dict[str, int] = dict.fromkeys(devices, 0)
    for o in problem.options:
        idx, dem = (o.workload, o.key), model.demands[o.workload]
        name = f"{model.w_name[o.workload]}__{model.k_name[idx]}"
        ub = replica_upper_bound(dem, o)
        model.n[idx] = prob.add_variable(f"n__{name}", 0, ub, cat=pulp.LpInteger)
        gpu_terms[o.device].append((o.gpus, model.n[idx]))
        gpu_ub[o.device] += o.gpus * ub
        for b, (lam, mu) in enumerate(zip(dem.bucket_qps, o.capacity_qps, strict=True)):
            if lam > 0 and mu > 0:
                model.x[(o.workload, b, o.key)] = prob.add_variable(
                    f"x__{model.w_name[o.workload]}__b{b}__{model.k_name[idx]}", 0, 1)
        if dem.n_plus_one:
            model.u[idx] = prob.add_variable(f"u__{name}", 0, 1, cat=pulp.LpInteger)
    for d in devices:
        per_node = problem.units[d].gpus_per_node
        model.m[d] = prob.add_variable(f"m__{model.d_name[d]}", 0, math.ceil(gpu_ub[d] / per_node),
                                       cat=pulp.LpInteger)
        model.gpus[d] = pulp.LpAffineExpression([(v, g) for g, v in gpu_terms[d]])
    return model


def define_demand(model: FleetModel) -> None:
    """Every bucket is fully routed: Σ_k x[w,b,k] = 1 for every bucket with λ[w,b] > 0.

    Named ``demand__{workload}__b{bucket}``.
    """
    shares: dict[tuple[str, int], list[pulp.LpVariable]] = {}
    for (w, b, _), v in model.x.items():
        shares.setdefault((w, b), []).append(v)
    for dem in model.problem.demands:
        for b, lam in enumerate(dem.bucket_qps):
            if lam > 0:
                model.prob += pulp.lpSum(shares.get((dem.workload, b), [])) == 1, \
                    f"demand__{model.w_name[dem.workload]}__b{b}"


def define_capacity(model: FleetModel) -> None:
    """Routed load fits the replicas at their SLO-safe rate.

    Σ_b λ[w,b]·x[w,b,k] / μ[w,b,k] ≤ n[w,k] − u[w,k]: the load, in replicas' worth of
    capacity, summed over the buckets k carries (a replica serving a mix of buckets has
    capacity 1 = Σ_b its utilisation by bucket b). u is 0 except for N+1 workloads, where
    it is one spare replica of every candidate that carries load (see
    :func:`define_n_plus_one`). Named ``capacity__{workload}__{candidate}``.
    """
    for o in model.problem.options:
        idx = (o.workload, o.key)
        dem = model.demands[o.workload]
        load = pulp.lpSum(
            (lam / mu) * model.x[(o.workload, b, o.key)]
            for b, (lam, mu) in enumerate(zip(dem.bucket_qps, o.capacity_qps, strict=True))
            if (o.workload, b, o.key) in model.x
        )
        spare = model.u.get(idx, 0)
        model.prob += load + spare <= model.n[idx], f"capacity__{model.w_name[o.workload]}__{model.k_name[idx]}"


def define_servers(model: FleetModel) -> None:
    """Whole servers: gpus[d] ≤ gpus_per_node[d] · m[d].

    Tensor-parallel groups stay within a server (tp divides gpus_per_node), so counting GPUs
    against whole servers is exact: replicas of power-of-two sizes pack without waste.
    Named ``servers__{device}``.
    """
    for d, m in model.m.items():
        unit = model.problem.units[d]
        model.prob += model.gpus[d] <= unit.gpus_per_node * m, f"servers__{model.d_name[d]}"


def define_min_replicas(model: FleetModel) -> None:
    """Σ_k n[w,k] ≥ min_replicas[w]. Named ``min_replicas__{workload}``."""
    reps: dict[str, list[pulp.LpVariable]] = {}
    for (w, _), v in model.n.items():
        reps.setdefault(w, []).append(v)
    for dem in model.problem.demands:
        if dem.min_replicas > 0:
            model.prob += pulp.lpSum(reps.get(dem.workload, [])) >= dem.min_replicas, f"min_replicas__{model.w_name[dem.workload]}"


def define_n_plus_one(model: FleetModel) -> None:
    """N+1: the fleet still carries every bucket within its SLO with any one replica down.

    Formulation: every candidate that carries load of an N+1 workload keeps one spare
    replica. u[w,k] ∈ {0,1} with x[w,b,k] ≤ u[w,k] (load ⇒ u = 1), and the capacity rule
    becomes load ≤ n − u. Whichever replica fails, the others of its group carry its
    routed load without re-routing; this is exact for a single-candidate workload and
    conservative (one spare per group, not per workload) for a mixed one.
    Named ``n_plus_one__{workload}__b{bucket}__{candidate}``.
    """
    for (w, b, key), x in model.x.items():
        u = model.u.get((w, key))
        if u is not None:
            model.prob += x <= u, f"n_plus_one__{model.w_name[w]}__b{b}__{model.k_name[(w, key)]}"


def define_capex_budget(model: FleetModel) -> None:
    """Σ_d capex_gpu[d]·gpus[d] + capex_node·m[d] ≤ capex budget. Named ``capex_budget``."""
    cap = model.problem.limits.capex_usd
    if cap is not None:
        model.prob += model.total("capex_usd") <= cap, "capex_budget"


def define_annual_budget(model: FleetModel) -> None:
    """Yearly opex (power + maintenance + rental) ≤ annual budget. Named ``annual_budget``."""
    cap = model.problem.limits.annual_opex_usd
    if cap is not None:
        model.prob += model.total("annual_opex_usd") <= cap, "annual_budget"


def define_power_cap(model: FleetModel) -> None:
    """Σ_d (tdp_w[d]·gpus[d] + server_power_w·m[d]) / 1000 ≤ max_power_kw. Named ``max_power_kw``."""
    cap = model.problem.limits.power_kw
    if cap is not None:
        model.prob += model.total("power_kw") <= cap, "max_power_kw"


def define_inventory(model: FleetModel) -> None:
    """gpus[d] ≤ inventory[d] for every device with a stated inventory. Named ``inventory__{device}``."""
    for d in model.m:
        inv = model.problem.units[d].inventory_gpus
        if inv is not None:
            model.prob += model.gpus[d] <= inv, f"inventory__{model.d_name[d]}"


def define_allowed_devices(model: FleetModel) -> None:
    """m[d] = 0 (hence gpus[d] = 0) for devices the plan does not allow. Named ``allowed__{device}``."""
    for d, m in model.m.items():
        if not model.problem.units[d].allowed:
            model.prob += m == 0, f"allowed__{model.d_name[d]}"


def amortised_usd_per_replica(problem: FleetProblem, option: Option) -> float:
    """Objective $ of one replica with its servers' cost spread over their GPUs:
    g[k] · (c_gpu[d] + c_node[d] / gpus_per_node[d])."""
    unit = problem.units[option.device]
    return option.gpus * (unit.objective_usd.per_gpu + unit.objective_usd.per_node / unit.gpus_per_node)


def define_workload_bounds(model: FleetModel, bounds_usd: Mapping[str, float]) -> None:
    """Valid cuts from the workloads solved one at a time (see :func:`workload_lower_bounds`).

    Σ_k a[k]·n[w,k] ≥ L[w], with a[k] the amortised cost of a replica and L[w] a proven
    lower bound on the cheapest fleet of w alone at amortised prices. Valid because
    c_node·m[d] ≥ c_node·gpus[d]/G[d], so the objective ≥ Σ_w Σ_k a[k]·n[w,k], and w's own
    replicas satisfy every constraint of its one-workload problem. The cuts lift the LP
    bound to about Σ_w L[w], leaving only the sharing of partly filled servers to branch on.
    Named ``workload_bound__{workload}``.
    """
    reps: dict[str, list[tuple[pulp.LpVariable, float]]] = {}
    for o in model.problem.options:
        reps.setdefault(o.workload, []).append((model.n[(o.workload, o.key)],
                                                amortised_usd_per_replica(model.problem, o)))
    for w, bound in bounds_usd.items():
        if bound > 0 and w in reps:
            model.prob += (pulp.LpAffineExpression([(v, a) for v, a in reps[w]]) >= bound,
                           f"workload_bound__{model.w_name[w]}")


def amortised_units(units: Mapping[str, UnitTerms]) -> dict[str, UnitTerms]:
    """The units with each server's objective $ spread over its GPUs: c_gpu + c_node / gpus_per_node per GPU."""
    return {d: replace(u, objective_usd=LinearTerms(u.objective_usd.per_gpu
                                                    + u.objective_usd.per_node / u.gpus_per_node, 0.0))
            for d, u in units.items()}


def solve_alone(demand: Demand, options: tuple[Option, ...], units: Mapping[str, UnitTerms], *,
                time_limit_s: float, gap: float, solver: str = "highs") -> FleetSolution | None:
    """One workload on its own: servers amortised per GPU (``amortised_units``), budgets and power dropped.

    Every fleet's replicas of the workload are feasible here, so this optimum bounds the
    workload's share of any fleet's cost. None when some bucket has no option at all.
    """
    amortised = amortised_units({o.device: units[o.device] for o in options})
    sub = FleetProblem((demand,), options, amortised, Limits())
    if uncovered_buckets(sub):
        return None
    return solve_fleet(sub, time_limit_s=time_limit_s, gap=gap, solver=solver, bounds=False)


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
        if sol is None:
            continue
        bound = sol.bound_usd if sol.bound_usd is not None else (
            sol.objective_usd if sol.status == SolveStatus.OPTIMAL else None)
        if bound is not None:
            # a hair below, and below the sub-solve's tie-break term: never cut off the optimum
            out[dem.workload] = bound * (1 - TIE_BREAK_FRACTION - 1e-9) - 1e-6
    return out


# Tie-break weight: the whole term is at most this fraction of the cheapest GPU's cost per GPU.
TIE_BREAK_FRACTION = 1e-6


def tie_break(model: FleetModel) -> pulp.LpAffineExpression:
    """ε·Σ_d r[d]·gpus[d]: among fleets of equal cost, the GPUs go to devices whose keys sort first.

    r[d] is the rank of device key d in sorted order (0 for the first) and
    ε = TIE_BREAK_FRACTION · (cheapest amortised $ per GPU) / (number of devices), so the term
    never outweighs a cost difference of more than a millionth of one GPU's price. The
    reported objective is recomputed from the fleet without it (:func:`extract`).

    Routing is deliberately left out: where replicas have spare capacity the split of a
    bucket among them is open, and a linear tie-break would push the first candidate to
    exactly its SLO capacity. The split is the solver's (the same input gives the same one).
    """
    units = model.problem.units
    per_gpu = [units[d].objective_usd.per_gpu + units[d].objective_usd.per_node / units[d].gpus_per_node
               for d in model.m]
    cheapest = min((c for c in per_gpu if c > 0), default=1.0)
    eps = TIE_BREAK_FRACTION * cheapest / max(len(model.m), 1)
    return pulp.lpSum(eps * rank * model.gpus[d] for rank, d in enumerate(sorted(model.m)) if rank)


def define_objective(model: FleetModel, minimise: Minimise = "objective") -> None:
    """Minimise Σ_d c_gpu[d]·gpus[d] + c_node[d]·m[d] for the plan's objective (USD), plus :func:`tie_break`.

    Diagnostics minimise another figure instead: capex, annual opex, power, or one device's GPUs.
    """
    if isinstance(minimise, tuple):
        model.prob += model.gpus[minimise[1]]
    elif minimise == "objective":
        model.prob += model.total("objective_usd") + tie_break(model)
    else:
        field_name = {"capex": "capex_usd", "annual_opex": "annual_opex_usd", "power": "power_kw"}[minimise]
        model.prob += model.total(field_name)


def build_model(problem: FleetProblem, minimise: Minimise = "objective",
                workload_bounds_usd: Mapping[str, float] | None = None) -> FleetModel:
    """The whole MILP: variables, one builder per constraint family, the objective."""
    model = define_variables(problem)
    define_demand(model)
    define_capacity(model)
    define_servers(model)
    define_min_replicas(model)
    define_n_plus_one(model)
    define_capex_budget(model)
    define_annual_budget(model)
    define_power_cap(model)
    define_inventory(model)
    define_allowed_devices(model)
    define_workload_bounds(model, workload_bounds_usd or {})
    define_objective(model, minimise)
    return model


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


@dataclass(frozen=True)
class SolveRun:
    status: SolveStatus
    detail: str
    gap: float | None
    solve_seconds: float
    solver: str
    bound: float | None = None


def _solver(name: str, time_limit_s: float, gap: float, presolve: bool = True) -> Any:
    if name == "highs":
        extra = {} if presolve else {"presolve": "off"}
        return pulp.HiGHS(msg=False, timeLimit=time_limit_s, gapRel=gap, threads=1, **extra)
    with warnings.catch_warnings():
        # PuLP 3.3 flags its bundled CBC as going away in 4.0; it is only our fallback.
        warnings.simplefilter("ignore", DeprecationWarning)
        return pulp.PULP_CBC_CMD(msg=False, timeLimit=max(1, math.ceil(time_limit_s)), gapRel=gap)


def solve_model(model: FleetModel, *, time_limit_s: float, gap: float, solver: str = "highs",
                reported_limit_s: float | None = None, presolve: bool = True) -> SolveRun:
    """Solve with HiGHS (CBC if HiGHS is unavailable or fails) and classify the outcome.

    PuLP reports a solve stopped by the time limit as status "Optimal"; only
    ``prob.sol_status`` (integer-feasible vs optimal) tells them apart, so both are read.
    ``reported_limit_s`` is the limit the user gave, named in the messages (default
    ``time_limit_s``, which may be what is left of it after building the model).
    ``presolve=False`` skips HiGHS's presolve (faster on small models).
    """
    names = [solver] + (["cbc"] if solver == "highs" else [])
    last_error = ""
    for name in names:
        if name == "highs" and not pulp.HiGHS(msg=False).available():
            last_error = "HiGHS (highspy) is not installed"
            continue
        start = time.perf_counter()
        try:
            with stdout_silenced():
                model.prob.solve(_solver(name, time_limit_s, gap, presolve))
        except pulp.PulpSolverError as exc:
            last_error = f"{name}: {exc}"
            continue
        seconds = time.perf_counter() - start
        return _classify(model, name, seconds, reported_limit_s or time_limit_s)
    raise SolverError(f"no MILP solver could run ({last_error}); install highspy: pip install highspy")


def _classify(model: FleetModel, solver: str, seconds: float, time_limit_s: float) -> SolveRun:
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
        return SolveRun(SolveStatus.FEASIBLE, f"time limit ({time_limit_s:g} s) reached" + _gap_text(gap),
                        gap, seconds, solver, bound)
    if status == pulp.LpStatusInfeasible or sol == pulp.LpSolutionInfeasible:
        return SolveRun(SolveStatus.INFEASIBLE, "no fleet satisfies every constraint", None, seconds, solver)
    if status == pulp.LpStatusNotSolved:
        return SolveRun(SolveStatus.ERROR, f"no solution found in {time_limit_s:g} s (the time limit); "
                        "raise --time-limit", None, seconds, solver)
    return SolveRun(SolveStatus.ERROR, f"solver status {pulp.LpStatus.get(status, status)}", None, seconds, solver)


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


def extract(model: FleetModel, run: SolveRun, build_seconds: float) -> FleetSolution:
    """Integer replicas, routed loads (λ·x, req/s) and whole servers from the solved model.

    Servers are recomputed as ⌈gpus[d] / gpus_per_node[d]⌉ — what the solver picks when a
    server costs anything, and never more than it picked.
    """
    stats = dict(n_variables=len(model.prob.variables()), n_constraints=len(model.prob.constraints()),
                 n_integer_variables=len(model.n) + len(model.m) + len(model.u))
    if not run.status.has_plan:
        return FleetSolution(run.status, run.detail, None, run.gap, run.solve_seconds, build_seconds, run.solver, **stats)
    units = model.problem.units
    replicas = {idx: int(round(v.value() or 0)) for idx, v in model.n.items()}
    replicas = {idx: r for idx, r in replicas.items() if r > 0}
    # Shares of candidates left without replicas (solver tolerance: n ≈ 1e-7) are dropped and
    # each bucket's remaining shares renormalised, so routed load adds up to the bucket's rate.
    shares: dict[tuple[str, int], dict[str, float]] = {}
    for (w, b, key), v in model.x.items():
        share = min(max(v.value() or 0.0, 0.0), 1.0)
        if share > 1e-12 and (w, key) in replicas:
            shares.setdefault((w, b), {})[key] = share
    routed: dict[tuple[str, int, str], float] = {}
    for (w, b), by_key in shares.items():
        total = sum(by_key.values())
        for key, share in by_key.items():
            routed[(w, b, key)] = share / total * model.demands[w].bucket_qps[b]
    gpus: dict[str, int] = {}
    for o in model.problem.options:
        r = replicas.get((o.workload, o.key), 0)
        if r:
            gpus[o.device] = gpus.get(o.device, 0) + r * o.gpus
    nodes = {d: math.ceil(g / units[d].gpus_per_node) for d, g in gpus.items()}
    objective = float(sum(units[d].objective_usd.at(g, nodes[d]) for d, g in gpus.items()))
    return FleetSolution(run.status, run.detail, objective, run.gap, run.solve_seconds, build_seconds,
                         run.solver, replicas, routed, gpus, nodes, **stats, bound_usd=run.bound)


def options_by_workload(problem: FleetProblem) -> dict[str, tuple[Option, ...]]:
    """The options of each workload, in problem order (one pass: linear in the options)."""
    out: dict[str, list[Option]] = {}
    for o in problem.options:
        out.setdefault(o.workload, []).append(o)
    return {w: tuple(opts) for w, opts in out.items()}


def uncovered_buckets(problem: FleetProblem) -> list[tuple[str, int]]:
    """(workload, bucket) pairs with load that no option can serve (μ = 0 everywhere)."""
    out = []
    by_workload = options_by_workload(problem)
    for dem in problem.demands:
        opts = by_workload.get(dem.workload, ())
        for b, lam in enumerate(dem.bucket_qps):
            if lam > 0 and not any(o.capacity_qps[b] > 0 for o in opts):
                out.append((dem.workload, b))
    return out


def solve_fleet(
    problem: FleetProblem,
    *,
    time_limit_s: float = 10.0,
    gap: float = 1e-3,
    solver: str = "highs",
    minimise: Minimise = "objective",
    bounds: bool = True,
) -> FleetSolution:
    """Build → solve → extract. Buckets no option serves make the plan infeasible up front.

    With several workloads, ``bounds`` and a large problem (``BOUNDS_MIN_OPTIONS``), each
    workload is first solved alone for the cuts of :func:`define_workload_bounds` (their
    time counts as build time); small problems solve faster without them.
    """
    missing = uncovered_buckets(problem)
    if missing:
        where = ", ".join(f"{w} bucket {b}" for w, b in missing)
        return FleetSolution(SolveStatus.INFEASIBLE, f"no candidate can serve {where}", solver=solver)
    start = time.perf_counter()
    cuts = None
    if bounds and minimise == "objective" and len(problem.demands) > 1 and len(problem.options) >= BOUNDS_MIN_OPTIONS:
        cuts = workload_lower_bounds(problem, time_limit_s=0.25 * time_limit_s, gap=gap, solver=solver)
    model = build_model(problem, minimise, cuts)
    build_seconds = time.perf_counter() - start
    remaining_s = max(time_limit_s - build_seconds, 0.1 * time_limit_s)
    run = solve_model(model, time_limit_s=remaining_s, gap=gap, solver=solver, reported_limit_s=time_limit_s,
                      presolve=len(problem.options) >= PRESOLVE_MIN_OPTIONS)
    return extract(model, run, build_seconds)
