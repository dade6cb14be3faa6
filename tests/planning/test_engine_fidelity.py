"""A deployment's fidelity follows the engine it runs (optimizer/planning/safeguards.fidelity_map).

The shipped calibration measured H100 SXM with TensorRT-LLM only (its ``coverage.device_engines``
lists ``h100-sxm/trtllm``, no ``h100-sxm/vllm``, and ``coverage.generation_engines`` has Hopper under
TensorRT-LLM only): an H100 planned with vLLM is class (c) "datasheet-only" (an engine never measured on
the generation: ``fidelity.engine_unmeasured``), not class (a) "measured" as the device's default engine is.
"""

from __future__ import annotations

import pytest

from catalog import load_catalog
from optimizer.models.params import load_params
from optimizer.optimize import optimize_plan
from optimizer.planning.safeguards import least_trusted
from optimizer.results.provenance import Fidelity
from workloads import parse_plan, resolve_catalog


def _plan(engine):
    w = {"name": "chat", "model": "llama-3.1-8b", "qps": 20, "prompt_tokens": {"mean": 1024, "p99": 4096},
         "output_tokens": {"mean": 256, "p99": 1024}, "slo": {"ttft_p99_ms": 1000}, "precisions": ["fp8"]}
    if engine is not None:
        w["engine"] = engine
    return parse_plan({"name": "f", "allowed_devices": ["h100-sxm"], "workloads": [w]}, "f")


def test_the_shipped_coverage_is_what_this_test_assumes():
    cov = load_params(None).coverage
    assert "h100-sxm/trtllm" in cov.device_engines and "h100-sxm/vllm" not in cov.device_engines
    assert "hopper" in cov.generations and "hopper/trtllm" in cov.generation_engines
    assert not {"hopper/vllm", "hopper/sglang"} & set(cov.generation_engines)


@pytest.mark.parametrize(("engine", "expected"), [
    (None, "measured"),  # the default engine on NVIDIA: TensorRT-LLM
    ("vllm", "datasheet-only"),
    (["vllm", "sglang"], "datasheet-only"),  # neither measured on Hopper
])
def test_deployment_fidelity_follows_its_engine(engine, expected):
    plan = _plan(engine)
    r = optimize_plan(plan, resolve_catalog(plan, load_catalog(), "f"), compare_single_device=False,
                      verify=False)
    assert r.deployments and {d.fidelity.class_ for d in r.deployments} == {expected}


def test_least_trusted_takes_the_lowest_class_then_the_widest_band():
    a = Fidelity("measured", "a", 0.9, 1.1)
    b_narrow, b_wide = Fidelity("same-generation", "b1", 0.8, 1.2), Fidelity("same-generation", "b2", 0.5, 1.5)
    assert least_trusted([a, b_narrow]) is b_narrow
    assert least_trusted([b_narrow, a, b_wide]) is b_wide
    assert least_trusted([a]) is a
    a_wide = Fidelity("measured", "a2", 0.4, 1.6)  # wider than b_narrow: the class decides before the band
    assert least_trusted([a_wide, b_narrow]) is b_narrow


def test_expert_parallel_on_a_device_never_measured_with_it_is_rated_as_its_generation():
    """The shipped data has ep > 1 rows on B200, B300, H100 and H200 with TensorRT-LLM and none on
    MI300X: an ep8 MI300X (vLLM) is class (b), an ep8 H100 stays (a), a tp8 MI300X stays (a)."""
    from optimizer.models.fidelity import fidelity_of

    cat, params = load_catalog(), load_params(None)
    assert params.coverage.expert_parallel_device_engines == ["b200/trtllm", "b300/trtllm", "h100-sxm/trtllm",
                                                              "h200-sxm/trtllm"]
    mi300x, h100 = cat.devices["mi300x"], cat.devices["h100-sxm"]
    ep8 = fidelity_of(mi300x, params, cat.devices, engine="vllm", ep=8)
    assert ep8.class_ == "same-generation" and "never with expert parallelism (ep 8)" in ep8.basis
    assert fidelity_of(mi300x, params, cat.devices, engine="vllm").class_ == "measured"
    assert fidelity_of(h100, params, cat.devices, ep=8).class_ == "measured"
    tp = fidelity_of(mi300x, params, cat.devices, engine="vllm")
    assert ep8.low_factor <= tp.low_factor and ep8.high_factor >= tp.high_factor  # nested: never narrower


def test_expert_parallel_on_a_device_or_engine_never_measured_is_not_called_measured():
    """The 'measured, but never with expert parallelism' basis is for a measured device/engine pair only. An ep2
    GB300 (TensorRT-LLM: never measured, its generation is), TPU v6e (nothing of its generation) or H100 under
    SGLang (an engine Hopper never ran) was said to be "measured, but never with expert parallelism; rated as its
    generation", even as a datasheet-only class: the basis says what the class rests on instead."""
    from optimizer.models.fidelity import fidelity_of

    cat, params = load_catalog(), load_params(None)
    cases = {("gb300", "trtllm"): ("same-generation", "gb300/trtllm not measured; its generation blackwell is"),
             ("tpu-v6e", "vllm"): ("datasheet-only", "nothing of generation tpu-v6e measured"),
             ("h100-sxm", "sglang"): ("datasheet-only", "generation hopper measured only with trtllm, never served "
                                                        "by sglang")}
    for (device, engine), (class_, basis) in cases.items():
        f = fidelity_of(cat.devices[device], params, cat.devices, engine=engine, ep=2)
        assert f.class_ == class_ and f.basis.startswith(basis), (device, engine, f)
        assert "measured, but never with expert parallelism" not in f.basis
        tp = fidelity_of(cat.devices[device], params, cat.devices, engine=engine)
        assert (f.class_, f.low_factor, f.high_factor) == (tp.class_, tp.low_factor, tp.high_factor)
