"""A hand-written --params file (no fit record) is warned about: the fields it leaves out are the built-in
defaults, not the shipped calibration's."""

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


def test_the_shipped_calibration_is_not_warned_about():
    r = CliRunner().invoke(app, ESTIMATE)
    assert r.exit_code == 0 and "fit record" not in r.stderr
