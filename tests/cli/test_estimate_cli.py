"""CLI: `gpuplan estimate`, `validate MEASUREMENTS.csv`, `calibrate`, `roofline` — exit codes, keys, messages."""

from __future__ import annotations

import json

import pytest
import yaml

from catalog import load_catalog
from optimizer.models.fidelity import fidelity_of
from optimizer.models.params import load_params
from tests.conftest import CALIBRATION_CSV

CSV = CALIBRATION_CSV
ALWAYS = {"model", "device", "precision", "engine", "tp", "pp", "ep", "fits", "reason", "weights_gb_per_gpu",
          "kv_cache_bytes_per_token", "max_concurrency", "tpot_bound_ms"}
BAND = {"output_tokens_per_s_low", "output_tokens_per_s_high", "fidelity"}
# the shipped fit has 14 offline rows of llama-3.1-70b fp8 tp4 on h100-sxm (TensorRT-LLM v0.12 / v0.17 perf overviews)
MEASURED = {"measured_configuration"}
BASE = ("estimate", "--model", "llama-3.1-70b", "--device", "h100-sxm", "--precision", "fp8", "--tp", "4",
        "--input-tokens", "1000", "--output-tokens", "1000")


def test_estimate_batch_json_keys(run_cli):
    r = run_cli(*BASE, "--batch", "32", "--json")
    assert r.code == 0, r.stderr
    out = json.loads(r.stdout)
    assert set(out) == ALWAYS | BAND | MEASURED | {"tpot_ms", "ttft_ms", "output_tokens_per_s", "bound"}
    assert out["measured_configuration"]["key"] == "h100-sxm/trtllm/llama-3.1-70b/fp8/tp4/ep1"
    assert out["measured_configuration"]["n"] == 14
    assert "outside the band" not in out["fidelity"]["basis"]  # its median measured/predicted is inside ×0.77–1.28
    assert out["fits"] is True and out["reason"] is None
    assert out["kv_cache_bytes_per_token"] == 163_840  # FP8 KV: 2·80·8·128·1
    # body (70.6e9 − 2·VH) at 1 B + lm_head VH at 2 B (BF16) = 70.6e9 B read; VH = 128256·8192
    assert out["tpot_bound_ms"] == pytest.approx(70.6e9 / 4 / 3.35e12 * 1e3, rel=1e-3)  # 5.27 ms
    # stored: body at 1 B + both embedding matrices at 2 B = 70.6e9 + 2·VH bytes, over 4 GPUs
    assert out["weights_gb_per_gpu"] == pytest.approx((70.6e9 + 2 * 128256 * 8192) / 4 / 1e9, rel=1e-3)
    assert out["output_tokens_per_s"] == pytest.approx(32 / out["tpot_ms"] * 1e3, rel=1e-3)
    assert out["bound"] in {"memory", "compute", "communication"}


def test_estimate_max_throughput_json_keys(run_cli):
    r = run_cli(*BASE, "--max-throughput", "--json")
    assert r.code == 0, r.stderr
    out = json.loads(r.stdout)
    assert set(out) == ALWAYS | BAND | MEASURED | {"batch", "output_tokens_per_s"}
    # the offline batch reserves input + f·output tokens per sequence (f = kv_reserved_output_fraction
    # <= 1, fitted), so it can exceed max_concurrency (full input + output) by up to 1/f
    assert 1 <= out["batch"] <= out["max_concurrency"] * 2000 / (1000 + 1000 * 0.5)
    # TensorRT-LLM v0.17 measured 7,431 tok/s for this cell (shipped calibration.csv, source group trtllm_perf_overview_v0.17)
    assert out["output_tokens_per_s"] == pytest.approx(7431, rel=0.3)


