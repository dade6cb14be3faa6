"""The `gpuplan` command line: parse, call one library function, render.

Library errors (GpuplanError) become one line on stderr and exit code 1; `--debug`
shows the traceback instead.
"""

from __future__ import annotations

import signal
import sys
from pathlib import Path
from typing import Annotated

import typer

from catalog.errors import GpuplanError
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
from cli.common import CatalogOpt, JsonOpt, ModelConfigOpt, ParamsOpt

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


@app.command()
def validate(
    path: Annotated[Path, typer.Argument(help="A plan .yaml file, or a measurements .csv (calibration.csv columns).")],
    catalog: CatalogOpt = None,
    model_config: ModelConfigOpt = None,
    params: ParamsOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Check a plan file (and summarise it), or predict a measurements CSV and report the errors."""
    if path.suffix.lower() == ".csv":
        from cli.validate_cmd import validate_measurements

        validate_measurements(path, catalog, params, json_out)
        return
    plan_cmd.ensure_yaml(path)
    plan_cmd.validate_plan(path, catalog, model_config, json_out)


@app.command()
def schema() -> None:
    """Print the JSON Schema of the plan file."""
    typer.echo(plan_cmd.plan_schema())


for _module in (estimate_cmd, simulate_cmd, calibrate_cmd, roofline_cmd, optimize_cmd, report_cmd, whatif_cmd):
    _module.register(app)


class Interrupted(BaseException):  # noqa: N818 - a signal, not an error of the program
    """SIGINT/SIGTERM. Not a KeyboardInterrupt: click would swallow that (exit 130, no message)."""


def _on_signal(signum, _frame):
    raise Interrupted(signum)


def main() -> None:
    previous = {s: signal.signal(s, _on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        app()
    except GpuplanError as exc:
        if _state["debug"]:
            raise
        sys.stderr.write(f"error: {' '.join(str(exc).split())}\n")
        sys.exit(1)
    except (Interrupted, KeyboardInterrupt):
        sys.stderr.write("error: interrupted; earlier outputs are left as they were\n")
        sys.exit(130)
    finally:  # main() also runs in-process (tests): give the caller its handlers back
        for signum, handler in previous.items():
            signal.signal(signum, handler)


if __name__ == "__main__":
    main()
