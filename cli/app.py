"""The `gpuplan` command line: parse, call one library function, render.

Every error is one line on stderr and exit code 1, handled here once for all commands:
library errors (GpuplanError), click's usage errors (a bad option value, a missing or
unknown option: ``command --option: what is wrong; see `gpuplan command --help` ``, not
click's exit-2 box), and OSError (``file: reason``). `--debug` shows the traceback
instead. Every float option rejects nan and inf. Control characters (ANSI escapes) in
a message are shown escaped, never sent to the terminal raw.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import math
import os
import signal
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from catalog.errors import GpuplanError
from catalog.outputs import (
    Interrupted,
    committed_outputs,
    forget_signals,
    interrupt_lost,
    raise_if_interrupted,
    set_stdout_closed,
    take_signal,
)

try:  # typer >= 0.2x carries its own copy of click
    from typer._click import exceptions as click_errors
except ImportError:  # older typer releases depend on click
    from click import exceptions as click_errors  # type: ignore[no-redef]
from cli import (
    calibrate_cmd,
    catalog_cmd,
    estimate_cmd,
    optimize_cmd,
    plan_cmd,
    report_cmd,
    roofline_cmd,
    simulate_cmd,
    whatif_cmd,
)
from cli.common import CatalogOpt, JsonOpt, ModelConfigOpt, ParamsOpt, clean
from cli.env_check import check_environment

app = typer.Typer(
    help="Cheapest fleet of inference accelerators that serves LLM workloads within their SLOs.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    # click's plain help: typer's rich help imports markdown-it, pygments and rich.traceback
    # (~0.12 s of every `gpuplan --help`)
    rich_markup_mode=None,
)
app.add_typer(catalog_cmd.app, name="catalog")

_state = {"debug": False}


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version  # ~0.1 s: only for --version

    try:
        return version("gpuplan")
    except PackageNotFoundError:
        return "0+unknown"


def _show_version(value: bool) -> None:
    if value:
        typer.echo(f"gpuplan {_version()}")
        raise typer.Exit()


@app.callback()
def _root(
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks for errors.")] = False,
    _version_flag: Annotated[
        bool, typer.Option("--version", callback=_show_version, is_eager=True, help="Print the version.")
    ] = False,
) -> None:
    _state["debug"] = debug
    check_environment()


@app.command()
def validate(
    paths: Annotated[list[Path], typer.Argument(
        help="A plan .yaml file, or one or more measurements .csv files (calibration.csv columns; "
             "`gpuplan validate --shipped` predicts the shipped calibration data).", show_default=False)] = None,
    shipped: Annotated[bool, typer.Option(
        "--shipped", help="Predict the measurements shipped in optimizer/calibration/data/.")] = False,
    catalog: CatalogOpt = None,
    model_config: ModelConfigOpt = None,
    params: ParamsOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Check a plan file (and summarise it), or predict measurements CSVs and report the errors."""
    from cli.validate_cmd import resolve_measurement_paths, validate_measurements

    paths = resolve_measurement_paths(paths or [], shipped)
    if all(p.suffix.lower() == ".csv" for p in paths):
        validate_measurements(paths, catalog, params, json_out)
        return
    if len(paths) != 1:
        from catalog.errors import GpuplanError

        raise GpuplanError("validate takes one plan .yaml file, or one or more measurements .csv files")
    path = paths[0]
    plan_cmd.ensure_yaml(path)
    plan_cmd.validate_plan(path, catalog, model_config, json_out)


@app.command()
def schema() -> None:
    """Print the JSON Schema of the plan file."""
    typer.echo(plan_cmd.plan_schema())


for _module in (estimate_cmd, simulate_cmd, calibrate_cmd, roofline_cmd, optimize_cmd, report_cmd, whatif_cmd):
    _module.register(app)


def _on_signal(signum, _frame):
    # noted even if the exception below is swallowed; around a fork it is raised as the block ends
    # (catalog.outputs.deferred_interrupts); once one is raised, later signals are only noted (take_signal)
    if take_signal(signum):
        raise Interrupted(signum)


def _exit_quietly(signum, _frame):
    """SIGINT/SIGTERM outside a command (before ``main`` installs its handler, or once it has given it back,
    while the interpreter shuts down: the worker pools' manager threads, multiprocessing's finalisers):
    leave at once with 130. Python's default handler raised KeyboardInterrupt there, printed
    "Exception ignored in: threading._shutdown" tracebacks and died by SIGINT."""
    with contextlib.suppress(Exception):
        sys.stdout.flush()
        sys.stderr.flush()
    os._exit(130)


def _quiet_interrupt(unraisable: Any) -> None:
    """``sys.unraisablehook`` while a command runs: an :class:`Interrupted` raised where Python can only
    ignore it (a signal landing in an ``os.fork`` callback such as logging's ``_releaseLock``, or in a
    ``__del__``) prints nothing, since ``_on_signal`` noted it and the run ends with the one-line message
    (``raise_if_interrupted``); anything else goes to the default hook."""
    if not isinstance(unraisable.exc_value, Interrupted):
        sys.__unraisablehook__(unraisable)
    else:
        interrupt_lost()  # the next signal raises again (catalog.outputs.take_signal)


def _harden(command: Any) -> Any:
    """Make every float option of ``command`` and its subcommands refuse nan and ±inf.

    Click's ranges let nan through (every comparison with nan is false), so the check is on
    the parsed values, before the command's function runs.
    """
    callback = command.callback
    if callback is not None and not getattr(callback, "_finite_checked", False):
        params = {p.name: p for p in command.params}

        @functools.wraps(callback)
        def checked(*args, **kwargs):
            for name, value in kwargs.items():
                if isinstance(value, float) and not math.isfinite(value):
                    opts = getattr(params.get(name), "opts", None) or [name]
                    raise GpuplanError(f"gpuplan {command.name}: {opts[0]}: must be a finite number (got {value!r}); "
                                       f"see `gpuplan {command.name} --help`")
            return callback(*args, **kwargs)

        checked._finite_checked = True  # type: ignore[attr-defined]
        command.callback = checked
    for sub in getattr(command, "commands", {}).values():
        _harden(sub)
    return command


