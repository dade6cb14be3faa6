"""Reading user files safely, and turning validation errors into one-line messages.

Shared by every loader (catalog overrides, plans, scenarios, measurements, capacity
tables, model configs, plan results): a file must be a regular file (not a directory,
device or FIFO: ``/dev/zero`` would never end, a FIFO would block), is read whole with a
size cap, decoded as strict UTF-8 and parsed with a YAML loader that refuses aliases (no
"billion laughs"), duplicate keys at any depth (``qps: 5`` then ``qps: 5000`` is an
error, not "the last one wins"), merge keys (``<<:``, whose keys the mapping's own silently
override) and the YAML 1.1 numbers that do not read as written (``017`` is octal 15, ``1:30``
base-60 90); a date reads as text. JSON objects refuse duplicate keys too. Pydantic errors
become ``FILE: field.path: what is wrong (got VALUE); fix``.

Writing is in :mod:`catalog.outputs`.
"""

from __future__ import annotations

import json
import math
import os
import re
import stat
import unicodedata
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from catalog.constants import MAX_WORKLOADS
from catalog.errors import GpuplanError, figure, suggest
from catalog.outputs import write_atomic  # noqa: F401 - re-exported: the one writing path

MAX_FILE_BYTES = 20_000_000
# A plan of MAX_WORKLOADS workloads is ~1.8 MB of YAML (180 bytes each, the README's annotated workload without
# comments), and PyYAML reads ~0.1 MB/s of it: a 20 MB plan took 150 s only to be read (57,000 workloads, 10 MB),
# so plans are held to 2.5x that size and fail at once beyond it
MAX_PLAN_BYTES = 4_500_000
# A plan result carries ~3.2 kB per workload (32,263,261 bytes at 10,000 workloads, --no-sensitivity): `report`
# must read back what `optimize` writes
MAX_RESULT_BYTES = 200_000_000


class StrictLoader(yaml.SafeLoader):
    """SafeLoader that rejects aliases (a tiny file cannot expand into gigabytes) and
    duplicate mapping keys at any nesting level (YAML 1.2 says keys are unique; PyYAML
    keeps the last one silently)."""

    def compose_node(self, parent, index):  # type: ignore[override]
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise yaml.YAMLError(
                f"YAML aliases (*{event.anchor}) are not supported at line {event.start_mark.line + 1}; "
                "write the value out"
            )
        return super().compose_node(parent, index)

    def construct_mapping(self, node, deep=False):  # type: ignore[override]
        _refuse_duplicate_keys(self, node)
        _refuse_merge_keys(node)
        return super().construct_mapping(node, deep=deep)

    def construct_yaml_int(self, node):  # type: ignore[override]
        _refuse_yaml11_number(node, self)
        return super().construct_yaml_int(node)

    def construct_yaml_float(self, node):  # type: ignore[override]
        _refuse_yaml11_number(node, self)
        return super().construct_yaml_float(node)

    def construct_yaml_timestamp(self, node):  # type: ignore[override]
        """A date is text: no plan, catalog or scenario field is a date, and ``name: 2026-01-01``
        means the name '2026-01-01', not ``datetime.date(2026, 1, 1)``."""
        return self.construct_scalar(node)


# YAML 1.1 (PyYAML) reads a plain 017 as octal 15 and 1:30 as base-60 90: numbers that do not
# follow from what was written. Both are refused; 0x10, 1_000 and 1e3-style numbers read as written.
_LEADING_ZERO = re.compile(r"[-+]?0[0-9_]+$")
_BASE_60 = re.compile(r"[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+(?:\.[0-9_]*)?$")


def _refuse_yaml11_number(node: yaml.ScalarNode, loader: yaml.constructor.SafeConstructor) -> None:
    """Raise on a plain scalar that YAML 1.1 reads as an octal or base-60 (sexagesimal) number."""
    text = str(node.value)
    line = node.start_mark.line + 1
    if _LEADING_ZERO.match(text):
        value = yaml.constructor.SafeConstructor.construct_yaml_int(loader, node)
        plain = text.lstrip("+-").lstrip("0_") or "0"
        raise yaml.YAMLError(f"'{text}' at line {line} has a leading zero, which YAML 1.1 reads as the octal "
                             f"number {value}; write {text[:1] if text[:1] == '-' else ''}{plain} "
                             f"(or quote it, '{text}', for text)")
    if _BASE_60.match(text):
        kind = "construct_yaml_float" if "." in text else "construct_yaml_int"
        value = getattr(yaml.constructor.SafeConstructor, kind)(loader, node)
        raise yaml.YAMLError(f"'{text}' at line {line} is a YAML 1.1 base-60 number, read as {value:g}; "
                             f"write the number itself (or quote it, '{text}', for text)")


