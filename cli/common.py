"""Options shared by several commands, and the rendering helpers they use."""

from __future__ import annotations

import gc
import json
import os
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from catalog.errors import GpuplanError
from optimizer.planning.solver_options import SolverOptions

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

    from catalog import Catalog
    from optimizer.models.params import CalibrationParams

CatalogOpt = Annotated[
    Path | None,
    typer.Option("--catalog", help="YAML file adding devices/models or overriding fields (e.g. a negotiated price)."),
]
ModelConfigOpt = Annotated[
    Path | None,
    typer.Option("--model-config", help="Read a model from a local Hugging Face config.json."),
]
ParamsOpt = Annotated[
    Path | None,
    typer.Option("--params", help="Calibration parameters (from `gpuplan calibrate`) to use instead of the shipped ones."),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON instead of a table.")]
# Flags are named as the library arguments they set: --time-limit-s is SolverOptions.time_limit_s.
# The old name stays as a hidden alias, so scripts written for it keep working.
TimeLimitOpt = Annotated[float | None, typer.Option(
    "--time-limit-s", min=0.1, show_default=False,
    help=f"Time limit of each solve stage, seconds (default {SolverOptions().time_limit_s:g}): the one-device "
    "fleets and the fleet MILP together, stopped with the best plan found (docs/plan-json.md 'Time limit').")]
TimeLimitAliasOpt = Annotated[float | None, typer.Option("--time-limit", min=0.1, hidden=True,
                                                         help="Old name of --time-limit-s.")]

NoCacheOpt = Annotated[bool, typer.Option(
    "--no-cache", help="Compute everything afresh and store nothing (capacities, solves, simulations, the result): "
    "ignores the disk cache ($GPUPLAN_CACHE_DIR, default ~/.cache/gpuplan; README 'Cache').")]


@contextmanager
def without_gc() -> Iterator[None]:
    """The block without the cyclic garbage collector, which is on again after it (if it was before).

    For a command's heavy imports (numpy, pulp, pydantic models: ~10^5 objects that live as long as
    the process, none of them garbage): the collector's passes over them are wasted, about 0.04 s of
    the optimizer's imports (a full collection lands inside them; docs/benchmarks.md "Session 14")."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def cache_off(no_cache: bool) -> None:
    """``--no-cache``: the disk cache off for this process and the workers it starts (an empty
    GPUPLAN_CACHE_DIR is what they read)."""
    if no_cache:
        from optimizer.planning import disk_cache  # the optimizer loads when a command runs

        os.environ["GPUPLAN_CACHE_DIR"] = ""
        disk_cache.disable()


def aliased(value: Any, old_value: Any, default: Any, flag: str, old_flag: str) -> Any:
    """The value of ``flag``, or of its old name ``old_flag``, or ``default``; both given and different: an error."""
    if value is not None and old_value is not None and value != old_value:
        raise GpuplanError(f"{old_flag} is the old name of {flag}; give one of them (got {old_value!r} and {value!r})")
    return value if value is not None else (old_value if old_value is not None else default)

# C0/C1 control characters but tab and newline, and the Unicode bidi overrides: a plan
# name must not move the cursor, recolour the terminal or reverse the text it is shown in.
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def clean(text: str) -> str:
    """``text`` with control characters shown escaped (``\\x1b``): displayed, never obeyed by the terminal."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100
                        else f"\\u{ord(m.group()):04x}", text)


def error_line(text: str) -> None:
    """The CLI's one error line on stderr: ``error: TEXT``, whitespace folded, control characters escaped."""
    sys.stderr.write(f"error: {clean(' '.join(str(text).split()))}\n")


def safe_console(**kwargs: Any) -> Console:
    """A rich Console whose string arguments go through :func:`clean` (tables are cleaned by :func:`table`)."""
    # rich loads when something is printed, not at `gpuplan --help`
    from rich.console import Console

    class SafeConsole(Console):
        def print(self, *objects: Any, **kw: Any) -> None:  # type: ignore[override]
            super().print(*(clean(o) if isinstance(o, str) else o for o in objects), **kw)

    return SafeConsole(**kwargs)


