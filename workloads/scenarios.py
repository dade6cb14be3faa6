"""Scenario files: a base plan, named variants that override fields by dotted path, sweeps.

```yaml
base: chat-fleet.yaml              # a plan file (relative to this file; ~ is the home folder) ...
# plan: {...}                      # ... or the plan inline
variants:
  - name: traffic-2x
    set: {workloads.chat.qps: 80}
  - name: h200-cheaper
    set: {devices.h200-sxm.purchase_usd: 24000, electricity_usd_per_kwh: 0.2}
sweeps:
  - {name: budget, kind: budget, from: 1000000, to: 5000000, steps: 5}   # served demand vs capex budget
  - {name: growth, kind: demand, multipliers: [1, 1.5, 2]}               # cheapest fleet vs demand
  - {name: h200-price, kind: price, device: h200-sxm, from: 20000, to: 35000, steps: 4}
uncertainty:                       # for --samples K
  demand: {sigma: 0.25}            # lognormal multiplier on every workload's rate, median 1
  prices: {h100-sxm: {low: 0.8, high: 1.2}}   # uniform multiplier on purchase_usd and cloud price
```

Dotted paths: ``workloads.NAME.FIELD`` (a workload by name), ``devices.KEY.FIELD`` (a catalog
field of a device, e.g. a negotiated price), ``budget.capex_usd``, or any top-level plan
field. A path that names nothing is an error listing the valid names at that level. Field
names never contain a dot, so NAME is everything between the first and the last dot:
``workloads.chat-v1.5.qps`` is field ``qps`` of workload ``chat-v1.5``; NAME may also be
quoted (``workloads."chat-v1.5".qps``).

Scenario names are unique: a sweep's levels are labelled with as many digits as it takes
to tell them apart (``b@100,000``, ``b@100,000.5``), and a sweep whose levels repeat is an
error.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from catalog.errors import GpuplanError, WorkloadError, suggest
from catalog.files import MAX_PLAN_BYTES, format_validation_error, read_yaml
from catalog.load import Catalog
from catalog.schema import Device, Platform, Strict
from workloads.load import parse_plan, resolve_catalog
from workloads.spec import Plan, Workload, plan_key

MAX_SCENARIOS = 10_000


class Variant(Strict):
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.+-]*$", max_length=64)
    set: dict[str, Any]

    @field_validator("set")
    @classmethod
    def _changes_something(cls, value: dict[str, Any]) -> dict[str, Any]:
        """A variant changes at least one field (an empty one is the base again, under another name)."""
        if not value:
            raise ValueError("changes nothing; give the fields to change, e.g. set: {workloads.chat.qps: 80}")
        seen: dict[str, str] = {}
        for path in value:
            if (first := seen.setdefault(_same_field(path), path)) != path:
                raise ValueError(f"'{first}' and '{path}' set the same field (device and platform names are read "
                                 "in any case, '_' as '-'); keep one")
        return value


def _same_field(path: str) -> str:
    """``path`` with its device or platform name as the plan reads it (``plan_key``): ``devices.A10.purchase_usd``
    and ``devices.a10.purchase_usd`` set one field, and a set mapping holding both kept whichever came last."""
    top = path.split(".", 1)[0]
    if top == "inventory" and "." in path:
        return f"inventory.{plan_key(path.split('.', 1)[1])}"
    if top in ("devices", "platforms") and (split := _split_named(path, top)) is not None:
        return f"{top}.{plan_key(split[0], device=top == 'devices')}.{split[1]}"
    return path


class Sweep(Strict):
    """A generated family of scenarios.

    ``budget``: capex budget levels from..to in ``steps`` (the best demand each buys);
    ``demand``: rate multipliers (the cheapest fleet for each); ``price``: a device's
    ``field`` (default purchase_usd) from..to in ``steps``.
    """

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.+-]*$", max_length=48)
    kind: Literal["budget", "demand", "price"]
    from_: Annotated[float, Field(gt=0, allow_inf_nan=False)] | None = Field(None, alias="from")
    to: Annotated[float, Field(gt=0, allow_inf_nan=False)] | None = None
    steps: Annotated[int, Field(ge=1, le=MAX_SCENARIOS)] = 5
    multipliers: list[Annotated[float, Field(gt=0, le=1000, allow_inf_nan=False)]] | None = None
    device: str | None = None
    field: str = "purchase_usd"

    model_config = ConfigDict(populate_by_name=True)  # with Strict's extra="forbid", frozen

    @model_validator(mode="after")
    def _check(self) -> Sweep:
        uses = {"budget": ("from", "to", "steps"), "demand": ("multipliers",),
                "price": ("from", "to", "steps", "device", "field")}
        given = {"from" if f == "from_" else f for f in self.model_fields_set} - {"name", "kind"}
        if stray := [f for f in ("from", "to", "steps", "multipliers", "device", "field")
                     if f in given and f not in uses[self.kind]]:
            raise ValueError(f"a {self.kind} sweep takes {', '.join(uses[self.kind])}; it would ignore "
                             f"{', '.join(stray)}: remove {'it' if len(stray) == 1 else 'them'} (or change kind)")
        if self.kind == "demand":
            if not self.multipliers:
                raise ValueError("a demand sweep needs multipliers: [1, 1.5, 2, ...]")
            twice = sorted({m for m in self.multipliers if self.multipliers.count(m) > 1})
            if twice:
                raise ValueError(f"multipliers lists {twice[0]:g} twice; each level once")
        else:
            if self.from_ is None or self.to is None:
                raise ValueError(f"a {self.kind} sweep needs from and to")
            if self.to < self.from_:
                raise ValueError(f"to ({self.to:g}) is below from ({self.from_:g})")
            if self.kind == "price" and not self.device:
                raise ValueError("a price sweep needs device: KEY")
            if self.steps > 1 and self.to == self.from_:
                raise ValueError(f"from and to are both {self.to:g}, so the {self.steps} steps are one level; "
                                 "use steps: 1 or a wider range")
        return self

    def levels(self) -> list[float]:
        if self.kind == "demand":
            return list(self.multipliers or [])
        lo, hi = float(self.from_), float(self.to)  # type: ignore[arg-type]
        if self.steps == 1:
            return [lo]
        return [lo + (hi - lo) * i / (self.steps - 1) for i in range(self.steps)]


class PriceSpread(Strict):
    low: Annotated[float, Field(gt=0, allow_inf_nan=False)]
    high: Annotated[float, Field(gt=0, allow_inf_nan=False)]

    @model_validator(mode="after")
    def _order(self) -> PriceSpread:
        if self.high < self.low:
            raise ValueError(f"high ({self.high:g}) is below low ({self.low:g})")
        return self


class DemandSpread(Strict):
    sigma: Annotated[float, Field(ge=0, le=3, allow_inf_nan=False)]


class Uncertainty(Strict):
    demand: DemandSpread | None = None
    prices: dict[str, PriceSpread] = Field(default_factory=dict)


class ScenarioFile(Strict):
    base: str | None = None
    plan: dict[str, Any] | None = None
    variants: list[Variant] = Field(default_factory=list)
    sweeps: list[Sweep] = Field(default_factory=list)
    uncertainty: Uncertainty | None = None

    @field_validator("variants", "sweeps", mode="before")
    @classmethod
    def _a_list(cls, value: Any, info: ValidationInfo) -> Any:
        """``variants:`` left empty (YAML null) read as pydantic's 'Input should be a valid list'."""
        if value is None:
            example = ("variants (- {name: traffic-2x, set: {workloads.chat.qps: 80}})" if info.field_name == "variants"
                       else "sweeps (- {name: growth, kind: demand, multipliers: [1, 1.5, 2]})")
            raise ValueError(f"is empty; it takes a list of {example}, or leave {info.field_name} out")
        return value

    @model_validator(mode="after")
    def _check(self) -> ScenarioFile:
        if (self.base is None) == (self.plan is None):
            # `base: ~` is YAML's null, not the home folder
            tilde = " (`base: ~` alone is YAML's null: write the path, e.g. base: ~/plans/chat.yaml)" \
                if self.base is None and "base" in self.model_fields_set else ""
            raise ValueError(f"give exactly one of base (a plan file) or plan (an inline plan){tilde}")
        if self.base is not None and not self.base.strip():  # read as the scenario file's own folder
            raise ValueError("base is empty; give the plan file's path, e.g. base: chat-fleet.yaml")
        names = [v.name for v in self.variants] + [s.name for s in self.sweeps]
        if "base" in names:
            raise ValueError("scenario name 'base' is the base plan's row; name the variant or sweep otherwise")
        if dup := sorted({n for n in names if names.count(n) > 1}):
            raise ValueError(f"scenario name '{dup[0]}' is used twice; names must be unique")
        return self


