"""The Strict pydantic models compile their validators when first used (``defer_build``), not at import.

A model validated only inside another (a calibration record, a catalog source) then never compiles a
validator of its own: 9 of the 21 in an ``optimize`` run (docs/benchmarks.md, Session 23). Deferring must not
change what is validated: the yes/no rule of ``Strict`` reads each model's field annotations, which
pydantic resolves when the class is created, deferred or not.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
from pydantic import ValidationError

from catalog.schema import Strict, _yes_no_fields

# nested models only: neither the optimize path's imports nor its loaders validate them on their own
NESTED = ("optimizer.models.params:FitRecord", "optimizer.models.params:ConfigurationRecord",
          "catalog.schema:Source", "catalog.schema:CitedSource")


def test_nested_models_compile_nothing_at_import() -> None:
    # a fresh interpreter: in this one another test may have validated them already
    code = ("import importlib, optimizer.optimize, cli.optimize_cmd, workloads.load\n"
            f"for spec in {NESTED!r}:\n"
            "    module, name = spec.split(':')\n"
            "    print(getattr(importlib.import_module(module), name).__pydantic_complete__)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["False"] * len(NESTED)


def _strict_models() -> list[type[Strict]]:
    import optimizer.models.params  # noqa: F401 - its models are Strict subclasses
    import workloads.scenarios  # noqa: F401
    import workloads.spec  # noqa: F401

    found, todo = [], [Strict]
    while todo:
        for sub in todo.pop().__subclasses__():
            found.append(sub)
            todo.append(sub)
    return found


def test_yes_no_fields_do_not_wait_for_the_build() -> None:
    models = _strict_models()
    assert len(models) >= 20
    for model in models:
        before = _yes_no_fields(model)
        model.model_rebuild(force=True)
        assert _yes_no_fields(model) == before, model.__name__


def test_a_deferred_model_still_refuses_yes_no_numbers() -> None:
    from optimizer.models.params import ConfigurationRecord

    with pytest.raises(ValidationError, match="n: true is a yes/no value, not a number or a name"):
        ConfigurationRecord.model_validate({"n": True, "median_measured_over_predicted": 1.0})
