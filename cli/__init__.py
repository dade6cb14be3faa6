"""The ``gpuplan`` command line (``cli.app``).

This file is the first of the CLI that Python runs, so it handles Ctrl-C from here on: importing
``cli.app`` (typer, click, every command module) takes ~70 ms of every run, and a SIGINT in that
window printed a KeyboardInterrupt traceback from the middle of the imports. When the package is
imported by the program itself — the console script's ``from cli.app import run`` or ``python -c``
code at the top level of ``__main__``, or ``python -m cli.app`` (``sys.argv[0]`` is ``-m`` while
the module is located) — SIGINT and SIGTERM go to :func:`exit_interrupted` until ``cli.app.main``
installs its own handler: the one line a command prints when interrupted, and exit code 130.
Imported by other code (the tests, a library user), the process keeps its handlers. Only
Python's default handlers are replaced, and only from the main thread.
"""

from __future__ import annotations

import os
import signal
import sys

INTERRUPTED_LINE = "error: interrupted; earlier outputs are left as they were\n"

# Set by cli.app.main once its own handler is in place: from then on a command prints the interrupted
# line itself (or has finished), so exit_interrupted, given back by main, stays silent.
_MAIN_HANDLES_SIGNALS = [False]


def exit_interrupted(signum: int, _frame: object) -> None:
    """SIGINT/SIGTERM outside a command's own handling: before ``main`` installs its handler (the imports),
    the interrupted line and exit 130; after it gave the handler back (interpreter shutdown: the worker
    pools' manager threads, multiprocessing's finalisers), exit 130 at once and silently, since the command
    has printed what it had to. ``os._exit``: Python's default handler raised KeyboardInterrupt there."""
    try:
        if not _MAIN_HANDLES_SIGNALS[0] and sys.stderr is not None:
            sys.stderr.write(INTERRUPTED_LINE)
        for stream in (sys.stdout, sys.stderr):
            if stream is not None:
                stream.flush()
    except Exception:  # a closed or broken stream: nothing more to say on it
        pass
    os._exit(130)


def main_handles_signals() -> None:
    """Called by ``cli.app.main`` once its handler is installed (see :func:`exit_interrupted`)."""
    _MAIN_HANDLES_SIGNALS[0] = True


def _imported_by_the_program() -> bool:
    """True when the code importing this package is the program's own top level (``__main__``: the console
    script, ``python -c``) or ``python -m`` locating ``cli.app``."""
    if sys.argv and sys.argv[0] == "-m":
        return True
    frame = sys._getframe(1).f_back  # the frame above this module's own
    while frame is not None and frame.f_code.co_filename.startswith("<frozen importlib"):
        frame = frame.f_back
    return frame is not None and frame.f_globals.get("__name__") == "__main__"


def _handle_early_signals() -> None:
    defaults = {signal.SIGINT: signal.default_int_handler, signal.SIGTERM: signal.SIG_DFL}
    for signum, default in defaults.items():
        if signal.getsignal(signum) is default:
            try:
                signal.signal(signum, exit_interrupted)
            except ValueError:  # not the main thread: leave the process as it is
                return


if _imported_by_the_program():
    _handle_early_signals()