class Scenario(Strict):
    """One concrete what-if: a validated plan plus how it is solved."""

    name: str
    group: str = Field(description="'base', 'variant' or the sweep's name")
    mode: Literal["min_cost", "max_demand"] = "min_cost"
    level: float | None = Field(None, description="the sweep level (budget USD, multiplier, price)")
    overrides: dict[str, Any] = Field(default_factory=dict)
    plan: Plan


def _valid_fields(model: type[BaseModel]) -> list[str]:
    return list(model.model_fields)


def _split_named(path: str, top: str) -> tuple[str, str] | None:
    """``top.NAME.FIELD`` → (NAME, FIELD): NAME is all between the first and the last dot, quotes removed."""
    rest = path[len(top) + 1:]
    if "." not in rest:
        return None
    name, field = rest.rsplit(".", 1)
    if len(name) >= 2 and name[0] == name[-1] and name[0] in "\"'":
        name = name[1:-1]
    return (name, field) if name and field else None


def _entry(data: dict[str, Any], section: str, key: str, *, device: bool = True) -> dict[str, Any]:
    """The override mapping of ``key`` in ``data[section]`` (devices, platforms), its entries under other spellings of
    the same key (``H200-SXM``) merged into it: the plan allows one entry per device or platform."""
    entries = data.get(section) if isinstance(data.get(section), dict) else {}
    merged: dict[str, Any] = {}
    for name in [n for n in entries if plan_key(n, device=device) == key]:
        old = entries.pop(name)
        merged.update(old if isinstance(old, dict) else {})
    entries[key] = merged
    data[section] = entries
    return merged


