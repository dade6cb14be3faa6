"""Fuzzing the loaders (plan, catalog override, YAML bytes, scenario, capacity table, measurements):
random structures and values around the valid examples.

The only outcomes allowed are a valid object or the project's own error type
(GpuplanError) — never another exception. Budget: max_examples per test below.
"""

from __future__ import annotations

import copy
import math

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from catalog import load_catalog
from catalog.errors import GpuplanError
from tests.conftest import CALIBRATION_CSV, EXAMPLES
from workloads import parse_plan, resolve_catalog

BASE = yaml.safe_load((EXAMPLES / "chat-fleet.yaml").read_text())
CATALOG = load_catalog()

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-10**12, max_value=10**12),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=12),
    st.sampled_from(["h100-sxm", "llama-3.1-70b", "fp8", "bf16", "n+1", "tco", "cloud", -1, 0, 1e30, "1e3"]),
)
values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                        st.dictionaries(st.text(max_size=8), inner, max_size=3)),
                      max_leaves=6)


def _paths(obj, prefix=()):
    yield prefix
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _paths(v, prefix + (i,))


ALL_PATHS = [p for p in _paths(BASE) if p]


def _mutate(data, paths, draw, value_strategy):
    """1-3 random edits of ``data`` at ``paths``: set a value, delete a key, add a key, or replace
    a scenario's ``set`` mapping."""
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(paths))
        parent = data
        try:
            for p in path[:-1]:
                parent = parent[p]
            action = draw(st.sampled_from(["set", "delete", "add", "override"]))
            if action == "set":
                parent[path[-1]] = draw(value_strategy)
            elif action == "delete" and isinstance(parent, dict):
                parent.pop(path[-1], None)
            elif action == "override" and isinstance(parent, dict) and path[-1] == "set":
                parent["set"] = {draw(override_keys): draw(value_strategy)}
            elif isinstance(parent, dict):
                parent[draw(st.text(min_size=1, max_size=10))] = draw(value_strategy)
        except (KeyError, IndexError, TypeError):
            continue
    return data


@st.composite
def mutated_plans(draw):
    return _mutate(copy.deepcopy(BASE), ALL_PATHS, draw, values)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated_plans())
def test_plan_loader_only_raises_own_errors(data):
    try:
        plan = parse_plan(data, "fuzz.yaml")
        resolve_catalog(plan, CATALOG, "fuzz.yaml")
    except GpuplanError as exc:
        assert str(exc).startswith("fuzz.yaml")
        return
    for w in plan.workloads:
        assert w.request_rate_qps > 0 and math.isfinite(w.request_rate_qps)


@settings(max_examples=150, deadline=None)
@given(st.dictionaries(st.sampled_from(["devices", "models", "extra"]),
                       st.lists(st.dictionaries(st.sampled_from(["key", "memory_gb", "purchase_usd", "tdp_w",
                                                                 "num_layers", "name", "bogus"]),
                                                scalars, max_size=4), max_size=2), max_size=2))
def test_catalog_override_loader_only_raises_own_errors(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("cat") / "override.yaml"
    try:
        path.write_text(yaml.safe_dump(data))
    except Exception:
        return
    try:
        load_catalog(path)
    except GpuplanError:
        pass


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200))
def test_yaml_reader_on_random_bytes(tmp_path_factory, blob):
    path = tmp_path_factory.mktemp("bytes") / "plan.yaml"
    path.write_bytes(blob)
    from workloads import load_plan
    try:
        load_plan(path)
    except GpuplanError:
        pass


# ---------------------------------------------------------------------------------------
# Scenario files (workloads.scenarios.load_scenarios)
# ---------------------------------------------------------------------------------------

SCENARIO_BASE = {
    "plan": BASE,
    "variants": [{"name": "traffic-2x", "set": {"workloads.chat.qps": 80, "devices.h200-sxm.purchase_usd": 24000}},
                 {"name": "pue", "set": {"pue": 1.5, "budget.capex_usd": 2_000_000}}],
    "sweeps": [{"name": "budget", "kind": "budget", "from": 500000, "to": 2500000, "steps": 3},
               {"name": "growth", "kind": "demand", "multipliers": [1, 2]},
               {"name": "h200", "kind": "price", "device": "h200-sxm", "from": 20000, "to": 30000, "steps": 2}],
    "uncertainty": {"demand": {"sigma": 0.25}, "prices": {"h100-sxm": {"low": 0.8, "high": 1.2}}},
}
# Scenario paths without the inline plan's own (fuzzed by the plan test above).
SCENARIO_PATHS = [p for p in _paths(SCENARIO_BASE) if p and p[0] != "plan"] + [("plan",), ("plan", "workloads")]
override_keys = st.one_of(
    st.sampled_from(["workloads.chat.qps", "workloads.chat", "workloads.nope.qps", "workloads.chat.name",
                     "devices.h200-sxm.purchase_usd", "devices.h200-sxm.key", "devices.nope.tdp_w", "budget",
                     "budget.capex_usd", "budget.x", "inventory.h100-sxm", "inventory", "pue.x", "", ".", "a..b"]),
    st.text(max_size=20),
)


@st.composite
def mutated_scenarios(draw):
    return _mutate(copy.deepcopy(SCENARIO_BASE), SCENARIO_PATHS, draw, values)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated_scenarios())
def test_scenario_loader_only_raises_own_errors(tmp_path_factory, data):
    from workloads.scenarios import load_scenarios

    path = tmp_path_factory.mktemp("scen") / "whatif.yaml"
    try:
        path.write_text(yaml.safe_dump(data))
    except Exception:  # noqa: BLE001 - hypothesis built something PyYAML cannot write
        return
    try:
        _spec, _base, scenarios = load_scenarios(path, CATALOG)
    except GpuplanError as exc:
        assert str(exc).startswith(str(path)), str(exc)
        return
    assert scenarios[0].name == "base"
    for s in scenarios:
        assert all(w.request_rate_qps > 0 and math.isfinite(w.request_rate_qps) for w in s.plan.workloads)


