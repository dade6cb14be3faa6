"""Whole experts per expert-parallel GPU (optimizer.models.memory_fit.expert_share)."""

from __future__ import annotations

import numpy as np
import pytest

from catalog import load_catalog
from optimizer.models.configs import build_configs
from optimizer.models.memory_fit import expert_share
from optimizer.models.params import load_params

CAT = load_catalog()


def test_the_fullest_gpu_holds_ceil_e_over_n_experts():
    mixtral = CAT.model("mixtral-8x7b")  # 8 routed experts
    assert mixtral.num_experts == 8
    # ep 2, 4, 8 divide 8: 1/e exactly; ep 3: the fullest GPU holds 3 of 8 (not 8/3 of 8); ep 5: 2 of 8
    got = expert_share(mixtral, np.array([1, 2, 3, 4, 5, 8]))
    assert list(got) == [1.0, 0.5, 3 / 8, 0.25, 2 / 8, 0.125]


@pytest.mark.parametrize(("ep", "share"), [(2, 1 / 2), (3, 3 / 8)])
def test_weights_per_gpu_count_whole_experts(ep, share):
    """mixtral-8x7b bf16 on one GPU per rank: weights = body + embeddings (2 B each) + share · experts (2 B)."""
    m, params = CAT.model("mixtral-8x7b"), load_params(None)
    c = build_configs(m, [(CAT.device("h100-sxm"), CAT.precision("bf16"), 1, 1)], params, ep=ep)
    body = (m.dense_params - m.embedding_params) + m.embedding_params  # every non-expert parameter, 2 bytes each
    expected = 2.0 * body + share * 2.0 * m.routed_expert_params
    assert float(c.weight_bytes_per_gpu[0]) == pytest.approx(expected, rel=1e-12)