def _set_keyed(data: dict[str, Any], path: str, value: Any, where: str, known: Mapping[str, Any],
               cls: type[BaseModel], fixed: set[str], example: str) -> None:
    """Set ``devices.KEY.FIELD`` or ``platforms.KEY.FIELD`` (``path``) in a raw plan mapping: KEY one of
    ``known``, FIELD a field of ``cls`` outside ``fixed``; or raise naming the valid ones."""
    top = path.split(".", 1)[0]
    what = top[:-1]  # device, platform
    split = _split_named(path, top)
    if split is None:
        raise WorkloadError(f"{where}: '{path}': write {top}.KEY.FIELD, e.g. {example}")
    key, field = plan_key(split[0], device=top == "devices"), split[1]
    editable = [f for f in cls.model_fields if f not in fixed]
    owner, _, inner = key.partition(".")
    if key not in known and owner in known and inner.split(".")[0] in cls.model_fields:
        # devices.a10.ranges.purchase_usd read as device 'a10.ranges'
        inner = inner.split(".")[0]
        if inner in editable:
            raise WorkloadError(f"{where}: '{path}': a path ends at a {what}'s field; set it whole, "
                                f"{top}.{owner}.{inner}: VALUE")
        raise WorkloadError(f"{where}: '{path}': a path ends at a {what}'s field, and {inner} is not one a "
                            f"what-if sets; valid: {', '.join(editable)}")
    if key not in known:
        raise WorkloadError(f"{where}: '{path}': unknown {what} '{split[0]}'{suggest(key, known)}")
    if field not in editable:
        raise WorkloadError(f"{where}: '{path}': unknown {what} field '{field}'{suggest(field, editable)}; "
                            f"valid: {', '.join(editable)}")
    _entry(data, top, key, device=top == "devices")[field] = value


