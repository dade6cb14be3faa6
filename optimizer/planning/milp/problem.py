"""The fleet MILP: the cheapest whole-server fleet whose replicas carry every bucket's load.

Indices: workloads w, request-size buckets b of w (rate λ[w,b] req/s), candidates k of w
(a device d(k) with g[k] = tp·pp GPUs per replica and capacity μ[w,b,k] req/s per replica
at the SLO), devices d (gpus_per_node G[d]). Variables::

    n[w,k] ∈ Z≥0      replicas of candidate k serving workload w
    x[w,b,k] ∈ [0,1]  share of bucket b of w routed to k      (only where μ[w,b,k] > 0)
    m[d] ∈ Z≥0        servers of device d
    r[d] ∈ Z≥0        cloud instances of c[d] GPUs of device d (only where 1 < c[d] < G[d], objective cloud)
    u[w,k] ∈ {0,1}    k carries load of w                     (only for N+1 workloads)
    s[w,b] ∈ [0,1]    share of bucket b of w served by disaggregated prefill + decode pools
                      (only where w has both; candidates k then have a stage, see ``define_demand``)
    z[w,k,q] ∈ {0,1}  k's replicas spread over servers of their own, at most q on each
    y[w,k,q] ∈ Z≥0    those servers                    (z, y: only n+1-node, see ``spread_packings``)
    a[w,k] ≥ 0        k's replicas on the device's shared servers (n, or 0 when spread)

and the GPUs of a device, gpus[d] = Σ_{w,k: d(k)=d} g[k]·n[w,k]. Every money and power
figure is linear in (gpus[d], m[d]) — see :mod:`optimizer.results.money` — so the objective is
Σ_d c_gpu[d]·gpus[d] + c_node[d]·m[d]. On a fixed-size platform (HGX/OAM board, NVL72 rack)
the GPUs are bought with the server, so c_gpu[d] = 0 and c_node[d] carries G[d] GPUs: a
partly used server is allowed (unless the plan forbids it) and paid in full. A device rented in cloud
instances of c[d] GPUs (1 < c[d] < G[d]) pays c_gpu[d] per GPU rented, c[d]·r[d] ≥ gpus[d], instead of per
GPU in use. Each constraint family has its builder below,
documenting its maths; constraint names are built from domain keys in ``[a-z0-9_]`` joined
by ``__`` (``capacity__chat__h100_sxm__fp8__tp4__pp1``).

Large multi-workload problems also get valid cuts from each workload solved alone
(:func:`define_workload_bounds`), which lift the LP bound to about the sum of the
one-workload optima; dominated candidates are pruned before (``optimizer.planning.candidates``).

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

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal, TypeVar

from catalog.names import slug
from optimizer.planning.solver_options import SolverOptions  # noqa: F401 (re-exported)
from optimizer.results.money import LinearTerms, installed_gpus, whole_instances_gpus
from optimizer.results.plan_result import SolveStatus

# ---------------------------------------------------------------------------------------
# Problem data (solver-independent)
# ---------------------------------------------------------------------------------------

T = TypeVar("T")


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
    fixed_size: bool = False  # a server is bought with all its GPUs (board, rack); money terms are per server
    full_servers_only: bool = False  # the plan forbids partly used servers
    # not fixed size: GPUs are bought in multiples of it (a cloud instance smaller than the server; 1 = one by one)
    gpus_per_instance: int = 1

    def installed_gpus(self, gpus_used: int, nodes: int) -> int:
        """GPUs bought: nodes · gpus_per_node on a fixed-size platform, else the GPUs in use rounded up to
        whole instances (gpus_per_instance · ⌈gpus_used / gpus_per_instance⌉)."""
        return installed_gpus(gpus_used, nodes, self.gpus_per_node, self.fixed_size, self.gpus_per_instance)

    def rented_gpus(self, gpus_used: int) -> int:
        """The GPUs the per-GPU terms apply to, as the MILP counts them (``milp.build.gpus_rented``): the GPUs in
        use rounded up to whole instances (a fixed-size server's GPUs are in its per-server terms)."""
        return whole_instances_gpus(gpus_used, self.gpus_per_instance)

    def figure(self, name: str, gpus_used: int, nodes: int) -> float:
        """A money or power figure (``objective_usd``, ``capex_usd``, ``annual_opex_usd``, ``power_kw``) of
        ``gpus_used`` GPUs on ``nodes`` servers: per_gpu · :meth:`rented_gpus` + per_node · nodes."""
        return getattr(self, name).at(self.rented_gpus(gpus_used), nodes)


Stage = Literal["colocated", "prefill", "decode"]


@dataclass(frozen=True)
class Option:
    """A candidate k of workload w: device, GPUs per replica, capacity per bucket (req/s).

    ``stage``: a colocated replica serves whole requests; a ``prefill`` replica only their
    prompts and a ``decode`` replica only their outputs (disaggregated pools: a request
    routed to the pools needs both, see ``define_demand``, and its decode replica must receive
    at least as fast as its prefill replica's tier, :func:`pairing_rows`).
    """

    workload: str
    key: str
    device: str
    gpus: int
    capacity_qps: tuple[float, ...]
    stage: Stage = "colocated"
    # pools: the pairing rule's link (B/s, :func:`pairing_rows`): a prefill option's receive tier (the slowest
    # decode replica it may feed, its TTFT budgeted the KV transfer at it), a decode option's own receive link
    pair_link_bytes_s: float | None = None


@dataclass(frozen=True)
class Demand:
    """The load of workload w per bucket (req/s) and its replica rules."""

    workload: str
    bucket_qps: tuple[float, ...]
    min_replicas: int = 0
    n_plus_one: bool = False
    per_server: bool = False  # N+1 against the loss of a whole server, not one replica


def spare_replicas(demand: Demand, option: Option, gpus_per_node: int, replicas_per_server: int | None = None) -> int:
    """Replicas of ``option`` an N+1 workload keeps spare: 1, or per server those one server can hold.

    Per server (redundancy n+1-node): a server of G GPUs holds at most ⌊G / g⌋ replicas of g
    GPUs (at least 1: a replica larger than a server is lost with any server it spans, one
    replica when g is a multiple of G and replicas are placed on whole servers) — wherever the
    replicas are placed on the device's shared servers. ``replicas_per_server`` = q: the
    replicas are spread over servers of their own, at most q on each (:func:`spread_packings`),
    so losing a server loses at most q.
    """
    if not demand.n_plus_one:
        return 0
    if not demand.per_server:
        return 1
    if replicas_per_server:
        return replicas_per_server
    return max(1, gpus_per_node // option.gpus)


# λ/μ (replicas a candidate needs to carry a bucket alone) above which it does not carry that bucket: HiGHS meets the
# share x of a bucket to 1e-6, one replica's load at λ/μ = 1e6 (``bucketing.carried_capacity``).
MAX_BUCKET_LOAD = 1e6


# The largest q of a spread placement (:func:`spread_packings`): bounds the MILP's binaries per option
# (8-GPU servers need at most 7; a 72-GPU rack of 1-GPU replicas would need 71).
MAX_SPREAD_REPLICAS_PER_SERVER = 8


def spread_packings(demand: Demand, option: Option, unit: UnitTerms) -> tuple[int, ...]:
    """The spread placements an n+1-node option may take besides the shared servers: q = 1, …,
    min(⌊G/g⌋ − 1, MAX_SPREAD_REPLICAS_PER_SERVER) replicas per server.

    Spread q: the R replicas of k run on y servers of their own (no other replica on them), evenly,
    so the busiest holds ⌈R/y⌉ ≤ q when R ≤ q·y, and losing any one server leaves R − q replicas
    at least: the capacity rule is load ≤ R − q (instead of R − ⌊G/g⌋ on shared servers), for
    y = ⌈R/q⌉ servers of d. Exact for an even spread: a fleet with R replicas on y servers is
    spread q = ⌈R/y⌉. q = ⌊G/g⌋ is the shared placement itself (losing a server loses at most
    ⌊G/g⌋ of k anywhere), so it is not repeated; none on a plan that forbids partly used servers
    (a server of its own with q·g < G GPUs in use is partly used), when a server holds one replica, or on a
    device rented in cloud instances smaller than its server (each server of its own would rent a partly
    used instance, which the instance count c·⌈gpus/c⌉ does not see).
    Servers of their own leave their idle slots idle (another deployment sharing them would need a
    packing check the MILP does not make), so a spread is chosen only where it is cheaper that way.
    The cap q ≤ MAX_SPREAD_REPLICAS_PER_SERVER only binds on servers of more than 8 GPUs (a 72-GPU
    rack): there a spread of more than 8 replicas per rack is not offered (the shared placement is),
    which may cost more but never loses the guarantee.
    """
    if not (demand.n_plus_one and demand.per_server) or unit.full_servers_only or unit.gpus_per_instance > 1:
        return ()
    most = unit.gpus_per_node // option.gpus
    return tuple(range(1, min(most - 1, MAX_SPREAD_REPLICAS_PER_SERVER) + 1))


def fleet_servers(problem: FleetProblem, replicas: Mapping[tuple[str, str], int],
                  replicas_per_server: Mapping[tuple[str, str], int] | None = None
                  ) -> tuple[dict[str, int], dict[str, int]]:
    """(GPUs, servers) per device of a fleet of ``replicas``: gpus[d] = Σ g[k]·n[k] and
    m[d] = ⌈Σ_{k shared} g[k]·n[k] / G[d]⌉ + Σ_{k spread q} ⌈n[k] / q[k]⌉ — the shared replicas on
    whole servers, each spread option (``replicas_per_server``, :func:`spread_packings`) on servers
    of its own."""
    spread = replicas_per_server or {}
    options = {(o.workload, o.key): o for o in problem.options}
    gpus: dict[str, int] = {}
    shared: dict[str, int] = {}
    own: dict[str, int] = {}
    for idx, n in replicas.items():
        if n <= 0:
            continue
        o = options[idx]
        gpus[o.device] = gpus.get(o.device, 0) + n * o.gpus
        if spread.get(idx):
            own[o.device] = own.get(o.device, 0) + math.ceil(n / spread[idx])
        else:
            shared[o.device] = shared.get(o.device, 0) + n * o.gpus
    nodes = {d: math.ceil(shared.get(d, 0) / problem.units[d].gpus_per_node) + own.get(d, 0) for d in gpus}
    return gpus, nodes


@dataclass(frozen=True)
class Limits:
    """Plan-wide caps; None = no cap."""

    capex_usd: float | None = None
    annual_opex_usd: float | None = None
    power_kw: float | None = None
    # a search cutoff, no plan limit: the minimised objective below it (optimize_plan's second, split solve only
    # looks for a fleet cheaper than the first; build.define_objective_cap)
    objective_usd: float | None = None


@dataclass(frozen=True)
class FleetProblem:
    demands: tuple[Demand, ...]
    options: tuple[Option, ...]
    units: Mapping[str, UnitTerms]
    limits: Limits = Limits()


# Below this many options the per-workload bound cuts cost more time than they save
# (measured: docs/benchmarks.md).
BOUNDS_MIN_OPTIONS = 300
# Below this many options HiGHS's presolve (which reduces nothing here) and its restarts cost
# more than they save (measured: docs/benchmarks.md).
PRESOLVE_MIN_OPTIONS = 300

# "feasible": any fleet that meets every constraint (objective 0: the first one found is optimal)
Minimise = Literal["objective", "capex", "annual_opex", "power", "feasible"] | tuple[Literal["gpus"], str]


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
    time_limited: bool = False  # a wall-clock limit, not the work done, ended the search: a rerun may differ
    # n+1-node options spread over servers of their own: q, the most replicas on one of them
    # (:func:`spread_packings`); the others share their device's servers
    replicas_per_server: dict[tuple[str, str], int] = field(default_factory=dict)


# ---------------------------------------------------------------------------------------
# Names
# ---------------------------------------------------------------------------------------


def unique_slugs(names: list[str]) -> dict[str, str]:
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





def amortised_usd_per_replica(problem: FleetProblem, option: Option) -> float:
    """Objective $ of one replica with its servers' cost spread over their GPUs:
    g[k] · (c_gpu[d] + c_node[d] / gpus_per_node[d])."""
    unit = problem.units[option.device]
    return option.gpus * (unit.objective_usd.per_gpu + unit.objective_usd.per_node / unit.gpus_per_node)




def amortised_units(units: Mapping[str, UnitTerms]) -> dict[str, UnitTerms]:
    """The units with each server's objective $ spread over its GPUs: c_gpu + c_node / gpus_per_node per GPU in use
    (cloud instances too: no rounding, so a workload alone bounds its share of any fleet from below)."""
    return {d: replace(u, objective_usd=LinearTerms(u.objective_usd.per_gpu
                                                    + u.objective_usd.per_node / u.gpus_per_node, 0.0),
                       gpus_per_instance=1)
            for d, u in units.items()}



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
            if lam > 0 and not any(o.capacity_qps[b] > 0 for o in opts if o.stage == "colocated") \
                    and not pools_cover(opts, b):
                out.append((dem.workload, b))
    return out


def pairing_rows(prefill: Sequence[tuple[float | None, T]], decode: Sequence[tuple[float | None, T]]
                 ) -> list[tuple[float, list[T], list[T]]]:
    """The pairing rule of one bucket as rows (r, lhs, rhs) meaning Σ lhs ≤ Σ rhs.

    ``prefill``: (receive tier r_i, routed share) of each prefill option — its TTFT budgets the KV
    transfer at r_i, so it may feed only decode replicas receiving at ≥ r_i; ``decode``: (receive
    link l_k, share) of each decode option. With Σ prefill = Σ decode (``define_demand``), the load
    can be paired, prefill load i to decode load k only where l_k ≥ r_i, if and only if for every
    prefill tier r::

        Σ_{i: r_i ≥ r} x_i  ≤  Σ_{k: l_k ≥ r} x_k

    Necessary: the load of the prefill options at tier ≥ r may only go to decode options at ≥ r.
    Sufficient (for any fractional mix; a transportation problem): by Hall's theorem (max-flow
    min-cut) a matching exists iff every set S of prefill options has Σ_S x ≤ Σ_{N(S)} x, N(S) its
    allowed decode options; N(S) = {k: l_k ≥ min_{i∈S} r_i} depends only on S's slowest tier r, and
    the largest S with that N(S) is {i: r_i ≥ r}: the rows above are the binding ones. Rows whose rhs
    holds every decode option are implied by the equal totals and left out (one tier: no row).
    """
    out = []
    for r in sorted({t or 0.0 for t, _ in prefill}, reverse=True):
        rhs = [x for link, x in decode if (link or 0.0) >= r]
        if len(rhs) < len(decode):
            out.append((r, [x for t, x in prefill if (t or 0.0) >= r], rhs))
    return out


def pools_cover(options: tuple[Option, ...], bucket: int) -> bool:
    """Some prefill option and some decode option both have capacity in ``bucket``."""
    return all(any(o.capacity_qps[bucket] > 0 for o in options if o.stage == stage) for stage in ("prefill", "decode"))
