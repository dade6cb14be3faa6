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


@pytest.mark.parametrize(("name", "known"), [("GPUPLAN_WORKRES", "GPUPLAN_WORKERS"), ("GPUPLAN_WORKER", "GPUPLAN_WORKERS"),
                                             ("GPUPLAN_CACHE_MAX_MiB", "GPUPLAN_CACHE_MAX_MB"),
                                             ("GPUPLAN_CACHEDIR", "GPUPLAN_CACHE_DIR"),
                                             ("GPUPLAN_workers", "GPUPLAN_WORKERS"),  # round 24: names are
                                             ("gpuplan_cache_dir", "GPUPLAN_CACHE_DIR")])  # case-sensitive
def test_a_misspelt_variable_is_named_not_ignored(run_cli, monkeypatch, name, known):
    """GPUPLAN_WORKRES=2 ran with the default worker count and said nothing."""
    monkeypatch.setenv(name, "2")
    r = run_cli("catalog", "devices")
    assert r.code == 1 and r.stdout == ""
    assert r.stderr.strip() == (f"error: environment variable {name} is not one gpuplan reads (did you mean {known}?); "
                                f"rename it to {known}, or unset it")


def test_an_unrelated_gpuplan_variable_is_left_alone():
    check_environment({"GPUPLAN_HOME": "/srv/plans", "GPUPLAN_CACHE_DIR": "/tmp/x"})
