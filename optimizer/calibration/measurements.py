"""Load a measurements CSV (the columns of the shipped ``optimizer/calibration/data/calibration.csv``).

Strict at the boundary: a missing required column is one error naming the file and the
column; a bad number names the file, the line and the column. Device, model and precision
names are resolved to catalog keys (catalog aliases plus case/dash normalisation,
``Mixed (FP16)`` → ``fp16``, ``Llama-3.3-70B (same arch as …)`` → ``llama-3.3-70b``);
rows whose names do not resolve are kept with the reason, so validation can list them.

Benchmark inputs the model must honour are read from optional columns, or derived when
the column is absent or empty:

- ``engine`` (trtllm, vllm, sglang): else from ``source_group`` — ``trtllm_*`` and
  ``nvidia_nim*`` (NIM's LLM containers run TensorRT-LLM) → trtllm, ``amd_*`` → vllm
  (AMD's MI300X tables are vLLM on ROCm), ``*sglang*`` → sglang; else the ``framework``
  text; else None (the device's default engine).
- ``ep`` (expert-parallel degree): else ``ep`` = the group size when the notes say
  ``Parallelism 'DEPn'`` (attention data-parallel + expert-parallel over the group; the
  row's ``tp`` then holds the group size, so ``tp`` becomes 1).
- ``max_batch`` (scheduler cap on running sequences): else ``max_num_seqs=N`` or
  ``max_batch_size N`` in the notes.
- a row whose notes say the checkpoint is natively MXFP4 (gpt-oss) ran ``mxfp4`` (4.25
  bits/weight) where the device has FP4 math, else (Hopper, labelled FP8) 4-bit weights
  dequantized to 16 bit: ``int4``.
- ``throughput_basis`` (``output`` or ``total``): else ``total`` when ``throughput_metric``
  says the label is ambiguous between output and input+output (AMD's vLLM tables: vLLM's
  benchmark_throughput prints total tokens/s — prompt + output — as its headline), else
  ``output``. A ``total`` figure is converted to output tokens/s: × output/(input + output).

``throughput_tok_s_per_gpu`` is informational, but when a row gives it, ``throughput_tok_s`` must equal it ×
tp·pp·ep within ``PER_GPU_TOLERANCE`` (a per-GPU figure in the group column would be fitted as a group running
1/(tp·pp·ep) of its speed).
"""

from __future__ import annotations

import csv
import difflib
import io
import math
import re
from dataclasses import dataclass
from pathlib import Path

from catalog.errors import CatalogError, ModelError
from catalog.files import has_separator, other_separator, read_text
from catalog.load import Catalog
from workloads.spec import MAX_QPS

REQUIRED_COLUMNS = (
    "gpu_key", "source_group", "model", "precision", "scenario", "tp", "pp",
    "input_len", "output_len", "throughput_tok_s",
)
# throughput_tok_s must be throughput_tok_s_per_gpu x tp·pp·ep within this share (the shipped rows: within
# rounding of the per-GPU figure); beyond it one of them is per GPU and the other per group, or wrong
PER_GPU_TOLERANCE = 0.02
MEASURED_LATENCIES = ("ttft_mean_ms", "ttft_p99_ms", "tpot_mean_ms", "tpot_p99_ms", "e2e_latency_s")
OPTIONAL_NUMERIC = (
    "concurrency_or_batch", "request_rate_qps", "ttft_mean_ms", "ttft_p99_ms",
    "tpot_mean_ms", "tpot_p99_ms", "e2e_latency_s",
)
# a latency statistic of the user's own (ttft_p90_ms, tpot_p50_ms, e2e_p99_s): never a typo of a known one
OWN_LATENCY_COLUMN = re.compile(r"(ttft|tpot|itl|e2e)(_latency)?_(p\d+(\.\d+)?|mean|median|max|min)_(ms|s)")
# the other columns this loader reads, and calibration.csv's informational ones: a header name close to one
# of these but not equal (engnie) is a typo, refused; a name far from all of them is the user's own column
KNOWN_COLUMNS = (*REQUIRED_COLUMNS, *OPTIONAL_NUMERIC, "engine", "ep", "max_batch", "throughput_basis", "row_id",
                 "notes", "framework", "throughput_metric", "benchmark_round", "submitter", "system", "accelerator",
                 "accel_count", "throughput_tok_s_per_gpu", "constraint_ttft_p99_ms", "constraint_tpot_p99_ms",
                 "source", "source_date")


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
    engine: str | None = None
    ep: int = 1
    max_batch: int | None = None
    throughput_basis: str = "output"  # what the source's throughput figure counted (converted to output)

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


