"""A function run in a forked child process with a hard wall-clock deadline.

Why: HiGHS 1.16 does not look at its time limit while it runs cut rounds in the root node of
a large MILP (a 500-workload plan ran 565 s against a 120 s limit), and neither its MIP,
simplex nor IPM interrupt callbacks are polled there. A child process can always be killed.

Protocol: ``run_with_deadline(fn, deadline_s)`` forks; the child calls ``fn(report)`` where
``report(message)`` sends a picklable message to the parent (e.g. each improving incumbent)
and ``fn``'s return value is the final message. The parent collects messages until the
final one arrives or ``deadline_s`` has passed, then kills the child (SIGKILL) and returns
:class:`ChildOutcome` — the final value if it came, and every reported message in order.

The child dies with the parent (``prctl(PR_SET_PDEATHSIG, SIGKILL)``), ignores SIGINT (the
parent handles Ctrl-C and kills it), writes nothing to the parent's stdout, and leaves by
``os._exit`` (no atexit handlers, no flushing of inherited buffers). ``os.fork`` rather than
``multiprocessing.Process``: a what-if worker is a daemonic pool process, which may not
start ``multiprocessing`` children.
"""

from __future__ import annotations

import contextlib
import ctypes
import multiprocessing
import os
import signal
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

from catalog.outputs import deferred_interrupts

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


@dataclass
class ChildOutcome:
    """What a child run gave: its final value (``finished``), or the messages it reported before
    it was killed at the deadline (``timed_out``) or died (``error``)."""

    finished: bool = False
    value: Any = None
    reports: list[Any] = field(default_factory=list)
    timed_out: bool = False
    error: str = ""
    wall_seconds: float = 0.0


def fork_available() -> bool:
    """``os.fork`` exists (POSIX); elsewhere callers run the function in-process."""
    return hasattr(os, "fork") and "fork" in multiprocessing.get_all_start_methods()


def die_with_parent(parent_pid: int) -> None:
    """Ask Linux to SIGKILL this process when its parent dies; leave at once if it already has."""
    with contextlib.suppress(Exception):  # not Linux: the parent's finally-kill still applies
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent_pid:
        os._exit(1)


def _child(fn: Callable[[Callable[[Any], None]], Any], conn: Connection, parent_pid: int) -> None:
    code = 0
    try:
        die_with_parent(parent_pid)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)  # HiGHS prints from C++; the parent's stdout is the user's
        conn.send(("final", fn(lambda message: conn.send(("report", message)))))
    except BaseException:  # noqa: BLE001 - anything the child meets is reported, not raised
        code = 1
        with contextlib.suppress(Exception):
            conn.send(("error", traceback.format_exc(limit=8)))
    finally:
        os._exit(code)


def run_with_deadline(fn: Callable[[Callable[[Any], None]], Any], deadline_s: float) -> ChildOutcome:
    """``fn(report)`` in a forked child, killed after ``deadline_s`` seconds of wall time.

    The parent keeps every reported message (the last incumbent is the useful one); on
    Ctrl-C or any exception in the parent the child is killed before the exception goes on.
    """
    reader, writer = multiprocessing.Pipe(duplex=False)
    start = time.perf_counter()
    parent = os.getpid()
    sys.stdout.flush()
    sys.stderr.flush()
    out = ChildOutcome()
    pid = 0
    try:
        # an interrupt during the fork is raised after it (catalog.outputs.deferred_interrupts), inside this
        # try, which kills the child
        with deferred_interrupts():
            pid = os.fork()
            if pid == 0:  # pragma: no cover - runs in the child, which leaves by os._exit
                reader.close()
                _child(fn, writer, parent)
            writer.close()
        while True:
            left = deadline_s - (time.perf_counter() - start)
            if left <= 0:
                out.timed_out = True
                break
            if not reader.poll(left):
                continue
            try:
                kind, payload = reader.recv()
            except (EOFError, OSError):
                out.error = "the solver process ended without an answer (killed or out of memory?)"
                break
            if kind == "report":
                out.reports.append(payload)
            elif kind == "final":
                out.finished, out.value = True, payload
                break
            else:
                out.error = str(payload).strip().splitlines()[-1] if payload else "the solver process failed"
                break
    finally:
        if pid > 0:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)
        reader.close()
        out.wall_seconds = time.perf_counter() - start
    return out