def _refuse_merge_keys(node: yaml.MappingNode) -> None:
    """Raise on a ``<<:`` merge key: keys it brings in are silently overridden by the mapping's own
    (``{<<: {qps: 500}, qps: 3}`` is qps 3), the duplicate the loader refuses everywhere else."""
    for key_node, _value in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":
            raise yaml.YAMLError(f"YAML merge keys (<<) are not supported at line {key_node.start_mark.line + 1}; "
                                 "write the fields out")


StrictLoader.add_constructor("tag:yaml.org,2002:int", StrictLoader.construct_yaml_int)
StrictLoader.add_constructor("tag:yaml.org,2002:float", StrictLoader.construct_yaml_float)
StrictLoader.add_constructor("tag:yaml.org,2002:timestamp", StrictLoader.construct_yaml_timestamp)


def _refuse_tag(loader: yaml.constructor.SafeConstructor, node: yaml.Node) -> Any:
    """Raise on a YAML tag whose value is not what the text says: ``!!binary MzAw`` is the bytes b'300', which a
    number field read as 300; ``!!set``, ``!!omap`` and ``!!pairs`` build collections no field takes."""
    raise yaml.YAMLError(f"the YAML tag {node.tag.replace('tag:yaml.org,2002:', '!!')} at line {node.start_mark.line + 1} "
                         "is not supported; write the value itself")


for _tag in ("binary", "set", "omap", "pairs"):
    StrictLoader.add_constructor(f"tag:yaml.org,2002:{_tag}", _refuse_tag)


def _refuse_duplicate_keys(loader: yaml.constructor.SafeConstructor, node: yaml.Node) -> None:
    """Raise on a mapping key given twice (YAML 1.2 says keys are unique; PyYAML keeps the last one)."""
    if not isinstance(node, yaml.MappingNode):
        return
    seen: dict[Any, int] = {}
    for key_node, _value in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":
            continue
        key = loader.construct_object(key_node, deep=True)
        line = key_node.start_mark.line + 1
        try:
            first = seen.get(key)
        except TypeError:  # an unhashable key: SafeLoader's own error follows
            continue
        if first is not None:
            raise yaml.YAMLError(f"duplicate key '{key}' at line {line} (first at line {first}); "
                                 "keep one of them")
        seen[key] = line


_NoAliasLoader = StrictLoader  # the name older code and tests know

if yaml.__with_libyaml__:
    class ShippedLoader(yaml.CSafeLoader):
        """libyaml's parser (~10× faster than PyYAML's: 0.21 → 0.02 s CPU for the built-in catalog)
        with StrictLoader's duplicate-key check, for the files shipped in the repository only: its
        composer is libyaml's, so StrictLoader's alias check does not run (a test reads every
        shipped file with both loaders and compares)."""

        def construct_mapping(self, node, deep=False):  # type: ignore[override]
            _refuse_duplicate_keys(self, node)
            return super().construct_mapping(node, deep=deep)
else:  # pragma: no cover - PyYAML built without libyaml
    ShippedLoader = StrictLoader


def is_regular_file(path: Path | str) -> bool:
    """True if ``path`` (after symlinks) is a regular file."""
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        return False


