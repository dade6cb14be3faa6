"""Files and signals: an interrupted `gpuplan optimize` leaves earlier outputs whole.

SIGINT or SIGTERM sent to a real subprocess while it computes: exit code 130, one line on
stderr, the pre-existing ``--json`` and ``--out`` files byte-identical, no temporary files
left (every output goes through ``catalog.files.write_atomic``: temp file + rename).
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO

EARLIER = b"earlier output\n"


def _slow_plan(path: Path) -> None:
    """Six workloads over every device, precision and sharding: many seconds of candidate work."""
    models = ["llama-3.1-70b", "qwen2.5-72b", "mixtral-8x7b", "llama-3.1-405b", "llama-2-70b", "deepseek-v3"]
    workloads = [{"name": f"svc{i}", "model": m, "qps": 10 + i, "precisions": ["bf16", "fp8", "int8", "int4"],
                  "prompt_tokens": {"mean": 1024 + 512 * i, "p99": 8192}, "output_tokens": {"mean": 256, "p99": 1024},
                  "slo": {"ttft_p99_ms": 2000 + 100 * i, "tpot_p99_ms": 100 + 10 * i}} for i, m in enumerate(models)]
    path.write_text(yaml.safe_dump({"name": "slow", "workloads": workloads}))


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    import os

    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc to see the child working")
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_interrupted_optimize_keeps_earlier_outputs(tmp_path, signum):
    plan = tmp_path / "slow.yaml"
    _slow_plan(plan)
    out_json, out_xlsx = tmp_path / "result.json", tmp_path / "report.xlsx"
    out_json.write_bytes(EARLIER)
    out_xlsx.write_bytes(EARLIER)
    proc = subprocess.Popen([sys.executable, "-m", "cli.app", "optimize", str(plan), "--json", str(out_json),
                             "--out", str(out_xlsx), "--time-limit", "60"],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        # imports take well under a second of CPU; past 1.5 s the child is computing candidates
        while proc.poll() is None and _cpu_seconds(proc.pid) < 1.5 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert proc.poll() is None, "finished before it could be interrupted"
        proc.send_signal(signum)
        stdout, stderr = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, (proc.returncode, stderr)
    assert stderr.strip() == "error: interrupted; earlier outputs are left as they were"
    assert "Traceback" not in stdout
    assert out_json.read_bytes() == EARLIER and out_xlsx.read_bytes() == EARLIER
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.xlsx", "result.json", "slow.yaml"]
