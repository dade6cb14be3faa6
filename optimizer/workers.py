"""Worker process pools that die with their parent, stop on Ctrl-C without tracebacks, and fit the machine.

Used by the what-if scenarios (optimizer/whatif.py) and the candidate evaluations
(optimizer/planning/candidates.py). The rules, in one place:

- **Sized by the work and the cores**: ``min(requested, work items, usable CPUs)`` workers,
  never 64 processes for 4 scenarios on 2 cores.
- **Die with the parent**: each worker asks Linux for SIGKILL when its parent dies
  (``prctl(PR_SET_PDEATHSIG, SIGKILL)``, through ctypes), and also runs a watchdog thread
  that exits the worker once ``os.getppid()`` changes (other systems, or a parent whose
  forking thread ended). A parent killed by SIGKILL (the OOM killer, a CI cancel) leaves
  no worker behind.
- **Ctrl-C is the parent's**: workers ignore SIGINT (the terminal sends it to the whole
  process group) and take SIGTERM's default action, so they print no traceback. The parent
  sees the interrupt once; on it, or on any error, it kills the workers and re-raises.
- Results come back in the order of the items, whatever the worker count.
- **A dead worker is one line**: a worker killed from outside (the OOM killer, ``kill PID``) stops the run
  with :class:`WorkerDied` (a GpuplanError: "error: a worker process (pid N) was killed by SIGKILL ..."),
  not concurrent.futures' BrokenProcessPool traceback.
- **No interrupt inside a fork**: the workers are forked inside ``catalog.outputs.deferred_interrupts``,
  so a SIGINT/SIGTERM that arrives meanwhile is raised after the fork, not inside ``os.fork``'s
  callbacks (logging's ``_releaseLock``), where Python could only print and ignore it.
- **A deadline is a deadline** (``run_pool(..., deadline=...)``): the items not done by then get a
  stand-in value and the workers are killed, so a wall-clock guard bounds the pool's wall time.
"""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from catalog.errors import GpuplanError
from catalog.outputs import deferred_interrupts

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
WATCHDOG_INTERVAL_S = 0.5


def usable_cpus() -> int:
    """CPUs this process may run on (its affinity mask), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def capped_workers(requested: int | None, items: int) -> int:
    """``min(requested or usable CPUs, items, usable CPUs)``, at least 1."""
    cores = usable_cpus()
    return max(1, min(requested or cores, items, cores))


def _set_parent_death_signal() -> None:
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    except (OSError, AttributeError):  # no prctl: the watchdog thread still covers it
        pass


def _watchdog(parent: int) -> None:
    while True:
        time.sleep(WATCHDOG_INTERVAL_S)
        if os.getppid() != parent:
            os._exit(1)


def worker_init(parent: int | None = None) -> None:
    """Pool initializer: ignore SIGINT, default SIGTERM, die when ``parent`` (the pid that started the pool) does."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    parent = parent if parent is not None else os.getppid()
    _set_parent_death_signal()
    if os.getppid() != parent:  # the parent died before the death signal was armed
        os._exit(1)
    threading.Thread(target=_watchdog, args=(parent,), name="gpuplan-watchdog", daemon=True).start()


def _context() -> Any:
    """``fork`` where it exists (workers inherit loaded modules and module-level jobs), else the default."""
    if "fork" in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("fork")
    return multiprocessing.get_context()


def _kill(pool: ProcessPoolExecutor) -> None:
    """Kill every worker at once (SIGKILL) and drop the queued work; the executor notices the
    dead workers by their sentinels and its manager thread ends (no lock is waited for)."""
    procs = list((getattr(pool, "_processes", None) or {}).values())
    for proc in procs:
        try:
            proc.kill()
        except (OSError, ValueError, AttributeError):
            pass
    manager = getattr(pool, "_executor_manager_thread", None)
    pool.shutdown(wait=False, cancel_futures=True)
    for proc in procs:
        try:
            proc.join(timeout=2.0)
        except (OSError, ValueError, AssertionError):
            pass
    # The manager thread closes the executor's wake-up pipe as it ends; concurrent.futures' exit
    # hook writes to that pipe with no lock (CPython 3.11), so a process that exits while the
    # thread is closing it prints "OSError: Bad file descriptor". Let the thread finish first.
    if manager is not None and manager.is_alive():
        manager.join(timeout=2.0)


class WorkerDied(GpuplanError):
    """A worker process ended without its result (killed by a signal, out of memory)."""


def _death_text(procs: Sequence[Any]) -> str:
    """``a worker process (pid 123) was killed by SIGKILL ...``: which worker, how, and what to do."""
    how, who = "ended abruptly", "the out-of-memory killer, or a kill of its pid"
    # the executor SIGTERMs the other workers once one died: name a worker that did not end so, if any
    for proc in sorted(procs, key=lambda p: getattr(p, "exitcode", None) == -signal.SIGTERM):
        code = getattr(proc, "exitcode", None)
        if code is not None and code != 0:
            try:
                cause = signal.Signals(-code).name if code < 0 else f"exit code {code}"
            except ValueError:
                cause = f"signal {-code}"
            how = f"(pid {proc.pid}) " + (f"was killed by {cause}" if code < 0 else f"ended with {cause}")
            if code > 0:
                who = "it exited without its result"
            elif code != -signal.SIGKILL:  # the out-of-memory killer sends SIGKILL; SIGTERM, SIGINT ... are a kill
                who = "a kill of its pid"
            break
    return (f"a worker process {how} ({who}) and the run stopped; "
            "run again, with fewer workers (GPUPLAN_WORKERS=1, whatif --workers 1) if memory is short")


def run_pool(fn: Callable[[Any], Any], items: Sequence[Any] | Iterable[Any], workers: int,
             progress: Callable[[int], None] | None = None, *, deadline: float | None = None,
             late: Any = None) -> list[Any]:
    """``[fn(x) for x in items]`` on ``workers`` worker processes (in item order).

    ``fn`` must be picklable (a module-level function or a functools.partial of one). An
    exception in a worker is re-raised in the parent as itself; on it, or on an interrupt in
    the parent, the workers are killed before it propagates. ``progress(1)`` is called as
    each result arrives, in order. ``deadline`` (``time.monotonic()``, the clock every process
    shares): the items not done by then come back as ``late`` and the workers are killed.
    """
    pool = ProcessPoolExecutor(max_workers=workers, mp_context=_context(), initializer=worker_init,
                               initargs=(os.getpid(),))
    timed_out = False
    procs: list[Any] = []
    try:
        with deferred_interrupts():  # a fork-context executor forks every worker at the first submit
            futures = [pool.submit(fn, x) for x in items]
        procs = list((getattr(pool, "_processes", None) or {}).values())
        out = []
        for future in futures:  # in submission order: results keep the item order
            try:
                out.append(future.result(None if deadline is None else max(deadline - time.monotonic(), 0.0)))
            except TimeoutError:  # past the deadline: what is done is kept, the rest is late
                timed_out = True
                out.append(late)
            if progress is not None:
                progress(1)
    except BrokenProcessPool:  # a worker died (the OOM killer, a kill of its pid): one line, not a traceback
        _kill(pool)
        raise WorkerDied(_death_text(procs)) from None
    except BaseException:
        _kill(pool)
        raise
    if timed_out:
        _kill(pool)
    else:
        pool.shutdown(wait=True)
    return out
