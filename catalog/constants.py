"""Constants every layer shares (catalog, workloads, optimizer, reports, cli), defined once."""

HOURS_PER_YEAR = 8760.0  # 365 days × 24 h: money per year and tokens per year are at this many hours
SECONDS_PER_HOUR = 3600.0
MONTHS_PER_YEAR = 12.0
Z99 = 2.326347874  # z of the standard normal's 99th percentile: Φ⁻¹(0.99)