def compute_ceiling_tok_s(cat: Catalog, keys: dict[str, str | None], gpus: int) -> float | None:
    """Output tokens/s no group of ``gpus`` GPUs exceeds: gpus · peak / (2 · (active − embedding params)), the dense
    peak of the row's precision (``Precision.compute_peak_tflops``); each output token runs every active weight
    once in a GEMM (2 FLOPs a parameter; the input embedding is a lookup, the LM head only adds). None when a name
    is unresolved or the device has no native peak for the precision (the row is skipped with that reason)."""
    if not (keys["device"] and keys["model"] and keys["precision"]):
        return None
    model = cat.models[keys["model"]]
    peak = cat.precisions[keys["precision"]].compute_peak_tflops(cat.devices[keys["device"]])
    flops_per_token = 2.0 * (model.active_params_b * 1e9 - model.embedding_params)
    if not peak or flops_per_token <= 0:
        return None
    return gpus * peak * 1e12 / flops_per_token


def derive_engine(source_group: str, framework: str = "") -> str | None:
    """Serving engine of a row from its source group (or framework text); None = unknown."""
    text = source_group.lower()
    for prefix, engine in (("trtllm", "trtllm"), ("nvidia_nim", "trtllm"), ("nim", "trtllm"), ("amd_", "vllm")):
        if text.startswith(prefix):
            return engine
    for word, engine in (("sglang", "sglang"), ("vllm", "vllm"), ("tensorrt-llm", "trtllm"), ("trt-llm", "trtllm")):
        if word in text or word in framework.lower():
            return engine
    return None


def derive_ep(notes: str) -> int | None:
    """Group size of a ``Parallelism 'DEPn'`` label in the notes, or the ``--ep N`` of a run with
    ``enable_attention_dp: true``; else None."""
    found = re.search(r"Parallelism '?DEP(\d+)'?", notes)
    if found:
        return int(found.group(1))
    found = re.search(r"--ep (\d+)", notes)
    return int(found.group(1)) if found and "enable_attention_dp: true" in notes else None


def derive_max_batch(notes: str) -> int | None:
    """A batch cap stated in the notes (``max_num_seqs=N``, ``max_batch_size N``), or None."""
    found = re.search(r"max_(?:num_seqs|batch_size)\s*[=:]?\s*(\d+)", notes)
    return int(found.group(1)) if found else None


def derive_throughput_basis(metric: str) -> str:
    """``total`` when the source's throughput label may count prompt + output tokens, else ``output``."""
    text = metric.lower()
    return "total" if "ambiguous" in text or text.startswith("total token") else "output"


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
    aliases = {"w4a16": "int4", "awq": "int4", "gptq": "int4", "w8a8": "int8"}
    return cat.precision(aliases.get(text, text)).key


def _shown(value: str, most: int = 40) -> str:
    """``value`` quoted for a message, cut to ``most`` characters (a 400-digit cell was echoed whole)."""
    return repr(value) if len(value) <= most else f"{value[:most]!r}... ({len(value):,} characters)"


