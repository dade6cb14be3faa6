"""What must be served: workloads with their rates, request sizes and SLOs, and the plan file."""

from workloads.load import load_plan, parse_plan, resolve_catalog
from workloads.spec import SLO, Budget, LengthDist, Plan, Workload

__all__ = ["SLO", "Budget", "LengthDist", "Plan", "Workload", "load_plan", "parse_plan", "resolve_catalog"]