# ---------------------------------------------------------------------------------------
# Capacity tables (optimizer.planning.capacity_table)
# ---------------------------------------------------------------------------------------

MELANGE_PLAN = parse_plan(yaml.safe_load((EXAMPLES / "melange-example.yaml").read_text()), "melange.yaml")
TABLE_ROWS = [line.split(",") for line in (EXAMPLES / "melange-example.csv").read_text().splitlines()
              if line and not line.startswith("#")]
cells = st.one_of(
    st.sampled_from(["", "0", "-1", "nan", "inf", "-inf", "1e308", "1e-320", "0.5", "2", "3.0", "1,5", '"', "A10G",
                     "melange", "h100-sxm", "a10gg", "fp8", "#", " ", "\ufeff", "30", "1e30"]),
    st.integers(-10**6, 10**6).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.text(max_size=8),
)
columns = st.sampled_from(["workload", "unit", "gpus", "gpus_per_node", "device", "precision", "tp", "pp",
                           "cost_usd_per_hour", "input_bucket", "output_bucket", "max_request_rate_qps",
                           "bucket_fraction", "total_request_rate_qps", "bogus"])


@st.composite
def mutated_tables(draw):
    rows = [list(r) for r in TABLE_ROWS]
    for _ in range(draw(st.integers(1, 4))):
        action = draw(st.sampled_from(["cell", "cell", "cell", "drop_row", "dup_row", "drop_col", "add_col",
                                       "rename_col", "short_row"]))
        if action == "cell":
            r = draw(st.integers(0, len(rows) - 1))
            if rows[r]:
                rows[r][draw(st.integers(0, len(rows[r]) - 1))] = draw(cells)
        elif action == "drop_row" and len(rows) > 1:
            rows.pop(draw(st.integers(0, len(rows) - 1)))
        elif action == "dup_row":
            rows.append(list(rows[draw(st.integers(0, len(rows) - 1))]))
        elif action == "drop_col" and rows[0]:
            c = draw(st.integers(0, len(rows[0]) - 1))
            rows = [r[:c] + r[c + 1:] for r in rows]
        elif action == "add_col":
            rows = [rows[0] + [draw(columns)]] + [r + [draw(cells)] for r in rows[1:]]
        elif action == "rename_col" and rows[0]:
            rows[0][draw(st.integers(0, len(rows[0]) - 1))] = draw(columns)
        elif action == "short_row" and len(rows) > 1:
            rows[-1] = rows[-1][:-1]
    return "\n".join(",".join(r) for r in rows) + "\n"


@settings(max_examples=300, deadline=None)
@given(mutated_tables())
def test_capacity_table_loader_only_raises_own_errors(text):
    from optimizer.planning.capacity_table import parse_capacity_table, table_candidates

    try:
        table = parse_capacity_table(text, "fuzz.csv")
        cset = table_candidates(table, MELANGE_PLAN, CATALOG)
    except GpuplanError as exc:
        assert str(exc).startswith("fuzz.csv"), str(exc)
        return
    for wc in cset.workloads:
        assert abs(sum(b.fraction for b in wc.buckets) - 1) <= 1e-6
        for c in wc.candidates:
            assert all(math.isfinite(q) and q >= 0 for q in c.capacity_qps)


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=300))
def test_capacity_table_parser_on_random_text(text):
    from optimizer.planning.capacity_table import parse_capacity_table

    try:
        parse_capacity_table(text, "fuzz.csv")
    except GpuplanError:
        pass


# ---------------------------------------------------------------------------------------
# Measurement CSVs (optimizer.calibration.measurements.load_measurements)
# ---------------------------------------------------------------------------------------

MEASURED = [line for line in CALIBRATION_CSV.read_text().splitlines()[:6]]


@st.composite
def mutated_measurements(draw):
    import csv
    import io

    rows = list(csv.reader(io.StringIO("\n".join(MEASURED))))
    for _ in range(draw(st.integers(1, 4))):
        action = draw(st.sampled_from(["cell", "cell", "cell", "drop_col", "drop_row", "add_field", "rename_col"]))
        if action == "cell":
            r = draw(st.integers(0, len(rows) - 1))
            if rows[r]:
                rows[r][draw(st.integers(0, len(rows[r]) - 1))] = draw(cells)
        elif action == "drop_col" and rows[0]:
            c = draw(st.integers(0, len(rows[0]) - 1))
            rows = [r[:c] + r[c + 1:] for r in rows]
        elif action == "drop_row" and len(rows) > 1:
            rows.pop(draw(st.integers(0, len(rows) - 1)))
        elif action == "add_field":
            rows[draw(st.integers(0, len(rows) - 1))].append(draw(cells))
        elif action == "rename_col" and rows[0]:
            rows[0][draw(st.integers(0, len(rows[0]) - 1))] = draw(columns)
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows(rows)
    return buf.getvalue()


@settings(max_examples=200, deadline=None)
@given(mutated_measurements())
def test_measurements_loader_only_raises_own_errors(tmp_path_factory, text):
    from optimizer.calibration.measurements import load_measurements

    path = tmp_path_factory.mktemp("meas") / "m.csv"
    path.write_text(text)
    try:
        rows = load_measurements(path, CATALOG)
    except GpuplanError as exc:
        assert str(exc).startswith(str(path)), str(exc)
        return
    for m in rows:
        assert m.tp >= 1 and m.pp >= 1
        assert m.throughput_tok_s is None or (math.isfinite(m.throughput_tok_s) and m.throughput_tok_s >= 0)
