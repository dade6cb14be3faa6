"""Error bands pool each leave-out prediction by the fidelity class it stood in (issue 14)."""

from __future__ import annotations

import pytest

from optimizer.calibration.bands import HeldOut, band_for, error_bands, leave_out_summary


def held(group: str, ratio: float, device_engine: bool, generation: bool) -> HeldOut:
    return HeldOut(group, "dev", "trtllm", "gen", "src", "output_tokens_per_s", ratio * 100.0, 100.0,
                   device_engine, generation)


def test_a_device_alone_in_its_generation_goes_to_class_c():
    """Leave-one-device-out: H200 held out (H100 still measured: Hopper stays) is class b; MI300X
    held out (the only CDNA 3 part) is class c, pooled with the leave-one-generation-out ones."""
    h200 = [held("h200", r, False, True) for r in (0.9, 1.0, 1.1)]
    mi300x = [held("mi300x", r, False, False) for r in (0.5, 2.0)]
    by_gen = [held("hopper", 1.2, False, False)]
    bands = error_bands([held("v1", 1.0, True, True)], h200 + mi300x, by_gen)
    assert bands["b"].n == 3 and bands["c"].n == 3
    # p10/p90 of (0.9, 1.0, 1.1) by linear interpolation: 0.92 and 1.08
    assert bands["b"].low_factor == pytest.approx(0.92) and bands["b"].high_factor == pytest.approx(1.08)
    assert [h.fidelity_class for h in (h200[0], mi300x[0])] == ["b", "c"]
    assert band_for(mi300x[0], bands) is bands["c"] and band_for(h200[0], bands) is bands["b"]
    table = leave_out_summary(h200 + mi300x, bands)
    assert table["h200"]["in_band_pct"] == pytest.approx(100 / 3, abs=0.1)  # 1.0 only: 0.9 < 0.92, 1.1 > 1.08
