"""The disk cache (optimizer.planning.disk_cache): a hit is the computation it replaces, bit for bit;
a corrupt entry, a folder that cannot be written or an empty GPUPLAN_CACHE_DIR never fails a run."""

from __future__ import annotations

import json
import multiprocessing
import os
import re
import threading
from pathlib import Path

import pytest

from catalog import load_catalog
from optimizer.optimize import optimize_plan
from optimizer.planning import disk_cache, evaluate
from tests.conftest import EXAMPLES
from workloads import load_plan, resolve_catalog

VARYING = re.compile(r'"(solve_seconds|created_utc|seconds)": [^,\n]+|"(timings_s|cache)": (\{[^}]*\}|null)')


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    """A fresh cache in ``tmp_path/cache`` for this test (the suite's is off: tests/conftest.py)."""
    root = tmp_path / "cache"
    monkeypatch.setattr(disk_cache, "_STATE", disk_cache.CacheState(root))
    monkeypatch.setattr(evaluate, "_CAPACITY_CACHE", {})
    return root


def _chat_json(sensitivity: bool = True) -> tuple[str, dict]:
    """The chat fleet solved as ``gpuplan optimize`` does (sensitivity, verification), as JSON text
    without the figures that vary between runs, and its cache counters; capacities memoised in
    this process are dropped first, so that they come from the disk or the models."""
    evaluate._CAPACITY_CACHE.clear()
    plan = load_plan(EXAMPLES / "chat-fleet.yaml")
    cat = resolve_catalog(plan, load_catalog(), "chat-fleet.yaml")
    result = optimize_plan(plan, cat, sensitivity=sensitivity, verify=True)
    text = json.dumps(result.to_json(), indent=2, allow_nan=False)
    return VARYING.sub("null", text), result.cache


def _entries(root: Path) -> list[Path]:
    return sorted(root.glob("*/*.pkl"))


def test_a_warm_run_is_byte_identical_to_the_cold_run_and_computes_nothing(cache_dir):
    cold, cold_stats = _chat_json()
    kinds = {p.parent.name for p in _entries(cache_dir)}
    assert {"capacity", "solve", "resolve", "simulation", "alone"} <= kinds
    assert cold_stats["hits"] == 0 and cold_stats["misses"] > 0 and cold_stats["dir"] == str(cache_dir)
    warm, warm_stats = _chat_json()
    assert warm == cold  # capacities, plan, verification, sensitivity: the same bytes
    assert warm_stats["misses"] == 0 and warm_stats["hits"] == cold_stats["misses"]


def test_corrupt_entries_are_recomputed_not_fatal(cache_dir):
    cold, _ = _chat_json(sensitivity=False)
    entries = _entries(cache_dir)
    for i, path in enumerate(entries):  # truncated, foreign bytes, a valid pickle under the wrong name
        path.write_bytes([b"", b"\x00garbage", disk_cache._MAGIC + b"\x80\x04N."][i % 3])
    again, stats = _chat_json(sensitivity=False)
    assert again == cold
    assert stats["hits"] == 0  # every entry refused, recomputed and rewritten
    assert all(p.read_bytes().startswith(disk_cache._MAGIC) and p.stat().st_size > 40 for p in _entries(cache_dir))


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_an_entry_that_is_a_fifo_or_a_folder_is_a_miss_not_a_hang(tmp_path, monkeypatch):
    """A FIFO where an entry should be made the read block for ever (`gpuplan optimize` hung); a folder there
    is a miss too. Both are recomputed; the FIFO is replaced by the rewritten entry."""
    monkeypatch.setattr(disk_cache, "_STATE", disk_cache.CacheState(tmp_path))
    (tmp_path / "test").mkdir()
    fifo = tmp_path / "test" / f"{disk_cache.digest('test', ('fifo',))}.pkl"
    os.mkfifo(fifo)
    (tmp_path / "test" / f"{disk_cache.digest('test', ('dir',))}.pkl").mkdir()
    result: list[object] = []
    reader = threading.Thread(target=lambda: result.append(disk_cache.get("test", ("fifo",))), daemon=True)
    reader.start()
    reader.join(10)
    if reader.is_alive():  # unblock the read (a writer opens the FIFO and closes it) so the thread ends
        with open(fifo, "wb"):
            pass
        reader.join(10)
        pytest.fail("reading a FIFO entry blocked")
    assert result == [disk_cache.MISSING]
    assert disk_cache.get("test", ("dir",)) is disk_cache.MISSING
    assert disk_cache.cached("test", ("fifo",), lambda: 42) == 42
    assert disk_cache.get("test", ("fifo",)) == 42


