"""Benchmark inputs read from a measurements CSV (issue 14): engine, expert parallelism, batch cap,
total vs output tokens; and the shipped data's engines."""

from __future__ import annotations

import pytest

from catalog import load_catalog
from optimizer.calibration.measurements import derive_engine, load_measurements
from optimizer.calibration.shipped import shipped_measurements

CAT = load_catalog()
HEADER = ("row_id,gpu_key,source_group,model,precision,scenario,framework,tp,pp,concurrency_or_batch,"
          "input_len,output_len,throughput_tok_s,throughput_metric,notes\n")


def write(tmp_path, *lines: str):
    path = tmp_path / "m.csv"
    path.write_text(HEADER + "".join(line + "\n" for line in lines))
    return load_measurements(path, CAT)


def test_engine_from_source_group():
    assert derive_engine("trtllm_perf_overview_v1.2") == "trtllm"
    assert derive_engine("nvidia_nim_benchmarking") == "trtllm"  # NIM LLM containers run TensorRT-LLM
    assert derive_engine("amd_rocm_perf_results") == "vllm"
    assert derive_engine("my_lab", "SGLang 0.4") == "sglang"
    assert derive_engine("my_lab") is None


def test_dep_label_max_num_seqs_and_total_tokens(tmp_path):
    """'DEP4' → ep 4, tp 1; 'max_num_seqs=256' → max_batch 256; an ambiguous AMD label is read as
    total tokens (vLLM benchmark_throughput's headline): output = 21760 × 2048/(128 + 2048) = 20480."""
    rows = write(
        tmp_path,
        "1,B200,trtllm_perf_overview_v1.2,Qwen3-30B-A3B,FP4,offline max-throughput,TRT,4,1,,1024,1024,100000,"
        "output tokens/s,Parallelism 'DEP4' as labelled",
        "2,MI300X,amd_rocm_perf_results,Llama-3.1-70B,FP8,offline max-throughput,vLLM,8,1,256,128,2048,21760,"
        "'Throughput (tokens/s)' - not stated whether output-only or input+output (ambiguous),max_num_seqs=256; x",
    )
    assert (rows[0].tp, rows[0].ep, rows[0].engine, rows[0].max_batch) == (1, 4, "trtllm", None)
    assert (rows[1].tp, rows[1].ep, rows[1].engine, rows[1].max_batch) == (8, 1, "vllm", 256)
    assert rows[1].throughput_basis == "total"
    assert rows[1].throughput_tok_s == pytest.approx(20480.0)


def test_explicit_columns_win(tmp_path):
    path = tmp_path / "m.csv"
    path.write_text("row_id,gpu_key,source_group,model,precision,scenario,tp,pp,input_len,output_len,"
                    "throughput_tok_s,engine,ep,max_batch,throughput_basis\n"
                    "1,H200-SXM,lab,Qwen3-235B-A22B,FP8,offline max-throughput,8,1,1000,1000,9000,sglang,8,512,output\n")
    m = load_measurements(path, CAT)[0]
    assert (m.engine, m.ep, m.tp, m.max_batch, m.throughput_tok_s) == ("sglang", 8, 1, 512, 9000.0)


def test_unknown_engine_is_one_line_error(tmp_path):
    from catalog.errors import ModelError

    path = tmp_path / "m.csv"
    path.write_text("row_id,gpu_key,source_group,model,precision,scenario,tp,pp,input_len,output_len,"
                    "throughput_tok_s,engine\n1,H100-SXM,lab,Llama-3.1-8B,FP8,offline,1,1,128,128,9000,tgi\n")
    with pytest.raises(ModelError, match="column 'engine': unknown engine 'tgi'"):
        load_measurements(path, CAT)


