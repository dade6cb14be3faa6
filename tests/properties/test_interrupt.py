"""Files and signals: an interrupted `gpuplan optimize` or `gpuplan whatif` leaves earlier outputs whole.

SIGINT or SIGTERM sent to a real subprocess while it computes: exit code 130, one line on
stderr, the pre-existing ``--json`` and ``--out`` files byte-identical, no temporary files
left (every output goes through ``catalog.files.write_atomic``: temp file + rename); and
no what-if worker process outlives the runner.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from catalog.outputs import (
    Interrupted,
    Output,
    committed_outputs,
    deferred_interrupts,
    forget_signals,
    note_signal,
    plan_outputs,
    raise_if_interrupted,
)
from cli import app as cli_app
from optimizer.workers import run_pool
from tests.conftest import REPO, assert_no_traceback

EARLIER = b"earlier output\n"


def _slow_plan(path: Path) -> None:
    """Six workloads over every device, precision and sharding: many seconds of candidate work."""
    models = ["llama-3.1-70b", "qwen2.5-72b", "mixtral-8x7b", "llama-3.1-405b", "qwen2.5-72b", "deepseek-v3"]  # contexts >= 32k: p99 8192 + 1024 fits
    workloads = [{"name": f"svc{i}", "model": m, "qps": 10 + i, "precisions": ["bf16", "fp8", "int8", "int4"],
                  "prompt_tokens": {"mean": 1024 + 512 * i, "p99": 8192}, "output_tokens": {"mean": 256, "p99": 1024},
                  "slo": {"ttft_p99_ms": 2000 + 100 * i, "tpot_p99_ms": 100 + 10 * i}} for i, m in enumerate(models)]
    path.write_text(yaml.safe_dump({"name": "slow", "workloads": workloads}))


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
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
            proc.communicate()  # reap it and close its pipes (no ResourceWarning in a later test)
    assert proc.returncode == 130, (proc.returncode, stderr)
    assert stderr.strip() == "error: interrupted; earlier outputs are left as they were"
    assert_no_traceback(stdout)
    assert out_json.read_bytes() == EARLIER and out_xlsx.read_bytes() == EARLIER
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.xlsx", "result.json", "slow.yaml"]


def _live_pids(field: int, value: int) -> list[int]:
    """Pids of live processes whose /proc/PID/stat field ``field`` (after the command name) equals ``value``:
    1 = parent pid, 2 = process group."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[field]) == value and fields[0] != "Z":
                pids.append(int(entry.name))
    return pids


def _process_group(pgid: int) -> list[int]:
    """Pids of the live processes in process group ``pgid`` (field 5 of /proc/PID/stat)."""
    return _live_pids(2, pgid)


