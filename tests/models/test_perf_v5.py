"""Performance model v5 (issue 14): the offline steady state starts whole prompts, and the attention
data-parallel ranks of an expert-parallel replica run each step in lockstep.

Expected values are derived on paper from the docstrings of ``optimizer.models.perf``
(``busiest_rank_prompts``, ``offline_step_s``), on the synthetic devices and models of ``test_perf_v2``.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from optimizer.models.configs import build_configs
from optimizer.models.params import CalibrationParams
from optimizer.models.perf import (
    _decode_step,
    busiest_rank_prompts,
    decode_parts,
    decode_step_s,
    offline_batch,
    offline_step_s,
    offline_throughput_tokens_s,
)
from tests.models.test_perf_v2 import BF16, ZERO_HOST, dense, device, moe


def test_busiest_rank_prompts_one_rank():
    """e = 1, λ = 1: P0 = e^-1 = 0.36788, E[N | N >= 1] = λ/(1 − e^-λ) = 1.58198; λ = 0: no prompt."""
    p0, n1 = busiest_rank_prompts(np.array([1.0, 0.0]), np.array([1.0, 1.0]))
    assert p0 == pytest.approx([math.exp(-1.0), 1.0])
    assert n1[0] == pytest.approx(1.0 / (1.0 - math.exp(-1.0)), rel=1e-9)


def test_busiest_rank_prompts_max_of_eight_ranks():
    """λ = 0.5 per rank, e = 8: F(0..5) = 0.60653, 0.90980, 0.98561, 0.99825, 0.99983, 0.99999;
    E[max] = Σ (1 − F(n)^8) = 0.98168 + 0.53057 + 0.10949 + 0.01391 + 0.00136 + 0.00011 = 1.6371
    (one rank alone: 0.5); P0 = e^(−4) = 0.018316, n1 = 1.6371/(1 − 0.018316) = 1.6677."""
    p0, n1 = busiest_rank_prompts(np.array([0.5]), np.array([8.0]))
    assert float(p0[0]) == pytest.approx(math.exp(-4.0), rel=1e-9)
    assert float(n1[0]) == pytest.approx(1.6677, abs=2e-4)


def test_offline_step_mixes_idle_and_prompt_steps():
    """Dense 8B, one GPU, b = 64, input 1000, output 64: λ = 64/64 = 1 prompt per step, P0 = e^-1;
    a step with prompts prefills 64·1000/64/(1 − e^-1) = 1582 tokens on average, so the mean step is
    e^-1·t(64, 1032) + (1 − e^-1)·t(64, 1032, 1582 tokens, span 500), longer than the step at the
    mean 1000 prompt tokens (the step is convex in its tokens: weight reads, then compute)."""
    p = CalibrationParams(**ZERO_HOST)
    c = build_configs(dense(), [(device(), BF16, 1, 1)], p)
    p0 = math.exp(-1.0)
    t0 = float(decode_step_s(c, 64.0, 1032.0)[0])
    t1 = float(decode_step_s(c, 64.0, 1032.0, 1000.0 / (1.0 - p0), 500.0)[0])
    got = float(offline_step_s(c, 64.0, 1000.0, 64.0)[0])
    assert got == pytest.approx(p0 * t0 + (1.0 - p0) * t1, rel=1e-9)
    assert got > float(decode_step_s(c, 64.0, 1032.0, 1000.0, 500.0)[0])


def test_lockstep_ranks_wait_for_the_busiest_dense_part():
    """moe() at ep 8, bf16, memory efficiency 1 and no communication latency: with the busiest rank's
    prefill tokens given (8 × 1024 replica-equivalent, against a mean of 1024), the dense GEMMs,
    attention and communication follow the busiest rank, the routed experts the mean; so the step
    lies between the step at the mean tokens and the step with every rank as busy as the busiest."""
    p = CalibrationParams(**ZERO_HOST, alltoall_latency_us=0.0)
    c = build_configs(moe(), [(device(), BF16, 1, 1)], p, ep=8)
    mean = float(decode_parts(c, 64.0, 512.0, 1024.0, 512.0).step_s[0])
    worst = float(decode_parts(c, 64.0, 512.0, 8192.0, 512.0).step_s[0])
    split = float(_decode_step(c, 64.0, 512.0, 1024.0, 512.0, 8192.0).step_s[0])
    assert mean < split < worst


def test_offline_throughput_uses_whole_prompts_only_when_asked():
    """Default (the shipped fit): b / t(b, ctx, b·input/output tokens); with offline_whole_prompts:
    b / offline_step_s. Dense 8B at the KV-limited batch of 1000/64 tokens."""
    for whole in (False, True):
        c = build_configs(dense(), [(device(), BF16, 1, 1)], CalibrationParams(**ZERO_HOST, offline_whole_prompts=whole))
        b = float(offline_batch(c, 1000.0, 64.0)[0])
        step = (offline_step_s(c, b, 1000.0, 64.0) if whole
                else decode_step_s(c, b, 1032.0, b * 1000.0 / 64.0, 500.0))
        assert float(offline_throughput_tokens_s(c, 1000.0, 64.0)[1][0]) == pytest.approx(b / float(step[0]), rel=1e-9)