def test_estimate_engine_ep_max_batch_and_band(run_cli):
    """--engine, --ep and --max-batch reach the model; the band brackets the value; pp > 1 says
    its pipeline terms are uncalibrated."""
    moe = ("estimate", "--model", "qwen3-30b-a3b", "--device", "b200", "--precision", "nvfp4",
           "--input-tokens", "1024", "--output-tokens", "1024", "--max-throughput", "--json")
    base = json.loads(run_cli(*moe).stdout)
    dep = json.loads(run_cli(*moe, "--ep", "4").stdout)
    capped = json.loads(run_cli(*moe, "--max-batch", "64").stdout)
    vllm = json.loads(run_cli(*moe, "--engine", "vllm").stdout)
    assert (base["engine"], vllm["engine"], dep["ep"]) == ("trtllm", "vllm", 4)
    assert dep["output_tokens_per_s"] > 2 * base["output_tokens_per_s"]  # 4 GPUs
    assert capped["batch"] == 64 and capped["output_tokens_per_s"] < base["output_tokens_per_s"]
    for out in (base, dep, capped, vllm):
        assert out["output_tokens_per_s_low"] <= out["output_tokens_per_s"] <= out["output_tokens_per_s_high"]
        assert out["fidelity"]["class"] in {"measured", "same-generation", "datasheet-only"} and out["fidelity"]["basis"]
    pp = json.loads(run_cli(*BASE, "--pp", "2", "--batch", "8", "--json").stdout)
    assert "pipeline" in pp["uncalibrated"]
    r = run_cli(*BASE, "--engine", "tgi", "--batch", "8")
    assert r.code == 1 and "--engine 'tgi': unknown engine; use trtllm, vllm or sglang" in r.stderr
    assert json.loads(run_cli(*moe, "--engine", "VLLM").stdout) == vllm  # any case, as a plan's engine: TRTLLM


def test_estimate_does_not_fit_exits_zero_with_reason(run_cli):
    r = run_cli("estimate", "--model", "llama-3.1-405b", "--device", "l4", "--precision", "bf16",
                "--input-tokens", "100", "--output-tokens", "100", "--batch", "1", "--json")
    assert r.code == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["fits"] is False and "raise tp/pp" in out["reason"]
    assert out["max_concurrency"] == 0
    # no step time or throughput for weights that do not fit (15.41 tok/s with a band was printed for Llama-3.1-70B
    # BF16 on one H100, 141.2 GB of weights in 82.4 GB), as --max-throughput and the serving figures say
    r = run_cli("estimate", "--model", "llama-3.1-70b", "--device", "h100-sxm", "--precision", "bf16",
                "--input-tokens", "1024", "--output-tokens", "256", "--batch", "1", "--json")
    out = json.loads(r.stdout)
    assert r.code == 0 and out["fits"] is False and out["weights_gb_per_gpu"] == 141.2
    assert [out[k] for k in ("tpot_ms", "ttft_ms", "output_tokens_per_s", "bound", "output_tokens_per_s_low",
                             "output_tokens_per_s_high")] == [None] * 6


def test_estimate_fp8_on_a100_rejected(run_cli):
    r = run_cli("estimate", "--model", "llama-3.1-8b", "--device", "a100-80gb-sxm", "--precision", "fp8",
                "--input-tokens", "100", "--output-tokens", "100", "--batch", "4", "--json")
    out = json.loads(r.stdout)
    assert r.code == 0 and out["fits"] is False and "no native fp8" in out["reason"]
    assert out["tpot_ms"] is None


def test_estimate_table_and_errors(run_cli):
    r = run_cli(*BASE, "--batch", "8")
    assert r.code == 0 and "TPOT" in r.stdout
    r = run_cli(*BASE, "--batch", "8", "--max-throughput")
    assert r.code == 1 and "exclude each other" in r.stderr
    r = run_cli("estimate", "--model", "llama-3.1-70b", "--device", "h100-sx", "--precision", "fp8",
                "--input-tokens", "1", "--output-tokens", "1")
    assert r.code == 1 and "unknown device 'h100-sx'" in r.stderr and "did you mean" in r.stderr


def test_params_flag_changes_the_answer(run_cli, tmp_path):
    slow = tmp_path / "slow.yaml"
    slow.write_text(yaml.safe_dump({"memory_bandwidth_efficiency": 0.1}))
    fast = json.loads(run_cli(*BASE, "--batch", "1", "--json").stdout)
    slow_out = json.loads(run_cli(*BASE, "--batch", "1", "--json", "--params", str(slow)).stdout)
    assert slow_out["tpot_ms"] > 2 * fast["tpot_ms"]
    bad = tmp_path / "bad.yaml"
    bad.write_text("memory_bandwith_efficiency: 0.5\n")
    r = run_cli(*BASE, "--batch", "1", "--params", str(bad))
    assert r.code == 1 and "bad.yaml" in r.stderr and "memory_bandwidth_efficiency" in r.stderr