def test_a_folder_that_cannot_be_created_turns_the_cache_off(tmp_path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    monkeypatch.setattr(disk_cache, "_STATE", disk_cache.CacheState(blocker / "cache"))
    assert disk_cache.cached("test", ("k",), lambda: 41 + 1) == 42
    assert disk_cache.state().root is None  # off for the rest of the process, no error
    assert disk_cache.cached("test", ("k",), lambda: 43) == 43


def test_where_the_cache_lives(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUPLAN_CACHE_DIR", "")
    assert disk_cache.default_dir() is None  # empty: off (the suite runs so: tests/conftest.py)
    monkeypatch.setenv("GPUPLAN_CACHE_DIR", str(tmp_path / "mine"))
    assert disk_cache.default_dir() == tmp_path / "mine"
    monkeypatch.delenv("GPUPLAN_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert disk_cache.default_dir() == tmp_path / "xdg" / "gpuplan"
    monkeypatch.setenv("XDG_CACHE_HOME", "")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert disk_cache.default_dir() == tmp_path / "home" / ".cache" / "gpuplan"


@pytest.mark.parametrize("home", ["", "  ", "relative/home"])
def test_an_empty_or_relative_home_is_no_home(monkeypatch, home):
    """HOME= is "/" to Python (the cache went to /.cache/gpuplan, as root) and HOME=relative put it under the
    working directory: with no usable home the cache is off, as with no home at all."""
    monkeypatch.delenv("GPUPLAN_CACHE_DIR", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", home)
    assert disk_cache.default_dir() is None


def test_the_key_holds_the_code_fingerprint(monkeypatch):
    a = disk_cache.digest("capacity", ("same", 1.0))
    monkeypatch.setattr(disk_cache, "_FINGERPRINT", "another version of the code")
    assert disk_cache.digest("capacity", ("same", 1.0)) != a
    assert disk_cache.digest("capacity", ("same", 1.0)) != disk_cache.digest("capacity", ("same", 1.0 + 1e-15))


def test_the_folder_is_pruned_least_recently_used_first(tmp_path):
    folder = tmp_path / "capacity"
    folder.mkdir()
    for i in range(10):  # 10 entries of 1 kB, entry i last used at t = 1000 + i
        p = folder / f"{i:040x}.pkl"  # an entry's name: digest(), 40 hex digits
        p.write_bytes(b"x" * 1000)
        os.utime(p, (1000 + i, 1000 + i))
    assert disk_cache.prune(tmp_path, 20_000) == 0  # under the bound: nothing
    # over a 5 kB bound: down to 0.8 · 5 kB = 4 kB, the 6 oldest go
    assert disk_cache.prune(tmp_path, 5_000) == 6
    assert sorted(p.name for p in folder.iterdir()) == [f"{i:040x}.pkl" for i in (6, 7, 8, 9)]


def test_pruning_deletes_only_the_caches_own_files(tmp_path):
    """$GPUPLAN_CACHE_DIR may name a folder that holds other files: a user's models/weights.pkl (older
    and larger than any entry) and an hour-old .notes.tmp are not entries and stay, whatever the bound."""
    (tmp_path / "models").mkdir()
    weights, notes = tmp_path / "models" / "weights.pkl", tmp_path / "models" / ".notes.tmp"
    entry = tmp_path / "capacity" / f"{1:040x}.pkl"
    entry.parent.mkdir()
    for path, size in ((weights, 3000), (notes, 10), (entry, 1000)):
        path.write_bytes(b"x" * size)
        os.utime(path, (1000, 1000))
    # over a 500-byte bound: the one entry (1 kB) goes; 3 kB of the user's files are neither counted nor deleted
    assert disk_cache.prune(tmp_path, 500) == 1
    assert weights.stat().st_size == 3000 and notes.exists() and not entry.exists()


def test_pruning_removes_leftover_temporary_files(tmp_path):
    """A put() killed by SIGKILL (a what-if worker on Ctrl-C) left its temporary file for ever: no bound
    counted it and nothing removed it. An hour-old one goes at the next check; a fresh one (a put() of
    another process under way) stays."""
    folder = tmp_path / "capacity"
    folder.mkdir()
    a, b = "a" * 40, "b" * 40  # digests
    old, fresh, entry = folder / f".{a}.x1.tmp", folder / f".{b}.x2.tmp", folder / f"{a}.pkl"
    for path in (old, fresh, entry):
        path.write_bytes(b"x" * 100)
    os.utime(old, (1000, 1000))
    assert disk_cache.prune(tmp_path, 1_000_000) == 0  # under the bound: no entry goes
    assert sorted(p.name for p in folder.iterdir()) == [f".{b}.x2.tmp", f"{a}.pkl"]


def _hammer(root: str, n: int) -> None:
    disk_cache.configure(root)
    for i in range(n):
        key = ("shared", i % 5)
        disk_cache.put("race", key, list(range(i % 5 * 1000)))
        got = disk_cache.get("race", key)
        if got is not disk_cache.MISSING and got != list(range(i % 5 * 1000)):
            raise SystemExit(3)  # a half-written or foreign entry was read as valid


def test_two_processes_writing_the_same_entries(tmp_path):
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_hammer, args=(str(tmp_path), 200)) for _ in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0, 0]
    assert len(_entries(tmp_path)) == 5
    assert not list((tmp_path / "race").glob(".*.tmp"))  # no temporary file left behind


def test_no_cache_flag_stores_nothing(run_cli, tmp_path, monkeypatch):
    root = tmp_path / "cache"
    monkeypatch.setenv("GPUPLAN_CACHE_DIR", str(root))
    monkeypatch.setattr(disk_cache, "_STATE", None)
    got = run_cli("optimize", EXAMPLES / "chat-fleet.yaml", "--no-cache", "--no-sensitivity", "--no-verify",
                  "--json", tmp_path / "out.json")
    assert got.code == 0, got.stderr
    assert not root.exists()
    assert json.loads((tmp_path / "out.json").read_text())["cache"] == {"dir": None, "hits": 0, "misses": 0}
