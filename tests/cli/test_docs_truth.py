"""The user-facing docs say what the product does: the annotated example files, the JSON keys of estimate and
simulate, the CLI reference's flags, the measurements CSV's columns, and every repository path they name."""

from __future__ import annotations

import json
import re

import pytest
import yaml

from tests.conftest import EXAMPLES, REPO
from tests.doc_keys import code_blocks, flat_keys, parse_flag_block

README = (REPO / "README.md").read_text(encoding="utf-8")


def _flag_block(first_key: str) -> dict[str, set[str]]:
    """The README's key block (``condition:  keys``) whose 'always' line names ``first_key`` first."""
    found = [b for b in code_blocks(README) if re.match(rf"always:\s+{first_key}\b", b)]
    assert len(found) == 1, f"{len(found)} README key blocks start with {first_key}"
    return parse_flag_block(found[0])


@pytest.mark.parametrize("name", ["chat-fleet.yaml", "whatif-budget.yaml"])
def test_readme_annotated_file_is_the_example(name):
    """The README shows the example files with its own comments: the same plan, not an older one."""
    found = re.findall(rf"`examples/{re.escape(name)}`:\n\n```yaml\n(.*?)```", README, flags=re.S)
    assert len(found) == 1
    assert yaml.safe_load(found[0]) == yaml.safe_load((EXAMPLES / name).read_text(encoding="utf-8"))


ESTIMATE = ["estimate", "--model", "llama-3.1-70b", "--device", "h100-sxm", "--precision", "fp8",
            "--input-tokens", "1024", "--output-tokens", "256", "--json"]
# ``why`` only when a capacity needs a word (unservable above the floor, the scheduler cap), which no cheap run
# here reaches; measured_configuration only on a configuration the shipped fit has >= 3 offline rows of (tp4 has)
OPTIONAL = {"why", "measured_configuration", "key", "n", "median_measured_over_predicted"}


@pytest.mark.parametrize("extra, conditions", [
    (["--tp", "4"], ["always"]),
    (["--tp", "4", "--batch", "32"], ["always", "--batch", "either of them"]),
    (["--tp", "4", "--max-throughput", "--qps", "5", "--ttft-p99-ms", "2000", "--tpot-p99-ms", "200",
      "--input-p99", "4096", "--output-p99", "1024"],
     ["always", "--max-throughput", "either of them", "--qps", "an SLO", "--qps or an SLO", "a TPOT figure"]),
    (["--tp", "2", "--pp", "2", "--batch", "8", "--ttft-p99-ms", "2000"],
     ["always", "--batch", "either of them", "an SLO", "--qps or an SLO", "--pp > 1"]),
])
def test_estimate_json_keys_are_the_documented_ones(run_cli, extra, conditions):
    documented = _flag_block("model")
    r = run_cli(*ESTIMATE, *extra)
    assert r.code == 0, r.stderr
    got = flat_keys(json.loads(r.stdout))
    expected = set().union(*(documented[c] for c in conditions))
    assert got <= expected, f"printed but not documented for {conditions}: {sorted(got - expected)}"
    assert expected - OPTIONAL <= got, f"documented for {conditions} but not printed: {sorted(expected - got)}"
    if extra[:2] == ["--tp", "4"] and "either of them" in conditions:
        assert {"measured_configuration", "median_measured_over_predicted"} <= got


def test_estimate_documents_no_condition_the_runs_miss():
    """The conditions of the parametrized runs above are the README's, no more and no fewer."""
    assert set(_flag_block("model")) == {"always", "--batch", "--max-throughput", "either of them", "--qps",
                                         "an SLO", "--qps or an SLO", "--pp > 1", "a TPOT figure"}


