"""Capacity tables: measured capacities at the SLO instead of the performance model.

For users who profiled their own serving stack (the input of Mélange, arXiv 2404.14527):
``gpuplan optimize PLAN.yaml --capacity-table FILE.csv``. One CSV, one row per
(workload, unit, request-size bucket)::

    workload,unit,gpus,cost_usd_per_hour,input_bucket,output_bucket,max_request_rate_qps,bucket_fraction,total_request_rate_qps
    chat,A10G,1,1.01,0,0,2,0.2,30
    chat,A100-80GB,1,3.67,0,0,20,0.2,30
    ...

Required columns

- ``workload``: a workload name of the plan.
- ``unit``: what one replica runs on — a device or a multi-GPU unit (``2xA100``).
- ``cost_usd_per_hour``: rental price of one unit, > 0 and at most $1,000 per GPU-hour (the plan's
  objective must be ``cloud``; a free unit would make every fleet of it cost $0, an arbitrary answer).
- ``input_bucket``, ``output_bucket``: labels of the request-size bucket (e.g. ``0`` or
  ``1-25``); the pair identifies the bucket.
- ``max_request_rate_qps``: the largest request rate (req/s) one unit sustains *within the
  SLO* when serving only this bucket; 0 = cannot meet the SLO on this bucket.
- ``bucket_fraction``: the bucket's share of the workload's requests (sums to 1).
- ``total_request_rate_qps``: the workload's total rate; must equal the plan's ``qps``.

Optional columns

- ``gpus`` (default 1, at most 1,024, as tp, pp and gpus_per_node): GPUs in one unit (one replica); ``gpus_per_node`` (default =
  ``gpus``): GPUs per server or cloud instance; ``device``: catalog key of the GPU (gives
  ``tdp_w`` for the power figures); ``precision``, ``tp``, ``pp``: how the unit serves, for
  the report (tp·pp = gpus; tp defaults to gpus / pp).

Rules (each broken rule is a one-line error naming file, row, column and fix): every
unit lists every bucket of its workload; a unit keeps one cost and one size on every
row; a bucket keeps one fraction and a workload one total rate on every row. Lines
starting with ``#`` are comments.

With continuous routing shares in the MILP the answer is exact for these tables, never
worse than Mélange's slice-based assignment.
"""

from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass, field
from pathlib import Path

from catalog.errors import GpuplanError, suggest
from catalog.files import has_separator, other_separator, read_text
from catalog.load import Catalog
from catalog.names import slug
from catalog.schema import DEVICE_CEILINGS
from optimizer.planning.candidate_set import (
    BucketSpec,
    Candidate,
    CandidateSet,
    UnitSpec,
    WorkloadCandidates,
    cloud_limit_notes,
    cost_per_replica_usd,
)
from optimizer.planning.milp.problem import MAX_BUCKET_LOAD
from optimizer.results.money import MoneyAssumptions, UnitPrice
from optimizer.results.plan_result import Diagnostic
from workloads.spec import Plan, plan_key

REQUIRED = ("workload", "unit", "cost_usd_per_hour", "input_bucket", "output_bucket",
            "max_request_rate_qps", "bucket_fraction", "total_request_rate_qps")
OPTIONAL = ("gpus", "gpus_per_node", "device", "precision", "tp", "pp")


class CapacityTableError(GpuplanError):
    """A capacity-table CSV is malformed or disagrees with the plan."""


@dataclass(frozen=True)
class TableUnit:
    """One unit (a replica's hardware) as the table prices and sizes it."""

    name: str
    cost_usd_per_hour: float
    gpus: int = 1
    gpus_per_node: int = 1
    device: str | None = None
    precision: str = ""
    tp: int = 1
    pp: int = 1


@dataclass(frozen=True)
class TableWorkload:
    """A workload's buckets, their fractions, its total rate and each unit's capacity per bucket."""

    name: str
    total_request_rate_qps: float
    buckets: tuple[tuple[str, str], ...]
    fractions: tuple[float, ...]
    capacity_qps: dict[str, tuple[float, ...]] = field(default_factory=dict)

    @property
    def bucket_qps(self) -> tuple[float, ...]:
        return tuple(f * self.total_request_rate_qps for f in self.fractions)


