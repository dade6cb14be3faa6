"""The steps between a solve and a result that finance can trust (issue 15).

``optimizer.optimize.optimize_plan`` calls them in this order:

1. :func:`fidelity_map` — the fidelity class and band of each (device, engine, ep) a kept candidate
   runs, and :func:`candidate_fidelity` — the bands widened for candidates whose configuration's own
   calibration rows lie outside them (``device_fidelity``: the least trusted per device, for the
   tornado's performance ends);
2. ``optimizer.planning.headroom.sized`` — capacities at the plan's confidence level and
   utilisation cap, rates at its demand quantile;
3. solve; :func:`verify_and_resize` — the simulator's check of every online deployment,
   derating missed candidates and re-solving;
4. :func:`annotate` — price basis per fleet device, fidelity and simulated p99 per deployment;
5. ``optimizer.planning.sensitivity.analyse`` — runner-up, break-evens, tornado.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import get_args

from catalog.load import Catalog
from optimizer.models.fidelity import (
    fidelity_of,
    structure_rating,
    with_measured_configuration,
)
from optimizer.models.params import CalibrationParams, configuration_key
from optimizer.planning.candidate_set import CandidateSet, fleet_problem
from optimizer.planning.headroom import FidelityKey, fidelity_key, sized
from optimizer.planning.milp.problem import FleetProblem, FleetSolution
from optimizer.planning.provenance import price_basis
from optimizer.planning.sensitivity import price_field
from optimizer.planning.verify import (
    MAX_VERIFIED_DEPLOYMENTS,
    MAX_VERIFY_ROUNDS,
    derate_factor,
    online_deployments,
    remembered,
    verify_deployments,
)
from optimizer.results.latency_text import ms_text
from optimizer.results.plan_result import Deployment, Diagnostic, PlanResult
from optimizer.results.provenance import Fidelity, FidelityClass, Verification, VerifiedDeployment
from workloads.spec import Plan

TABLE_FIDELITY = Fidelity("measured", "capacities measured by the user (--capacity-table); no model band", 1.0, 1.0)


# measured < same-generation < datasheet-only: the order of ``FidelityClass``
CLASS_RANK = {c: i for i, c in enumerate(get_args(FidelityClass))}


def fidelity_map(cset: CandidateSet, params: CalibrationParams | None, catalog: Catalog) -> dict[FidelityKey, Fidelity]:
    """Fidelity of every (device, engine, ep) a kept candidate runs (``fidelity_key``; ``params`` None: a
    measured capacity table), computed once per distinct triple.

    The class is that of the candidate's own configuration (``fidelity_of(device, engine=, ep=)``):
    on an H100 with a TensorRT-LLM tp candidate (measured), an ep8 one (never measured with ep) and a vLLM
    one (an engine Hopper was never measured with) beside it, the first is rated, sized at a confidence
    level and reported as measured, the second as same-generation, the third as datasheet-only. What
    depends on the candidate's model or pp too is in ``candidate_fidelity``.
    """
    keys = {fidelity_key(c) for wc in cset.workloads for c in wc.kept}
    out = {}
    for k in sorted(keys):
        device, engine, ep = k
        dev = cset.units[device].device if device in cset.units else None
        if params is None or dev is None:
            out[k] = TABLE_FIDELITY
            continue
        out[k] = fidelity_of(dev, params, catalog.devices, engine=engine or None, ep=ep)
    return out


def candidate_fidelity(cset: CandidateSet, fidelity: Mapping[FidelityKey, Fidelity],
                       params: CalibrationParams | None, catalog: Catalog) -> dict[tuple[str, str], Fidelity]:
    """(workload, candidate key) → its band where it differs from its configuration's class band
    (``fidelity[fidelity_key(c)]``), for the kept candidates:

    - lowered where its model, precision or pipeline was never measured on its hardware
      (``optimizer.models.fidelity.structure_rating``: a MoE model or a weight-only precision on a generation and
      engine never measured with one, datasheet-only; pp > 1 on a measured device, same-generation);
    - widened to contain the median measured / predicted of the calibration's own rows of that configuration
      (device, engine, model, precision, tp, ep: ``CalibrationParams.measured_configuration``) where that median
      lies outside the band (``with_measured_configuration``).

    The others are absent."""
    if params is None:
        return {}
    records = params.fit is not None and bool(params.fit.by_configuration)
    out = {}
    rated: dict[tuple[FidelityKey, bool, bool, int], Fidelity] = {}  # one per (configuration, MoE, weight-only, pp)
    for wc in cset.workloads:
        moe = wc.model in catalog.models and catalog.models[wc.model].is_moe
        for c in wc.kept:
            fid = fidelity.get(fidelity_key(c))
            if fid is None or not c.engine or c.device not in cset.units:
                continue
            weight_only = c.precision in catalog.precisions and catalog.precisions[c.precision].weight_only
            at = (fidelity_key(c), moe, weight_only, c.pp)
            if at not in rated:
                rated[at] = structure_rating(fid, cset.units[c.device].device, c.engine, params, moe=moe,
                                             weight_only=weight_only, pp=c.pp)
            own = rated[at]
            if records:
                rec = params.measured_configuration(configuration_key(c.device, c.engine, wc.model, c.precision,
                                                                      c.tp, c.ep))
                own = with_measured_configuration(own, rec)
            if own is not fid:
                out[(wc.workload.name, c.key)] = own
    return out


def device_fidelity(fidelity: Mapping[FidelityKey, Fidelity],
                    candidates: Mapping[tuple[str, str], Fidelity] | None = None,
                    cset: CandidateSet | None = None) -> dict[str, Fidelity]:
    """Per device, the least trusted fidelity of its configurations (``least_trusted``), those widened for
    a candidate of ``cset`` (``candidate_fidelity``) included: the band the tornado's performance ends move
    each device by (``optimizer.planning.sensitivity``)."""
    by_device: dict[str, list[Fidelity]] = {}
    for (device, _, _), f in sorted(fidelity.items()):
        by_device.setdefault(device, []).append(f)
    if candidates and cset is not None:
        device_of = {(wc.workload.name, c.key): c.device for wc in cset.workloads for c in wc.kept}
        for k, f in sorted(candidates.items()):
            if k in device_of:
                by_device.setdefault(device_of[k], []).append(f)
    return {d: least_trusted(fs) for d, fs in by_device.items()}


def least_trusted(fidelities: list[Fidelity]) -> Fidelity:
    """The fidelity of the lowest class (measured < same-generation < datasheet-only), then the widest
    band (largest high_factor / low_factor); the first of equals."""
    return max(fidelities, key=lambda f: (CLASS_RANK[f.class_], f.high_factor / f.low_factor))


def verify_by_default(cset: CandidateSet, sol: FleetSolution) -> bool:
    """On when the plan has at most MAX_VERIFIED_DEPLOYMENTS online deployments (the time budget)."""
    return online_deployments(cset, sol) <= MAX_VERIFIED_DEPLOYMENTS


def confidently_missed(v: VerifiedDeployment) -> bool:
    """A missed SLO to re-size for (``VerifiedDeployment.verdict`` ``missed``): the simulated p99 is over the
    SLO, and either its 95 % confidence interval lies above the SLO (``simulated_ci_low_ms`` > ``slo_ms``), or
    the pooled p99 is more than ``results.provenance.SIMULATED_MISS_RATIO`` × the SLO, or the analytic model's own p99 at that load is
    over it too. A deployment the model puts within its SLO whose simulated p99 is near the SLO with an interval
    that straddles it (``at_slo``) is not re-sized — its p99 cannot be told from the SLO at the simulated
    request count, and re-sizing such deployments on the point estimate alone flips about half of them each
    round (planned at their SLO), so the rounds never settle; ``annotate`` names them in a
    ``simulation_at_slo`` warning."""
    return v.verdict == "missed"


def verify_and_resize(plan: Plan, cset: CandidateSet, sol: FleetSolution, catalog: Catalog,
                      params: CalibrationParams, solve: Callable[[FleetProblem], FleetSolution]
                      ) -> tuple[CandidateSet, FleetProblem | None, FleetSolution, Verification]:
    """Simulate every online deployment; derate each missed candidate and re-solve, up to
    MAX_VERIFY_ROUNDS times. Returns the final candidate set, problem (None if unchanged),
    solution and the verification of the final plan."""
    with remembered():  # a round re-checks the deployments the re-solve kept without simulating them again
        return _verify_and_resize(plan, cset, sol, catalog, params, solve)


def _verify_and_resize(plan: Plan, cset: CandidateSet, sol: FleetSolution, catalog: Catalog,
                       params: CalibrationParams, solve: Callable[[FleetProblem], FleetSolution]
                       ) -> tuple[CandidateSet, FleetProblem | None, FleetSolution, Verification]:
    start = time.perf_counter()
    factors: dict[tuple[str, str], float] = {}
    problem = None
    rounds = 0
    notes: list[str] = []
    while True:
        checked, unsimulated = verify_deployments(cset, sol, catalog, params)
        misses = [v for v in checked if confidently_missed(v)]
        if not misses or rounds >= MAX_VERIFY_ROUNDS:
            break
        notes.extend(f"round {rounds + 1}: {v.workload} on {v.key} simulated {v.metric} {ms_text(v.simulated_ms)} ms "
                     f"> SLO {ms_text(v.slo_ms)} ms (predicted {ms_text(v.predicted_ms or 0)} ms): capacity × "
                     f"{derate_factor(v):.3f}, re-solved" for v in misses)
        step = {(v.workload, v.key): derate_factor(v) for v in misses}
        for k, f in step.items():
            factors[k] = factors.get(k, 1.0) * f
        candidate = sized(cset, {}, 1.0, step)
        candidate_problem = fleet_problem(candidate, plan)
        new = solve(candidate_problem)
        rounds += 1
        if not new.status.has_plan:
            notes.append("re-sizing the missed deployments left no feasible fleet; the plan is kept as solved")
            break
        cset, problem, sol = candidate, candidate_problem, new
    checked = [replace(v, derate_factor=factors.get((v.workload, v.key), 1.0)) for v in checked]
    all_met = all(v.met for v in checked)
    note = "; ".join(notes + unsimulated)
    return cset, problem, sol, Verification(tuple(checked), rounds, time.perf_counter() - start, all_met, note,
                                            tuple(unsimulated))


def dtype_bound_note(d: Deployment, cset: CandidateSet, params: CalibrationParams | None, catalog: Catalog | None) -> str:
    """What the deployment's capacity rests on when its GEMM dtype was never measured on its vendor and is
    held to the next wider dtype's achieved FLOPS (``CalibrationParams.unmeasured_dtype_bound``, binding);
    "" otherwise (a measured dtype, a weight-only precision, a capacity-table unit)."""
    unit = cset.units.get(d.device)
    dev = unit.device if unit is not None else None
    prec = catalog.precisions.get(d.precision) if catalog is not None and d.precision else None
    bound = params.binding_dtype_bound(dev, d.engine or None, prec) if params and dev and prec else None
    return bound.note(params.unmeasured_dtype_speedup_cap) if bound is not None else ""  # type: ignore[union-attr]


def _with_dtype_note(f: Fidelity | None, note: str) -> Fidelity | None:
    return replace(f, basis=f"{f.basis}; {note}") if f is not None and note else f


def annotate(result: PlanResult, plan: Plan, cset: CandidateSet, fidelity: Mapping[FidelityKey, Fidelity],
             verification: Verification | None, params: CalibrationParams | None = None,
             catalog: Catalog | None = None,
             candidates: Mapping[tuple[str, str], Fidelity] | None = None) -> PlanResult:
    """Price basis on each fleet row, the fidelity of its own (device, engine, ep) and the simulator's
    figures on each deployment (with ``params`` and ``catalog``: the fidelity basis also says when the
    capacity rests on an unmeasured GEMM dtype's bound, ``dtype_bound_note``), and a warning for every
    chosen device whose price is an estimate. ``candidates``: per (workload, key) bands widened by the
    configuration's own measurements (``candidate_fidelity``), reported instead of the class band."""
    candidates = candidates or {}
    if not result.status.has_plan:
        return result
    field = price_field(plan.objective)
    fleet = []
    notes = []
    for f in result.fleet:
        dev = cset.units[f.device].device if f.device in cset.units else None
        if dev is None:
            fleet.append(replace(f, price_basis="quoted", price_basis_detail="capacity-table unit price"))
            continue
        basis, detail = price_basis(dev, field)
        fleet.append(replace(f, price_basis=basis, price_basis_detail=detail))
        if basis == "estimated":
            notes.append(Diagnostic("warning", "price_estimated",
                                    f"the recommended {dev.name} price ({field} {getattr(dev, field):,.2f}) is an "
                                    f"estimate ({detail}); enter your quote in Assumptions or the plan's devices: "
                                    "section"))
    checked = {(v.workload, v.key): v for v in verification.deployments} if verification else {}
    deployments = tuple(replace(d, fidelity=_with_dtype_note(candidates.get((d.workload, d.key),
                                                                            fidelity.get(fidelity_key(d))),
                                                             dtype_bound_note(d, cset, params, catalog)),
                                verification=checked.get((d.workload, d.key)))
                        for d in result.deployments)
    if verification is not None and not verification.all_met:
        notes += _miss_notes(verification)
    if verification is not None and verification.unsimulated:
        notes.append(Diagnostic("warning", "not_simulated",
                                "deployments the simulator could not check; their p99s are the analytic model's "
                                "alone (plan with confidence or target_utilization for headroom): "
                                + "; ".join(verification.unsimulated)))
    return replace(result, fleet=tuple(fleet), deployments=deployments,
                   diagnostics=result.diagnostics + tuple(notes))


def _miss_notes(verification: Verification) -> list[Diagnostic]:
    """A warning for the deployments the simulator finds over their SLO: those beyond its noise
    (``confidently_missed``), and those whose 95 % interval straddles the SLO."""
    def text(v) -> str:
        return (f"{v.workload} on {v.key} ({v.metric} {ms_text(v.simulated_ms)} ms, 95 % CI "
                f"{ms_text(v.simulated_ci_low_ms)}-{ms_text(v.simulated_ci_high_ms)} ms, SLO {ms_text(v.slo_ms)} ms)")
    missed = [text(v) for v in verification.deployments if confidently_missed(v)]
    marginal = [text(v) for v in verification.deployments if not v.met and not confidently_missed(v)]
    notes = []
    if missed:
        notes.append(Diagnostic("warning", "simulation_misses_slo",
                                "the simulator finds p99s above the SLO after re-sizing: " + "; ".join(missed)))
    if marginal:
        notes.append(Diagnostic("warning", "simulation_at_slo",
                                "the simulated p99 is above the SLO but within the simulation's 95 % confidence "
                                "interval, so it cannot be told from the SLO (not re-sized; the plan's target_utilization "
                                "or confidence adds headroom): " + "; ".join(marginal)))
    return notes
