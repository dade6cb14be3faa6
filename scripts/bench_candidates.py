"""The candidate stage alone, serial: CPU seconds, capacity-search probe calls and row-probes, screening.

    python scripts/bench_candidates.py [chat | N] [CHECKOUT]
        (N: bench_optimizer.py's N-workload plan; default chat; CHECKOUT: another checkout whose modules
        are measured, e.g. main's worktree, default this one)

Runs ``model_candidates`` (screened, as ``optimize_plan`` runs it) with ``GPUPLAN_WORKERS=1`` and the
disk cache off, and counts the calls of the capacity search's probe (``capacity._Search.margin``:
one vectorised serving-model evaluation) and the rows they evaluate. A probe call costs ~3-5 ms
whatever its rows plus ~0.1-0.15 ms per row (docs/benchmarks.md "Session 11: candidate stage
(speedcand)"), so both counts matter.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

os.environ["GPUPLAN_CACHE_DIR"] = ""
os.environ["GPUPLAN_WORKERS"] = "1"
REPO = Path(sys.argv[2]).resolve() if len(sys.argv) > 2 else Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "scripts")]

from bench_optimizer import big_plan  # noqa: E402

from catalog import load_catalog  # noqa: E402
from optimizer.models.params import load_params  # noqa: E402
from optimizer.models.serving import capacity  # noqa: E402
from optimizer.planning.candidates import model_candidates  # noqa: E402
from optimizer.planning.screening import NOT_EVALUATED  # noqa: E402
from workloads import load_plan, resolve_catalog  # noqa: E402

COUNTS = {"calls": 0, "rows": 0}
_margin = capacity._Search.margin


def _counted(self, rows, lam, t0=None):
    COUNTS["calls"] += 1
    COUNTS["rows"] += len(rows)
    return _margin(self, rows, lam, t0)


def main() -> None:
    which = sys.argv[1] if len(sys.argv) > 1 else "chat"
    capacity._Search.margin = _counted
    catalog, params = load_catalog(), load_params(None)
    if which == "chat":
        plan = load_plan(REPO / "examples" / "chat-fleet.yaml")
    else:
        plan = big_plan(int(which), catalog)
    cat = resolve_catalog(plan, catalog, which)
    c0 = time.process_time()
    cset = model_candidates(plan, cat, params)
    cpu = time.process_time() - c0
    every = [c for wc in cset.workloads for c in wc.candidates]
    screened = sum(NOT_EVALUATED in (c.pruned_reason or "") for c in every)
    probed = sum("misses the SLO" in (c.pruned_reason or "") for c in every)
    kept = sum(len(wc.kept) for wc in cset.workloads)
    print(f"{which}: candidates CPU {cpu:.2f} s; probe calls {COUNTS['calls']:,}, row-probes {COUNTS['rows']:,}; "
          f"{len(every):,} candidates, {screened:,} screened ({probed:,} of them by a probe), {kept:,} kept; "
          f"load {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