def _number(value: str, path: Path, line: int, column: str, *, integer: bool = False,
            required: bool = False, allow_inf: bool = False) -> float | int | None:
    text = value.strip() if value is not None else ""
    if not text:
        if required:
            raise ModelError(f"{path}: line {line}: column '{column}' is empty; give a number")
        return None
    if has_separator(text):  # 28836,77 is 28836.77 in one locale and 2,883,677 in another
        raise ModelError(f"{path}: line {line}: column '{column}': {_shown(value)} has a separator; write a plain "
                         "decimal number with a dot for decimals and no thousands separators, e.g. 28836.77")
    try:
        number = float(text)
    except ValueError:
        raise ModelError(f"{path}: line {line}: column '{column}': not a number (got {_shown(value)}); "
                         "write a plain decimal number such as 1234.5") from None
    if allow_inf and number == math.inf:
        return number
    if integer:  # the whole-number rule first: tp -1 read "must be >= 0", then tp 0 "must be >= 1"
        if not math.isfinite(number) or number != int(number) or number < 1:
            raise ModelError(f"{path}: line {line}: column '{column}': must be a whole number >= 1 (got {_shown(value)})")
        return int(number)
    if not math.isfinite(number) or number < 0:
        raise ModelError(f"{path}: line {line}: column '{column}': must be a finite number >= 0 (got {_shown(value)})")
    return number


def load_measurements(path: Path | str, cat: Catalog) -> list[Measurement]:
    """Every row of a measurements CSV, names resolved against ``cat``."""
    path = Path(path)
    text = read_text(path, "measurements", ModelError)
    try:
        return _parse_measurements(path, text, cat)
    except csv.Error as exc:  # e.g. a lone carriage return or a NUL inside a field
        raise ModelError(f"{path}: not a valid CSV file ({exc}); save it as plain comma-separated text") from None


def _check_header(path: Path, header: list[str]) -> None:
    """A column named twice (the last copy would win silently) or a near-miss of a known column is an error."""
    seen: set[str] = set()
    for name in header:
        if name in seen:
            raise ModelError(f"{path}: column '{name}' appears twice in the header; keep one")
        seen.add(name)
        # compared in lower case: 'TP' beside 'tp' was taken as the user's own column, its values unread
        if (name not in KNOWN_COLUMNS and not OWN_LATENCY_COLUMN.fullmatch(name)
                and (close := difflib.get_close_matches(name.strip().lower(), KNOWN_COLUMNS, n=1, cutoff=0.8))):
            raise ModelError(f"{path}: unknown column '{name}' (did you mean '{close[0]}'?); rename it, "
                             "or give your own column a name unlike the known ones")


def _whole_tokens(n: float | int | None) -> float | None:
    """A token count read as a whole number, kept as a float (the JSON and the arithmetic of the fit)."""
    return None if n is None else float(n)


def _sharding_problem(cat: Catalog, model_key: str | None, tp: int, pp: int, ep: int) -> str | None:
    """Why a row's tp/pp/ep cannot run its model (``Model.sharding_problem``, or ep on a dense model; the row
    is then skipped with that reason), or None."""
    if model_key is None:
        return None
    m = cat.models[model_key]
    if ep > 1 and not m.is_moe:
        return f"ep {ep}: {m.key} is a dense model; expert parallelism needs an MoE model"
    if problem := m.sharding_problem(tp, pp, ep):
        degree, value, why = problem
        return f"{degree} {value}: {why}"
    return None


