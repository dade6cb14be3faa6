"""The `gpuplan` command line: parse, call one library function, render.

Library errors (GpuplanError) become one line on stderr and exit code 1; `--debug`
shows the traceback instead.
"""

from __future__ import annotations

import signal
import sys
from importlib.metadata import PackageNotFoundError, version
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
)
app.add_typer(catalog_cmd.app, name="catalog")

_state = {"debug": False}


def _version() -> str:
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
