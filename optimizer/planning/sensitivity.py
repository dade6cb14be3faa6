"""How far the inputs may move before the recommended fleet changes.

Every figure is a re-solve of the fleet MILP on the same candidates (capacities come from
the serving model once; only the data of the MILP changes): a device's price rebuilds its
unit terms, a capacity factor scales the capacities of its options, electricity rebuilds
every unit's opex, demand scales every bucket's rate.

- **Runner-up**: the cheapest fleet without the winning fleet's main device (the device
  with the largest share of the objective), and its cost difference.
- **Break-even price** p* of a chosen device d (purchase_usd; objective cloud: the hourly
  price): the price above which the optimal fleet changes. Every fleet F's objective is
  linear in p, C_F(p) = C_F(p0) + s_F·(p − p0) with s_F = d objective / d price (∝ F's GPUs
  of d), so the base fleet B stays optimal up to the first crossing of its line with another
  fleet's. Start from the cheapest fleet A without d (s_A = 0): p1 = crossing(B, A). Then
  re-solve at p1·(1 − tol): if the optimum is B, p* ∈ [p1·(1 − tol), p1] and p1 is
  reported; else its fleet F crosses B earlier, p2 = crossing(B, F), and repeat. Each
  step strictly lowers the bound; a handful of solves suffice.
- **Break-even capacity factor** f* of d: the factor on d's capacities below which the
  optimal fleet changes. Lowering capacity only removes feasible fleets, so B stays optimal
  exactly while it stays feasible; with B's own routing it is feasible down to
  u = max over B's deployments on d of routed load / capacity, and with its replicas re-routed
  down to f_B ≤ u, the least factor of one LP (:func:`~optimizer.planning.milp.routing.lowest_capacity_factor`;
  the same of any known plan that costs no more than B, another optimum). No factor at or above
  the least such f_B needs a re-solve. The fleet usually changes just below it (B's replicas
  run near their capacity), so the search gallops down from it: probes at f_B − tol,
  f_B − 2·tol, f_B − 4·tol, … (F_MIN at the latest) until the fleet changes, then bisects the
  last bracket to the tolerance, each probe skipped where a known plan as cheap as B fits
  (chat fleet: 4 re-solves for its two devices, 12 with the gallop from u).
- **Tornado**: the optimal objective at the low and the high end of each input — the
  catalog's price ``ranges`` (an estimated price without a range: ±ESTIMATE_SWING), the
  electricity price ±50 %, demand ±25 %, and every device's capacity at the ends of its
  fidelity band (``optimizer.models.fidelity``). The low price end of a device B does not buy
  needs no re-solve when an LP bound on every fleet that buys it
  (:func:`~optimizer.planning.milp.relax.cheapest_with_device_bound`) is at least B's cost:
  the optimum is then B's (chat fleet: gb300, h100-sxm, mi300x; power cap: no fleet under
  the cap can buy a gb300, h100-sxm or mi300x server at all). The high price end of a chosen
  device d past its break-even needs none when the cheapest fleet without d (the break-even's
  re-solve) costs no more than the least any fleet buying d can cost there (:func:`_dearer_end`:
  chat fleet, b200).

Re-solves start from the cheapest known plan that is feasible as it is, topped up (its overflow
on the option of least marginal cost) or trimmed (:func:`~optimizer.planning.milp.resolve.topped_up`,
:func:`~optimizer.planning.milp.resolve.trimmed`): HiGHS then mostly proves it (chat fleet,
one worker: 0.74 → 0.37 s CPU for the sensitivity, docs/benchmarks.md "Session 11").

A re-solved fleet "differs" when its GPUs per device differ from B's and it is cheaper
than B at that input (prices), or B is infeasible there (capacity); a different fleet within
the solver's gap of B's cost counts as the same decision. Tolerances: PRICE_TOLERANCE
(relative) and CAPACITY_TOLERANCE (absolute), plus the solver's relative gap.
"""

from __future__ import annotations

import hashlib
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace

from catalog.load import builtin_devices
from optimizer.planning import disk_cache
from optimizer.planning.candidate_set import CandidateSet, unit_terms
from optimizer.planning.evaluate import parallel_workers
from optimizer.planning.milp.problem import FleetProblem, FleetSolution
from optimizer.planning.milp.relax import cheapest_with_device_bound
from optimizer.planning.milp.resolve import (
    is_feasible,
    keep_solve,
    plan_key,
    resolve_fleet,
    solve_key,
    topped_up,
    transplant,
    trimmed,
)
from optimizer.planning.milp.routing import lowest_capacity_factor
from optimizer.planning.provenance import price_basis
from optimizer.planning.solver_options import SolverOptions
from optimizer.results.money import MoneyAssumptions
from optimizer.results.provenance import (
    DeviceSensitivity,
    Fidelity,
    FleetDeviceGpus,
    RunnerUp,
    Sensitivity,
    TornadoRow,
)
from optimizer.workers import run_pool
from workloads.spec import Plan

PRICE_TOLERANCE = 0.005  # break-even prices: relative
CAPACITY_TOLERANCE = 0.005  # break-even capacity factors: absolute
F_MIN = 0.05  # capacity factors below this are not searched
MAX_CROSSING_STEPS = 8
BASE_COST_RTOL = 1e-9  # a known plan within this of B's cost is another optimum of the base problem
BOUND_RTOL = 1e-6  # an LP bound must clear B's cost by this (relative) to decide a re-solve (LP tolerances)
ESTIMATE_SWING = 0.25  # tornado swing of an estimated price that has no published range
ELECTRICITY_SWING = 0.5
DEMAND_SWING = 0.25

Fleet = dict[str, tuple[int, int]]  # device -> (gpus, nodes)


def price_field(objective: str) -> str:
    """The price the objective depends on: the hourly price for cloud, else the purchase price."""
    return "cloud_usd_per_gpu_hour" if objective == "cloud" else "purchase_usd"


def fleet_of(sol: FleetSolution) -> Fleet:
    return {d: (g, sol.nodes.get(d, 0)) for d, g in sorted(sol.gpus.items()) if g > 0}


def fleet_objective_usd(fleet: Fleet, problem: FleetProblem) -> float:
    """Σ_d objective terms of d at (gpus, nodes), under ``problem``'s unit terms."""
    return sum(problem.units[d].figure("objective_usd", g, n) for d, (g, n) in fleet.items())


def fleet_rows(fleet: Fleet, problem: FleetProblem) -> tuple[FleetDeviceGpus, ...]:
    """The fleet's rows with the GPUs bought (``UnitTerms.installed_gpus``: a board bought whole counts its idle
    GPUs), which the fleet's objective pays for."""
    return tuple(FleetDeviceGpus(d, g, n, problem.units[d].installed_gpus(g, n)) for d, (g, n) in fleet.items())


# ---------------------------------------------------------------------------------------
# The MILP data with one input changed
# ---------------------------------------------------------------------------------------


def with_price(problem: FleetProblem, cset: CandidateSet, a: MoneyAssumptions, device: str, field: str,
               value: float) -> FleetProblem:
    """``problem`` with ``device``'s ``field`` (purchase_usd | cloud_usd_per_gpu_hour) set to ``value``."""
    unit = cset.units[device]
    priced = replace(unit, price=replace(unit.price, **{field: value}))
    return replace(problem, units={**problem.units, device: unit_terms(priced, a)})


def with_money(problem: FleetProblem, cset: CandidateSet, a: MoneyAssumptions) -> FleetProblem:
    """``problem`` with every unit's terms recomputed under the money assumptions ``a``."""
    return replace(problem, units={d: unit_terms(cset.units[d], a) for d in problem.units})


def with_capacity(problem: FleetProblem, factors: Mapping[str, float]) -> FleetProblem:
    """``problem`` with the capacities of each device's options multiplied by its factor."""
    options = tuple(replace(o, capacity_qps=tuple(c * factors[o.device] for c in o.capacity_qps))
                    if o.device in factors else o for o in problem.options)
    return replace(problem, options=options)