def test_estimate_pair_json_keys_are_the_documented_ones(run_cli):
    documented = _flag_block("prefill")
    pair = ["estimate", "--model", "llama-3.1-70b", "--prefill-device", "h100-sxm", "--decode-device", "h20",
            "--precision", "fp8", "--prefill-tp", "8", "--decode-tp", "2", "--input-tokens", "6000",
            "--output-tokens", "800", "--ttft-p99-ms", "1000", "--tpot-p99-ms", "50", "--json"]
    alone, loaded = run_cli(*pair), run_cli(*pair, "--qps", "1")
    assert alone.code == 0 and loaded.code == 0, alone.stderr + loaded.stderr
    assert flat_keys(json.loads(alone.stdout)) == documented["always"]
    assert flat_keys(json.loads(loaded.stdout)) == documented["always"] | documented["--qps"]


def test_simulate_json_keys_are_the_documented_ones(run_cli):
    r = run_cli("simulate", "--model", "llama-3.1-8b", "--device", "h100-sxm", "--precision", "fp8", "--qps", "5",
                "--input-tokens", "512", "--output-tokens", "128", "--requests", "1000", "--json")
    assert r.code == 0, r.stderr
    data = json.loads(r.stdout)
    assert set(data) == _flag_block("config")["always"]
    assert data["requests"] == 950  # the first 5 % warm the replica up, as the README says


# Options every catalog-reading command takes, described once under the table; --help everywhere.
SHARED_FLAGS = {"--catalog", "--params", "--model-config", "--help"}


def _commands():
    import typer

    from cli.app import app

    def walk(command, path):
        subs = getattr(command, "commands", None)
        if subs:
            for name, sub in subs.items():
                yield from walk(sub, [*path, name])
        else:
            yield " ".join(path), command

    yield from walk(typer.main.get_command(app), ["gpuplan"])


def test_cli_reference_names_every_flag():
    """Each command's row of the README's CLI reference names every visible flag it takes (a --x/--no-x pair
    by either name) and no flag it does not take."""
    rows = [line for line in README.splitlines() if line.startswith("| `gpuplan ")]
    for name, command in _commands():
        mine = [r for r in rows if f"`{name} " in r or f"`{name}`" in r
                or (name.split()[-1] in ("models", "precisions") and "`gpuplan catalog models\\|precisions " in r)]
        assert mine, f"no CLI reference row for {name}"
        shown = set(re.findall(r"--[a-z0-9-]+", " ".join(mine)))  # validate has two rows: plan, measurements
        options = [p for p in command.params if getattr(p, "opts", None) and p.opts[0].startswith("--")]
        known = {o for p in options for o in (*p.opts, *p.secondary_opts)}
        for p in options:
            if p.hidden or p.opts[0] in SHARED_FLAGS:
                continue
            assert shown & {*p.opts, *p.secondary_opts}, f"{name}: {p.opts[0]} is missing from its README row"
        if name.split()[-1] not in ("models", "precisions", "show"):  # one row for the three
            assert shown <= known, f"{name}: the README row names flags it does not take: {sorted(shown - known)}"


def _readme_measurement_columns() -> dict[str, bool]:
    """{column: required} of the README's measurements table."""
    start = README.index("| column | required | meaning |")
    out = {}
    for line in README[start:].splitlines()[2:]:
        if not line.startswith("|"):
            break
        names, required = line.split("|")[1:3]
        for column in re.findall(r"`([a-z0-9_]+)`", names):
            out[column] = required.strip() == "yes"
    return out


def test_measurements_columns_are_the_loaders():
    """The README's measurements table: its required columns are the loader's, every column it names is one the
    loader knows (or reads), and the example file loads with every row resolved."""
    from catalog import load_catalog
    from optimizer.calibration.measurements import (
        KNOWN_COLUMNS,
        REQUIRED_COLUMNS,
        load_measurements,
    )

    columns = _readme_measurement_columns()
    assert {c for c, required in columns.items() if required} == set(REQUIRED_COLUMNS)
    assert set(columns) <= set(KNOWN_COLUMNS), sorted(set(columns) - set(KNOWN_COLUMNS))
    rows = load_measurements(EXAMPLES / "measurements-example.csv", load_catalog())
    assert len(rows) == 6 and all(r.unresolved is None for r in rows)  # "six real rows"


