"""Flags carry the names of the library arguments they set; the old names still work, hidden."""

from __future__ import annotations

import json

import pytest

from optimizer.planning.solver_options import DEFAULT_N_BUCKETS, SolverOptions
from tests.conftest import EXAMPLES


@pytest.mark.parametrize("command, new, old", [("optimize", "--time-limit-s", "--time-limit"),
                                               ("optimize", "--n-buckets", "--buckets"),
                                               ("whatif", "--time-limit-s", "--time-limit")])
def test_help_shows_the_new_name_only(run_cli, command, new, old):
    r = run_cli(command, "--help")
    assert r.code == 0
    flags = {word.rstrip(",") for word in r.stdout.split() if word.startswith("--")}
    assert new in flags and old not in flags


def test_help_states_the_library_defaults(run_cli):
    text = " ".join(run_cli("optimize", "--help").stdout.split())
    assert f"(default {SolverOptions().time_limit_s:g})" in text
    assert f"default {DEFAULT_N_BUCKETS})" in text


def test_old_and_new_names_give_the_same_plan(run_cli, tmp_path):
    plan = str(EXAMPLES / "chat-fleet.yaml")
    common = ["--no-sensitivity", "--no-verify"]
    new, old = tmp_path / "new.json", tmp_path / "old.json"
    assert run_cli("optimize", plan, "--json", new, "--time-limit-s", "20", "--n-buckets", "2", *common).code == 0
    assert run_cli("optimize", plan, "--json", old, "--time-limit", "20", "--buckets", "2", *common).code == 0
    a, b = json.loads(new.read_text()), json.loads(old.read_text())
    assert a["objective_usd"] == b["objective_usd"] and a["fleet"] == b["fleet"]
    assert max(row["bucket"] for row in a["buckets"]) <= 1  # two buckets (0, 1) or one when planned whole


def test_both_names_with_different_values_is_an_error(run_cli):
    r = run_cli("optimize", str(EXAMPLES / "chat-fleet.yaml"), "--time-limit-s", "5", "--time-limit", "6")
    assert r.code == 1
    assert "--time-limit is the old name of --time-limit-s; give one of them" in r.stderr