def with_demand(problem: FleetProblem, factor: float) -> FleetProblem:
    """``problem`` with every bucket's rate multiplied by ``factor`` (replica rules kept)."""
    demands = tuple(replace(d, bucket_qps=tuple(q * factor for q in d.bucket_qps)) for d in problem.demands)
    return replace(problem, demands=demands)


def without_device(problem: FleetProblem, device: str) -> FleetProblem:
    return replace(problem, options=tuple(o for o in problem.options if o.device != device))


# ---------------------------------------------------------------------------------------
# The analysis
# ---------------------------------------------------------------------------------------


class _Solver:
    """Counts re-solves; returns None for a problem with no plan.

    Every plan found (and the base plan) is kept; a re-solve starts from the cheapest of them
    that satisfies every constraint of its problem (:func:`~optimizer.planning.milp.resolve.is_feasible`),
    so that HiGHS only has to prove it optimal, or improve on it. A re-solve is thus a function
    of its problem and the plans known before it (in order, ``known_key`` digests them): it goes
    through the disk cache under both (:func:`~optimizer.planning.milp.resolve.solve_key`; kept
    when proven optimal; on a hit its first incumbent is not even looked for). :meth:`many` re-solves independent
    problems from the same known plans, on forked workers: the same answers with any number.
    """

    def __init__(self, options: SolverOptions, base: tuple[FleetProblem, FleetSolution] | None = None,
                 known: Sequence[tuple[FleetProblem, FleetSolution]] = ()):
        self.options = options
        self.count = 0
        self.known: list[tuple[FleetProblem, FleetSolution]] = []
        self.known_key = ""
        self._digests: dict[int, tuple[FleetProblem, str]] = {}
        for source, sol in ([base] if base is not None else []) + list(known):
            self._add(source, sol)

    def _add(self, problem: FleetProblem, sol: FleetSolution) -> None:
        self.known.append((problem, sol))
        text = repr((self.known_key, self._digest(problem), plan_key(sol)))
        self.known_key = hashlib.blake2b(text.encode(), digest_size=20).hexdigest()

    def _digest(self, problem: FleetProblem) -> str:
        """Digest of ``repr(problem)``, once per problem object (the base recurs in every known plan)."""
        hit = self._digests.get(id(problem))
        if hit is None or hit[0] is not problem:
            hit = self._digests[id(problem)] = (problem, hashlib.blake2b(repr(problem).encode(), digest_size=20).hexdigest())
        return hit[1]

    def start(self, problem: FleetProblem) -> FleetSolution | None:
        """The cheapest known plan, carried onto ``problem``, that is feasible there (None: none is)."""
        best, best_usd = None, math.inf
        for source, sol in self.known:
            moved = transplant(sol, source, problem)
            if moved is None:
                continue
            for plan in (moved, topped_up(problem, moved), topped_up(problem, moved, fill_idle=False),
                         trimmed(problem, moved)):
                if plan is None or not is_feasible(problem, plan):
                    continue
                usd = fleet_objective_usd(fleet_of(plan), problem)
                if usd < best_usd:
                    best, best_usd = plan, usd
        return best

    def _key(self, problem: FleetProblem) -> tuple:
        return solve_key(problem, ("known", self.known_key), gap=self.options.gap, solver=self.options.solver)

    def solve(self, problem: FleetProblem) -> FleetSolution:
        """The re-solve of ``problem`` from the best known plan (uncached)."""
        return resolve_fleet(problem, **self.options.solve_kwargs, start=self.start(problem))

    def __call__(self, problem: FleetProblem) -> FleetSolution | None:
        return self.many([problem])[0]

    def many(self, problems: Sequence[FleetProblem]) -> list[FleetSolution | None]:
        """``self(p)`` of each of ``problems``, every one from the plans known now (they are then
        known, in order): the cached ones from the disk, the others on forked workers when there
        are at least two (``parallel_workers``)."""
        global _MANY
        self.count += len(problems)
        keys = [self._key(p) for p in problems]
        got = [disk_cache.get("resolve", k) for k in keys]
        todo = [i for i, g in enumerate(got) if not isinstance(g, FleetSolution)]
        workers = min(parallel_workers(), len(todo))
        if workers < 2:
            fresh = [self.solve(problems[i]) for i in todo]
        else:
            _MANY = [self, [problems[i] for i in todo]]
            try:
                fresh = run_pool(_many_task, range(len(todo)), workers)
            finally:
                _MANY = []
        for i, sol in zip(todo, fresh, strict=True):
            got[i] = sol
            keep_solve("resolve", keys[i], sol)
        out = []
        for p, sol in zip(problems, got, strict=True):
            if sol.status.has_plan:
                self._add(p, sol)
            out.append(sol if sol.status.has_plan else None)
        return out


