"""The mechanics that make a capacity probe cheaper give the same bits as what they replaced (probe-v8).

Each test compares a rewritten piece with the plain computation it stands for, with ``np.array_equal``
(not a tolerance): the distinct steps of a step table against ``np.unique`` per row, the ordered sum
against ``np.sum`` over a last axis, h at two points in one step-table call against two calls, the
lazy subsets of ``Configs`` and ``RowLengths`` against eager indexing (and through a pickle).
"""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from catalog import load_catalog
from optimizer.models.configs import _CONFIG_FIELDS, build_configs
from optimizer.models.params import load_params
from optimizer.models.serving.fixed_point import _Pair
from optimizer.models.serving.latency import _sum_in_order
from optimizer.models.serving.rows import _ROW_FIELDS, row_lengths
from optimizer.models.serving.state import _distinct_steps, _steps, lengths_for, step_k_rows
from workloads.spec import LengthDist

CHUNK = 512


@pytest.fixture(scope="module")
def configs():
    cat = load_catalog(None)
    combos = [(cat.device(d), cat.precision(p), t, 1) for d in ("h100-sxm", "l40s", "mi300x", "a100-80gb-sxm")
              for p in ("bf16", "fp8") for t in (1, 2)]
    return build_configs(cat.model("llama-3.1-8b"), combos, load_params(None))


@pytest.fixture(scope="module")
def lens(configs):
    sets = [lengths_for(LengthDist(mean=1024, p99=4096), LengthDist(mean=256, p99=1024)),
            lengths_for(LengthDist(mean=300, p99=900), LengthDist(mean=64, p99=200))]
    return row_lengths(sets, len(configs) // 2)


def test_distinct_steps_are_those_of_np_unique_row_by_row():
    rng = np.random.default_rng(7)
    for _ in range(100):
        g, j = int(rng.integers(1, 6)), int(rng.integers(1, 30))
        tokens = rng.integers(0, 4, (g, j)).astype(float) * CHUNK
        spans = rng.integers(0, 5, (g, j)).astype(float) * 2.5
        per_row = [np.unique(np.stack([tokens[r], spans[r]]), axis=1, return_inverse=True) for r in range(g)]
        width = max(u.shape[1] for u, _ in per_row)
        expected = np.stack([np.pad(u, ((0, 0), (0, width - u.shape[1])), mode="edge") for u, _ in per_row], axis=1)
        steps, columns = _distinct_steps(tokens, spans)
        assert np.array_equal(steps, expected)
        assert np.array_equal(columns, np.stack([i.ravel() for _, i in per_row]))


@pytest.mark.parametrize("k", range(1, 16))
def test_ordered_sum_is_numpys_sum_over_a_last_axis(k):
    rng = np.random.default_rng(k)
    x = rng.standard_normal((3000, 4, k)) * np.exp(4.0 * rng.standard_normal((3000, 4, k)))
    assert np.array_equal(_sum_in_order([x[..., i].copy() for i in range(k)]), np.sum(x, axis=-1))


def test_two_points_in_one_step_table_call_are_two_calls(configs, lens):
    """``_Pair.steps`` stacks both points when their prompt counts agree: the same tables as apart."""
    runnable = np.flatnonzero(configs.runnable)
    c, ls = configs.take(runnable), lens.take(runnable)
    rng = np.random.default_rng(3)
    b = rng.uniform(1.0, 60.0, len(c))
    m = rng.uniform(0.0, 3.0, len(c))
    for m2 in (m * (1.0 + 1e-4), m + 5.0):  # k_max agrees; k_max differs (evaluated apart)
        pair_a, pair_b = _Pair.of(c, ls).steps(b, m, b * 1.01, m2, CHUNK)
        for st, (bb, mm) in ((pair_a, (b, m)), (pair_b, (b * 1.01, m2))):
            alone = _steps(c, bb, mm, ls, CHUNK, step_k_rows(mm, ls.group, ls.n_groups))
            for r in (1, 2, 3, 4):
                assert np.array_equal(st.moment(r), alone.moment(r))
            assert np.array_equal(st.pk, alone.pk) and np.array_equal(st.g1, alone.g1)


def test_lazy_subsets_equal_eager_indexing(configs, lens):
    first = np.array([7, 0, 3, 12, 5, 9])
    second = np.array([4, 1, 1, 0])
    rows = first[second]
    sub = configs.take(first).take(second)
    assert len(sub) == len(rows)
    for name in _CONFIG_FIELDS:
        value, full = getattr(sub, name), getattr(configs, name)
        if isinstance(full, np.ndarray):
            assert np.array_equal(value, full[rows], equal_nan=full.dtype.kind == "f"), name
        elif isinstance(full, list):
            assert value == [full[i] for i in rows], name
    assert np.array_equal(configs.take(first).stage.memory_bytes_s, configs.stage.memory_bytes_s[first])
    again = pickle.loads(pickle.dumps(sub))
    assert again.keys == sub.keys and "_taken" not in again.__dict__
    sliced = configs.take(slice(2, 6))
    assert sliced.keys == configs.keys[2:6]
    ls = lens.take(first).take(second)
    for name in _ROW_FIELDS:
        assert np.array_equal(getattr(ls, name), getattr(lens, name)[rows]), name
    assert ls.grids is lens.grids and ls.base is lens.base
    ls_again = pickle.loads(pickle.dumps(ls))
    assert np.array_equal(ls_again.l_dev, ls.l_dev) and "_taken" not in ls_again.__dict__
    with pytest.raises(AttributeError):
        sub.no_such_field  # noqa: B018
