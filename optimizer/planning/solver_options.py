"""Solver settings and the planning defaults the CLI shows, in a module light enough for the CLI to
import at start-up (no solver import)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from catalog.errors import SolverError

# Request-size buckets per workload (``optimize_plan(n_buckets=...)``, ``gpuplan optimize --n-buckets``).
DEFAULT_N_BUCKETS = 4


@dataclass(frozen=True)
class SolverOptions:
    """How the MILP is solved; every default is declared here once (CLI flags default to these).

    ``time_limit_s`` bounds each solve (s), ``gap`` is the relative MIP gap at which the solver
    stops, ``solver`` is ``highs`` (CBC is the fallback when HiGHS is missing) or ``cbc``.
    """

    time_limit_s: float = 10.0
    gap: float = 1e-3
    solver: str = "highs"

    def __post_init__(self) -> None:
        if not (isinstance(self.time_limit_s, int | float) and math.isfinite(self.time_limit_s)
                and self.time_limit_s > 0):
            raise SolverError(f"time limit must be a finite number of seconds > 0 (got {self.time_limit_s}); "
                              "e.g. --time-limit-s 10")
        if not (isinstance(self.gap, int | float) and 0 <= self.gap < 1):
            raise SolverError(f"gap must be a fraction in [0, 1) (got {self.gap}); e.g. --gap 0.001 for 0.1 %")

    @property
    def solve_kwargs(self) -> dict[str, float | str]:
        """The keyword arguments of ``solve_fleet`` and the diagnostics' solves."""
        return {"time_limit_s": self.time_limit_s, "gap": self.gap, "solver": self.solver}
