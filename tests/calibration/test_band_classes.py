"""Error bands pool each leave-out prediction by the fidelity class it stood in (issue 14)."""

from __future__ import annotations

import numpy as np
import pytest

from optimizer.calibration.bands import (
    HeldOut,
    band_for,
    band_of,
    error_bands,
    leave_out_summary,
    weighted_percentile,
)


def held(group: str, ratio: float, device_engine: bool, generation: bool,
         metric: str = "output_tokens_per_s", gen: str = "gen") -> HeldOut:
    return HeldOut(group, "dev", "trtllm", gen, "src", metric, ratio * 100.0, 100.0, device_engine, generation)


def test_a_device_alone_in_its_generation_goes_to_class_c():
    """Leave-one-device-out: H200 held out (H100 still measured: Hopper stays) is class b; MI300X
    held out (the only CDNA 3 part) is class c, pooled with the leave-one-generation-out ones."""
    h200 = [held("h200", r, False, True, gen="hopper") for r in (0.9, 1.0, 1.1)]
    mi300x = [held("mi300x", r, False, False, gen="cdna3") for r in (0.5, 2.0)]
    by_gen = [held("hopper", 1.2, False, False, gen="hopper")]
    bands = error_bands([held("v1", 1.0, True, True)], h200 + mi300x, by_gen)
    assert bands["b"].n == 3 and bands["c"].n == 3
    # p10/p90 of (0.9, 1.0, 1.1), one group: Hazen positions 1/6, 1/2, 5/6, so p10 < 1/6 and p90 > 5/6 take the ends
    assert bands["b"].low_factor == pytest.approx(0.9) and bands["b"].high_factor == pytest.approx(1.1)
    assert [h.fidelity_class for h in (h200[0], mi300x[0])] == ["b", "c"]
    assert band_for(mi300x[0], bands) is bands["c"] and band_for(h200[0], bands) is bands["b"]
    table = leave_out_summary(h200 + mi300x, bands)
    assert table["h200"]["in_band_pct"] == pytest.approx(100.0)


def test_a_device_alone_in_its_generation_counts_once():
    """MI300X held out by device and CDNA 3 held out by generation are one refit (the same rows left
    out): class c takes the generation's predictions and not the device's again."""
    mi300x = [held("mi300x", r, False, False, gen="cdna3") for r in (0.5, 2.0)]
    cdna3 = [held("cdna3", r, False, False, gen="cdna3") for r in (0.5, 2.0)]
    bands = error_bands([held("v1", 1.0, True, True)], mi300x, cdna3)
    assert bands["c"].n == 2 and "b" not in bands


def test_a_latency_residual_scales_capacity_the_other_way():
    """One batch measured at 1.25x its predicted time serves 0.8x the predicted tokens/s: the band, a
    factor on capacity, must see 0.8, not 1.25 (before, latency rows entered as measured/predicted)."""
    slow = HeldOut("mi300x", "mi300x", "vllm", "cdna3", "src", "e2e_latency_s", 1.25, 1.0, False, False)
    fast = HeldOut("mi300x", "mi300x", "vllm", "cdna3", "src", "output_tokens_per_s", 1.25, 1.0, False, False)
    assert slow.ratio == pytest.approx(0.8) and fast.ratio == pytest.approx(1.25)
    assert slow.abs_pct_error == pytest.approx(20.0)  # |1/1.25 - 1|: the error figures are unchanged


def test_every_held_out_group_weighs_the_same():
    """Nine rows of one device at 1.0 and one row of another at 2.0. Per group (1/9 each, and 1): Hazen
    positions of the 1.0s span 1/36..17/36 and 2.0 sits at (2 - 1/2)/2 = 3/4, so p90 = 2.0 and p10 = 1.0;
    per row, 2.0 sits at 0.95 and p90 = 1.0 + (0.90 - 0.85)/0.10 * 1.0 = 1.5."""
    rows = [held("h100", 1.0, False, True)] * 9 + [held("h200", 2.0, False, True)]
    band = band_of(rows, "x")
    assert (band.low_factor, band.high_factor) == pytest.approx((1.0, 2.0))
    per_row = band_of(rows, "x", weights=np.ones(len(rows)))
    assert per_row.high_factor == pytest.approx(1.5)


@pytest.mark.parametrize("q", [0.0, 10.0, 37.5, 50.0, 90.0, 100.0])
def test_weighted_percentile_with_equal_weights_is_numpys_hazen(q):
    values = np.random.default_rng(7).lognormal(0.0, 0.3, 41)
    assert weighted_percentile(values, np.full(41, 0.5), q) == pytest.approx(
        float(np.percentile(values, q, method="hazen")), rel=1e-12)
