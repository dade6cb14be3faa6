"""Screening before the serving model (``optimizer.planning.screening``) keeps the candidates pruning keeps.

A candidate whose capacity bound a smaller evaluated one covers is marked dominated without a
capacity search. On a small plan the kept candidates are those of the unscreened evaluation (keys,
reasons and capacities within the search's tolerance: a search over fewer rows lands elsewhere in
its final bracket), every screened candidate is dominated by the one its reason names by its real
capacity, and it shows no capacity it was not given.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from catalog import load_catalog
from optimizer.planning import evaluate, screening
from optimizer.planning.candidates import model_candidates
from optimizer.planning.screening import NOT_EVALUATED, first_round, second_round, screen_rows, with_twins
from tests.conftest import EXAMPLES
from workloads import load_plan, resolve_catalog

# The capacity search stops within CAPACITY_RTOL (5e-4) of its root, wherever its probes fell.
SEARCH_RTOL = 3e-3


@pytest.fixture(scope="module", params=["two rounds", "three rounds"])
def both(request):
    """(screened, unscreened) candidates of the chat fleet; "three rounds": round 2 forced (the chat
    fleet has too few open rows for it: 108 against SECOND_ROUND_MIN_OPEN_ROWS)."""
    plan = load_plan(EXAMPLES / "chat-fleet.yaml")
    cat = resolve_catalog(plan, load_catalog(), "chat-fleet.yaml")
    evaluate._CAPACITY_CACHE.clear()
    with pytest.MonkeyPatch.context() as mp:
        if request.param == "three rounds":
            mp.setattr(screening, "SECOND_ROUND_MIN_OPEN_ROWS", 0)
        screened = model_candidates(plan, cat)
    evaluate._CAPACITY_CACHE.clear()
    plain = model_candidates(plan, cat, screen=False)
    return screened, plain, request.param


def _by_key(cset):
    return {(wc.workload.name, len(wc.buckets), c.key): c for wc in cset.workloads for c in wc.candidates}


def test_screening_keeps_the_same_candidates(both):
    screened, plain = (_by_key(c) for c in both[:2])
    assert screened.keys() == plain.keys()
    kept = {k for k, c in plain.items() if c.kept}
    assert {k for k, c in screened.items() if c.kept} == kept
    for k in kept:
        np.testing.assert_allclose(screened[k].capacity_qps, plain[k].capacity_qps, rtol=SEARCH_RTOL)
        assert screened[k].limited_by == plain[k].limited_by
    assert [d.message for d in both[0].diagnostics] == [d.message for d in both[1].diagnostics]


def test_screened_candidates_are_dominated_by_their_named_candidate(both):
    screened, plain = (_by_key(c) for c in both[:2])
    marked = [k for k, c in screened.items() if NOT_EVALUATED in (c.pruned_reason or "")]
    assert len(marked) > 20  # the chat fleet's larger tp of most devices
    assert len(marked) == (180 if both[2] == "three rounds" else 162)  # round 2 screens 18 more
    for w, nb, key in marked:
        c = screened[(w, nb, key)]
        assert c.capacity_qps == (0.0,) * nb and c.limited_by == (NOT_EVALUATED,) * nb
        assert c.floor_p99_ms == ({},) * nb
        m, by = re.match(r"dominated by (\d+) × (\S+) \(", c.pruned_reason).groups()
        b, truth = plain[(w, nb, by)], plain[(w, nb, key)]
        assert b.device == truth.device and int(m) == truth.gpus // b.gpus
        assert all(int(m) * cb >= ca for cb, ca in zip(b.capacity_qps, truth.capacity_qps, strict=True))
        assert (truth.pruned_reason or "").startswith(("dominated by", "no capacity at the SLO"))


def test_screen_rows_on_paper():
    """b (1 GPU, 2 and 3 req/s) covers a (2 GPUs, bound 4 and 5): 2 × b ≥ a's bound. c (1 GPU, bound
    equal to b's capacity) is b's possible twin: not screened. d's bound exceeds 2 × b in bucket 1.
    e is covered only by f, which has no capacity in bucket 0: not a dominator."""
    keys = ["b", "a", "c", "d", "f", "e"]
    devices = ["x", "x", "x", "x", "y", "y"]
    gpus = np.array([1, 2, 1, 2, 1, 2])
    evaluated = np.array([True, False, False, False, True, False])
    caps = np.array([[2.0, 3.0], [0, 0], [0, 0], [0, 0], [0.0, 9.0], [0, 0]])
    upper = np.array([[2.0, 3.0], [4.0, 5.0], [2.0, 3.0], [4.0, 6.5], [0.0, 9.0], [0.0, 1.0]])
    out = screen_rows(keys, devices, gpus, evaluated, caps, upper)
    assert out[1] == ("dominated by 2 × b (2 GPUs, at least its capacity in every bucket; capacity not "
                      "evaluated: its upper bound is within theirs)")
    assert out[2] is None and out[3] is None and out[5] is None
    assert out[0] is None and out[4] is None  # evaluated rows are not screened


def test_the_first_round_is_each_devices_smallest_config_with_the_largest_bound():
    devices = ["x", "x", "x", "y", "y"]
    gpus = np.array([2, 1, 1, 4, 8])
    upper = np.array([[9.0], [1.0], [3.0], [1.0], [5.0]])
    assert first_round(devices, gpus, upper).tolist() == [False, False, True, True, False]


def test_the_second_round_is_each_sizes_open_row_with_the_largest_bound():
    """x has two 1-GPU rows open (bounds 4 and 6: the 6 is picked) and one 2-GPU row; y's only open row
    is picked; closed rows (evaluated or screened) are never picked, whatever their bound."""
    devices = ["x", "x", "x", "x", "y", "y"]
    gpus = np.array([1, 1, 2, 1, 4, 4])
    upper = np.array([[1.0, 3.0], [2.0, 4.0], [1.0, 1.0], [50.0, 50.0], [3.0, 3.0], [9.0, 9.0]])
    open_rows = np.array([True, True, True, False, True, False])
    assert second_round(devices, gpus, upper, open_rows).tolist() == [False, True, True, False, True, False]


def test_twins_join_their_rows_round():
    classes = np.array([0, 1, 0, 2, 1])
    assert with_twins(np.array([True, False, False, False, False]), classes).tolist() == [True, False, True, False,
                                                                                           False]