def test_validate_measurements_json(run_cli):
    r = run_cli("validate", str(CSV), "--json")
    assert r.code == 0, r.stderr
    out = json.loads(r.stdout)
    assert {"rows", "by_device", "overall", "skipped"} <= set(out)
    # 426 offline rows + 82 predictions on the 30 finite-rate online rows (TTFT, TPOT, tokens/s)
    assert out["overall"]["n"] == 508 and out["overall"]["median_abs_pct_error"] <= 15.0
    assert out["by_metric"]["output_tokens_per_s"]["n"] == 456
    assert out["by_metric"]["ttft_mean_ms"]["n"] == out["by_metric"]["tpot_mean_ms"]["n"] == 26
    assert set(out["by_device"]) == {"h100-sxm", "a100-80gb-sxm", "l40s"}
    assert len(out["skipped"]) == 6  # online rows at an unlimited (INF) rate


def test_validate_measurements_table(run_cli):
    r = run_cli("validate", str(CSV))
    assert r.code == 0, r.stderr
    assert "by device" in r.stdout and "overall" in r.stdout and "not predicted" in r.stdout


def test_calibrate_writes_params_and_refuses_input(run_cli, tmp_path):
    small = tmp_path / "m.csv"
    lines = CSV.read_text().splitlines()
    small.write_text("\n".join(lines[:60]) + "\n")
    out = tmp_path / "p.yaml"
    r = run_cli("calibrate", str(small), "--out", str(out))
    assert r.code == 0, r.stderr
    data = yaml.safe_load(out.read_text())
    assert data["fit"]["rows_used"] == 59 and data["fit"]["median_abs_pct_error"] >= 0
    # every fitted row is in the per-configuration record, keyed device/engine/model/precision/tpT/epE
    by_config = data["fit"]["by_configuration"]
    assert sum(r["n"] for r in by_config.values()) == 59
    assert all(k.count("/") == 5 and k.split("/")[4].startswith("tp") for k in by_config)
    r = run_cli(*BASE, "--batch", "4", "--params", str(out), "--json")
    assert r.code == 0, r.stderr
    r = run_cli("calibrate", str(small), "--out", str(small))
    assert r.code == 1 and "output path is the input" in r.stderr


def test_calibrate_online_weight_fits_online_rows(run_cli, tmp_path):
    """--online-weight W: the online-serving rows' mean TTFT and ITL enter the fit (and the
    front-end time request_overhead_ms is fitted); 0 = offline rows only; default = the shipped weight."""
    lines = CSV.read_text().splitlines()
    offline = [ln for ln in lines[1:] if "offline" in ln][:20]
    online = [ln for ln in lines[1:] if "online serving" in ln and ",INF," not in ln][:2]
    small = tmp_path / "m.csv"
    small.write_text("\n".join([lines[0], *offline, *online]) + "\n")
    out0, out1 = tmp_path / "p0.yaml", tmp_path / "p1.yaml"
    r = run_cli("calibrate", str(small), "--out", str(out0), "--online-weight", "0")
    assert r.code == 0, r.stderr
    p0 = yaml.safe_load(out0.read_text())
    assert "online" not in p0["fit"]["method"] and p0["request_overhead_ms"] == 0.0
    r = run_cli("calibrate", str(small), "--out", str(out1))  # default: the shipped fit's weight (1)
    assert r.code == 0, r.stderr
    assert "2 online-serving rows (weight 1)" in r.stdout
    text = out1.read_text()
    p1 = yaml.safe_load(text)
    assert "mean ITL and mean TTFT over 2 online-serving rows" in p1["fit"]["method"]
    assert "+ 2 online-serving rows at weight 1" in text.splitlines()[1]
    assert p1["request_overhead_ms"] > 0 and p1["fit"]["rows_used"] == 20
    r = run_cli("calibrate", str(small), "--out", str(out1), "--online-weight", "-1")
    assert r.code != 0 and "online-weight" in r.stderr