def apply_override(data: dict[str, Any], path: str, value: Any, catalog: Catalog, where: str) -> None:
    """Set ``path`` (dotted) in a raw plan mapping, or raise naming the valid fields there."""
    parts = path.split(".")
    top = parts[0]
    plan_fields = _valid_fields(Plan)
    if top == "workloads":
        names = [w.get("name") for w in data.get("workloads", []) if isinstance(w, dict)]
        split = _split_named(path, top)
        if split is None:
            raise WorkloadError(f"{where}: '{path}': write workloads.NAME.FIELD (workloads: {', '.join(map(str, names))})")
        name, field = split
        nested = next(((n, name[len(str(n)) + 1:].split(".")[0]) for n in names if name.startswith(f"{n}.")
                       and name[len(str(n)) + 1:].split(".")[0] in Workload.model_fields), None)
        if name not in names and nested:  # workloads.chat.slo.ttft_p99_ms read as workload 'chat.slo'
            whole = f"workloads.{nested[0]}.{nested[1]}"
            raise WorkloadError(f"{where}: '{path}': a path ends at a workload's field; set it whole, {whole}: VALUE "
                                f"(a mapping such as slo: {{...}} replaces the plan's: give every key it keeps)")
        if name not in names:
            raise WorkloadError(f"{where}: '{path}': no workload '{name}'{suggest(name, names)}; "
                                f"workloads: {', '.join(map(str, names))}")
        settable = [f for f in Workload.model_fields if f != "name"]
        if field == "name":  # 'unknown field 'name' (did you mean 'name'?)' said nothing
            raise WorkloadError(f"{where}: '{path}': a variant cannot rename a workload (scenarios and their results "
                                f"address it by name); set another field: {', '.join(settable)}")
        if field not in settable:
            raise WorkloadError(f"{where}: '{path}': unknown workload field '{field}'"
                                f"{suggest(field, settable)}; valid: {', '.join(settable)}")
        for w in data["workloads"]:
            if isinstance(w, dict) and w.get("name") == name:
                w[field] = value
        return
    if top == "devices":
        _set_keyed(data, path, value, where, catalog.devices, Device, {"key", "sources", "estimated", "ranges"},
                   "devices.h200-sxm.purchase_usd")
        return
    if top == "platforms":
        _set_keyed(data, path, value, where, catalog.platforms, Platform,
                   {"key", "sources", "estimated", "kind", "devices"}, "platforms.pcie-8.server_usd")
        return
    if top not in plan_fields:
        raise WorkloadError(f"{where}: '{path}': unknown plan field '{top}'{suggest(top, plan_fields)}; "
                            f"valid: {', '.join(plan_fields)}")
    if len(parts) == 1:
        data[top] = value
        return
    sub = Plan.model_fields[top].annotation
    if isinstance(sub, type) and issubclass(sub, BaseModel) and len(parts) == 2:
        # budget.capex_usd, facility.colocation_usd_per_kw_month, finance.lease_interest_rate
        if parts[1] not in sub.model_fields:
            raise WorkloadError(f"{where}: '{path}': unknown {top} field '{parts[1]}'"
                                f"{suggest(parts[1], sub.model_fields)}; valid: {', '.join(sub.model_fields)}")
        section = data.get(top)
        data[top] = {**(section if isinstance(section, dict) else {}), parts[1]: value}
        return
    if top == "inventory" and len(parts) == 2:
        section = data.get("inventory") if isinstance(data.get("inventory"), dict) else {}
        data["inventory"] = {**{k: v for k, v in section.items() if plan_key(k) != plan_key(parts[1])},
                             plan_key(parts[1]): value}
        return
    raise WorkloadError(f"{where}: '{path}': {top} ({getattr(sub, '__name__', sub)}) has no sub-field path "
                        f"'{'.'.join(parts[1:])}'")


_WORKLOAD_INDEX = re.compile(r"(?<![\w.])workloads\.(\d+)\.")


def _by_name(message: str, data: dict[str, Any]) -> str:
    """A scenario's validation error with each ``workloads.<i>.`` path written ``workloads.<name>.``, as its
    ``set:`` paths address workloads (a set of ``workloads.chat.redundancy`` said ``workloads.0.redundancy``)."""
    workloads = data.get("workloads") if isinstance(data.get("workloads"), list) else []

    def name(m: re.Match[str]) -> str:
        i = int(m.group(1))
        w = workloads[i] if i < len(workloads) else None
        return f"workloads.{w['name']}." if isinstance(w, dict) and isinstance(w.get("name"), str) else m.group(0)

    return _WORKLOAD_INDEX.sub(name, message)


def _scaled(data: dict[str, Any], multiplier: float) -> dict[str, Any]:
    out = copy.deepcopy(data)
    for w in out.get("workloads", []):
        for field in ("qps", "tokens_per_day"):
            if isinstance(w, dict) and isinstance(w.get(field), int | float):
                w[field] = w[field] * multiplier
    return out


def _make(name: str, group: str, data: dict[str, Any], catalog: Catalog, where: str, **kw) -> Scenario:
    try:
        plan = parse_plan(data, f"{where}: scenario '{name}'")
    except WorkloadError as exc:
        raise WorkloadError(_by_name(str(exc), data)) from None
    resolve_catalog(plan, catalog, f"{where}: scenario '{name}'")
    return Scenario(name=name, group=group, plan=plan, **kw)