@dataclass(frozen=True)
class CapacityTable:
    path: str
    workloads: dict[str, TableWorkload]
    units: dict[str, TableUnit]


def _err(path: str, row: int | None, column: str | None, msg: str) -> CapacityTableError:
    where = path
    if row is not None:
        where += f": row {row}"
    if column is not None:
        where += f", column {column}"
    return CapacityTableError(f"{where}: {msg}")


def _number(path: str, row: int, col: str, text: str, *, positive: bool = False) -> float:
    if has_separator(text):  # float() would take 1_000; a separator is never silently dropped
        raise _err(path, row, col, f"{text!r} has a separator; write a plain decimal number with a dot "
                                   "for decimals and no thousands separators")
    try:
        value = float(text)
    except ValueError:
        raise _err(path, row, col, f"not a number (got {text!r}); write a decimal number") from None
    if not math.isfinite(value):
        raise _err(path, row, col, f"must be a finite number (got {text!r})")
    if value < 0 or (positive and value == 0):
        raise _err(path, row, col, f"must be {'> 0' if positive else '>= 0'} (got {text!r})")
    return value


def _integer(path: str, row: int, col: str, text: str) -> int:
    value = _number(path, row, col, text, positive=True)
    if value != int(value):
        raise _err(path, row, col, f"must be a whole number (got {text!r})")
    return int(value)


def _gpu_count(path: str, row: int, col: str, text: str) -> int:
    """A unit's GPU count (gpus, gpus_per_node, tp, pp): a whole number from 1 to the catalog's ceiling of
    GPUs per server (1,024; a larger figure is a slip, e.g. a rate typed in the wrong column)."""
    value = _integer(path, row, col, text)
    ceiling, example = DEVICE_CEILINGS["gpus_per_node"]
    if value > ceiling:
        raise _err(path, row, col, f"{value:,} GPUs is above the ceiling of {ceiling:,} ({example}); "
                   "write the GPUs of one replica")
    return value


def parse_capacity_table(text: str, path: str) -> CapacityTable:
    """Parse and check the CSV text of a capacity table (see the module docstring)."""
    # Comment lines become blank lines, so that reader.line_num stays the file's line number.
    lines = ["" if ln.lstrip().startswith("#") else ln for ln in text.splitlines()]
    reader = csv.reader(io.StringIO("\n".join(lines)))
    header: list[str] = []
    for first in reader:
        if any(c.strip() for c in first):
            header = [h.strip() for h in first]
            break
    if not header:
        raise _err(path, None, None, "empty capacity table; write a header row and one row per unit and bucket")
    header_row = reader.line_num
    if other := other_separator(header):
        raise _err(path, header_row, None, f"the header is one column holding {other[0]!r}: the file is separated by "
                   f"{other[1]}s, a capacity table by commas; save it as comma-separated CSV")
    for h in header:
        if h not in REQUIRED and h not in OPTIONAL:
            raise _err(path, header_row, h, f"unknown column{suggest(h, REQUIRED + OPTIONAL)}; "
                       f"columns are {', '.join(REQUIRED + OPTIONAL)}")
    if twice := next((h for i, h in enumerate(header) if h in header[:i]), None):
        raise _err(path, header_row, twice, "appears twice in the header; keep one")
    missing = [c for c in REQUIRED if c not in header]
    if missing:
        raise _err(path, header_row, missing[0], "required column is missing; add it "
                   f"(required: {', '.join(REQUIRED)})")

    units: dict[str, TableUnit] = {}
    unit_row: dict[str, int] = {}
    rows_by_workload: dict[str, list[tuple[int, dict[str, str]]]] = {}
    for raw in reader:
        i = reader.line_num
        if not any(c.strip() for c in raw):
            continue
        if len(raw) != len(header):
            raise _err(path, i, None, f"has {len(raw)} fields, the header has {len(header)}; "
                       "fix the commas")
        rec = {h: c.strip() for h, c in zip(header, raw, strict=True)}
        for col in REQUIRED:
            if not rec[col]:
                raise _err(path, i, col, "empty; every row needs a value here")
        unit = _unit_of(path, i, rec)
        if unit.name in units and units[unit.name] != unit:
            raise _err(path, i, None, f"unit '{unit.name}' differs from its definition on row "
                       f"{unit_row[unit.name]} (cost, gpus, device, precision, tp or pp); "
                       "use one name per distinct unit")
        clash = next((n for n in units if n != unit.name and slug(n) == slug(unit.name)), None)
        if clash is not None:  # the plan keys a unit by slug(name): two would be one MILP variable name
            raise _err(path, i, "unit", f"unit '{unit.name}' and unit '{clash}' (row {unit_row[clash]}) differ only "
                       f"in case or punctuation (both '{slug(unit.name)}'); spell one unit one way, or rename one")
        units.setdefault(unit.name, unit)
        unit_row.setdefault(unit.name, i)
        rows_by_workload.setdefault(rec["workload"], []).append((i, rec))
    if not rows_by_workload:
        raise _err(path, None, None, "no data rows; add one row per unit and bucket")
    workloads = {w: _workload_of(path, w, rows) for w, rows in rows_by_workload.items()}
    return CapacityTable(path, workloads, units)