class LazyConsole:
    """A console made on first use (``make()``), so importing the CLI does not import rich."""

    def __init__(self, make: Any):
        self._make, self._console = make, None

    def __getattr__(self, name: str) -> Any:
        if self._console is None:
            self._console = self._make()
        return getattr(self._console, name)


# Wide when piped (CI logs, files); the terminal width otherwise.
stdout = LazyConsole(lambda: safe_console(width=None if sys.stdout.isatty() else 240))


def load(catalog: Path | None = None, model_config: Path | None = None) -> Catalog:
    """The built-in catalog plus the user's overrides and model config, if given."""
    from catalog.load import (  # pydantic + YAML: not at `gpuplan --help`
        load_catalog,
        model_from_hf_config,
    )

    cat = load_catalog(catalog)
    if model_config is not None:
        model = model_from_hf_config(model_config)
        if model.key in cat.models:  # meant, often (a local copy of a catalog model), but never silently
            sys.stderr.write(f"warning: --model-config {clean(str(model_config))} is read as model {model.key}, which "
                             "replaces the catalog's model of that key for this run\n")
        cat = cat.with_model(model)
    return cat


def load_calibration(path: Path | None, cat: Catalog) -> CalibrationParams:
    """The calibration of ``--params`` (None: the shipped one). A file without a fit record (hand-written: ``{}``,
    or one factor) holds the built-in defaults for every field it leaves out, not the shipped calibration's
    values: a warning on stderr says so, as nothing else would."""
    from optimizer.models.params import (  # pydantic + YAML: not at `gpuplan --help`
        FACTOR_FIELDS,
        load_params,
    )

    params = load_params(path, cat)
    # a fitted file lacking a fitted factor (one of another gpuplan version, or trimmed by hand) takes the
    # built-in default for it: memory_bandwidth_efficiency 0.8 for the fit's 0.46 moved an L40S TPOT p99 53 → 33 ms
    missing = [f for f in FACTOR_FIELDS if f not in params.model_fields_set and getattr(params, f) is not None]
    if path is not None and params.fit is not None and missing:
        sys.stderr.write(f"warning: {clean(str(path))} has a fit record but no {', '.join(missing)} (a file of another "
                         "gpuplan version, or edited?): "
                         + ", ".join(f"{f} is the built-in default {getattr(params, f):g}" for f in missing)
                         + ", not a fitted value; re-run `gpuplan calibrate` to fit every factor\n")
    if path is not None and params.fit is None:
        sys.stderr.write(f"warning: {clean(str(path))} has no fit record (not written by `gpuplan calibrate`): every "
                         "field it leaves out is the built-in default, not the shipped calibration's value; to change "
                         "one factor of the shipped calibration, edit a copy of optimizer/models/data/calibration.yaml\n")
    return params


def print_json(obj: Any) -> None:
    sys.stdout.write(json.dumps(obj, indent=2, allow_nan=False, default=_default) + "\n")


def _default(obj: Any) -> Any:
    if hasattr(obj, "model_dump"):
        return obj.model_dump(mode="json")
    if hasattr(obj, "item"):
        return obj.item()
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def table(title: str | None, columns: list[str], rows: list[list[Any]], right: set[str] | None = None) -> Table:
    from rich.table import Table

    right = right or set()
    t = Table(title=None if title is None else clean(title), header_style="bold", show_lines=False)
    for c in columns:
        t.add_column(clean(c), justify="right" if c in right else "left", overflow="fold")
    for r in rows:
        t.add_row(*["" if v is None else clean(str(v)) for v in r])
    return t


def plural(count: float, noun: str) -> str:
    """``1 year``, ``3 years``, ``1 workload``."""
    return f"{count:,g} {noun}{'' if count == 1 else 's'}"


def fmt(value: float | None, digits: int = 0, none: str = "—") -> str:
    if value is None:
        return none
    return f"{value:,.{digits}f}"