_MANY: list = []  # [solver, problems] of the re-solves being run on the pool (inherited by forked workers)


def _many_task(i: int) -> FleetSolution:
    solver, problems = _MANY
    return solver.solve(problems[i])


def main_device(fleet: Fleet, problem: FleetProblem) -> str:
    """The device with the largest share of the fleet's objective (ties: the key sorting first)."""
    return min(fleet, key=lambda d: (-problem.units[d].figure("objective_usd", *fleet[d]), d))


def analyse(plan: Plan, cset: CandidateSet, problem: FleetProblem, base: FleetSolution,
            fidelity: Mapping[str, Fidelity], options: SolverOptions = SolverOptions(),
            known: Sequence[FleetSolution] = ()) -> Sensitivity:
    """Runner-up, break-even price and capacity factor per chosen device, tornado swings.

    ``known``: other plans of ``problem`` (the one-device fleets), first incumbents of the re-solves
    where they are feasible and the cheapest known (a fleet without a chosen device, say).
    """
    start = time.perf_counter()
    solve = _Solver(options, (problem, base), [(problem, k) for k in known])
    a = MoneyAssumptions.from_plan(plan)
    field = price_field(plan.objective)
    fleet = fleet_of(base)
    base_usd = fleet_objective_usd(fleet, problem)
    main = main_device(fleet, problem)

    without: dict[str, FleetSolution | None] = {}
    for d in fleet:
        without[d] = solve(without_device(problem, d))
    ru = without[main]
    runner_up = RunnerUp(main, fleet_rows(fleet_of(ru), problem) if ru else (),
                         fleet_objective_usd(fleet_of(ru), problem) if ru else None,
                         fleet_objective_usd(fleet_of(ru), problem) - base_usd if ru else None)

    devices = []
    for d in fleet:
        price = getattr(cset.units[d].price, field)
        be_price, price_note = break_even_price(problem, cset, a, d, field, price, fleet, without[d], solve,
                                                options.gap)
        be_cap, cap_note = break_even_capacity(problem, d, fleet, base, solve, options.gap)
        devices.append(DeviceSensitivity(d, field, price, be_price, be_cap, price_note, cap_note))

    alternative = {d: fleet_objective_usd(fleet_of(sol), problem) for d, sol in without.items() if sol is not None}
    tornado = tornado_rows(plan, cset, problem, a, field, fleet, base_usd, devices, fidelity, solve,
                           alternative, options.gap)
    return Sensitivity(base_usd, runner_up, tuple(devices), tuple(tornado), PRICE_TOLERANCE, CAPACITY_TOLERANCE,
                       solve.count, time.perf_counter() - start)


def _slope(problem_at: Callable[[float], FleetProblem], fleet: Fleet, p: float) -> float:
    """d C_F / d p: the objective is linear in the price, so one unit step gives the slope."""
    return fleet_objective_usd(fleet, problem_at(p + 1.0)) - fleet_objective_usd(fleet, problem_at(p))