def _unit_of(path: str, i: int, rec: dict[str, str]) -> TableUnit:
    gpus = _gpu_count(path, i, "gpus", rec["gpus"]) if rec.get("gpus") else 1
    per_node = _gpu_count(path, i, "gpus_per_node", rec["gpus_per_node"]) if rec.get("gpus_per_node") else gpus
    pp = _gpu_count(path, i, "pp", rec["pp"]) if rec.get("pp") else 1
    tp = _gpu_count(path, i, "tp", rec["tp"]) if rec.get("tp") else max(gpus // pp, 1)
    if tp * pp != gpus:
        raise _err(path, i, "tp", f"tp·pp = {tp}·{pp} = {tp * pp} differs from the unit's gpus ({gpus}); "
                   "a unit is one replica: make tp·pp equal gpus")
    if per_node % gpus and gpus % per_node:
        raise _err(path, i, "gpus_per_node", f"{per_node} GPUs per server cannot hold units of {gpus} GPUs "
                   "without waste; use a multiple or a divisor of gpus")
    cost = _number(path, i, "cost_usd_per_hour", rec["cost_usd_per_hour"], positive=True)
    ceiling, example = DEVICE_CEILINGS["cloud_usd_per_gpu_hour"]
    if cost > ceiling * gpus:  # a purchase price or a yearly figure typed as an hourly one
        raise _err(path, i, "cost_usd_per_hour", f"${cost:,.2f} an hour for {gpus} GPU(s) is above ${ceiling:,} "
                   f"per GPU-hour ({example}); write the unit's hourly rental price")
    return TableUnit(
        name=rec["unit"], cost_usd_per_hour=cost,
        gpus=gpus, gpus_per_node=max(per_node, gpus), device=rec.get("device") or None,
        precision=rec.get("precision") or "", tp=tp, pp=pp,
    )


def _workload_of(path: str, name: str, rows: list[tuple[int, dict[str, str]]]) -> TableWorkload:
    buckets: list[tuple[str, str]] = []
    fraction: dict[tuple[str, str], tuple[float, int]] = {}
    total: tuple[float, int] | None = None
    cap: dict[tuple[str, tuple[str, str]], float] = {}
    for i, rec in rows:
        b = (rec["input_bucket"], rec["output_bucket"])
        f = _number(path, i, "bucket_fraction", rec["bucket_fraction"])
        if f > 1:
            raise _err(path, i, "bucket_fraction", f"a share of requests must be <= 1 (got {f:g})")
        if b in fraction and abs(fraction[b][0] - f) > 1e-12:
            raise _err(path, i, "bucket_fraction", f"bucket {b[0]}/{b[1]} of '{name}' has fraction {f:g} here "
                       f"and {fraction[b][0]:g} on row {fraction[b][1]}; give one fraction per bucket")
        if b not in fraction:
            buckets.append(b)
            fraction[b] = (f, i)
        t = _number(path, i, "total_request_rate_qps", rec["total_request_rate_qps"], positive=True)
        if total is not None and abs(total[0] - t) > 1e-12 * max(1.0, t):
            raise _err(path, i, "total_request_rate_qps", f"workload '{name}' has total rate {t:g} here and "
                       f"{total[0]:g} on row {total[1]}; give one total rate per workload")
        total = total or (t, i)
        key = (rec["unit"], b)
        if key in cap:
            raise _err(path, i, None, f"unit '{rec['unit']}' lists bucket {b[0]}/{b[1]} of '{name}' twice; "
                       "keep one row")
        cap[key] = _number(path, i, "max_request_rate_qps", rec["max_request_rate_qps"])
    fractions = tuple(fraction[b][0] for b in buckets)
    if abs(sum(fractions) - 1.0) > 1e-6:
        raise _err(path, rows[0][0], "bucket_fraction", f"the bucket fractions of '{name}' sum to "
                   f"{sum(fractions):.6g}, not 1; fix them so they add up to 1")
    units = list(dict.fromkeys(rec["unit"] for _, rec in rows))
    capacity: dict[str, tuple[float, ...]] = {}
    for u in units:
        for b in buckets:
            if (u, b) not in cap:
                raise _err(path, None, None, f"unit '{u}' has no row for bucket {b[0]}/{b[1]} of '{name}'; "
                           "add it (max_request_rate_qps 0 if it cannot meet the SLO there)")
        capacity[u] = tuple(cap[(u, b)] for b in buckets)
    if total is None:  # unreachable: a workload has at least one row
        raise _err(path, None, None, f"workload '{name}' has no rows")
    for (u, b), mu in cap.items():
        lam = fraction[b][0] * total[0]
        if mu > 0 and lam / mu > MAX_BUCKET_LOAD:  # the MILP would not route the bucket to it (carried_capacity)
            row, rec = next((i, rec) for i, rec in rows
                            if rec["unit"] == u and (rec["input_bucket"], rec["output_bucket"]) == b)
            raise _err(path, row, "max_request_rate_qps", f"{rec['max_request_rate_qps'].strip()} req/s would take "
                       f"{lam / mu:.3g} units of '{u}' "
                       f"to carry bucket {b[0]}/{b[1]}'s {lam:g} req/s, more than {MAX_BUCKET_LOAD:,.0f}: check the "
                       "unit (req/s, per unit), or write 0 if the unit cannot serve the bucket")
    return TableWorkload(name, total[0], tuple(buckets), fractions, capacity)


def load_capacity_table(path: Path | str) -> CapacityTable:
    """Read and check a capacity-table CSV file."""
    return parse_capacity_table(read_text(path, "capacity table", CapacityTableError), str(path))


def check_against_plan(table: CapacityTable, plan: Plan, where: str = "plan") -> None:
    """The table and the plan name the same workloads at the same rates, under the cloud objective."""
    if plan.objective != "cloud":
        raise CapacityTableError(
            f"{table.path}: prices units by the hour (cost_usd_per_hour), but {where} has objective "
            f"'{plan.objective}'; set `objective: cloud` in the plan")
    names = [w.name for w in plan.workloads]
    for name, tw in table.workloads.items():
        if name not in names:
            raise CapacityTableError(f"{table.path}: workload '{name}' is not in {where}{suggest(name, names)}; "
                                     "use a workload name of the plan")
        qps = plan.workload(name).request_rate_qps
        if abs(qps - tw.total_request_rate_qps) > 1e-9 * max(1.0, qps):
            raise CapacityTableError(
                f"{table.path}: total_request_rate_qps of '{name}' is {tw.total_request_rate_qps:.15g} but {where} "
                f"says qps {qps:.15g}; make them agree")  # 15 digits: 30.0000001 is not shown as 30
    for name in names:
        if name not in table.workloads:
            raise CapacityTableError(f"{table.path}: no rows for workload '{name}' of {where}; "
                                     "add its units and buckets, or remove it from the plan")


def table_candidates(table: CapacityTable, plan: Plan, catalog: Catalog | None = None) -> CandidateSet:
    """The table as a :class:`optimizer.planning.candidates.CandidateSet` (one candidate per unit and workload).

    A unit is its own "device" in the MILP: its GPUs are counted in servers of
    ``gpus_per_node``, priced at ``cost_usd_per_hour / gpus`` per GPU-hour, and draw the
    catalog ``tdp_w`` of its ``device`` (0 W when it names none).
    """
    check_against_plan(table, plan)
    a = MoneyAssumptions.from_plan(plan)
    allowed = None
    if plan.allowed_devices is not None and catalog is not None:
        allowed = {catalog.device(d).key for d in plan.allowed_devices}
    units = {}
    for u in table.units.values():
        dev = None
        if u.device is not None and catalog is not None:
            try:
                dev = catalog.device(u.device)
            except GpuplanError as exc:
                detail = str(exc).removeprefix(f"{u.device}: ")
                raise CapacityTableError(f"{table.path}: unit '{u.name}', column device: {detail}") from None
        units[u.name] = UnitSpec(
            key=u.name, gpus_per_node=u.gpus_per_node,
            price=UnitPrice(None, u.cost_usd_per_hour / u.gpus, dev.tdp_w if dev else None),
            inventory_gpus=plan.inventory.get(dev.key) if dev is not None else None,
            allowed=allowed is None or (dev is not None and dev.key in allowed), device=dev,
        )
    workloads = []
    for w in plan.workloads:
        tw = table.workloads[w.name]
        buckets = tuple(
            BucketSpec(i, f, f * tw.total_request_rate_qps, label=f"in {b[0]} / out {b[1]}")
            for i, (b, f) in enumerate(zip(tw.buckets, tw.fractions, strict=True))
        )
        cands = []
        for name, caps in tw.capacity_qps.items():
            u = table.units[name]
            reason = None if any(c > 0 for c in caps) else "max_request_rate_qps is 0 in every bucket"
            if not units[name].allowed:
                reason = f"device {u.device or name} is not in allowed_devices"
            cands.append(Candidate(
                workload=w.name, key=slug(name), device=name, precision=u.precision, tp=u.tp, pp=u.pp,
                gpus=u.gpus, capacity_qps=caps, limited_by=tuple("measured" for _ in caps),
                cost_per_replica_usd=cost_per_replica_usd(units[name], u.gpus, a), pruned_reason=reason,
            ))
        workloads.append(WorkloadCandidates(w, w.model, buckets, tuple(cands)))
    allowed_list = tuple(plan.allowed_devices) if plan.allowed_devices is not None else None
    notes = cloud_limit_notes(plan) + unapplied_inventory(plan, units) + unapplied_overrides(plan)
    return CandidateSet(tuple(workloads), units, notes, plan.objective, allowed_list)


def unapplied_overrides(plan: Plan) -> tuple[Diagnostic, ...]:
    """A warning per plan ``devices:`` / ``platforms:`` entry whose fields a capacity table makes moot: its units
    take their price, size and server from the table, and only ``tdp_w`` (power) from their device column."""
    notes = []
    for section, entries in (("devices", plan.devices), ("platforms", plan.platforms)):
        for key, fields in entries.items():
            if moot := [f for f in fields if not (section == "devices" and f == "tdp_w")]:
                notes.append(Diagnostic("warning", "override_not_applied",
                                        f"{section}.{key}: {', '.join(moot)} change nothing with --capacity-table: "
                                        "its units take their price (cost_usd_per_hour), GPUs and servers from the "
                                        "table (a unit's device column gives its tdp_w only)"))
    return tuple(notes)


def unapplied_inventory(plan: Plan, units: dict[str, UnitSpec]) -> tuple[Diagnostic, ...]:
    """A warning per plan inventory entry that caps no unit: a unit is capped by the inventory of its ``device``
    column (``inventory: {h100-sxm: 0}`` said nothing and capped nothing beside a unit named h100-sxm without one)."""
    covered = {u.device.key for u in units.values() if u.device is not None}
    notes = []
    for key, gpus in plan.inventory.items():
        if key in covered:
            continue
        named = [n for n in units if plan_key(n) == key]
        why = (f"unit '{named[0]}' of the capacity table has no device column; give it device {key} to cap it"
               if named else f"no unit of the capacity table has device {key} in its device column")
        notes.append(Diagnostic("warning", "inventory_not_applied",
                                f"inventory.{key} ({gpus:,} GPUs) limits nothing: {why}"))
    return tuple(notes)
