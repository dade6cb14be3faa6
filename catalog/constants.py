"""Constants every layer shares (catalog, workloads, optimizer, reports, cli), defined once."""

HOURS_PER_YEAR = 8760.0  # 365 days × 24 h: money per year and tokens per year are at this many hours
SECONDS_PER_HOUR = 3600.0
MONTHS_PER_YEAR = 12.0
Z99 = 2.326347874  # z of the standard normal's 99th percentile: Φ⁻¹(0.99)
# Workloads of one plan: 10,000 planned in 300 s and 2.3 GB (--no-sensitivity, 2026-12-07, hostile round 23), and
# time and memory grow with the count; more is refused when the plan is read (workloads.load.parse_plan)
MAX_WORKLOADS = 10_000