def _given(opts: list[str], argv: list[str]) -> str | None:
    """The value given on the command line for an option (``--x V`` or ``--x=V``), if any; the last one
    when it is repeated, as click keeps the last (``--requests 500 --requests 0`` is refused for 0)."""
    value = None
    for i, arg in enumerate(argv):
        for opt in opts:
            if arg == opt and i + 1 < len(argv):
                value = argv[i + 1]
            elif arg.startswith(opt + "="):
                value = arg[len(opt) + 1:]
    return value


def _usage_line(exc: Any, argv: list[str]) -> str:
    """``gpuplan estimate --input-tokens: input should be greater than or equal to 1 (got '0');
    see `gpuplan estimate --help```: option, value and where the fix is."""
    where = exc.ctx.command_path if exc.ctx is not None else "gpuplan"
    message = " ".join(exc.format_message().split()).rstrip(".")
    param = getattr(exc, "param", None)
    if isinstance(exc, click_errors.BadParameter) and param is not None:
        opts = list(getattr(param, "opts", None) or []) or [param.name or "value"]
        message = message.split(": ", 1)[-1] if message.startswith("Invalid value") else message
        value = _given(opts, argv)
        got = f" (got {value!r})" if value is not None else ""
        message = f"{opts[0]}: {message[:1].lower()}{message[1:]}{got}"
    return f"{where}: {message}; see `{where} --help`"


def _fail(text: str) -> None:
    sys.stderr.write(f"error: {clean(' '.join(str(text).split()))}\n")
    sys.exit(1)


def _usable_streams() -> list[str]:
    """Make stdout and stderr writable whatever the environment; returns the names of those replaced.

    A closed one (``gpuplan optimize ... >&-``: Python sets it to None) becomes the null device, as
    ``print`` treats it, instead of an AttributeError traceback from the console; one whose encoding is
    not UTF-8 (``LC_ALL=C PYTHONUTF8=0``, ``PYTHONIOENCODING=latin-1``) writes what it cannot encode as
    ``\\u2014`` escapes instead of raising UnicodeEncodeError at the first em dash of a table, after the
    outputs were written."""
    replaced = []
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if stream is None:
            setattr(sys, name, open(os.devnull, "w", encoding="utf-8"))  # noqa: SIM115 - lives as long as the process
            replaced.append(name)
            continue
        encoding = (getattr(stream, "encoding", None) or "").lower().replace("-", "").replace("_", "")
        if encoding != "utf8" and hasattr(stream, "reconfigure"):
            try:
                stream.reconfigure(errors="backslashreplace")
            except (OSError, ValueError):  # a closed or detached stream: nothing to print on anyway
                pass
    return replaced


def main() -> None:
    forget_signals()
    null_streams = _usable_streams()
    set_stdout_closed("stdout" in null_streams)  # `--json -` is then refused, not lost
    previous = {s: signal.signal(s, _on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    previous_hook, sys.unraisablehook = sys.unraisablehook, _quiet_interrupt
    try:
        code = _harden(typer.main.get_command(app)).main(prog_name="gpuplan", standalone_mode=False)
        raise_if_interrupted()  # a signal whose exception was swallowed still ends the run with 130
        if isinstance(code, int) and code:
            sys.exit(code)
    except click_errors.NoArgsIsHelpError as exc:  # `gpuplan` alone: the help it asked for
        sys.stdout.write(exc.format_message() + "\n")
        sys.exit(0)
    except click_errors.UsageError as exc:
        if _state["debug"]:
            raise
        _fail(_usage_line(exc, sys.argv[1:]))
    except click_errors.ClickException as exc:
        if _state["debug"]:
            raise
        _fail(exc.format_message())
    except GpuplanError as exc:
        if _state["debug"]:
            raise
        _fail(str(exc))
    except (Interrupted, KeyboardInterrupt, typer.Abort):
        written = committed_outputs()  # a signal after the outputs were renamed into place: say so
        sys.stderr.write(f"error: interrupted after writing {', '.join(map(clean, written))}\n" if written
                         else "error: interrupted; earlier outputs are left as they were\n")
        sys.exit(130)
    except OSError as exc:
        if _state["debug"]:
            raise
        name = exc.filename if exc.filename is not None else "gpuplan"
        _fail(f"{name}: {exc.strerror or exc}; check the path and its permissions")
    finally:  # main() also runs in-process (tests): give the caller its handlers back, and no signal on record
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        sys.unraisablehook = previous_hook
        forget_signals()
        set_stdout_closed(False)
        for name in null_streams:  # in-process callers get their (closed) stream back
            getattr(sys, name).close()
            setattr(sys, name, None)


def run() -> None:
    """The console script ``gpuplan``: :func:`main`, then an exit without the interpreter's last full
    garbage collection over every object the run made (``gc.freeze``: they are all freed with the
    process anyway; ~0.08 s of a chat-fleet ``optimize`` on the 2-core reference machine,
    docs/benchmarks.md "Session 14"). In-process callers (tests) call :func:`main`, whose objects
    stay collectable."""
    for signum in (signal.SIGINT, signal.SIGTERM):  # main() installs its own and gives these back when it ends
        signal.signal(signum, _exit_quietly)
    try:
        main()
    finally:
        gc.freeze()


if __name__ == "__main__":
    run()
