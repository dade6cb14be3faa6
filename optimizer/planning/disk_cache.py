"""A persistent cache of pure results (capacities, exact MILP solves, seeded simulations) on disk.

A result is stored under the digest of everything it depends on: its *inputs* (the caller's key:
model, devices, configurations, buckets, SLO and calibration JSON for a capacity; the MILP data
for a solve; the deployment, rate and seed for a simulation) and the *code* that computed it
(:func:`code_fingerprint`: a hash of every file of the ``optimizer``, ``catalog`` and
``workloads`` packages plus the versions of Python, numpy, pulp, highspy and pydantic), so that a change
of code, calibration or library never returns a stale number. The value is pickled, so a hit is
bit-identical to the computation it replaces.

Where: ``$GPUPLAN_CACHE_DIR`` if set (empty = disabled), else ``$XDG_CACHE_HOME/gpuplan``
(default ``~/.cache/gpuplan``; ``%LOCALAPPDATA%\\gpuplan`` on Windows). Entries are
``<dir>/<kind>/<digest>.pkl``.

Safety: a write goes to a temporary file in the same folder and is renamed over the entry
(``os.replace``, atomic on POSIX and Windows), so two ``gpuplan`` processes or forked workers
never see half an entry; an unreadable or corrupt entry (truncated, foreign, wrong digest) is
a miss and is recomputed (so is an entry that is not a regular file: a FIFO there is not read, which
would block for ever); a folder that cannot be created or written (read-only or missing
home) turns the cache off for the process, silently. Nothing here raises.

Size: the folder is bounded by ``$GPUPLAN_CACHE_MAX_MB`` (default DEFAULT_MAX_MB). A process
that writes checks the folder's size once, at its first write; above the bound the entries
used least recently (modification time, refreshed on every hit) are deleted until it is
PRUNE_TO of the bound. Clearing it by hand is always safe: ``rm -rf ~/.cache/gpuplan``.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import pickle
import re
import stat
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

DEFAULT_MAX_MB = 256
PRUNE_TO = 0.8
STALE_TMP_S = 3600.0  # a put() takes milliseconds: an older temporary file is a leftover
_MAGIC = b"gpuplan-cache-1\n"
_ENTRY = re.compile(r"[0-9a-f]{40}\.pkl")  # digest() is 20 bytes of blake2b in hex
_TMP = re.compile(r"\.[0-9a-f]{40}\..*\.tmp")  # put()'s mkstemp(prefix=".<digest>.", suffix=".tmp")
_PACKAGES = ("optimizer", "catalog", "workloads")


@dataclass
class CacheState:
    """The cache of this process: its folder (None = off), counters, whether the size was checked."""

    root: Path | None
    hits: int = 0
    misses: int = 0
    checked_size: bool = False
    unsettled: int = 0  # solves stopped by their time limit (not reproducible): optimizer.planning.result_cache


_STATE: CacheState | None = None
_FINGERPRINT: str | None = None


def default_dir() -> Path | None:
    """The cache folder from the environment (module doc); None when ``GPUPLAN_CACHE_DIR`` is empty."""
    env = os.environ.get("GPUPLAN_CACHE_DIR")
    if env is not None:
        return Path(env).expanduser() if env.strip() else None
    if sys.platform == "win32" and os.environ.get("LOCALAPPDATA"):
        return Path(os.environ["LOCALAPPDATA"]) / "gpuplan"
    xdg = os.environ.get("XDG_CACHE_HOME", "").strip()
    if xdg and Path(xdg).is_absolute():
        return Path(xdg) / "gpuplan"
    try:
        home = Path.home()
    except RuntimeError:  # no home directory
        return None
    # HOME= (empty) is "/" to Python: the cache went to /.cache/gpuplan; HOME=relative put it under the
    # working directory. A home that is not an absolute path is no home (as a relative XDG_CACHE_HOME is ignored)
    if not home.is_absolute() or not os.environ.get("HOME", str(home)).strip():
        return None
    return home / ".cache" / "gpuplan"


def state() -> CacheState:
    """This process's cache (made from the environment on first use)."""
    global _STATE
    if _STATE is None:
        _STATE = CacheState(default_dir())
    return _STATE


def configure(root: Path | str | None) -> CacheState:
    """Use ``root`` as the cache folder from now on (None: no cache; ``--no-cache``); counters reset."""
    global _STATE
    _STATE = CacheState(Path(root) if root is not None else None)
    return _STATE


def disable() -> None:
    configure(None)


def stats() -> dict[str, Any]:
    """``{"dir": folder or None, "hits": n, "misses": m}`` of this process so far."""
    st = state()
    return {"dir": str(st.root) if st.root is not None else None, "hits": st.hits, "misses": st.misses}


def code_fingerprint() -> str:
    """Hash of the code and data the cached results depend on (module doc), once per process (~7 ms)."""
    global _FINGERPRINT
    if _FINGERPRINT is None:
        h = hashlib.blake2b(digest_size=16)
        h.update(repr((sys.version, *map(package_version, ("numpy", "pulp", "highspy", "pydantic")))).encode())
        top = Path(__file__).resolve().parents[2]
        for pkg in _PACKAGES:
            for root, dirs, files in os.walk(top / pkg):
                dirs[:] = sorted(d for d in dirs if d != "__pycache__")
                for name in sorted(files):
                    if name.endswith((".pyc", ".pyo")):
                        continue
                    path = Path(root, name)
                    try:
                        data = path.read_bytes()
                    except OSError:
                        continue
                    h.update(str(path.relative_to(top)).encode() + b"\0" + len(data).to_bytes(8, "little"))
                    h.update(data)
        _FINGERPRINT = h.hexdigest()
    return _FINGERPRINT


