"""Warnings on stderr for inputs that change more than they seem to: a hand-written --params file (no fit
record: the fields it leaves out are the built-in defaults, not the shipped calibration's), and a --model-config
read under a catalog model's key (it replaces that model)."""

from __future__ import annotations

from typer.testing import CliRunner

from cli.app import app

ESTIMATE = ["estimate", "--model", "llama-3.1-8b", "--precision", "fp8", "--device", "h100-sxm", "--input-tokens", "128",
            "--output-tokens", "128", "--batch", "1", "--json"]


def test_a_params_file_without_a_fit_record_is_warned_about(tmp_path):
    one = tmp_path / "one-factor.yaml"
    one.write_text("memory_bandwidth_efficiency: 0.7\n")
    r = CliRunner().invoke(app, [*ESTIMATE, "--params", str(one)])
    assert r.exit_code == 0
    assert "has no fit record" in r.stderr and "not the shipped calibration's value" in r.stderr
    assert r.stdout.lstrip().startswith("{")  # the JSON on stdout stays clean


def test_a_fitted_params_file_missing_a_factor_is_warned_about(tmp_path):
    """A calibrate output without memory_bandwidth_efficiency (another version's, or trimmed) silently took the
    built-in 0.8 for it: no warning, since the file has a fit record. A whole copy is not warned about."""
    from optimizer.models.params import shipped_params_path

    shipped = shipped_params_path().read_text()
    whole, trimmed = tmp_path / "whole.yaml", tmp_path / "trimmed.yaml"
    whole.write_text(shipped)
    trimmed.write_text("".join(line for line in shipped.splitlines(keepends=True)
                               if not line.startswith("memory_bandwidth_efficiency:")))
    r = CliRunner().invoke(app, [*ESTIMATE, "--params", str(whole)])
    assert r.exit_code == 0 and "warning" not in r.stderr
    r = CliRunner().invoke(app, [*ESTIMATE, "--params", str(trimmed)])
    assert r.exit_code == 0
    assert (f"warning: {trimmed} has a fit record but no memory_bandwidth_efficiency" in r.stderr
            and "memory_bandwidth_efficiency is the built-in default 0.8, not a fitted value" in r.stderr)


def test_the_shipped_calibration_is_not_warned_about():
    r = CliRunner().invoke(app, ESTIMATE)
    assert r.exit_code == 0 and "fit record" not in r.stderr


def test_a_model_config_that_replaces_a_catalog_model_says_so(tmp_path):
    cfg = tmp_path / "config.json"
    cfg.write_text('{"_name_or_path": "llama-3.1-8b", "num_hidden_layers": 32, "hidden_size": 4096, '
                   '"num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336, '
                   '"vocab_size": 128256, "max_position_embeddings": 131072, "tie_word_embeddings": false}')
    r = CliRunner().invoke(app, [*ESTIMATE, "--model-config", str(cfg)])
    assert r.exit_code == 0 and "replaces the catalog's model of that key" in r.stderr
    other = tmp_path / "other" / "config.json"
    other.parent.mkdir()
    other.write_text(cfg.read_text().replace('"llama-3.1-8b"', '"my-llama"'))
    r = CliRunner().invoke(app, [*ESTIMATE, "--model-config", str(other)])
    assert r.exit_code == 0 and "replaces" not in r.stderr


def test_validate_measurements_reads_the_model_config(run_cli):
    """Hostile round 26: `validate M.csv --model-config config.json` read no config (the option was passed to the
    plan check only), so a row of that model was dropped as an unknown model, without a word. With it read, the
    row (my-8b, FP8, 1 × H100, 1,000/1,000 tokens, 3,000 tok/s) is predicted."""
    from tests.conftest import TEST_DATA

    r = run_cli("validate", TEST_DATA / "measurements-custom-model.csv", "--model-config",
                TEST_DATA / "hfconfig-my-8b.json", "--json")
    assert r.code == 0, r.stderr
    import json

    rows = json.loads(r.stdout)["rows"]
    assert [(row["model"], row["measured"]) for row in rows] == [("my-8b", 3000.0)]
