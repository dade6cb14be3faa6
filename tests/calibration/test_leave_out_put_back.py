"""``scripts/leave_out.py --only ... --put-back``: the values a leave-out refit moved, and the refit with one put back."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from optimizer.models.params import CalibrationParams, FactorOverride

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "leave_out.py"


@pytest.fixture(scope="module")
def leave_out():
    spec = importlib.util.spec_from_file_location("leave_out_script", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


FULL = CalibrationParams(memory_bandwidth_efficiency=0.65, pcie_link_efficiency=0.46, overrides=[
    FactorOverride(generation="hopper", memory_bandwidth_efficiency=0.65, moe_efficiency=0.95),
    FactorOverride(exclude_vendors=["nvidia"], step_overhead_ms=2.47)])
REFIT = CalibrationParams(memory_bandwidth_efficiency=0.66, overrides=[
    FactorOverride(generation="hopper", memory_bandwidth_efficiency=0.55, moe_efficiency=0.67)])


def test_drifts_list_the_values_moved_by_more_than_ten_percent(leave_out):
    moved = {name: (mine, theirs) for name, mine, theirs in leave_out.drifts(REFIT, FULL)}
    # 0.66 / 0.65 is 1.5 % off: not listed; the override moved 15 % and 29 %
    assert set(moved) == {"generation=hopper:memory_bandwidth_efficiency", "generation=hopper:moe_efficiency"}
    assert moved["generation=hopper:moe_efficiency"] == (0.67, 0.95)


def test_put_back_takes_the_full_fits_value(leave_out):
    top = leave_out.put_back_value(REFIT, FULL, "pcie_link_efficiency")
    assert top.pcie_link_efficiency == 0.46 and top.memory_bandwidth_efficiency == 0.66
    one = leave_out.put_back_value(REFIT, FULL, "generation=hopper:memory_bandwidth_efficiency")
    assert one.overrides[0].memory_bandwidth_efficiency == 0.65 and one.overrides[0].moe_efficiency == 0.67


def test_put_back_of_a_class_the_refit_lacks_adds_it_last_with_that_factor_only(leave_out):
    added = leave_out.put_back_value(REFIT, FULL, "exclude_vendors=nvidia:step_overhead_ms")
    assert len(added.overrides) == 2
    assert added.overrides[-1].exclude_vendors == ["nvidia"] and added.overrides[-1].step_overhead_ms == 2.47
    with pytest.raises(KeyError, match="no override 'generation=ada'"):
        leave_out.put_back_value(REFIT, FULL, "generation=ada:memory_bandwidth_efficiency")