def package_version(package: str) -> str:
    """The installed version of ``package`` from its metadata (without importing it), "" if unknown."""
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return ""


def note_unsettled() -> None:
    """Count a solve stopped by its time limit (``CacheState.unsettled``)."""
    state().unsettled += 1


def digest(kind: str, key: object) -> str:
    """blake2b of the code fingerprint, ``kind`` and ``repr(key)`` (a key of plain data: str,
    numbers, tuples; floats' repr round-trips, so equal keys are equal inputs)."""
    text = repr((code_fingerprint(), kind, key))
    return hashlib.blake2b(text.encode(), digest_size=20).hexdigest()


_MISSING = object()


def get(kind: str, key: object) -> Any:
    """The value stored for (``kind``, ``key``), or ``MISSING`` (also for an unreadable entry)."""
    st = state()
    if st.root is None:
        return _MISSING
    name = digest(kind, key)
    path = st.root / kind / f"{name}.pkl"
    try:
        # O_NONBLOCK and a regular-file check: a FIFO (or device) in the folder would block the read forever
        with open(os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0)), "rb") as fh:
            if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
                raise ValueError("not a regular file")
            blob = fh.read()
        if not blob.startswith(_MAGIC):
            raise ValueError("not a gpuplan cache entry")
        stored, value = pickle.loads(blob[len(_MAGIC):])
        if stored != name:
            raise ValueError("digest mismatch")
    except Exception:  # noqa: BLE001 - absent, or corrupt of any kind: a miss, recomputed and rewritten
        st.misses += 1
        return _MISSING
    try:
        os.utime(path)  # least recently used goes first when the folder is pruned
    except OSError:
        pass
    st.hits += 1
    return value


MISSING = _MISSING


def put(kind: str, key: object, value: object) -> None:
    """Store ``value`` for (``kind``, ``key``): temporary file + ``os.replace``; off on any OS error."""
    st = state()
    if st.root is None:
        return
    name = digest(kind, key)
    folder = st.root / kind
    try:
        blob = _MAGIC + pickle.dumps((name, value), protocol=pickle.HIGHEST_PROTOCOL)
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=folder)
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(blob)
            os.replace(tmp, folder / f"{name}.pkl")
        except BaseException:
            _unlink(Path(tmp))
            raise
    except (OSError, pickle.PicklingError, TypeError, AttributeError):
        st.root = None  # read-only or full: no cache for the rest of this process
        return
    if not st.checked_size:
        st.checked_size = True
        prune(st.root, max_bytes())


def cached(kind: str, key: object, compute: Callable[[], Any], keep: Callable[[Any], bool] = lambda _: True) -> Any:
    """``compute()`` through the cache: the stored value if any, else computed and stored when
    ``keep(value)`` (e.g. only proven-optimal solves)."""
    hit = get(kind, key)
    if hit is not _MISSING:
        return hit
    value = compute()
    if keep(value):
        put(kind, key, value)
    return value


def max_bytes() -> int:
    """The size bound: ``GPUPLAN_CACHE_MAX_MB`` (MB = 2**20 bytes), DEFAULT_MAX_MB if unset or invalid."""
    try:
        mb = float(os.environ.get("GPUPLAN_CACHE_MAX_MB", DEFAULT_MAX_MB))
    except ValueError:
        mb = DEFAULT_MAX_MB
    return int(max(mb, 0.0) * 2**20)


def prune(root: Path, limit_bytes: int) -> int:
    """Delete the least recently used entries under ``root`` until their total is at most
    PRUNE_TO · ``limit_bytes``, if it is over ``limit_bytes``; returns the entries deleted.

    Temporary files older than STALE_TMP_S go too, whatever the size: a process killed by SIGKILL
    inside :func:`put` (a what-if worker killed on Ctrl-C) leaves its ``.<digest>.*.tmp`` behind,
    which no ``.pkl`` count bounded and nothing removed.

    Only the cache's own files are counted and deleted (``<40 hex digits>.pkl`` and their
    temporary files): ``$GPUPLAN_CACHE_DIR`` may point at a folder that holds other files, and a
    ``models/weights.pkl`` of the user's is not an entry."""
    entries = []
    now = time.time()
    try:
        for kind in os.scandir(root):
            if not kind.is_dir(follow_symlinks=False):
                continue
            for e in os.scandir(kind.path):
                if _ENTRY.fullmatch(e.name):
                    try:
                        st = e.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    entries.append((st.st_mtime, st.st_size, e.path))
                elif _TMP.fullmatch(e.name):  # a put() cut short by SIGKILL
                    with contextlib.suppress(OSError):
                        if e.stat(follow_symlinks=False).st_mtime < now - STALE_TMP_S:
                            _unlink(Path(e.path))
    except OSError:
        return 0
    total = sum(s for _, s, _ in entries)
    if total <= limit_bytes:
        return 0
    deleted = 0
    for _, size, path in sorted(entries):
        if total <= PRUNE_TO * limit_bytes:
            break
        if _unlink(Path(path)):
            deleted += 1
        total -= size
    return deleted


def _unlink(path: Path) -> bool:
    try:
        path.unlink()
        return True
    except OSError:  # another process removed it first, or no permission
        return False