def read_bytes(path: Path | str, what: str, error: type[GpuplanError], limit: int = MAX_FILE_BYTES) -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes, or raise ``error`` naming it.

    Directories, devices (``/dev/zero``), FIFOs and sockets are refused before they are
    opened; the read itself is bounded too (a file that grows while read).
    """
    path = Path(path)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise error(f"{path}: {what} file not found; check the path") from None
    except OSError as exc:
        raise error(f"{path}: cannot read {what} file ({exc.strerror})") from None
    if stat.S_ISDIR(st.st_mode):
        raise error(f"{path}: is a directory, expected a {what} file")
    if not stat.S_ISREG(st.st_mode):
        kind = "a FIFO" if stat.S_ISFIFO(st.st_mode) else "a device or socket"
        raise error(f"{path}: is {kind}, not a regular file; give the path of a {what} file")
    if st.st_size > limit:
        raise error(f"{path}: {what} file is {st.st_size:,} bytes, over the {limit:,}-byte limit{_too_big_fix(what)}")
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        with os.fdopen(fd, "rb") as fh:
            if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):  # swapped between stat and open
                raise error(f"{path}: is not a regular file; give the path of a {what} file")
            data = fh.read(limit + 1)
    except OSError as exc:
        raise error(f"{path}: cannot read {what} file ({exc.strerror})") from None
    if len(data) > limit:
        raise error(f"{path}: {what} file is over the {limit:,}-byte limit{_too_big_fix(what)}")
    return data


def _too_big_fix(what: str) -> str:
    """The fix for an input over its size limit."""
    if what == "plan":
        return (f"; a plan holds at most {MAX_WORKLOADS:,} workloads: split it into several plans, or bin long "
                "histograms coarser (a few hundred rows each)")
    return "; give a smaller file"


def read_text(path: Path | str, what: str, error: type[GpuplanError], limit: int = MAX_FILE_BYTES) -> str:
    """Read a UTF-8 text file, or raise ``error`` naming the file and the problem."""
    path = Path(path)
    data = read_bytes(path, what, error, limit)
    if b"\x00" in data:
        encoding = _wide_encoding(data)
        if encoding:
            raise error(f"{path}: is {encoding} text, expected a {what} file in UTF-8 text; save the {what} file "
                        "as UTF-8")
        raise error(f"{path}: is a binary file, expected a {what} file in UTF-8 text")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise error(
            f"{path}: not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start}); "
            f"save the {what} file as UTF-8"
        ) from None


def _wide_encoding(data: bytes) -> str | None:
    """'UTF-16' or 'UTF-32' when ``data`` is text in one of them (what Windows calls "Unicode": Excel's "Unicode
    Text", PowerShell 5's ``>``), told by its byte-order mark or, without one, by the zero bytes every ASCII
    character brings (every other byte in UTF-16, three of four in UTF-32), and confirmed by decoding it to text
    without control characters, mostly ASCII; else None (a binary file that happens to start with FF FE)."""
    if data[:4] in (b"\xff\xfe\x00\x00", b"\x00\x00\xfe\xff"):
        guesses = [("UTF-32", "utf-32")]
    elif data[:2] in (b"\xff\xfe", b"\xfe\xff"):
        guesses = [("UTF-16", "utf-16")]
    else:
        head = data[:400]
        head = head[:len(head) - len(head) % 4]
        guesses = []
        for width, name, codec in ((4, "UTF-32", "utf-32-{}"), (2, "UTF-16", "utf-16-{}")):
            zero = [not head[i::width].strip(b"\x00") for i in range(width)]
            if len(head) >= 8 and sum(zero) == width - 1 and zero[0] != zero[-1]:  # one lane of characters
                guesses.append((name, codec.format("be" if zero[0] else "le")))
    for name, codec in guesses:
        try:
            text = data.decode(codec)
        except UnicodeDecodeError:
            continue
        # a plan, a table or a JSON file is mostly ASCII; bytes FF FE 00 01 ... read as UTF-16 are not
        if not re.search(r"[\x00-\x08\x0b\x0e-\x1f\x7f]", text) and 2 * sum(c.isascii() for c in text) > len(text):
            return name
    return None


def has_separator(text: str) -> bool:
    """A number written with ',' or '_' separators (``28,837``, ``28836,77``, ``1_0``): a number once they
    are removed. A word such as ``not_measured`` has none: it is not a number at all."""
    if "," not in text and "_" not in text:
        return False
    try:
        float(text.replace(",", "").replace("_", ""))
    except ValueError:
        return False
    return True


# Separators of a spreadsheet's other exports: a CSV header read as one column holding one was saved with it.
OTHER_SEPARATORS = {";": "semicolon", "\t": "tab", "|": "bar"}


def other_separator(header: list[str]) -> tuple[str, str] | None:
    """(separator, its name) when a CSV ``header`` is one column holding a separator of OTHER_SEPARATORS (a
    semicolon-, tab- or bar-separated file read as CSV), else None."""
    if len(header) != 1:
        return None
    return next(((sep, name) for sep, name in OTHER_SEPARATORS.items() if sep in header[0]), None)


def too_deep(syntax: str, what: str) -> str:
    """The message for a file nested past Python's recursion limit (YAML, JSON or a parsed plan's fields)."""
    return (f"{syntax} nesting too deep (over Python's recursion limit); a {what} file needs only a few levels: "
            "flatten it")


def read_yaml(path: Path | str, what: str, error: type[GpuplanError], limit: int = MAX_FILE_BYTES) -> dict[str, Any]:
    """Parse a YAML (or JSON) file of at most ``limit`` bytes whose top level must be a mapping (a plan's
    readers give MAX_PLAN_BYTES)."""
    text = read_text(path, what, error, limit)
    if not text.strip():
        raise error(f"{path}: {what} file is empty")
    try:
        data = yaml.load(text, Loader=StrictLoader)  # noqa: S506 - SafeLoader subclass
    except yaml.YAMLError as exc:
        raise error(f"{path}: not valid YAML: {_yaml_error_text(exc, text)}") from None
    except RecursionError:
        raise error(f"{path}: {too_deep('YAML', what)}") from None
    if not isinstance(data, dict):
        raise error(f"{path}: expected a mapping of fields at the top level, got {_top_level_text(data)}; a {what} "
                    "file is YAML lines of field: value")
    return data


def _top_level_text(data: Any) -> str:
    """What a YAML file that is not a mapping holds, in words (``NoneType`` and ``str`` said little)."""
    if data is None:
        return "nothing (only comments or blank lines)"
    if isinstance(data, str):
        return "a text value (a CSV, or a file of another format?)"
    if isinstance(data, list):
        return "a list"
    return f"a single {type(data).__name__} value"


def parse_yaml_text(text: str, where: str, error: type[GpuplanError], *, shipped: bool = False) -> Any:
    """Parse YAML text with the strict loader; ``shipped``: a file of the repository's own data,
    read with :class:`ShippedLoader` (libyaml, duplicate keys still refused)."""
    try:
        return yaml.load(text, Loader=ShippedLoader if shipped else StrictLoader)  # noqa: S506 - safe constructors
    except yaml.YAMLError as exc:
        raise error(f"{where}: not valid YAML: {_yaml_error_text(exc, text)}") from None


def _range_fix(kind: str, ctx: dict[str, Any]) -> str:
    """The fix of a bound pydantic reports (``ctx``: gt, ge, lt or le): "use a value of at least 1", ..."""
    bound = {"greater_than": "gt", "greater_than_equal": "ge", "less_than": "lt", "less_than_equal": "le"}[kind]
    if bound not in ctx:
        return "use a value in range"
    limit = ctx[bound]
    shown = figure(limit) if isinstance(limit, int | float) and not isinstance(limit, bool) else str(limit)
    return {"gt": f"use a value above {shown}", "ge": f"use a value of at least {shown}",
            "lt": f"use a value below {shown}", "le": f"use a value of at most {shown}"}[bound]


# Characters a web page, a word processor or a CJK keyboard puts where YAML needs a plain space or colon: YAML
# reads them as text, so the error it gives names something else ("mapping values are not allowed here")
_LOOKALIKES = re.compile("[\u00a0\u1680\u2000-\u200b\u202f\u205f\u3000\ufeff\uff1a]")


def _yaml_error_text(exc: yaml.YAMLError, text: str | None = None) -> str:
    """PyYAML's message on one line, without its ``in "<unicode string>",`` (the file is named
    already), and with the fix for a tab, which YAML never takes as indentation, or for the first
    no-break space, other Unicode space or fullwidth colon in ``text`` (the file's text), which YAML reads as text."""
    detail = " ".join(str(exc).split()).replace(' in "<unicode string>",', " at")
    if "'\\t'" in detail:
        detail += "; YAML indents with spaces, not tabs: replace the tab"
    elif text is not None and (odd := _LOOKALIKES.search(text.lstrip("\ufeff"))) is not None:
        offset = odd.start() + len(text) - len(text.lstrip("\ufeff"))
        line = text.count("\n", 0, offset) + 1
        char = odd.group()
        plain = "colon" if char == "\uff1a" else "space"
        detail += (f"; line {line} holds U+{ord(char):04X} {unicodedata.name(char, 'a Unicode character')}, "
                   f"which YAML reads as text: replace it with a plain {plain}")
    mark = getattr(exc, "problem_mark", None)
    if getattr(exc, "problem", None) == "but found another document" and mark is not None:
        return (f"the file holds more than one YAML document (another starts at line {mark.line + 1} with '---'); "
                "keep one document per file")
    return detail


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"duplicate key '{key}' in a JSON object; keep one of them")
        out[key] = value
    return out


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON; write a finite number or null")


