"""Why a workload uses a serving technique: its cost alone with and without it.

For every workload with candidates that use disaggregated pools, speculative decoding or
(only as part of every candidate) a prefix cache, the workload is planned alone twice —
with all its candidates, and with only colocated candidates without speculation
(:func:`own_fleet_usd`: its own fleet, whole servers as the plan buys them, so a fixed-size board or
rack is paid whole) — and an info diagnostic ``technique`` states both costs: figures one could buy. The fleet MILP may still pick
otherwise when servers are shared with other workloads; the note is the workload's own case.
"""

from __future__ import annotations

from dataclasses import replace

from optimizer.planning.bucketing import ALONE_GAP, ALONE_TIME_LIMIT_S, problem_parts
from optimizer.planning.milp.problem import FleetProblem, UnitTerms
from optimizer.planning.milp.resolve import cached_solve
from optimizer.planning.milp.solve import solve_fleet
from optimizer.results.plan_result import Diagnostic


def own_fleet_usd(wc, units: dict[str, UnitTerms]) -> float | None:
    """The objective $ of the workload's cheapest fleet of its own: whole servers (a board or rack bought whole
    pays for its idle GPUs), inventories and allowed devices as planned, no budget or power cap; None if
    nothing serves it. Not ``bucketing.alone_usd``, whose servers are amortised per GPU (a share of a
    server, the right figure for splitting buckets within a fleet, not a price one can pay)."""
    demand, options = problem_parts(wc)
    if not options:
        return None
    own = FleetProblem((demand,), options, {o.device: units[o.device] for o in options})
    sol = cached_solve("own_fleet", own, lambda: solve_fleet(
        own, time_limit_s=ALONE_TIME_LIMIT_S, gap=ALONE_GAP, bounds=False), gap=ALONE_GAP)
    return sol.objective_usd if sol.status.has_plan else None


def technique_note(wc, units: dict[str, UnitTerms]) -> Diagnostic | None:
    """The ``technique`` diagnostic of one WorkloadCandidates, or None when it has no technique option."""
    special = [c for c in wc.kept if c.stage != "colocated" or c.key.endswith("__spec")]
    if not special:
        return None
    # colocated candidates without speculation, including those pruned only as dominated by a technique's
    plain = replace(wc, candidates=tuple(
        replace(c, pruned_reason=None) if (c.pruned_reason or "").startswith("dominated by") else c
        for c in wc.candidates if c.stage == "colocated" and not c.key.endswith("__spec")))
    with_all, without = own_fleet_usd(wc, units), own_fleet_usd(plain, units)
    kinds = []
    if any(c.stage != "colocated" for c in special):
        kinds.append("disaggregated prefill/decode pools")
    if any(c.key.endswith("__spec") for c in special):
        kinds.append("speculative decoding")
    name, what = wc.workload.name, " and ".join(kinds)
    if with_all is None:
        return None
    if without is None:
        return Diagnostic("info", "technique", f"{name}: only {what} can serve it (${with_all:,.0f} alone); "
                                               "colocated replicas without them cannot meet its SLO")
    saving = 1.0 - with_all / without if without > 0 else 0.0
    verdict = (f"{what} cut its cost alone to ${with_all:,.0f} from ${without:,.0f} with colocated replicas "
               f"only ({saving:.1%} less)") if saving > 1e-6 else (
               f"{what} do not pay for it alone (${without:,.0f} colocated either way)")
    return Diagnostic("info", "technique", f"{name}: {verdict}")
