"""One result schema: the JSON the optimizer writes, the keys docs/plan-json.md documents and the
keys the workbook reads (reports/result.py) agree.

- every key the optimizer writes (top level and in every row list) is documented;
- every key the reports' models read is written by the optimizer;
- the reports parse the optimizer's JSON (``parse_result``) without error.
"""

from __future__ import annotations

import dataclasses
import re

import pytest
from pydantic import BaseModel

from catalog import load_catalog
from optimizer.models.params import load_params
from optimizer.optimize import optimize_plan
from reports import result as report_schema
from tests.conftest import EXAMPLES, REPO
from workloads import load_plan, resolve_catalog

DOC = REPO / "docs" / "plan-json.md"


def documented_keys() -> set[str]:
    """Every word that the 'Top-level keys' block and later key blocks of the doc name as a key."""
    text = DOC.read_text(encoding="utf-8")
    blocks = re.findall(r"```\n(.*?)```", text, flags=re.S)
    words: set[str] = set()
    for block in blocks:
        words |= set(re.findall(r"\b[a-z][a-z0-9_]*\b", block))
    return words


@pytest.fixture(scope="module")
def chat_json() -> dict:
    """The chat fleet as `gpuplan optimize` writes it: with the sensitivity and the verification."""
    plan = load_plan(EXAMPLES / "chat-fleet.yaml")
    return optimize_plan(plan, resolve_catalog(plan, load_catalog(), "chat"), load_params(None), sensitivity=True,
                         verify=True).to_json()


def _keys(data: dict) -> set[str]:
    """Top-level keys and the keys of every row of every list / nested mapping, flattened."""
    out = set(data)
    for value in data.values():
        if isinstance(value, dict):
            out |= _keys(value)
        elif isinstance(value, list):
            for row in value:
                if isinstance(row, dict):
                    out |= _keys(row)
    return out


def test_every_written_key_is_documented(chat_json):
    missing = sorted(_keys(chat_json) - documented_keys())
    assert not missing, f"keys written but not documented in docs/plan-json.md: {missing}"


def _model_fields(model: type, seen: set[type]) -> set[str]:
    """The JSON keys a reader model reads: its fields (aliases), and those of the models and
    dataclasses (``assumptions``: ``optimizer.results.money.MoneyAssumptions``) inside it."""
    if model in seen:
        return set()
    seen.add(model)
    if dataclasses.is_dataclass(model):
        return {f.name for f in dataclasses.fields(model)}
    names = {f.alias or n for n, f in model.model_fields.items()}  # the JSON key (e.g. fidelity 'class')
    for f in model.model_fields.values():
        for arg in _types_in(f.annotation):
            if isinstance(arg, type) and (issubclass(arg, BaseModel) or dataclasses.is_dataclass(arg)):
                names |= _model_fields(arg, seen)
    return names


def _types_in(tp) -> list:
    args = getattr(tp, "__args__", None)
    if not args:
        return [tp]
    out = []
    for a in args:
        out += _types_in(a)
    return out


def test_every_key_the_workbook_reads_is_written(chat_json):
    read = _model_fields(report_schema.PlanResult, set())
    never_written = sorted(read - _keys(chat_json))
    # keys that are written only in other situations (infeasible plans, capacity tables) are documented
    undocumented = [k for k in never_written if k not in documented_keys()]
    assert not undocumented, f"the workbook reads keys the optimizer never writes or documents: {undocumented}"


def test_reports_parse_the_optimizer_json(chat_json):
    parsed = report_schema.parse_result(chat_json)
    assert parsed.objective_usd == pytest.approx(chat_json["objective_usd"])
    assert len(parsed.fleet) == len(chat_json["fleet"])


def test_one_money_assumptions_type(chat_json):
    """The optimizer writes and the workbook reads the same assumptions type, with its checks."""
    from optimizer.results.money import MoneyAssumptions

    parsed = report_schema.parse_result(chat_json)
    assert isinstance(parsed.assumptions, MoneyAssumptions)
    assert dataclasses.asdict(parsed.assumptions) == chat_json["assumptions"]
    for key, bad in (("pue", 0.5), ("horizon_years", 0), ("power_utilization", 1.5)):
        with pytest.raises(report_schema.PlanResultError, match=key):
            report_schema.parse_result({**chat_json, "assumptions": {**chat_json["assumptions"], key: bad}})
    stated = {k: v for k, v in chat_json["assumptions"].items() if k != "pue"}
    with pytest.raises(report_schema.PlanResultError, match=r"assumptions\.pue: required field is missing"):
        report_schema.parse_result({**chat_json, "assumptions": stated})


def _documented_paths() -> dict[str, set[str]]:
    """{path: keys} of the doc's key blocks: the top-level keys, the rows added to them, the sensitivity."""
    import textwrap

    from tests.doc_keys import block_starting, parse_key_block

    text = DOC.read_text(encoding="utf-8")
    out: dict[str, set[str]] = {}
    for block in (block_starting(text, "status"), block_starting(text, "fleet[].price_basis")):
        for path, keys in parse_key_block(block).items():
            out[path] = out.get(path, set()) | keys
    sensitivity = block_starting(text, "sensitivity {").splitlines()
    inner = parse_key_block(textwrap.dedent("\n".join(sensitivity[1:-1])))
    out |= {".".join(p for p in ("sensitivity", path) if p): keys for path, keys in inner.items()}
    return out


# Documented keys the chat fleet cannot show: its workload is not disaggregated (no pools) and its objective is
# tco (the sensitivity's device rows carry the purchase pair; under cloud the hourly pair instead).
NOT_IN_THE_CHAT_FLEET = {"sensitivity.devices": {"cloud_usd_per_gpu_hour", "break_even_cloud_usd_per_gpu_hour"}}
SKIPPED_PATHS = {"disaggregated", "single_device_best.fleet", "sensitivity.runner_up.fleet"}  # no rows / "as fleet[]"


def test_every_documented_key_is_written(chat_json):
    """The other direction of test_every_written_key_is_documented, path by path: each key block of the doc
    (the top level, each row list and mapping) lists exactly the keys the chat fleet's JSON has there."""
    from tests.doc_keys import json_keys

    documented, written = _documented_paths(), json_keys(chat_json)
    assert written[""] == documented[""]
    checked = 0
    for path, keys in documented.items():
        if path in SKIPPED_PATHS or not keys:
            continue
        allowed_missing = NOT_IN_THE_CHAT_FLEET.get(path, set())
        assert written[path] <= keys, f"{path}: written, not documented: {sorted(written[path] - keys)}"
        assert keys - allowed_missing <= written[path], f"{path}: documented, not written: {sorted(keys - written[path])}"
        checked += 1
    assert checked >= 20  # every block was read (a parser that finds nothing passes nothing)