def level_text(field: str, level: float) -> str:
    """A sweep level as a reader writes it: ``$24,000`` for a price, ``$2.49`` for an hourly rate, ``1.5`` else."""
    if "usd" in field:
        return f"${level:,.0f}" if abs(level) >= 100 else f"${level:,.2f}"
    return f"{level:,g}"


def _labels(levels: list[float], first: str) -> list[str]:
    """Labels for sweep levels: ``first`` (a format spec) if it tells them apart, else more digits."""
    labels = [format(x, first) for x in levels]
    digits = 1
    while len(set(labels)) != len(labels) and digits <= 12:
        labels = [format(x, f",.{digits}f") for x in levels]
        digits += 1
    if len(set(labels)) != len(labels):
        labels = [repr(x) for x in levels]
    return labels


def expand_scenarios(spec: ScenarioFile, base_data: dict[str, Any], catalog: Catalog, where: str,
                     base_where: str | None = None) -> list[Scenario]:
    """The base, each variant, then each sweep's levels, in file order (the order of results).

    ``base_where`` names the base plan in errors of the base itself (the file ``base:`` points at).
    """
    count = 1 + len(spec.variants) + sum(s.steps if s.kind != "demand" else len(s.multipliers or []) for s in spec.sweeps)
    if count > MAX_SCENARIOS:  # checked before validating thousands of plans
        raise WorkloadError(f"{where}: {count} scenarios, over the limit of {MAX_SCENARIOS}; use fewer steps")
    base_plan = parse_plan(copy.deepcopy(base_data), base_where or f"{where}: scenario 'base'")
    resolve_catalog(base_plan, catalog, base_where or f"{where}: scenario 'base'")
    for s in spec.sweeps:
        if s.kind == "budget" and base_plan.objective == "cloud":
            # a cloud plan buys nothing: capex 0 is under every level, each level's answer was the ceiling of
            # the max-demand search (1024x the demand, a $834M rental "within" a $100,000 budget)
            raise WorkloadError(f"{where}: sweeps.{s.name}: a budget sweep caps capex (budget.capex_usd), and the "
                                "base plan's objective cloud rents its GPUs (capex $0), so no level limits anything; "
                                "set objective: tco or capex in the base plan, or use a demand sweep")
    out = [Scenario(name="base", group="base", plan=base_plan)]
    for v in spec.variants:
        data = copy.deepcopy(base_data)
        for path, value in v.set.items():
            apply_override(data, path, value, catalog, f"{where}: variants.{v.name}")
        out.append(_make(v.name, "variant", data, catalog, where, overrides=dict(v.set)))
    for s in spec.sweeps:
        levels = s.levels()
        if s.kind == "demand":
            labels = [t + "x" for t in _labels(levels, "g")]
        elif s.kind == "budget" or "usd" in (s.field or ""):
            money = ",.0f" if s.kind == "budget" or min(abs(x) for x in levels) >= 100 else ",.2f"
            labels = ["$" + t for t in _labels(levels, money)]
        else:
            labels = _labels(levels, ",.4g")
        for level, label in zip(levels, labels, strict=True):
            name = f"{s.name} @ {label}"  # as a reader writes it: 'h200 @ $24,000', 'growth @ 1.5x'; unique
            if s.kind == "budget":
                data = copy.deepcopy(base_data)
                data.setdefault("budget", {})["capex_usd"] = level
                out.append(_make(name, s.name, data, catalog, where, mode="max_demand",
                                 level=level, overrides={"budget.capex_usd": level}))
            elif s.kind == "demand":
                out.append(_make(name, s.name, _scaled(base_data, level), catalog, where,
                                 level=level, overrides={"demand_multiplier": level}))
            else:
                data = copy.deepcopy(base_data)
                path = f"devices.{s.device}.{s.field}"
                apply_override(data, path, level, catalog, f"{where}: sweeps.{s.name}")
                out.append(_make(name, s.name, data, catalog, where, level=level, overrides={path: level}))
    if len(out) > MAX_SCENARIOS:
        raise WorkloadError(f"{where}: {len(out)} scenarios, over the limit of {MAX_SCENARIOS}; use fewer steps")
    return out


_SCENARIO_ONLY = ("base", "variants", "sweeps", "uncertainty")


