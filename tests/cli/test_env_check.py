"""GPUPLAN_* environment variables: an unreadable value is a one-line error with exit 1, not a silent default."""

from __future__ import annotations

import pytest

from catalog.errors import GpuplanError
from cli.env_check import check_environment


@pytest.mark.parametrize(("name", "value"), [
    ("GPUPLAN_WORKERS", "abc"), ("GPUPLAN_WORKERS", "0"), ("GPUPLAN_WORKERS", "-2"), ("GPUPLAN_WORKERS", "1.5"),
    ("GPUPLAN_WORKERS", "\u00b2"), ("GPUPLAN_WORKERS", "4\u2075"),  # isdigit() but not int(): was a ValueError traceback
    ("GPUPLAN_CACHE_MAX_MB", "abc"), ("GPUPLAN_CACHE_MAX_MB", "-1"), ("GPUPLAN_CACHE_MAX_MB", "nan"),
    ("GPUPLAN_CACHE_MAX_MB", "inf"), ("GPUPLAN_CACHE_MAX_MB", "2O0"),
])
def test_an_unreadable_value_stops_every_command_with_its_name_and_value(run_cli, monkeypatch, name, value):
    monkeypatch.setenv(name, value)
    r = run_cli("catalog", "devices")
    assert r.code == 1
    assert r.stdout == ""
    assert f"{name}={value!r}" in r.stderr and "unset it" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("env", [{}, {"GPUPLAN_WORKERS": ""}, {"GPUPLAN_WORKERS": " 2 "},
                                 {"GPUPLAN_CACHE_MAX_MB": "0"}, {"GPUPLAN_CACHE_MAX_MB": "12.5"},
                                 {"GPUPLAN_CACHE_MAX_MB": "  "}])
def test_unset_empty_or_valid_values_pass(env):
    check_environment(env)


def test_the_first_bad_variable_is_named():
    with pytest.raises(GpuplanError, match="GPUPLAN_CACHE_MAX_MB='x'"):
        check_environment({"GPUPLAN_WORKERS": "1", "GPUPLAN_CACHE_MAX_MB": "x"})