def break_even_price(problem: FleetProblem, cset: CandidateSet, a: MoneyAssumptions, device: str, field: str,
                     price: float | None, fleet: Fleet, alt: FleetSolution | None, solve: _Solver,
                     gap: float) -> tuple[float | None, str]:
    """p* above which the optimal fleet is no longer ``fleet`` (see the module doc)."""
    if price is None:
        return None, f"{device} has no {field}"
    if alt is None:
        return None, f"no fleet without {device} meets the plan: the fleet does not change at any price"

    def at(p: float) -> FleetProblem:
        return with_price(problem, cset, a, device, field, p)

    def crossing(other: Fleet) -> float | None:
        gap_usd = fleet_objective_usd(other, at(price)) - fleet_objective_usd(fleet, at(price))
        ds = _slope(at, fleet, price) - _slope(at, other, price)
        return price + gap_usd / ds if ds > 0 else None

    p_hi = crossing(fleet_of(alt))
    if p_hi is None:
        return None, "no cheaper alternative at any price"
    for _ in range(MAX_CROSSING_STEPS):
        probe = p_hi * (1.0 - PRICE_TOLERANCE)
        if probe <= price:
            return p_hi, "within the tolerance of today's price"
        sol = solve(at(probe))
        if sol is None:
            return p_hi, ""
        other = fleet_of(sol)
        prob = at(probe)
        if other == fleet or fleet_objective_usd(other, prob) >= fleet_objective_usd(fleet, prob):
            return p_hi, ""
        nxt = crossing(other)
        p_hi = nxt if nxt is not None and nxt < probe else probe
    return p_hi, "search stopped after its step limit"


def _utilisation(problem: FleetProblem, base: FleetSolution, device: str) -> float:
    """max over base deployments on ``device`` of Σ_b routed_b / μ_b / replicas."""
    cap = {(o.workload, o.key): o.capacity_qps for o in problem.options if o.device == device}
    worst = 0.0
    for (w, k), n in base.replicas.items():
        if n <= 0 or (w, k) not in cap:
            continue
        mu = cap[(w, k)]
        load = sum(q / mu[b] for (w2, b, k2), q in base.routed_qps.items()
                   if w2 == w and k2 == k and q > 0 and mu[b] > 0)
        worst = max(worst, load / n)
    return worst


def break_even_capacity(problem: FleetProblem, device: str, fleet: Fleet, base: FleetSolution, solve: _Solver,
                        gap: float) -> tuple[float | None, str]:
    """f* below which the optimal fleet is no longer ``fleet`` (see the module doc).

    A factor needs no re-solve where a known plan as cheap as B (B itself, or another optimum of
    the base problem) still fits with its replicas re-routed (:func:`kept_down_to`): it is then
    optimal there, since lowering a capacity only removes feasible fleets. The search starts there."""
    base_usd = fleet_objective_usd(fleet, problem)
    floor = _KeptDownTo(problem, device, base_usd, solve)

    def changed(f: float) -> bool:
        if floor() <= f:
            return False
        sol = solve(with_capacity(problem, {device: f}))
        if sol is None:
            return True
        other = fleet_of(sol)
        return other != fleet and fleet_objective_usd(other, problem) > base_usd * (1.0 + gap)

    hi = floor()  # unchanged at hi (a plan as cheap as B fits)
    if hi > 1.0:  # no known plan's LP solved: B's own routing fits down to its utilisation
        hi = min(1.0, _utilisation(problem, base, device)) or 1.0
    if hi <= F_MIN:
        return None, f"the fleet does not change down to a factor of {F_MIN}"
    if hi - CAPACITY_TOLERANCE <= F_MIN:
        return hi, ""
    step = CAPACITY_TOLERANCE
    while True:  # gallop down: hi unchanged, lo = hi - step probed
        lo = max(hi - step, F_MIN)
        if changed(lo):
            if step == CAPACITY_TOLERANCE:
                return hi, ""
            break
        if lo <= F_MIN:
            return None, f"the fleet does not change down to a factor of {F_MIN}"
        hi, step = min(lo, floor()), 2.0 * step
    while hi - lo > CAPACITY_TOLERANCE * (1 + 1e-9):
        mid = (lo + hi) / 2.0
        if changed(mid):
            lo = mid
        else:
            hi = min(mid, max(floor(), lo))
    return hi, ""


