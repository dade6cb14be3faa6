"""Constants every layer shares (catalog, workloads, optimizer, reports, cli), defined once."""

HOURS_PER_YEAR = 8760.0  # 365 days × 24 h: money per year and tokens per year are at this many hours
SECONDS_PER_HOUR = 3600.0
MONTHS_PER_YEAR = 12.0
Z99 = 2.326347874  # z of the standard normal's 99th percentile: Φ⁻¹(0.99)
# Workloads of one plan: 10,000 planned in 300 s and 2.3 GB (--no-sensitivity, 2026-12-07, hostile round 23), and
# time and memory grow with the count; more is refused when the plan is read (workloads.load.parse_plan)
MAX_WORKLOADS = 10_000
# Ceilings on a plan's per-server and facility figures (hostile round 26): 1e300 in any of them became an objective
# coefficient HiGHS could not solve with, reported as "no solution found in 10 s (the time limit)" after 0.9 s, and
# 1e15 $/kW-month made PuLP's HiGHS interface fail (exit 70). Each is far above any real figure: the dearest shipped
# platform's server_usd is $65,000 and its server_power_w 33,600 W; colocation runs ~$100-300 per kW-month.
MAX_SERVER_USD = 10_000_000
MAX_SERVER_POWER_W = 1_000_000
MAX_COLOCATION_USD_PER_KW_MONTH = 10_000
MAX_COLOCATION_USD_PER_RACK_MONTH = 1_000_000
MAX_NETWORK_USD_PER_SERVER = 10_000_000
