"""Reading user files safely, and turning validation errors into one-line messages.

Shared by every loader (catalog overrides, plans, scenarios, measurements): a file is
read whole with a size cap, decoded as strict UTF-8 and parsed with a YAML loader that
refuses aliases (no "billion laughs"); pydantic errors become
``FILE: field.path: what is wrong (got VALUE); fix``.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from catalog.errors import GpuplanError, suggest

MAX_FILE_BYTES = 20_000_000


class _NoAliasLoader(yaml.SafeLoader):
    """SafeLoader that rejects YAML aliases: a tiny file cannot expand into gigabytes."""

    def compose_node(self, parent, index):  # type: ignore[override]
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise yaml.YAMLError(
                f"YAML aliases (*{event.anchor}) are not supported at line {event.start_mark.line + 1}; "
                "write the value out"
            )
        return super().compose_node(parent, index)


def read_text(path: Path | str, what: str, error: type[GpuplanError]) -> str:
    """Read a UTF-8 text file, or raise ``error`` naming the file and the problem."""
    path = Path(path)
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        raise error(f"{path}: {what} file not found; check the path") from None
    except OSError as exc:
        raise error(f"{path}: cannot read {what} file ({exc.strerror})") from None
    if path.is_dir():
        raise error(f"{path}: is a directory, expected a {what} file")
    if size > MAX_FILE_BYTES:
        raise error(f"{path}: {what} file is {size:,} bytes, over the {MAX_FILE_BYTES:,}-byte limit")
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise error(f"{path}: cannot read {what} file ({exc.strerror})") from None
    if b"\x00" in data:
        raise error(f"{path}: is a binary file, expected a {what} file in UTF-8 text")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise error(
            f"{path}: not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start}); "
            f"save the {what} file as UTF-8"
        ) from None


def read_yaml(path: Path | str, what: str, error: type[GpuplanError]) -> dict[str, Any]:
    """Parse a YAML (or JSON) file whose top level must be a mapping."""
    text = read_text(path, what, error)
    if not text.strip():
        raise error(f"{path}: {what} file is empty")
    try:
        data = yaml.load(text, Loader=_NoAliasLoader)  # noqa: S506 - SafeLoader subclass
    except yaml.YAMLError as exc:
        detail = " ".join(str(exc).split())
        raise error(f"{path}: not valid YAML: {detail}") from None
    except RecursionError:
        raise error(f"{path}: YAML nesting too deep") from None
    if not isinstance(data, dict):
        raise error(f"{path}: expected a mapping of fields at the top level, got {type(data).__name__}")
    return data


def _value_repr(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def format_validation_error(
    where: str, exc: ValidationError, model: type[BaseModel] | None = None, prefix: str = ""
) -> str:
    """One line for the first error of a pydantic ValidationError, with a fix where we know one."""
    err = exc.errors()[0]
    loc = [str(p) for p in err["loc"]]
    path = ".".join(([prefix] if prefix else []) + loc) or "(top level)"
    kind = err["type"]
    value = err.get("input")
    msg = err["msg"]
    if kind == "extra_forbidden":
        known = _fields_at(model, err["loc"][:-1]) if model else []
        hint = suggest(loc[-1], known) if known else ""
        more = f"; known fields: {', '.join(known)}" if known and not hint else ""
        return f"{where}: {path}: unknown field{hint}{more}"
    if kind == "missing":
        return f"{where}: {path}: required field is missing; add it"
    if kind in {"greater_than", "greater_than_equal", "less_than", "less_than_equal"}:
        return f"{where}: {path}: {msg.lower()} (got {_value_repr(value)}); use a value in range"
    if kind == "finite_number" or (isinstance(value, float) and not math.isfinite(value)):
        return f"{where}: {path}: must be a finite number (got {_value_repr(value)})"
    if kind == "value_error":
        msg = msg.removeprefix("Value error, ")
    return f"{where}: {path}: {msg} (got {_value_repr(value)})"


def _fields_at(model: type[BaseModel], loc: tuple) -> list[str]:
    """Field names of the (sub)model that a location points into, best effort."""
    current: Any = model
    for part in loc:
        if isinstance(part, int) or current is None:
            continue
        field = getattr(current, "model_fields", {}).get(part)
        if field is None:
            return []
        current = _model_in(field.annotation)
    return list(getattr(current, "model_fields", {}).keys()) if current is not None else []


def _model_in(annotation: Any) -> Any:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()) or ():
        found = _model_in(arg)
        if found is not None:
            return found
    return None


def write_atomic(path: Path | str, data: bytes | str, inputs: tuple[Path | str, ...] = ()) -> Path:
    """Write ``data`` to ``path`` through a temporary file in the same directory and a rename.

    A crash or interrupt leaves either the old file or the new one, never half of one.
    Refuses to write over any of ``inputs`` (an output path equal to an input path).
    """
    import os
    import tempfile

    from catalog.errors import OutputError

    path = Path(path)
    target = path.resolve()
    if any(target == Path(src).resolve() for src in inputs):
        raise OutputError(f"{path}: output path is the input file; choose another output path")
    if path.is_dir():
        raise OutputError(f"{path}: is a directory; give a file name")
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise OutputError(f"{path}: directory {parent} does not exist; create it first")
    payload = data.encode("utf-8") if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=parent)
    try:
        mask = os.umask(0o022)  # mkstemp makes 0600; a new file gets 0o666 & ~umask like any other
        os.umask(mask)
        os.fchmod(fd, 0o666 & ~mask)
        with os.fdopen(fd, "wb") as fh:
            fh.write(payload)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return path