class _KeptDownTo:
    """The least capacity factor on ``device`` at which some known plan costing no more than B
    (``base_usd``, the optimum at factor 1: a lower bound at every factor below) still meets every
    row with its replicas re-routed (:func:`~optimizer.planning.milp.routing.lowest_capacity_factor`);
    > 1 when there is none. Each plan's LP is solved once, on the plans known when called."""

    def __init__(self, problem: FleetProblem, device: str, base_usd: float, solve: _Solver) -> None:
        self.problem, self.device, self.base_usd, self.solve = problem, device, base_usd, solve
        self.seen = 0
        self.least = math.inf

    def __call__(self) -> float:
        for _, sol in self.solve.known[self.seen:]:
            fleet = fleet_of(sol)
            if all(d in self.problem.units for d in fleet) \
                    and fleet_objective_usd(fleet, self.problem) <= self.base_usd * (1 + BASE_COST_RTOL):
                f = lowest_capacity_factor(self.problem, sol, self.device)
                if f is not None:
                    self.least = min(self.least, f)
        self.seen = len(self.solve.known)
        return self.least


def _never_beats(problem: FleetProblem, device: str, base_usd: float) -> bool:
    """Every fleet of ``problem`` that buys ``device`` costs at least ``base_usd`` (an LP bound:
    :func:`~optimizer.planning.milp.relax.cheapest_with_device_bound`), so a fleet that does not
    buy it and costs ``base_usd`` is optimal."""
    bound = cheapest_with_device_bound(problem, device)
    return bound is not None and bound >= base_usd * (1 + BOUND_RTOL)


def _dearer_end(problem: FleetProblem, at: FleetProblem, device: str, base_usd: float, alternative_usd: float,
                gap: float) -> float | None:
    """The optimum at a higher price of a chosen ``device`` (``at``), when it is the cheapest fleet
    without it (A, cost ``alternative_usd``, which the price does not change); None when that is
    not proven.

    Every fleet F that buys d has C_F(p) = C_F(p0) + Δ_gpu·g_F + Δ_node·m_F, with Δ the increase of
    d's unit terms (both ≥ 0 at a higher price) and g_F, m_F ≥ 1, so C_F(p) ≥ OPT(p0) + Δ_gpu + Δ_node,
    and OPT(p0) ≥ B·(1 − gap) (B = ``base_usd``, the base plan, within the solver's relative gap of
    its bound). When A ≤ B·(1 − gap) + Δ_gpu + Δ_node, no fleet that buys d is cheaper than A, and A is
    the optimum among those that do not (within the gap, as a re-solve's answer is)."""
    before, after = problem.units[device].objective_usd, at.units[device].objective_usd
    d_gpu, d_node = after.per_gpu - before.per_gpu, after.per_node - before.per_node
    if d_gpu < 0 or d_node < 0:
        return None
    return alternative_usd if alternative_usd <= base_usd * (1 - gap) + d_gpu + d_node else None