def test_roofline_png(run_cli, tmp_path):
    out = tmp_path / "r.png"
    r = run_cli("roofline", "--model", "llama-3.1-8b", "--device", "l40s", "--precision", "fp8",
                "--input-tokens", "500", "--output-tokens", "500", "--out", str(out))
    assert r.code == 0, r.stderr
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    r = run_cli("roofline", "--model", "llama-3.1-405b", "--device", "l4", "--precision", "bf16",
                "--input-tokens", "500", "--output-tokens", "500", "--out", str(out))
    assert r.code == 1 and "cannot plot" in r.stderr


def test_estimate_rates_a_device_against_the_whole_catalog_without_bands(run_cli, tmp_path):
    """With a parameter file without leave-out bands, the same-generation band of an unmeasured H100
    PCIe is the envelope of the measured Hopper devices' bands (h100-sxm, h200-sxm), as the plan's
    fidelity gives; estimate saw the device alone and reported the narrower ×0.392–1.417."""
    params = load_params(None).model_copy(update={"error_bands": {}})
    path = tmp_path / "no-bands.yaml"
    path.write_text(yaml.safe_dump(params.model_dump(mode="json", exclude_none=True)))
    cat = load_catalog()
    want = fidelity_of(cat.devices["h100-pcie"], load_params(path), cat.devices, engine="trtllm")
    r = run_cli("estimate", "--model", "llama-3.1-8b", "--device", "h100-pcie", "--precision", "fp8",
                "--input-tokens", "1000", "--output-tokens", "200", "--batch", "8", "--json", "--params", str(path))
    assert r.code == 0, r.stderr
    fid = json.loads(r.stdout)["fidelity"]
    assert fid["class"] == "same-generation" and "h100-sxm, h200-sxm" in fid["basis"]
    assert fid["band_high_factor"] == pytest.approx(want.high_factor, abs=1e-4)
    assert want.high_factor > 1.417 + 0.1


USER_ROWS = """gpu_key,source_group,model,precision,scenario,engine,tp,pp,input_len,output_len,throughput_tok_s
H100-SXM,labA,llama-3.1-8b,BF16,offline,vllm,1,1,128,128,14000
H100-SXM,labA,llama-3.1-8b,BF16,offline,vllm,1,1,128,2048,9000
H100-SXM,labA,llama-3.1-8b,BF16,offline,vllm,1,1,2048,128,1700
H100-SXM,labB,llama-3.1-8b,FP8,offline,vllm,1,1,128,128,17000
H100-SXM,labB,llama-3.1-70b,FP8,offline,vllm,2,1,128,128,4500
H100-SXM,labB,llama-3.1-70b,FP8,offline,vllm,4,1,2048,2048,6000
"""


def test_calibrate_on_one_device_says_which_bands_it_could_not_give(run_cli, tmp_path):
    """Six H100/vLLM rows from two source groups: the leave-one-source-group-out refits give class a its
    band, but there is no other device or generation to hold out, so b and c have none; calibrate said
    nothing, and `--params` rated h100/vllm by the fit's in-sample p90 (a few %) although the file carried
    the class-a band. Now calibrate names the missing classes and estimate rates h100/vllm by the a band."""
    data = tmp_path / "mine.csv"
    data.write_text(USER_ROWS)
    out = tmp_path / "p.yaml"
    r = run_cli("calibrate", str(data), "--out", str(out))
    assert r.code == 0, r.stderr
    assert "warning: no leave-out band for fidelity class b, c" in r.stderr
    params = load_params(out)
    assert set(params.error_bands) == {"a"}
    band = params.error_bands["a"]
    r = run_cli("estimate", "--model", "llama-3.1-8b", "--device", "h100-sxm", "--engine", "vllm", "--precision",
                "bf16", "--input-tokens", "128", "--output-tokens", "128", "--max-throughput", "--params", str(out),
                "--json")
    assert r.code == 0, r.stderr
    fid = json.loads(r.stdout)["fidelity"]
    assert fid["class"] == "measured" and "leave-one-source-group-out" in fid["basis"]
    assert (fid["band_low_factor"], fid["band_high_factor"]) == pytest.approx(
        (band.low_factor, band.high_factor), abs=1e-4)
    one_group = tmp_path / "one.csv"
    one_group.write_text(USER_ROWS.replace("labB", "labA"))
    r = run_cli("calibrate", str(one_group), "--out", str(tmp_path / "q.yaml"), "--json")
    assert r.code == 0, r.stderr
    assert "fidelity class a, b, c" in json.loads(r.stdout)["missing_bands"]


