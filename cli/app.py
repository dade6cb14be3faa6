"""The `gpuplan` command line: parse, call one library function, render.

Every error is one line on stderr and exit code 1, handled here once for all commands:
library errors (GpuplanError), click's usage errors (a bad option value, a missing or
unknown option: ``command --option: what is wrong; see `gpuplan command --help` ``, not
click's exit-2 box), and OSError (``file: reason``). `--debug` shows the traceback
instead. Every float option rejects nan and inf. Control characters (ANSI escapes) in
a message are shown escaped, never sent to the terminal raw.

Anything else is a bug, not bad input: one line ``gpuplan: internal error (a bug, not your input):
ExcType: message`` naming the file that holds the full traceback, exit code 70 (EX_SOFTWARE);
``--debug`` or ``GPUPLAN_DEBUG=1`` shows the traceback instead. A reader that closes stdout early
(``gpuplan optimize plan.yaml | head -1``) gets no message and no failure: the rest of the output
goes to the null device and the command finishes (its files are written) with its own exit code.
Ctrl-C: exit code 130 and one line, from the first import on (``cli/__init__.py``).
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
from cli import INTERRUPTED_LINE, exit_interrupted, main_handles_signals

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
from cli.common import CatalogOpt, JsonOpt, ModelConfigOpt, ParamsOpt, clean, error_line
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
        validate_measurements(paths, catalog, params, json_out, model_config)
        return
    from catalog.errors import GpuplanError

    if len(paths) != 1:
        raise GpuplanError("validate takes one plan .yaml file, or one or more measurements .csv files")
    if params is not None:  # it was read by nothing: a plan's check uses no performance model
        raise GpuplanError("--params applies to measurements .csv files (the model that predicts them); validate of "
                           "a plan checks its fields and uses no performance model: drop --params (optimize takes it)")
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


def _not_finite(text: str) -> bool:
    """True for a command-line number that parses as nan or ±inf (``--confidence nan``)."""
    try:
        return not math.isfinite(float(text))
    except ValueError:
        return False


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
        if value is not None and _not_finite(value) and " than " in message:
            # a float range's bound check caught nan or inf ("less than or equal to 0.99 (got 'nan')": nan fails
            # both bounds): say what is wrong, as the options without a range do (``_harden``)
            message = "must be a finite number"
        message = f"{opts[0]}: {message[:1].lower()}{message[1:]}{got}"
    return f"{where}: {message}; see `{where} --help`"


def _fail(text: str) -> None:
    error_line(text)
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


class _ReaderGoneSafe:
    """``sys.stdout`` or ``sys.stderr`` while a command runs: a write or flush that finds the reader gone
    (EPIPE: ``gpuplan optimize plan.yaml | head -1``) points the file descriptor at the null device and
    carries on, so the command still finishes (its ``--json``/``--out`` files are written whole, or not
    at all, as ever) with its own exit code and no message. Unix tools stay silent for a reader that
    stopped reading (the Python docs' "Note on SIGPIPE" redirects stdout to devnull); rich and click
    exited 1 there, the run cut short. ``buffer`` (bytes to stdout: ``--json -``) is guarded likewise."""

    def __init__(self, stream: Any):
        self._stream = stream

    def _reader_gone(self) -> None:
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, self._stream.fileno())
        finally:
            os.close(devnull)

    def write(self, data: Any) -> int:
        try:
            return self._stream.write(data)
        except BrokenPipeError:
            self._reader_gone()  # what the stream still holds goes to the null device at its next flush
            return len(data)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            self._reader_gone()
            self._stream.flush()

    @property
    def buffer(self) -> _ReaderGoneSafe:
        return _ReaderGoneSafe(self._stream.buffer)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def _guard_pipes() -> list[tuple[str, Any]]:
    """Put :class:`_ReaderGoneSafe` around the process's own stdout and stderr (not a caller's capture, in
    tests); returns (name, original) to give back."""
    guarded = []
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if stream is not None and stream is getattr(sys, f"__{name}__"):
            setattr(sys, name, _ReaderGoneSafe(stream))
            guarded.append((name, stream))
    return guarded


INTERNAL_ERROR = "internal error (a bug, not your input)"
EX_SOFTWARE = 70  # sysexits.h: an internal software error


def _internal_error_folder() -> Path:
    """Where a bug's traceback is saved: ``internal-errors/`` in the disk cache's folder (README "Cache";
    kept across reboots, never pruned: the pruning deletes only cache entries), or the temp folder when the
    cache is off (``GPUPLAN_CACHE_DIR=``, ``--no-cache``) or its folder cannot be found."""
    import tempfile

    try:
        from optimizer.planning import disk_cache

        folder = disk_cache.default_dir()
    except Exception:  # the bug may be in the import itself: the temp folder then
        folder = None
    return Path(tempfile.gettempdir()) if folder is None else folder / "internal-errors"


def _save_traceback(exc: BaseException) -> Path | None:
    """Write the traceback of ``exc`` (with the command line and versions) to a new file, atomically (a temp
    file renamed into place, mode 0600: it holds paths of the user's files); None if no folder takes it."""
    import tempfile
    import time
    import traceback

    text = (f"gpuplan {_version()} on Python {sys.version.split()[0]} ({sys.platform})\n"
            f"command: {' '.join(sys.argv)}\n\n" + "".join(traceback.format_exception(exc)))
    name = f"gpuplan-internal-error-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{os.getpid()}.txt"
    folders = [_internal_error_folder(), Path(tempfile.gettempdir())]
    for folder in dict.fromkeys(folders):
        tmp = None
        try:
            folder.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=folder)
            with os.fdopen(fd, "w", encoding="utf-8", errors="backslashreplace") as fh:
                fh.write(text)
            os.replace(tmp, folder / name)
            return folder / name
        except OSError:
            if tmp is not None:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
    return None