def base_plan_path(spec: ScenarioFile, path: Path | str) -> Path | None:
    """The plan file ``base:`` names, relative to the scenario file; None for an inline plan. A leading ``~`` or
    ``~user`` is the home folder, as a shell reads it (``base: ~/plans/chat.yaml``)."""
    if spec.base is None:
        return None
    base = Path(spec.base)
    try:
        base = base.expanduser()
    except RuntimeError:  # no home folder to expand to (an unknown ~user): read as written, "not found" names it
        pass
    return base if base.is_absolute() else Path(path).parent / base


def scenario_inputs(spec: ScenarioFile, path: Path | str) -> list[Path]:
    """Every file a scenario file reads besides itself (its base plan): outputs must not be one."""
    base = base_plan_path(spec, path)
    return [base] if base is not None else []


def read_scenario_file(path: Path | str) -> ScenarioFile:
    """The scenario file itself, validated (no catalog needed: its base plan is not read)."""
    raw = read_yaml(path, "scenario", WorkloadError)
    try:
        return ScenarioFile.model_validate(raw)
    except ValidationError as exc:
        raise WorkloadError(format_validation_error(str(path), exc, ScenarioFile)) from None


def load_scenarios(path: Path | str, catalog: Catalog) -> tuple[ScenarioFile, dict[str, Any], list[Scenario]]:
    """Parse a scenario file and expand it into validated scenarios (base first)."""
    path = Path(path)
    spec = read_scenario_file(path)
    base_path = base_plan_path(spec, path)
    base_where = None
    if base_path is not None:
        base_where = f"{base_path} (the base plan of {path})"
        base_data = read_yaml(base_path, "plan", WorkloadError, MAX_PLAN_BYTES)
        if found := [k for k in _SCENARIO_ONLY if k in base_data]:
            raise WorkloadError(f"{base_path}: is a scenario file (it has {found[0]}:), not a plan; "
                                f"point base: in {path} at a plan file")
    else:
        base_data = dict(spec.plan or {})
    seen: dict[str, str] = {}
    for name in (spec.uncertainty.prices if spec.uncertainty else {}):
        key = plan_key(name)  # as a plan's devices: and catalog.device read it (h100_sxm, H100-SXM)
        if key not in catalog.devices:
            raise WorkloadError(f"{path}: uncertainty.prices: unknown device '{name}'{suggest(key, catalog.devices)}")
        if key in seen:  # each spelling would draw its own multiplier, applied one over the other
            raise WorkloadError(f"{path}: uncertainty.prices: '{seen[key]}' and '{name}' name the same device "
                                f"{key}; keep one entry")
        seen[key] = name
    scenarios = expand_scenarios(spec, base_data, catalog, str(path), base_where)
    if spec.uncertainty:
        check_price_spreads(scenarios[0].plan, spec.uncertainty, catalog, str(path))
    return spec, base_data, scenarios


def with_price_multipliers(plan: Plan, prices: dict[str, float], catalog: Catalog) -> Plan:
    """``plan`` with each device's purchase and cloud prices × its multiplier (over the plan's own overrides)."""
    data = plan.model_dump(mode="python", by_alias=True)
    devices = copy.deepcopy(data.get("devices") or {})
    for key, mult in prices.items():
        dev = catalog.device(key)
        fields = devices.setdefault(dev.key, {})
        for field in ("purchase_usd", "cloud_usd_per_gpu_hour"):
            base_value = fields.get(field, getattr(dev, field))
            if base_value is not None:
                fields[field] = float(base_value) * mult
    data["devices"] = devices
    return Plan.model_validate(data)


def check_price_spreads(base: Plan, uncertainty: Uncertainty, catalog: Catalog, path: str) -> None:
    """Each device's prices × its spread's low and high are prices the catalog accepts (both ends, so
    the answer does not depend on the draws a seed makes). A draw beyond the catalog's plausibility
    bounds failed inside one Monte Carlo scenario, blamed on the plan's name."""
    for key, spread in sorted(uncertainty.prices.items()):
        for end, mult in (("low", spread.low), ("high", spread.high)):
            try:
                resolve_catalog(with_price_multipliers(base, {key: mult}, catalog), catalog, base.name)
            except GpuplanError as e:
                raise WorkloadError(f"{path}: uncertainty.prices.{key}: {end} {mult:g} × its prices is a price the "
                                    f"catalog refuses ({e}); narrow low and high") from None
