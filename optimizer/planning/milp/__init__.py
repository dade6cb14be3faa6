"""The fleet MILP: problem data (:mod:`.problem`), model building (:mod:`.build`), solving (:mod:`.solve`)."""

from optimizer.planning.milp.build import (
    FleetModel,
    build_model,
    define_objective,
    replica_upper_bound,
    tie_break,
)
from optimizer.planning.milp.problem import (
    BOUNDS_MIN_OPTIONS,
    PRESOLVE_MIN_OPTIONS,
    Demand,
    FleetProblem,
    FleetSolution,
    Limits,
    Minimise,
    Option,
    SolverOptions,
    UnitTerms,
    amortised_units,
    amortised_usd_per_replica,
    options_by_workload,
    slug,
    uncovered_buckets,
)
from optimizer.planning.milp.solve import (
    SolveRun,
    extract,
    solve_alone,
    solve_fleet,
    solve_model,
    stdout_silenced,
    workload_lower_bounds,
)

__all__ = [
    "BOUNDS_MIN_OPTIONS", "PRESOLVE_MIN_OPTIONS", "Demand", "FleetModel", "FleetProblem", "FleetSolution",
    "Limits", "Minimise", "Option", "SolveRun", "SolverOptions", "UnitTerms", "amortised_units", "amortised_usd_per_replica",
    "build_model", "define_objective", "replica_upper_bound", "extract", "options_by_workload", "slug", "solve_alone", "solve_fleet",
    "solve_model", "stdout_silenced", "tie_break", "uncovered_buckets", "workload_lower_bounds",
]