USER_DOCS = [REPO / "README.md", *(REPO / "docs").glob("*.md")]
LOGS = {"benchmarks.md", "model-accuracy.md"}  # dated measurement records: their paths are of their day


@pytest.mark.parametrize("doc", [d for d in USER_DOCS if d.name not in LOGS], ids=lambda d: d.name)
def test_every_path_the_doc_names_exists(doc):
    """A backticked path with a directory (``optimizer/models/perf.py``, ``optimizer/planning/milp/``) exists."""
    text = doc.read_text(encoding="utf-8")
    paths = set(re.findall(r"`((?:optimizer|catalog|workloads|reports|cli|tests|scripts|examples|docs)/[A-Za-z0-9_./-]*)",
                           text))
    missing = sorted(p for p in paths if not (REPO / p).exists())
    assert not missing, f"{doc.name} names paths that do not exist: {missing}"


def test_validate_table_shows_expert_parallelism(run_cli):
    """The example's gpt-oss-120b rows run DEP2 (notes: Parallelism 'DEP2'): tp 1, ep 2; the table said 'tp1'."""
    r = run_cli("validate", str(EXAMPLES / "measurements-example.csv"))
    assert r.code == 0, r.stderr
    gpt_oss = [line for line in r.stdout.splitlines() if "gpt-oss-120b" in line]
    assert len(gpt_oss) == 2 and all("tp1 ep2" in line for line in gpt_oss), gpt_oss


def test_readme_tree_names_every_optimizer_module():
    """'Where things are' names every module of optimizer/ (a new module gets its line)."""
    tree = next(b for b in code_blocks(README) if b.startswith("catalog/"))
    words = set(re.findall(r"[a-z_0-9]+", tree))
    modules = [f for f in (REPO / "optimizer").rglob("*.py") if f.stem != "__init__"]
    missing = sorted(str(f.relative_to(REPO)) for f in modules if f.stem not in words)
    assert not missing, f"README 'Where things are' lacks: {missing}"


def test_readme_names_every_script():
    """Each script of scripts/ is named in the README (what it is for, where it is run from)."""
    missing = sorted(f.name for f in (REPO / "scripts").glob("*.py") if f"`{f.name}`" not in README
                     and f"scripts/{f.name}" not in README)
    assert not missing, f"README does not name: {missing}"


def test_readme_catalog_counts():
    """'a sourced catalog of 28 accelerators and 23 LLMs' (and the same again under 'Where the numbers come from')."""
    from catalog import load_catalog

    cat = load_catalog()
    said = re.findall(r"(\d+) accelerators and (\d+) (?:LLMs|models)", README)
    assert said and all((int(d), int(m)) == (len(cat.devices), len(cat.models)) for d, m in said), said


def test_readme_validate_shipped_figures(run_cli):
    """The in-sample figures the README quotes are what `gpuplan validate --shipped` prints today."""
    found = re.search(r"offline median \|error\| ([\d.]+) % over (\d+) rows, every device/engine group ≤ ([\d.]+) %,"
                      r"\s+online rows \(mean TTFT, mean ITL, throughput; (\d+) predictions\) ([\d.]+) %", README)
    assert found, "the README's validate --shipped sentence moved; update this test with it"
    r = run_cli("validate", "--shipped", "--json")
    assert r.code == 0, r.stderr
    data = json.loads(r.stdout)
    offline, online = data["by_kind"]["offline"], data["by_kind"]["online"]
    worst = max(g["median_abs_pct_error"] for g in data["by_device_engine"].values())
    assert float(found.group(1)) == round(offline["median_abs_pct_error"], 1)
    assert int(found.group(2)) == offline["n"]
    assert float(found.group(3)) == round(worst, 1)
    assert int(found.group(4)) == online["n"]
    assert float(found.group(5)) == round(online["median_abs_pct_error"], 1)