def _whatif_with_workers(tmp_path: Path, *args: str) -> subprocess.Popen:
    """``gpuplan whatif whatif-budget.yaml --workers 2 ARGS`` (the example and its base plan copied to
    ``tmp_path``) in its own session, returned once its worker processes exist (or it ended, or 60 s)."""
    for name in ("whatif-budget.yaml", "chat-fleet.yaml"):
        (tmp_path / name).write_bytes((REPO / "examples" / name).read_bytes())
    proc = subprocess.Popen([sys.executable, "-m", "cli.app", "whatif", str(tmp_path / "whatif-budget.yaml"),
                             "--workers", "2", *args],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    deadline = time.monotonic() + 60
    while proc.poll() is None and len(_process_group(proc.pid)) < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    return proc


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc to see the workers")
@pytest.mark.parametrize("how", ["ctrl-c to the group", "sigterm to the parent"])
def test_interrupted_whatif_with_workers_stops_them_and_keeps_earlier_outputs(tmp_path, how):
    """Ctrl-C reaches the runner and its worker processes; SIGTERM only the runner. Either way:
    exit 130, one line, the earlier --json output byte-identical, no worker left running."""
    out_json = tmp_path / "whatif.json"
    out_json.write_bytes(EARLIER)
    proc = _whatif_with_workers(tmp_path, "--json", str(out_json))
    try:
        time.sleep(1.0)  # the workers are solving scenarios (the whole file takes tens of seconds)
        assert proc.poll() is None, "finished before it could be interrupted"
        if how == "ctrl-c to the group":
            os.killpg(proc.pid, signal.SIGINT)
        else:
            proc.send_signal(signal.SIGTERM)
        stdout, stderr = proc.communicate(timeout=90)
        deadline = time.monotonic() + 10
        while _process_group(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        left = _process_group(proc.pid)
    finally:
        if proc.poll() is None:
            proc.kill()
        for pid in _process_group(proc.pid):
            os.kill(pid, signal.SIGKILL)
    assert proc.returncode == 130, (proc.returncode, stderr)
    assert stderr.strip() == "error: interrupted; earlier outputs are left as they were"
    assert left == [], f"worker processes still running: {left}"
    assert out_json.read_bytes() == EARLIER
    assert sorted(p.name for p in tmp_path.iterdir()) == ["chat-fleet.yaml", "whatif-budget.yaml", "whatif.json"]


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc to see the workers")
def test_a_held_ctrl_c_still_ends_with_one_line(tmp_path):
    """Twenty SIGINTs 0.5 ms apart to the group (a held or repeated Ctrl-C) while the what-if workers run: the
    second one landed in the cleanup of the first (killing the pool, main's except and finally) or, once main
    had given Python's handler back, in threading._shutdown and multiprocessing's finalisers, and the run
    printed "During handling of the above exception" / "Exception ignored in" tracebacks and exited 1.
    Now: the one line, and exit 130 (or death by SIGINT in the interpreter's last C-level teardown, which
    the shell shows as 130 too)."""
    for _attempt in range(2):
        proc = _whatif_with_workers(tmp_path, "--no-cache")
        try:
            time.sleep(0.3)
            assert proc.poll() is None, "finished before it could be interrupted"
            for _ in range(20):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGINT)
                time.sleep(0.0005)
            _stdout, stderr = proc.communicate(timeout=90)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
            for pid in _process_group(proc.pid):
                os.kill(pid, signal.SIGKILL)
        assert proc.returncode in (130, -signal.SIGINT), (proc.returncode, stderr)
        assert stderr == "error: interrupted; earlier outputs are left as they were\n"


def test_only_the_first_signal_of_a_command_raises():
    """Later signals are noted while the first one's Interrupted is on its way; after a swallowed one
    (sys.unraisablehook) the next raises again, so a second Ctrl-C still stops such a run."""
    try:
        with pytest.raises(Interrupted):
            cli_app._on_signal(signal.SIGINT, None)
        cli_app._on_signal(signal.SIGINT, None)  # in the cleanup of the first: only noted
        cli_app._on_signal(signal.SIGTERM, None)
        cli_app._quiet_interrupt(type("Unraisable", (), {"exc_value": Interrupted(signal.SIGINT)})())
        with pytest.raises(Interrupted):
            cli_app._on_signal(signal.SIGINT, None)
        forget_signals()  # the next command: its first signal raises
        with pytest.raises(Interrupted):
            cli_app._on_signal(signal.SIGTERM, None)
    finally:
        forget_signals()


def _children(pid: int) -> list[int]:
    """Pids whose parent is ``pid`` (field 4 of /proc/PID/stat)."""
    return _live_pids(1, pid)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc to see the workers")
def test_sigkilled_whatif_parent_leaves_no_worker(tmp_path):
    """SIGKILL (the OOM killer, a CI cancel) cannot be caught by the parent: the workers must
    notice by themselves (parent-death signal, watchdog) and be gone 2 s later."""
    for name in ("whatif-budget.yaml", "chat-fleet.yaml"):
        (tmp_path / name).write_bytes((REPO / "examples" / name).read_bytes())
    proc = subprocess.Popen([sys.executable, "-m", "cli.app", "whatif", str(tmp_path / "whatif-budget.yaml"),
                             "--workers", "2"], cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    workers: list[int] = []
    try:
        deadline = time.monotonic() + 60
        while proc.poll() is None and len(workers) < 2 and time.monotonic() < deadline:
            workers = _children(proc.pid)
            time.sleep(0.05)
        assert len(workers) == 2, f"expected 2 workers, saw {workers}"
        time.sleep(0.5)
        assert proc.poll() is None, "finished before it could be killed"
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        time.sleep(2.0)
        left = [pid for pid in workers if _alive(pid)]
    finally:
        if proc.poll() is None:
            proc.kill()
        for pid in workers:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
    assert left == [], f"workers outlived their SIGKILLed parent: {left}"


def test_worker_count_is_capped_by_work_and_cores():
    from optimizer.workers import capped_workers, usable_cpus

    cores = usable_cpus()
    assert capped_workers(64, 4) == min(4, cores)
    assert capped_workers(None, 1000) == cores
    assert capped_workers(2, 0) == 1


def test_a_swallowed_signal_still_stops_the_outputs(tmp_path):
    """A SIGINT whose exception Python swallowed (it landed in an at-fork hook while the candidate
    stage forked its workers; the run went on and exited 0) is still on record: no output is
    committed, the earlier file stays whole and no temporary file is left."""
    target = tmp_path / "result.json"
    target.write_bytes(EARLIER)
    outputs = plan_outputs([Output("--json", target, (".json",))])
    note_signal(signal.SIGINT)
    try:
        with pytest.raises(Interrupted):
            outputs.write({"--json": "{}"})
    finally:
        forget_signals()
    assert target.read_bytes() == EARLIER
    assert sorted(p.name for p in tmp_path.iterdir()) == ["result.json"]


def _schema_exit_code(monkeypatch, plan_schema) -> int:
    """The exit code of ``gpuplan schema`` run in-process with ``plan_schema`` in place of the real one."""
    monkeypatch.setattr(cli_app.plan_cmd, "plan_schema", plan_schema)
    monkeypatch.setattr(sys, "argv", ["gpuplan", "schema"])
    with pytest.raises(SystemExit) as exc:
        cli_app.main()
    return exc.value.code


def test_a_swallowed_signal_ends_the_command_with_130(monkeypatch, capsys):
    """The CLI re-checks after the command returns: exit 130 and the interrupted message, not 0."""
    def schema_then_signal():
        note_signal(signal.SIGINT)  # what the handler records before its exception is swallowed
        return "{}"

    assert _schema_exit_code(monkeypatch, schema_then_signal) == 130
    assert "interrupted" in capsys.readouterr().err
    raise_if_interrupted()  # main() leaves no signal on record for the next command in this process


def test_a_swallowed_signal_prints_no_traceback(monkeypatch, capsys):
    """A signal's Interrupted raised where Python can only ignore it (an at-fork hook: seen once in CI as
    "Exception ignored in: <function _releaseLock>" above the one-line message; here a __del__) prints nothing
    while a command runs; the run still ends with 130 and the one line. Other unraisable errors still print."""
    class Dropped:
        def __init__(self, error: BaseException):
            self.error = error

        def __del__(self):
            raise self.error

    def schema_with_a_signal_in_a_finaliser():
        note_signal(signal.SIGTERM)  # what _on_signal records before raising
        Dropped(Interrupted(signal.SIGTERM))  # freed at once: its exception can only be reported, not raised
        return "{}"

    monkeypatch.setattr(cli_app.plan_cmd, "plan_schema", schema_with_a_signal_in_a_finaliser)
    monkeypatch.setattr(sys, "argv", ["gpuplan", "schema"])
    before = sys.unraisablehook
    with pytest.raises(SystemExit) as exc:
        cli_app.main()
    assert exc.value.code == 130
    assert capsys.readouterr().err == "error: interrupted; earlier outputs are left as they were\n"
    assert sys.unraisablehook is before  # main() gives the caller its hook back
    hook, sys.unraisablehook = sys.unraisablehook, cli_app._quiet_interrupt
    try:
        Dropped(ValueError("not a signal"))
    finally:
        sys.unraisablehook = hook
    assert "ValueError: not a signal" in capsys.readouterr().err


def test_an_interrupt_during_a_fork_is_raised_after_it():
    """Inside catalog.outputs.deferred_interrupts (around the workers' and the deadline child's forks) the CLI's
    handler only notes a signal, whichever thread the kernel gave it to; the block raises it as it ends, so no
    Interrupted is raised inside os.fork's callbacks (where Python prints "Exception ignored" and goes on)."""
    reached = False
    try:
        with pytest.raises(Interrupted), deferred_interrupts():
            cli_app._on_signal(signal.SIGTERM, None)  # what the signal runs, in the main thread
            reached = True
        assert reached
        forget_signals()  # a new command (the Interrupted above was this one's: later signals are only noted)
        with pytest.raises(Interrupted):  # outside a block it raises at once
            cli_app._on_signal(signal.SIGINT, None)
    finally:
        forget_signals()
    old = signal.signal(signal.SIGTERM, cli_app._on_signal)
    try:  # a real signal while a pool forks its workers: the pool is killed and the interrupt goes on
        with pytest.raises(Interrupted):
            run_pool(_signal_self_then_square, [2, 3], 2)
    finally:
        signal.signal(signal.SIGTERM, old)
        forget_signals()


def _signal_self_then_square(x: int) -> int:
    os.kill(os.getppid(), signal.SIGTERM)
    time.sleep(5.0)  # killed with the pool
    return x * x


def test_a_signal_between_the_renames_replaces_every_output_or_none(tmp_path, monkeypatch):
    """A SIGINT that arrives after the first output was renamed into place and before the second (the JSON
    new, the workbook old: seen by signalling from os.replace) is held until the last rename is done: the
    outputs are a consistent set, Interrupted is raised after, and the CLI is told what was written."""
    out_json, out_xlsx = tmp_path / "result.json", tmp_path / "report.xlsx"
    out_json.write_bytes(EARLIER)
    out_xlsx.write_bytes(EARLIER)
    outputs = plan_outputs([Output("--json", out_json, (".json",)), Output("--out", out_xlsx, (".xlsx",))])
    real_replace, renames = os.replace, []

    def replace_then_signal(src, dst):
        real_replace(src, dst)
        renames.append(dst)
        if len(renames) == 1:
            os.kill(os.getpid(), signal.SIGINT)  # delivered to the CLI's handler before the next bytecode

    old = signal.signal(signal.SIGINT, cli_app._on_signal)
    monkeypatch.setattr(os, "replace", replace_then_signal)
    try:
        with pytest.raises(Interrupted):
            outputs.write({"--json": "{}\n", "--out": b"workbook"})
        assert (out_json.read_bytes(), out_xlsx.read_bytes()) == (b"{}\n", b"workbook")
        assert committed_outputs() == [str(out_json), str(out_xlsx)]
    finally:
        signal.signal(signal.SIGINT, old)
        forget_signals()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.xlsx", "result.json"]
    assert committed_outputs() == []  # forget_signals starts the next command with none


def test_an_interrupt_after_the_outputs_were_written_says_so(tmp_path, monkeypatch, capsys):
    """A signal that lands after the outputs were renamed into place (while the tables print) still ends the run
    with 130, but the line names the files written instead of claiming the earlier ones were kept."""
    target = tmp_path / "result.json"
    target.write_bytes(EARLIER)

    def schema_written_then_signal():
        plan_outputs([Output("--json", target, (".json",))]).write({"--json": "{}\n"})
        note_signal(signal.SIGTERM)
        return "{}"

    assert _schema_exit_code(monkeypatch, schema_written_then_signal) == 130
    assert capsys.readouterr().err == f"error: interrupted after writing {target}\n"
    assert target.read_bytes() == b"{}\n"


# Imported by a test's subprocess at start-up (sitecustomize, on PYTHONPATH): sends SIGINT to its own process
# when the module named in GPUPLAN_TEST_SIGINT_AT is about to be imported — a Ctrl-C at that point of the
# CLI's start-up, without timing luck.
SIGINT_AT_IMPORT = """
import os, signal, sys

class _SigintAt:
    def find_spec(self, name, path=None, target=None):
        if name == os.environ.get("GPUPLAN_TEST_SIGINT_AT"):
            os.kill(os.getpid(), signal.SIGINT)
        return None

sys.meta_path.insert(0, _SigintAt())
"""

# What pip writes for the console script `gpuplan = "cli.app:run"` (pyproject.toml).
CONSOLE_SCRIPT = """import re
import sys
from cli.app import run
if __name__ == '__main__':
    sys.argv[0] = re.sub(r'(-script\\.pyw|\\.exe)?$', '', sys.argv[0])
    sys.exit(run())
"""


@pytest.mark.parametrize("form", ["console script", "python -m cli.app"])
@pytest.mark.parametrize("module", ["cli.app", "typer", "catalog.outputs", "cli.whatif_cmd", "cli.env_check"])
def test_a_ctrl_c_while_the_cli_imports_is_one_line_and_130(tmp_path, form, module):
    """The ~70 ms in which cli.app imports typer, click and the command modules (cli.env_check is the last):
    a SIGINT there printed a KeyboardInterrupt traceback and the process died by SIGINT. Now the line an
    interrupted command prints, and exit 130 (cli/__init__.py)."""
    (tmp_path / "sitecustomize.py").write_text(SIGINT_AT_IMPORT)
    script = tmp_path / "gpuplan"
    script.write_text(CONSOLE_SCRIPT)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(REPO)]),
           "GPUPLAN_TEST_SIGINT_AT": module}
    cmd = [sys.executable, str(script)] if form == "console script" else [sys.executable, "-m", "cli.app"]
    proc = subprocess.run([*cmd, "--help"], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert (proc.returncode, proc.stderr) == (130, "error: interrupted; earlier outputs are left as they were\n")
    assert proc.stdout == ""  # interrupted before the help was printed


def test_importing_the_cli_from_other_code_keeps_its_signal_handlers():
    """The tests (and any library user) import cli.app: Ctrl-C must stay theirs (pytest's KeyboardInterrupt)."""
    import cli

    assert signal.getsignal(signal.SIGINT) is not cli.exit_interrupted
    assert signal.getsignal(signal.SIGTERM) is not cli.exit_interrupted