def tornado_rows(plan: Plan, cset: CandidateSet, problem: FleetProblem, a: MoneyAssumptions, field: str,
                 fleet: Fleet, base_usd: float, devices: list[DeviceSensitivity],
                 fidelity: Mapping[str, Fidelity], solve: _Solver, alternative: Mapping[str, float] | None = None,
                 gap: float = 0.0) -> list[TornadoRow]:
    """Optimal objective at both ends of each input, largest swing first.

    The ends that need a re-solve are independent of each other: they are re-solved together
    (``_Solver.many``: from the plans known after the break-evens, on the worker pool).
    ``alternative``: per chosen device d, the cost A_d of the cheapest fleet without it (the
    re-solve of the break-even, within ``gap``), which decides d's high price end without a re-solve
    (:func:`_dearer_end`)."""
    alternative = alternative or {}
    break_even = {s.device: s.break_even_price for s in devices}
    rows: list[tuple[str, str, str, object, object]] = []  # an end: a figure ($ or None) or a problem to re-solve
    used = sorted({o.device for o in problem.options})
    for d in used:
        unit = cset.units[d]
        dev = unit.device
        price = getattr(unit.price, field)
        if dev is None or price is None:
            continue
        # a price the user set (plan devices: section, --catalog) is not the catalog's figure: the shipped range
        # and estimate were about that figure, and swung around the quote they put both ends off the base
        # (h100-sxm quoted at $5,000 swung over the catalog's $25,000-30,678, both ends +81 %); a range the
        # user gave with the quote is still theirs, and so is an estimate they marked (estimated: {field: basis})
        quoted = price_basis(dev, field)[0] == "quoted"
        shipped = builtin_devices().get(d)
        own_range = shipped is None or shipped.ranges.get(field) != dev.ranges.get(field)
        own_estimate = shipped is None or shipped.estimated.get(field) != dev.estimated.get(field)
        if field in dev.ranges and (own_range or not quoted):
            low, high = dev.ranges[field]
            what = "catalog range"
        elif d in fleet and field in dev.estimated and (own_estimate or not quoted):
            low, high = price * (1 - ESTIMATE_SWING), price * (1 + ESTIMATE_SWING)
            what = f"estimate ±{ESTIMATE_SWING:.0%}"
        else:
            continue

        def end(p: float, d: str = d, price: float = price) -> object:
            if p >= price and d not in fleet:
                return base_usd  # a dearer device that is not bought changes nothing
            at = with_price(problem, cset, a, d, field, p)
            if d not in fleet and _never_beats(at, d, base_usd):
                return base_usd  # no fleet that buys d beats B even at the lower price: the optimum stays B
            be = break_even.get(d)
            if p >= price and be is not None and p < be * (1 - PRICE_TOLERANCE):
                return fleet_objective_usd(fleet, at)  # below the break-even the fleet stays
            if p >= price and d in alternative:
                dearer = _dearer_end(problem, at, d, base_usd, alternative[d], gap)
                if dearer is not None:
                    return dearer  # every fleet that buys d costs more there than the best without it
            return at

        unit_label = "$/GPU-hour" if field == "cloud_usd_per_gpu_hour" else "$"
        rows.append((f"{d} {field} ({what})", f"{low:,.2f} {unit_label}" if field != "purchase_usd"
                     else f"${low:,.0f}", f"{high:,.2f} {unit_label}" if field != "purchase_usd"
                     else f"${high:,.0f}", end(low), end(high)))

    if plan.objective != "cloud" and plan.electricity_usd_per_kwh > 0:
        e = plan.electricity_usd_per_kwh
        ends = [with_money(problem, cset, replace(a, electricity_usd_per_kwh=e * f))
                for f in (1 - ELECTRICITY_SWING, 1 + ELECTRICITY_SWING)]
        rows.append((f"electricity_usd_per_kwh ±{ELECTRICITY_SWING:.0%}", f"{e * (1 - ELECTRICITY_SWING):.3f}",
                     f"{e * (1 + ELECTRICITY_SWING):.3f}", *ends))

    rows.append((f"demand (every rate) ±{DEMAND_SWING:.0%}", f"×{1 - DEMAND_SWING:g}", f"×{1 + DEMAND_SWING:g}",
                 with_demand(problem, 1 - DEMAND_SWING), with_demand(problem, 1 + DEMAND_SWING)))

    devs = [d for d in used if d in fidelity]
    if devs:
        # the pessimistic end (low capacity) costs more: it is the "high" end of the objective's input
        rows.append(("performance (each device at its fidelity band's end)", "band high (faster)", "band low (slower)",
                     with_capacity(problem, {d: fidelity[d].high_factor for d in devs}),
                     with_capacity(problem, {d: fidelity[d].low_factor for d in devs})))

    pending = [x for r in rows for x in r[3:] if isinstance(x, FleetProblem)]
    optimum = {id(p): fleet_objective_usd(fleet_of(sol), p) if sol is not None else None
               for p, sol in zip(pending, solve.many(pending), strict=True)}
    out = [TornadoRow(name, low, high, *(optimum[id(x)] if isinstance(x, FleetProblem) else x for x in ends))
           for name, low, high, *ends in rows]
    out.sort(key=lambda r: -r.swing_usd)
    return out