def test_calibrate_names_the_rows_it_could_not_use(run_cli, tmp_path):
    """A typo in a row's gpu_key (H100-SMX) dropped the row from the fit without a word: 'fitted on 6 rows'
    of a 7-row file. Now calibrate names the file, the line and why (the catalog's did-you-mean)."""
    data = tmp_path / "mine.csv"
    data.write_text(USER_ROWS + "H100-SMX,labB,llama-3.1-8b,BF16,offline,vllm,1,1,128,128,14500\n")
    r = run_cli("calibrate", str(data), "--out", str(tmp_path / "p.yaml"), "--no-bands", "--json")
    assert r.code == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["params"]["fit"]["rows_used"] == USER_ROWS.count("\n") - 1  # the six good rows
    assert out["unused_rows"].startswith(f"1 row not used in the fit: {data} line 8: gpu_key 'H100-SMX': "
                                         "unknown device 'h100-smx' (did you mean 'h100-sxm'")
    r = run_cli("calibrate", str(tmp_path / "mine.csv"), "--out", str(tmp_path / "q.yaml"), "--no-bands")
    assert r.code == 0 and f"warning: 1 row not used in the fit: {data} line 8" in r.stderr


def test_calibrate_names_a_row_given_twice(run_cli, tmp_path):
    """A measurement pasted twice (line 8 = line 2 in every column) was fitted as two measurements without a word;
    the file beside it repeating line 4 counts as well. Now calibrate names each copy and the line it repeats, in the
    JSON (duplicate_rows) and as a warning on stderr; a file without copies gets no note."""
    data = tmp_path / "mine.csv"
    data.write_text(USER_ROWS + USER_ROWS.splitlines()[1] + "\n")
    other = tmp_path / "more.csv"
    other.write_text(USER_ROWS.splitlines()[0] + "\n" + USER_ROWS.splitlines()[3] + "\n")
    r = run_cli("calibrate", str(data), str(other), "--out", str(tmp_path / "p.yaml"), "--no-bands", "--json")
    assert r.code == 0, r.stderr
    note = json.loads(r.stdout)["duplicate_rows"]
    assert note.startswith("2 rows repeat another in every column, so the fit counts it twice: "
                           f"{data} line 8 repeats {data} line 2; {other} line 2 repeats {data} line 4")
    r = run_cli("calibrate", str(data), "--out", str(tmp_path / "q.yaml"), "--no-bands")
    assert r.code == 0 and "warning: 1 row repeats another in every column" in r.stderr
    plain = tmp_path / "plain.csv"
    plain.write_text(USER_ROWS)
    r = run_cli("calibrate", str(plain), "--out", str(tmp_path / "r.yaml"), "--no-bands", "--json")
    assert json.loads(r.stdout)["duplicate_rows"] is None


def test_calibrate_with_no_usable_row_says_why(run_cli, tmp_path):
    """Every row a typo: the error said only 'no offline max-throughput rows to fit' of a file of offline
    max-throughput rows. Now it names the rows it could not use and why; exit 1, no output written."""
    data = tmp_path / "mine.csv"
    header = USER_ROWS.splitlines()[0]
    data.write_text(header + "\nH100-SMX,labB,llama-3.1-8b,BF16,offline,vllm,1,1,128,128,14500\n")
    r = run_cli("calibrate", str(data), "--out", str(tmp_path / "p.yaml"), "--no-bands")
    assert r.code == 1 and not (tmp_path / "p.yaml").exists()
    assert f"{data}: no offline max-throughput rows to fit" in r.stderr
    assert f"1 row not used in the fit: {data} line 2: gpu_key 'H100-SMX': unknown device 'h100-smx'" in r.stderr