def _parse_measurements(path: Path, text: str, cat: Catalog) -> list[Measurement]:
    reader = csv.DictReader(io.StringIO(text, newline=""))
    header = reader.fieldnames or []
    if not header:
        raise ModelError(f"{path}: measurements file is empty; expected a CSV header with {', '.join(REQUIRED_COLUMNS)}")
    if other := other_separator(header):
        raise ModelError(f"{path}: the header is one column holding {other[0]!r} ({header[0][:60]!r}...): the file is "
                         f"{other[1]}-separated; save it as comma-separated CSV")
    _check_header(path, header)
    for column in REQUIRED_COLUMNS:
        if column not in header:
            raise ModelError(f"{path}: required column '{column}' is missing; "
                             f"use the columns of calibration.csv ({', '.join(REQUIRED_COLUMNS)}, ...)")
    rows: list[Measurement] = []
    for i, rec in enumerate(reader):
        line = i + 2
        if None in rec:
            raise ModelError(f"{path}: line {line}: more fields than the header has columns")
        if not any((v or "").strip() for v in rec.values()):
            continue  # a spreadsheet's row of empty cells (,,,,) is a blank line
        if (given := sum(v is not None for v in rec.values())) < len(header):  # a cut file ends in one
            bare_cr = "\r" in text.replace("\r\n", "")  # a lone carriage return ends a CSV row mid-line
            raise ModelError(f"{path}: line {line}: has {given} fields, the header has {len(header)} (a truncated "
                             "or misaligned row); " + ("the file holds a carriage return (\\r) inside a line, which "
                                                       "ends a CSV row: remove it" if bare_cr else
                                                       "fix the commas (an empty cell is written ,,)"))
        if [(rec[c] or "").strip() for c in header] == [c.strip() for c in header]:
            raise ModelError(f"{path}: line {line} repeats the header row (two CSV files pasted together?); "
                             "delete that line, or give each file to the command on its own")
        nums = {c: _number(rec.get(c) or "", path, line, c, allow_inf=c == "request_rate_qps")
                for c in OPTIONAL_NUMERIC if c in header}
        rate = nums.get("request_rate_qps")
        if rate is not None and math.isfinite(rate) and rate > MAX_QPS:  # the serving model overflowed into warnings
            raise ModelError(f"{path}: line {line}: column 'request_rate_qps': {rate:g} is above {MAX_QPS:,.0f} "
                             "requests/s; give the run's rate in requests per second (INF = all at once)")
        problems: list[str] = []
        keys: dict[str, str | None] = {}
        for what, col, fn in (("device", "gpu_key", resolve_device), ("model", "model", resolve_model),
                              ("precision", "precision", resolve_precision)):
            try:
                keys[what] = fn(cat, rec[col] or "")
            except CatalogError as exc:
                keys[what] = None
                problems.append(f"{col} {rec[col]!r}: {exc}")
        notes = rec.get("notes") or ""
        if keys["precision"] in ("fp8", "fp4") and keys["device"] and "natively MXFP4" in notes:
            # gpt-oss ships MXFP4 weights: FP4 math where the device has it, else dequantized to 16 bit
            keys["precision"] = "mxfp4" if cat.devices[keys["device"]].fp4_tflops else "int4"
        tp = int(_number(rec["tp"], path, line, "tp", integer=True, required=True))  # type: ignore[arg-type]
        ep = _number(rec.get("ep") or "", path, line, "ep", integer=True) or derive_ep(notes) or 1
        if ep > 1 and tp == ep:
            tp = 1  # 'DEPn': the tp column holds the group size
        engine = (rec.get("engine") or "").strip().lower() or derive_engine(rec["source_group"] or "",
                                                                          rec.get("framework") or "")
        if engine not in (None, "trtllm", "vllm", "sglang"):
            raise ModelError(f"{path}: line {line}: column 'engine': unknown engine {engine!r}; "
                             "use trtllm, vllm or sglang (or leave it empty)")
        max_batch = _number(rec.get("max_batch") or "", path, line, "max_batch", integer=True) or derive_max_batch(notes)
        basis = (rec.get("throughput_basis") or "").strip().lower() or derive_throughput_basis(
            rec.get("throughput_metric") or "")
        if basis not in ("output", "total"):
            raise ModelError(f"{path}: line {line}: column 'throughput_basis': {basis!r}; use output or total")
        pp = int(_number(rec["pp"] or "1", path, line, "pp", integer=True, required=True))  # type: ignore[arg-type]
        if (sharding_why := _sharding_problem(cat, keys["model"], tp, pp, int(ep))) is not None:
            problems.append(sharding_why)
        if engine == "trtllm" and keys["device"] and (vendor := cat.devices[keys["device"]].vendor) != "nvidia":
            # as the planner and `gpuplan estimate` refuse it (optimizer.planning.candidates.engine_reason)
            problems.append(f"engine trtllm: TensorRT-LLM runs on NVIDIA GPUs only, {keys['device']} is {vendor}")
        inp, out = (_whole_tokens(_number(rec[c], path, line, c, integer=True)) for c in ("input_len", "output_len"))
        tput = _number(rec["throughput_tok_s"], path, line, "throughput_tok_s")
        per_gpu = _number(rec.get("throughput_tok_s_per_gpu") or "", path, line, "throughput_tok_s_per_gpu")
        gpus = tp * pp * int(ep)
        for col, value in (("throughput_tok_s", tput), ("throughput_tok_s_per_gpu", per_gpu),
                           *((c, nums.get(c)) for c in MEASURED_LATENCIES)):
            if value == 0:  # read as "not measured" (the row left out of the fit unsaid) or a 0 ms target
                raise ModelError(f"{path}: line {line}: column '{col}': is 0 (got {_shown(rec[col])}); no run serves "
                                 "at 0 tokens/s or in 0 ms: leave the cell empty where nothing was measured")
        # (a row whose tp/pp/ep cannot run is skipped with that reason instead: its GPU count is no count)
        if tput and per_gpu and sharding_why is None and abs(tput / (per_gpu * gpus) - 1.0) > PER_GPU_TOLERANCE:
            raise ModelError(f"{path}: line {line}: column 'throughput_tok_s': {tput:g} is not "
                             f"throughput_tok_s_per_gpu {per_gpu:g} x {gpus} GPUs (tp {tp} x pp {pp} x ep {int(ep)}) "
                             f"= {per_gpu * gpus:g}; throughput_tok_s is the whole group's tokens/s, "
                             "throughput_tok_s_per_gpu that / its GPUs: fix the one that is wrong (or leave "
                             "throughput_tok_s_per_gpu empty)")
        if tput is not None and basis == "total" and inp and out:
            tput = tput * out / (inp + out)
        if tput and sharding_why is None and (ceiling := compute_ceiling_tok_s(cat, keys, gpus)) is not None \
                and tput > ceiling:
            raise ModelError(f"{path}: line {line}: column 'throughput_tok_s': {rec['throughput_tok_s'].strip()} "
                             f"output tokens/s is more than {gpus} × {keys['device']} can compute for "
                             f"{keys['model']} at {keys['precision']}: at most {ceiling:,.0f} (every output token "
                             "takes 2 FLOPs per active parameter beside the embeddings, at the dense peak); check "
                             "the unit (tokens/s of the whole group) and the row's tp, pp and ep")
        rows.append(Measurement(
            row_id=(rec.get("row_id") or str(line)).strip(), line=line,
            source_group=(rec["source_group"] or "").strip(), scenario=(rec["scenario"] or "").strip(),
            gpu_name=rec["gpu_key"] or "", model_name=rec["model"] or "", precision_name=rec["precision"] or "",
            device_key=keys["device"], model_key=keys["model"], precision_key=keys["precision"],
            unresolved="; ".join(problems) or None,
            tp=tp,
            pp=pp,
            input_tokens=inp, output_tokens=out, throughput_tok_s=tput,
            concurrency=nums.get("concurrency_or_batch"), request_rate_qps=nums.get("request_rate_qps"),
            ttft_mean_ms=nums.get("ttft_mean_ms"), ttft_p99_ms=nums.get("ttft_p99_ms"),
            tpot_mean_ms=nums.get("tpot_mean_ms"), tpot_p99_ms=nums.get("tpot_p99_ms"),
            e2e_latency_s=nums.get("e2e_latency_s"),
            engine=engine, ep=int(ep), max_batch=int(max_batch) if max_batch else None, throughput_basis=basis,
        ))
    if not rows:
        raise ModelError(f"{path}: the header has no rows under it; add at least one measurement row "
                         "(the format of calibration.csv)")
    return rows
