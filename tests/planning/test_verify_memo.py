"""A re-size round does not simulate again the runs it already has (optimizer/planning/verify.py ``remembered``)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from optimizer.planning import disk_cache, verify


def _task(rate: float, seed: int) -> tuple:
    dist = SimpleNamespace(model_dump_json=lambda: "{}")
    check = SimpleNamespace(sim_key=("deployment",), prepare=lambda: None)
    bucket = SimpleNamespace(rate=rate, bucket=SimpleNamespace(prompt=dist, output=dist))
    return check, bucket, 100, seed


def test_runs_are_simulated_once_within_a_verification(monkeypatch):
    """Two rounds of the same three runs (and one new rate): 3 + 1 simulations inside ``remembered``,
    3 + 4 outside it (the disk cache off); the remembered runs are the very results of the first round."""
    monkeypatch.setattr(disk_cache, "get", lambda kind, key: disk_cache.MISSING)
    monkeypatch.setattr(disk_cache, "put", lambda kind, key, value: None)
    monkeypatch.setattr(verify, "parallel_workers", lambda: 1)
    calls: list[int] = []

    def fake(i: int) -> dict[str, np.ndarray]:
        _, bucket, _, seed = verify._SIM_TASKS[i]
        calls.append(seed)
        return {"ttft_s": np.array([bucket.rate, float(seed)])}

    monkeypatch.setattr(verify, "_sim_task", fake)
    first = [_task(2.0, s) for s in (0, 1, 2)]
    again = [_task(2.0, s) for s in (0, 1, 2)] + [_task(2.5, 0)]
    with verify.remembered():
        one = verify._simulated(first)
        two = verify._simulated(again)
    assert len(calls) == 4
    assert all(a is b for a, b in zip(one, two[:3], strict=True))
    assert two[3]["ttft_s"][0] == 2.5
    assert verify._MEMO is None
    calls.clear()
    verify._simulated(first)
    verify._simulated(again)
    assert len(calls) == 7
