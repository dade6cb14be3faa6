"""Load a measurements CSV (the columns of the shipped ``optimizer/calibration/data/calibration.csv``).

Strict at the boundary: a missing required column is one error naming the file and the
column; a bad number names the file, the line and the column. Device, model and precision
names are resolved to catalog keys (catalog aliases plus case/dash normalisation,
``Mixed (FP16)`` → ``fp16``, ``Llama-3.3-70B (same arch as …)`` → ``llama-3.3-70b``);
rows whose names do not resolve are kept with the reason, so validation can list them.
"""

from __future__ import annotations

import csv
import io
import math
import re
from dataclasses import dataclass
from pathlib import Path

from catalog.errors import CatalogError, ModelError
from catalog.files import read_text
from catalog.load import Catalog

REQUIRED_COLUMNS = (
    "gpu_key", "source_group", "model", "precision", "scenario", "tp", "pp",
    "input_len", "output_len", "throughput_tok_s",
)
OPTIONAL_NUMERIC = (
    "concurrency_or_batch", "request_rate_qps", "ttft_mean_ms", "ttft_p99_ms",
    "tpot_mean_ms", "tpot_p99_ms", "e2e_latency_s",
)


@dataclass(frozen=True)
class Measurement:
    """One measured row; ``*_key`` are catalog keys or None with ``unresolved`` saying why."""

    row_id: str
    line: int
    source_group: str
    scenario: str
    gpu_name: str
    model_name: str
    precision_name: str
    device_key: str | None
    model_key: str | None
    precision_key: str | None
    unresolved: str | None
    tp: int
    pp: int
    input_tokens: float | None
    output_tokens: float | None
    throughput_tok_s: float | None
    concurrency: float | None
    request_rate_qps: float | None
    ttft_mean_ms: float | None
    ttft_p99_ms: float | None
    tpot_mean_ms: float | None
    tpot_p99_ms: float | None
    e2e_latency_s: float | None

    @property
    def is_offline(self) -> bool:
        """An offline max-throughput row (all requests at once, memory-limited batch)."""
        return "offline" in self.scenario.lower() or self.source_group.startswith("trtllm_perf_overview")

    @property
    def label(self) -> str:
        return (f"{self.gpu_name} {self.model_name} {self.precision_name} tp{self.tp} "
                f"{self.input_tokens:g}/{self.output_tokens:g} [{self.source_group}]"
                if self.input_tokens is not None and self.output_tokens is not None
                else f"{self.gpu_name} {self.model_name} {self.precision_name} tp{self.tp} [{self.source_group}]")


def _norm(name: str) -> str:
    return re.sub(r"[\s_]+", "-", name.strip().lower())


def resolve_device(cat: Catalog, name: str) -> str:
    return cat.device(_norm(name)).key


def resolve_model(cat: Catalog, name: str) -> str:
    """Model key for a benchmark's model name; a trailing parenthetical note is dropped."""
    base = re.sub(r"\s*\(.*\)\s*$", "", name).strip()
    for candidate in (name, base, _norm(base)):
        key = cat.model_aliases.get(candidate) or cat.model_aliases.get(candidate.lower())
        if key:
            return key
    return cat.model(base).key  # raises with a suggestion


def resolve_precision(cat: Catalog, name: str) -> str:
    """Precision key: ``FP8`` → fp8; ``Mixed (FP16)`` → fp16 (the dtype in parentheses)."""
    inner = re.search(r"\(([^)]*)\)", name)
    text = (inner.group(1) if inner else name).strip().lower()
    aliases = {"w4a16": "int4", "awq": "int4", "gptq": "int4", "w8a8": "int8", "nvfp4": "fp4", "mxfp4": "fp4"}
    return cat.precision(aliases.get(text, text)).key