def test_trtllm_on_amd_is_skipped_and_a_huge_rate_refused(tmp_path):
    """A TensorRT-LLM row on an AMD device is skipped with the reason `gpuplan estimate` and the planner give (it
    was predicted, with NVIDIA's engine factors, and entered the fit); a request rate above ten million per second is
    a one-line error (1e12 overflowed the serving model into RuntimeWarnings on stderr)."""
    from catalog.errors import ModelError

    path = tmp_path / "m.csv"
    head = ("row_id,gpu_key,source_group,model,precision,scenario,tp,pp,input_len,output_len,throughput_tok_s,"
            "engine,request_rate_qps\n")
    path.write_text(head + "1,MI300X,lab,Llama-3.1-8B,FP8,offline,1,1,128,128,9000,trtllm,\n"
                    "2,MI300X,lab,Llama-3.1-8B,FP8,offline,1,1,128,128,9000,vllm,\n")
    amd_trt, amd_vllm = load_measurements(path, CAT)
    assert amd_trt.unresolved == "engine trtllm: TensorRT-LLM runs on NVIDIA GPUs only, mi300x is amd"
    assert amd_vllm.unresolved is None
    path.write_text(head + "1,H100-SXM,lab,Llama-3.1-8B,FP8,online,1,1,128,128,9000,trtllm,1e12\n")
    with pytest.raises(ModelError, match=r"line 2: column 'request_rate_qps': 1e\+12 is above 10,000,000"):
        load_measurements(path, CAT)
    path.write_text(head + "1,H100-SXM,lab,Llama-3.1-8B,FP8,online,1,1,128,128,9000,trtllm,INF\n")
    assert load_measurements(path, CAT)[0].request_rate_qps == float("inf")

def test_shipped_2026_rows_carry_engine_ep_and_caps():
    rows = load_measurements(shipped_measurements("measurements-2026.csv"), CAT)
    by = {(m.device_key, m.engine) for m in rows}
    assert ("mi300x", "vllm") in by and ("b200", "trtllm") in by
    assert sum(m.ep > 1 for m in rows) >= 78  # DEP2/4/8 cells + the DeepSeek blog's attention-DP runs
    amd = [m for m in rows if m.source_group.startswith("amd_") and m.throughput_tok_s]
    assert amd and all(m.max_batch and m.throughput_basis == "total" for m in amd)
    assert all(m.precision_key in ("mxfp4", "int4") for m in rows if m.model_key and m.model_key.startswith("gpt-oss"))


def test_a_per_gpu_figure_in_the_group_column_is_refused(tmp_path):
    """throughput_tok_s is the whole tp·pp·ep group's tokens/s. A row giving the per-GPU figure there too
    (1500 on a tp4 row whose throughput_tok_s_per_gpu says 1500) was fitted as a group doing a quarter of its
    real 6000 tokens/s; with both columns given they must agree (shipped rows: within rounding), a DEP4 row
    counting its 4 GPUs through ep (tp column = group size)."""
    from catalog.errors import ModelError

    head = ("gpu_key,source_group,model,precision,scenario,tp,pp,input_len,output_len,throughput_tok_s,"
            "throughput_tok_s_per_gpu,notes\n")
    path = tmp_path / "m.csv"
    path.write_text(head + "H100-SXM,lab,Llama-3.1-70B,FP8,offline,4,1,128,128,1500,1500,\n")
    with pytest.raises(ModelError, match=r"line 2: column 'throughput_tok_s': 1500 is not throughput_tok_s_per_gpu "
                                         r"1500 x 4 GPUs \(tp 4 x pp 1 x ep 1\) = 6000"):
        load_measurements(path, CAT)
    path.write_text(head + "H100-SXM,lab,Llama-3.1-70B,FP8,offline,4,1,128,128,6001,1500,\n"
                    "B200,lab,gpt-oss-120b,FP4,offline,4,1,1024,1024,4000,1000,Parallelism 'DEP4'\n")
    rows = load_measurements(path, CAT)
    assert [r.throughput_tok_s for r in rows] == [6001.0, 4000.0]
    assert (rows[1].tp, rows[1].ep) == (1, 4)


def test_semicolon_files_and_rows_of_empty_cells(tmp_path):
    """A semicolon-separated export was refused as "required column 'gpu_key' is missing" (its header is one
    column); a spreadsheet's trailing row of empty cells (,,,) stopped the file at "column 'tp' is empty"."""
    from catalog.errors import ModelError

    head = "gpu_key,source_group,model,precision,scenario,tp,pp,input_len,output_len,throughput_tok_s\n"
    row = "H100-SXM,lab,Llama-3.1-8B,FP8,offline,1,1,128,128,9000\n"
    path = tmp_path / "m.csv"
    path.write_text(head.replace(",", ";") + row.replace(",", ";"))
    with pytest.raises(ModelError, match="the file is semicolon-separated; save it as comma-separated CSV"):
        load_measurements(path, CAT)
    path.write_text(head + row + ",,,,,,,,,\n" + '"","","","","","","","","",""\n')
    rows = load_measurements(path, CAT)
    assert len(rows) == 1 and rows[0].throughput_tok_s == 9000.0