def _internal_error(exc: Exception) -> None:
    """One line for a bug (any exception that is not bad input), the saved traceback's path, exit 70."""
    saved = _save_traceback(exc)
    message = " ".join(str(exc).split())
    where = (f"full traceback in {saved}" if saved is not None
             else "the traceback could not be saved (no writable cache or temp folder)")
    sys.stderr.write(clean(f"gpuplan: {INTERNAL_ERROR}: {type(exc).__name__}{': ' + message if message else ''}; "
                           f"{where}; please report it to the gpuplan maintainers with that file "
                           "(GPUPLAN_DEBUG=1 shows the traceback here)") + "\n")
    sys.exit(EX_SOFTWARE)


def _debugging() -> bool:
    """``--debug`` or ``GPUPLAN_DEBUG`` set to anything but empty or 0: tracebacks instead of one-line errors."""
    return _state["debug"] or os.environ.get("GPUPLAN_DEBUG", "").strip() not in ("", "0")


def main() -> None:
    forget_signals()
    null_streams = _usable_streams()
    set_stdout_closed("stdout" in null_streams)  # `--json -` is then refused, not lost
    guarded = _guard_pipes()
    previous: dict[int, Any] = {}
    previous_hook = sys.unraisablehook
    try:
        # inside the try: a signal that lands between the two is the interrupted line below, not a traceback
        for signum in (signal.SIGTERM, signal.SIGINT):
            previous[signum] = signal.signal(signum, _on_signal)
        main_handles_signals()
        sys.unraisablehook = _quiet_interrupt
        code = _harden(typer.main.get_command(app)).main(prog_name="gpuplan", standalone_mode=False)
        raise_if_interrupted()  # a signal whose exception was swallowed still ends the run with 130
        sys.stdout.flush()  # here, not at exit: a full disk under `> out.txt` is the OSError line below
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
                         else INTERRUPTED_LINE)
        sys.exit(130)
    except OSError as exc:
        if _state["debug"]:
            raise
        name = exc.filename if exc.filename is not None else "gpuplan"
        _fail(f"{name}: {exc.strerror or exc}; check the path and its permissions")
    except Exception as exc:  # a bug, not bad input
        if _debugging():
            raise
        _internal_error(exc)
    finally:  # main() also runs in-process (tests): give the caller its handlers back, and no signal on record
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        sys.unraisablehook = previous_hook
        forget_signals()
        set_stdout_closed(False)
        for name, stream in guarded:  # what is still buffered (after an error), through the guard
            with contextlib.suppress(OSError, ValueError):
                getattr(sys, name).flush()
            setattr(sys, name, stream)
        for name in null_streams:  # in-process callers get their (closed) stream back
            getattr(sys, name).close()
            setattr(sys, name, None)


def run() -> None:
    """The console script ``gpuplan``: :func:`main`, then an exit without the interpreter's last full
    garbage collection over every object the run made (``gc.freeze``: they are all freed with the
    process anyway; ~0.08 s of a chat-fleet ``optimize`` on the 2-core reference machine,
    docs/benchmarks.md "Session 14"). In-process callers (tests) call :func:`main`, whose objects
    stay collectable. Outside main (before it installs its handler, and once it has given it back, while
    the interpreter shuts down) a signal is :func:`cli.exit_interrupted`: exit 130 at once."""
    for signum in (signal.SIGINT, signal.SIGTERM):  # main() installs its own and gives these back when it ends
        signal.signal(signum, exit_interrupted)
    try:
        main()
    except (Interrupted, KeyboardInterrupt):  # a signal inside main's own cleanup, before it gave its handler back
        exit_interrupted(signal.SIGINT, None)
    finally:
        gc.freeze()


if __name__ == "__main__":
    run()
