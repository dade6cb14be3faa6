"""Fuzzing the loaders: random structures and values around the valid example.

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
from tests.conftest import EXAMPLES
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


@st.composite
def mutated_plans(draw):
    data = copy.deepcopy(BASE)
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(ALL_PATHS))
        parent = data
        try:
            for p in path[:-1]:
                parent = parent[p]
            action = draw(st.sampled_from(["set", "delete", "add"]))
            if action == "set":
                parent[path[-1]] = draw(values)
            elif action == "delete" and isinstance(parent, dict):
                parent.pop(path[-1], None)
            elif isinstance(parent, dict):
                parent[draw(st.text(min_size=1, max_size=10))] = draw(values)
        except (KeyError, IndexError, TypeError):
            continue
    return data


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