def read_json(path: Path | str, what: str, error: type[GpuplanError], limit: int = MAX_FILE_BYTES) -> Any:
    """Parse a JSON file strictly: duplicate keys, NaN and Infinity are errors naming the file."""
    text = read_text(path, what, error, limit)
    try:
        return json.loads(text, object_pairs_hook=_unique_pairs, parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        raise error(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno}); fix the {what} file") from None
    except ValueError as exc:
        raise error(f"{path}: {exc}") from None
    except RecursionError:
        raise error(f"{path}: {too_deep('JSON', what)}") from None


def _value_repr(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def format_validation_error(
    where: str, exc: ValidationError, model: type[BaseModel] | None = None, prefix: str = ""
) -> str:
    """One line for the first error of a pydantic ValidationError, with a fix where we know one."""
    err = exc.errors()[0]
    loc = [str(p) for p in err["loc"]]
    path = ".".join(([prefix] if prefix else []) + loc)
    # a check of the whole mapping (loc empty) is named by ``where`` alone: "devices.a10: purchase_usd: ..."
    head = f"{where}: {path}: " if path else f"{where}: "
    kind = err["type"]
    value = err.get("input")
    msg = err["msg"]
    if kind == "extra_forbidden":
        known = _fields_at(model, err["loc"][:-1]) if model else []
        hint = suggest(loc[-1], known) if known else ""
        more = f"; known fields: {', '.join(known)}" if known and not hint else ""
        return f"{head}unknown field{hint}{more}"
    if kind == "missing":
        return f"{head}required field is missing; add it"
    if kind in {"greater_than", "greater_than_equal", "less_than", "less_than_equal"} and _non_finite(value):
        return f"{head}must be a finite number (got {_value_repr(value)})"  # nan fails a bound too; say what it is
    if kind in {"greater_than", "greater_than_equal", "less_than", "less_than_equal"}:
        return f"{head}{msg.lower()} (got {_value_repr(value)}); {_range_fix(kind, err.get('ctx') or {})}"
    if kind in {"model_type", "model_attributes_type", "dict_type", "list_type"} and value is None:
        # `slo:` with nothing after it, or `slo: ~`: YAML's null, not an empty mapping
        shape = "list" if kind == "list_type" else "mapping"
        required = model is not None and _is_required(model, err["loc"])
        return (f"{head}is empty (a key with nothing after it is YAML's null); give its {shape}"
                + (" ({} for one with no fields)" if shape == "mapping" else "")
                + ("" if required else ", or leave the key out for its default"))
    if kind == "string_too_long" and isinstance(value, str):
        limit = (err.get("ctx") or {}).get("max_length")
        return f"{head}{len(value):,} characters, more than the {limit} allowed; shorten it (got {_value_repr(value)})"
    if kind == "literal_error":
        return f"{head}{_value_repr(value)} is not a choice here; use {(err.get('ctx') or {}).get('expected', '?')}"
    if kind in {"float_parsing", "int_parsing"} and isinstance(value, str) and _non_finite(value):
        return f"{head}must be a finite number (got {_value_repr(value)})"
    if kind in {"float_parsing", "int_parsing"} and isinstance(value, str) and not value.isascii():
        try:  # Python reads '３' (fullwidth) and '٣' (Arabic-Indic) as 3; pydantic, rightly, does not
            number = float(value)
        except ValueError:
            pass
        else:
            return f"{head}not a number in ASCII digits (got {_value_repr(value)}); write {number:g}"
    if kind == "float_parsing" and isinstance(value, str):  # 'lots'; a date, which the loader leaves as text
        return f"{head}not a number (got {_value_repr(value)}); write it in digits"
    if kind == "int_from_float" and isinstance(value, float) and math.isfinite(value):
        low, high = _int_bounds(model, err["loc"]) if model is not None else (None, None)
        # the two whole numbers either side, kept within the field's bounds (horizon_years 5e-324: not "0 or 1")
        near = sorted({min(max(n, -math.inf if low is None else low), math.inf if high is None else high)
                       for n in (math.floor(value), math.ceil(value))})
        return f"{head}must be a whole number (got {_value_repr(value)}); use {' or '.join(map(str, near))}"
    if kind == "finite_number" or (isinstance(value, float) and not math.isfinite(value)):
        return f"{head}must be a finite number (got {_value_repr(value)})"
    if kind == "string_type" and isinstance(value, bool):  # `precisions: [on]`: YAML 1.1 reads on/off/yes/no as booleans
        return (f"{head}{str(value).lower()} is a yes/no value, not a name (YAML reads unquoted "
                "yes/no/on/off/true/false so); write the name, in quotes if it is one of those words")
    if kind == "string_type" and isinstance(value, int | float):  # `name: 2026`: YAML reads digits as a number
        return (f"{head}{_value_repr(value)} is a number, not text (YAML reads an unquoted "
                "number so); write it in quotes, as you want it read")
    if kind == "int_parsing" and isinstance(value, str):
        try:
            number = float(value.strip())
        except ValueError:
            return f"{head}{value!r} is not a whole number; write it in digits"
        if math.isfinite(number):
            fix = (f"write {int(number)}" if number == int(number)
                   else f"a whole number is due: use {math.floor(number)} or {math.ceil(number)}")
            if "e" in value.lower():  # `1e6`: YAML 1.1 reads an exponent without a dot and a sign as text
                return f"{head}{value!r} is text to YAML 1.1 (its numbers with an exponent need a dot and a sign); {fix}"
            return f"{head}{value!r} is not a whole number; {fix}"
    if kind == "string_pattern_mismatch":
        pattern = (err.get("ctx") or {}).get("pattern", "")
        return f"{head}{_pattern_fix(str(value), pattern)}"
    if kind == "value_error":
        msg = msg.removeprefix("Value error, ")
        if isinstance(value, bool):  # the yes/no checks (Strict, inventory) name the value themselves
            return f"{head}{msg}"
        if isinstance(value, dict) and len(repr(value)) > 60:
            # a check across fields: its message names them and their values; a whole workload cut
            # at 60 characters ("(got {'name': 'a', 'model': ...)") would only hide the fix
            return f"{head}{msg}"
    return f"{head}{msg} (got {_value_repr(value)})"


def _non_finite(value: Any) -> bool:
    """A float nan or ±inf, or text a float reads as one ('1e309', which YAML 1.1 leaves as text)."""
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            return False
    return isinstance(value, float) and not math.isfinite(value)


def _pattern_fix(value: str, pattern: str) -> str:
    """What a name pattern allows, in words, and a corrected name where one is easy to make."""
    upper = "A-Z" in pattern
    allowed = ["letters" if upper else "lowercase letters", "digits"]
    tail = pattern[pattern.rfind("[") + 1:pattern.rfind("]")] if "[" in pattern else ""
    allowed += [f"'{c}'" for c in "._+-" if c in tail.replace("a-z", "").replace("A-Z", "").replace("0-9", "")]
    words = f"use only {', '.join(allowed[:-1])} and {allowed[-1]}, starting with a letter or digit"
    fixed = value if upper else value.lower()
    fixed = re.sub(r"[^A-Za-z0-9._+-]+", "-", fixed).strip("-._+")
    hint = f"; e.g. '{fixed}'" if fixed and fixed != value and re.fullmatch(pattern, fixed) else ""
    return f"{_value_repr(value)} is not a valid name: {words}{hint}"


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


def _int_bounds(model: type[BaseModel], loc: tuple) -> tuple[int | None, int | None]:
    """The whole-number bounds (ge / gt, le / lt) of the field a location names, best effort: (None, None)."""
    current: Any = model
    field = None
    for part in loc:
        if isinstance(part, int) or current is None:
            continue
        field = getattr(current, "model_fields", {}).get(part)
        if field is None:
            return None, None
        current = _model_in(field.annotation)
    low = high = None
    metas = list(getattr(field, "metadata", None) or ())  # `Annotated[int, Field(ge=1)] | None`: inside the union
    metas += [m for arg in getattr(getattr(field, "annotation", None), "__args__", ()) or ()
              for m in getattr(arg, "__metadata__", ())]
    metas = [inner for m in metas for inner in (getattr(m, "metadata", None) or [m])]  # a Field(...) holds its own
    for meta in metas:
        if getattr(meta, "ge", None) is not None:
            low = math.ceil(meta.ge)
        if getattr(meta, "gt", None) is not None:
            low = math.floor(meta.gt) + 1
        if getattr(meta, "le", None) is not None:
            high = math.floor(meta.le)
        if getattr(meta, "lt", None) is not None:
            high = math.ceil(meta.lt) - 1
    return low, high


def _is_required(model: type[BaseModel], loc: tuple) -> bool:
    """Whether the field a location names must be given (no default), best effort: False if it cannot tell."""
    current: Any = model
    for i, part in enumerate(loc):
        if isinstance(part, int) or current is None:
            continue
        field = getattr(current, "model_fields", {}).get(part)
        if field is None:
            return False
        if i == len(loc) - 1:
            return field.is_required()
        current = _model_in(field.annotation)
    return False


def _model_in(annotation: Any) -> Any:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()) or ():
        found = _model_in(arg)
        if found is not None:
            return found
    return None