def _number(value: str, path: Path, line: int, column: str, *, integer: bool = False,
            required: bool = False, allow_inf: bool = False) -> float | int | None:
    text = value.strip().replace(",", "") if value is not None else ""
    if not text:
        if required:
            raise ModelError(f"{path}: line {line}: column '{column}' is empty; give a number")
        return None
    try:
        number = float(text)
    except ValueError:
        raise ModelError(f"{path}: line {line}: column '{column}': not a number (got {value!r}); "
                         "write a plain decimal number such as 1234.5") from None
    if allow_inf and number == math.inf:
        return number
    if not math.isfinite(number) or number < 0:
        raise ModelError(f"{path}: line {line}: column '{column}': must be a finite number >= 0 (got {value!r})")
    if integer:
        if number != int(number) or number < 1:
            raise ModelError(f"{path}: line {line}: column '{column}': must be a whole number >= 1 (got {value!r})")
        return int(number)
    return number


def load_measurements(path: Path | str, cat: Catalog) -> list[Measurement]:
    """Every row of a measurements CSV, names resolved against ``cat``."""
    path = Path(path)
    text = read_text(path, "measurements", ModelError)
    try:
        return _parse_measurements(path, text, cat)
    except csv.Error as exc:  # e.g. a lone carriage return or a NUL inside a field
        raise ModelError(f"{path}: not a valid CSV file ({exc}); save it as plain comma-separated text") from None


def _parse_measurements(path: Path, text: str, cat: Catalog) -> list[Measurement]:
    reader = csv.DictReader(io.StringIO(text, newline=""))
    header = reader.fieldnames or []
    if not header:
        raise ModelError(f"{path}: measurements file is empty; expected a CSV header with {', '.join(REQUIRED_COLUMNS)}")
    for column in REQUIRED_COLUMNS:
        if column not in header:
            raise ModelError(f"{path}: required column '{column}' is missing; "
                             f"use the columns of calibration.csv ({', '.join(REQUIRED_COLUMNS)}, ...)")
    rows: list[Measurement] = []
    for i, rec in enumerate(reader):
        line = i + 2
        if None in rec:
            raise ModelError(f"{path}: line {line}: more fields than the header has columns")
        nums = {c: _number(rec.get(c) or "", path, line, c, allow_inf=c == "request_rate_qps")
                for c in OPTIONAL_NUMERIC if c in header}
        problems: list[str] = []
        keys: dict[str, str | None] = {}
        for what, col, fn in (("device", "gpu_key", resolve_device), ("model", "model", resolve_model),
                              ("precision", "precision", resolve_precision)):
            try:
                keys[what] = fn(cat, rec[col] or "")
            except CatalogError as exc:
                keys[what] = None
                problems.append(f"{col} {rec[col]!r}: {exc}")
        rows.append(Measurement(
            row_id=(rec.get("row_id") or str(line)).strip(), line=line,
            source_group=(rec["source_group"] or "").strip(), scenario=(rec["scenario"] or "").strip(),
            gpu_name=rec["gpu_key"] or "", model_name=rec["model"] or "", precision_name=rec["precision"] or "",
            device_key=keys["device"], model_key=keys["model"], precision_key=keys["precision"],
            unresolved="; ".join(problems) or None,
            tp=int(_number(rec["tp"], path, line, "tp", integer=True, required=True)),  # type: ignore[arg-type]
            pp=int(_number(rec["pp"] or "1", path, line, "pp", integer=True, required=True)),  # type: ignore[arg-type]
            input_tokens=_number(rec["input_len"], path, line, "input_len"),
            output_tokens=_number(rec["output_len"], path, line, "output_len"),
            throughput_tok_s=_number(rec["throughput_tok_s"], path, line, "throughput_tok_s"),
            concurrency=nums.get("concurrency_or_batch"), request_rate_qps=nums.get("request_rate_qps"),
            ttft_mean_ms=nums.get("ttft_mean_ms"), ttft_p99_ms=nums.get("ttft_p99_ms"),
            tpot_mean_ms=nums.get("tpot_mean_ms"), tpot_p99_ms=nums.get("tpot_p99_ms"),
            e2e_latency_s=nums.get("e2e_latency_s"),
        ))
    if not rows:
        raise ModelError(f"{path}: the header has no rows under it; add at least one measurement row "
                         "(the format of calibration.csv)")
    return rows
