"""Performance model v4 (issue 14): expert-parallel all-to-all volume, 16-bit attention weights of
expert-only-quantized checkpoints.

Expected values are derived on paper from the formulas in the docstrings of
``optimizer.models.configs`` / ``optimizer.models.perf``, on the synthetic devices and models of
``test_perf_v2``, so each test isolates one effect from the catalog's figures.
"""

from __future__ import annotations

import pytest

from optimizer.models.configs import build_configs, remote_ranks_per_token
from optimizer.models.params import CalibrationParams
from optimizer.models.perf import decode_parts
from tests.models.test_perf_v2 import BF16, ZERO_HOST, device, moe


def test_remote_ranks_per_token_dedups_experts_on_one_rank():
    """Qwen3-235B (E 128, k 8) at ep 4: P0 = C(96, 8)/C(128, 8) = 0.09275, r = 3·(1 − P0) = 2.722
    (one copy per expert would be 8·3/4 = 6); top-1 (Maverick, E 128) at ep 8: r = 7·(1/8) = 0.875
    = k·(e − 1)/e; ep 1: nothing leaves the rank; never more than e − 1."""
    assert float(remote_ranks_per_token(128, 8, 4)) == pytest.approx(2.7218, abs=1e-4)
    assert float(remote_ranks_per_token(128, 1, 8)) == pytest.approx(0.875)
    assert float(remote_ranks_per_token(128, 8, 1)) == 0.0
    assert float(remote_ranks_per_token(256, 8, 64)) <= 8.0  # at most k ranks when e > k
    assert float(remote_ranks_per_token(8, 8, 8)) == pytest.approx(7.0)  # every expert on its own rank


def test_alltoall_time_counts_one_copy_per_remote_rank():
    """moe() with k = 8 of 64 experts at ep 4, 256 decode tokens, link 1000/2 GB/s per direction at
    efficiency 1, no latency: r = 3·(1 − C(48, 8)/C(64, 8)) = 2.7442; each of the 32·2 all-to-alls
    moves r·T/e·hidden·2 B = 2.7442·64·4096·2 B per GPU: 64 · 1.4388 MB / 5e11 B/s = 184.2 µs."""
    m = moe(experts_per_token=8)
    p = CalibrationParams(**ZERO_HOST, link_efficiency=1.0, alltoall_latency_us=0.0)
    c = build_configs(m, [(device(), BF16, 1, 1)], p, ep=4)
    assert float(decode_parts(c, 256.0, 0.0).comm_s[0]) == pytest.approx(184.16e-6, rel=1e-3)
