"""Candidate capacities do not depend on what ran before in the process.

A family search (a workload's buckets in one ``capacity_at_slo_sets`` call) gives each member its
one-set figures only within rounding (~1e-9 relative), so a job memoised from one family must not
be reused inside another: the Ray backend (fresh worker processes) and the local backend (a
process whose cache earlier calls filled) must give the same bits (tests/test_whatif.py).
"""

from __future__ import annotations

import pytest

from catalog import load_catalog
from optimizer.planning import evaluate
from optimizer.planning.candidates import model_candidates
from tests.conftest import EXAMPLES
from workloads import load_plan, resolve_catalog


def _capacities(cset):
    return {(w.workload.name, len(w.buckets), c.key, c.stage, c.technique): c.capacity_qps
            for w in cset.workloads for c in w.candidates}


def test_capacities_are_the_same_bits_after_other_calls(monkeypatch):
    plan = load_plan(EXAMPLES / "chat-fleet.yaml")
    cat = resolve_catalog(plan, load_catalog(), "chat-fleet.yaml")
    monkeypatch.setattr(evaluate, "_CAPACITY_CACHE", {})
    fresh = _capacities(model_candidates(plan, cat, n_buckets=4))
    monkeypatch.setattr(evaluate, "_CAPACITY_CACHE", {})
    model_candidates(plan, cat, n_buckets=2)  # the whole-workload jobs, in 3-member families
    after = _capacities(model_candidates(plan, cat, n_buckets=4))
    assert after.keys() == fresh.keys()
    assert [k for k in fresh if after[k] != fresh[k]] == []  # bit for bit, not approx


def test_a_repeated_call_is_served_from_the_cache(monkeypatch):
    plan = load_plan(EXAMPLES / "chat-fleet.yaml")
    cat = resolve_catalog(plan, load_catalog(), "chat-fleet.yaml")
    monkeypatch.setattr(evaluate, "_CAPACITY_CACHE", {})
    model_candidates(plan, cat)
    calls = []
    monkeypatch.setattr(evaluate, "_evaluate_family", lambda jobs: calls.append(jobs) or pytest.fail("re-evaluated"))
    model_candidates(plan, cat)
    assert calls == []
