"""Output paths: every combination of outputs over inputs, each other, devices, links and bad
directories either succeeds or fails with exit 1 and one line — and never touches an input or
leaves half the outputs written (catalog.outputs: validated up front, written all-or-nothing).
Written files have the permissions of any new file (0644 under umask 022, not mkstemp's 0600).
"""

from __future__ import annotations

import json
import os
import stat
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import REPO, SMALL_PLAN, assert_no_traceback

PLAN = SMALL_PLAN
CATALOG = "devices:\n  - key: l4\n    purchase_usd: 2500\n"
SENTINEL = b"earlier output\n"

# Where an output may point. Names map to a path inside the run directory (or outside it).
KINDS = ["new", "existing", "plan", "catalog", "params", "dev-null", "link-dev-null", "link-plan",
         "hardlink-plan", "missing-dir", "read-only-dir", "directory", "fifo", "dangling-link", "stdout",
         "other-output", "wrong-extension"]


def _layout(run: Path) -> dict[str, Path]:
    (run / "plan.yaml").write_text(PLAN)
    (run / "cat.yaml").write_text(CATALOG)
    (run / "params.yaml").write_bytes((REPO / "optimizer" / "models" / "data" / "calibration.yaml").read_bytes())
    (run / "ro").mkdir()
    (run / "ro").chmod(0o555)
    (run / "adir.json").mkdir()
    os.mkfifo(run / "fifo.json")
    os.symlink("/dev/null", run / "null.json")
    os.symlink("plan.yaml", run / "toplan.json")
    os.link(run / "plan.yaml", run / "hard.json")
    os.symlink(str(run / "gone" / "x.json"), run / "dangling.json")
    return {"plan": run / "plan.yaml", "catalog": run / "cat.yaml", "params": run / "params.yaml"}


def _target(kind: str, option: str, run: Path, other: str) -> str:
    ext = ".json" if option == "--json" else ".xlsx"
    return {
        "new": str(run / f"new{option[2:]}{ext}"),
        "existing": str(run / f"old{option[2:]}{ext}"),
        "plan": str(run / "plan.yaml"),
        "catalog": str(run / "cat.yaml"),
        "params": str(run / "params.yaml"),
        "dev-null": "/dev/null",
        "link-dev-null": str(run / "null.json"),
        "link-plan": str(run / "toplan.json"),
        "hardlink-plan": str(run / "hard.json"),
        "missing-dir": str(run / "missing" / f"x{ext}"),
        "read-only-dir": str(run / "ro" / f"x{ext}"),
        "directory": str(run / "adir.json"),
        "fifo": str(run / "fifo.json"),
        "dangling-link": str(run / "dangling.json"),
        "stdout": "-",
        "other-output": other,
        "wrong-extension": str(run / "x.txt"),
    }[kind]


def _snapshot(root: Path) -> dict[str, object]:
    out: dict[str, object] = {}
    for p in sorted(root.rglob("*")):
        st_ = os.lstat(p)
        key = str(p.relative_to(root))
        if stat.S_ISREG(st_.st_mode):
            out[key] = p.read_bytes()
        elif stat.S_ISLNK(st_.st_mode):
            out[key] = "link:" + os.readlink(p)
        else:
            out[key] = f"mode:{stat.S_IFMT(st_.st_mode):o}"
    return out


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(json_kind=st.sampled_from(KINDS + ["none"]), out_kind=st.sampled_from(KINDS + ["none"]),
       with_catalog=st.booleans(), with_params=st.booleans())
def test_output_path_combinations(run_cli, json_kind, out_kind, with_catalog, with_params):
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp)
        inputs = _layout(run)
        (run / "oldjson.json").write_bytes(SENTINEL)
        (run / "oldout.xlsx").write_bytes(SENTINEL)
        args = ["optimize", str(inputs["plan"]), "--time-limit", "20"]
        if with_catalog:
            args += ["--catalog", str(inputs["catalog"])]
        if with_params:
            args += ["--params", str(inputs["params"])]
        json_path = out_path = None
        if json_kind != "none":
            json_path = _target(json_kind, "--json", run, str(run / "newout.xlsx"))
            args += ["--json", json_path]
        if out_kind != "none":
            out_path = _target(out_kind, "--out", run, json_path or str(run / "newjson.json"))
            args += ["--out", out_path]
        before = _snapshot(run)
        null_mode = os.stat("/dev/null").st_mode
        try:
            r = run_cli(*args)
        finally:
            (run / "ro").chmod(0o755)
        after = _snapshot(run)
        assert os.stat("/dev/null").st_mode == null_mode and stat.S_ISCHR(null_mode)
        for name in ("plan.yaml", "cat.yaml", "params.yaml", "hard.json"):
            assert after[name] == before[name], f"input {name} changed"
        assert_no_traceback(r.stderr)
        assert r.code in (0, 1), (r.code, r.stderr)
        if r.code == 1:
            assert len(r.stderr.strip().splitlines()) == 1, r.stderr
            assert after == before, "a failed run changed or created files"
            return
        # success: every asked output exists whole, nothing else appeared
        written = {k for k in after if after[k] != before.get(k)}
        expected = set()
        for path, magic in ((json_path, b"{"), (out_path, b"PK")):
            if path is None or path == "-":
                continue
            key = str(Path(os.path.realpath(path)).relative_to(os.path.realpath(run)))
            expected.add(key)
            assert isinstance(after[key], bytes) and after[key].startswith(magic), key
        assert written <= expected, written - expected
        if json_path == "-":
            assert json.loads(r.stdout)["status"] in ("optimal", "feasible")


@pytest.mark.parametrize(("umask", "mode"), [(0o022, 0o644), (0o027, 0o640), (0o002, 0o664)])
def test_outputs_get_umask_permissions(run_cli, tmp_path, umask, mode):
    plan = tmp_path / "plan.yaml"
    plan.write_text(PLAN)
    old = os.umask(umask)
    try:
        r = run_cli("optimize", plan, "--json", tmp_path / "r.json", "--out", tmp_path / "r.xlsx")
    finally:
        os.umask(old)
    assert r.code == 0, r.stderr
    for name in ("r.json", "r.xlsx"):
        assert stat.S_IMODE(os.stat(tmp_path / name).st_mode) == mode, name


def test_replaced_output_gets_umask_permissions_too(run_cli, tmp_path):
    """An earlier 0600 file (e.g. from an older gpuplan) is replaced by a 0644 one under umask 022."""
    plan = tmp_path / "plan.yaml"
    plan.write_text(PLAN)
    out = tmp_path / "r.json"
    out.write_bytes(SENTINEL)
    out.chmod(0o600)
    old = os.umask(0o022)
    try:
        r = run_cli("optimize", plan, "--json", out)
    finally:
        os.umask(old)
    assert r.code == 0, r.stderr
    assert stat.S_IMODE(os.stat(out).st_mode) == 0o644


def test_write_failure_leaves_every_output_untouched(tmp_path, monkeypatch):
    """All temp files are written before any rename: a failure on the second output's temp
    file leaves the first output as it was, and no temp file behind."""
    from catalog.errors import OutputError
    from catalog.outputs import Output, plan_outputs

    first, second = tmp_path / "a.json", tmp_path / "b.xlsx"
    first.write_bytes(SENTINEL)
    outputs = plan_outputs([Output("--json", first, (".json",)), Output("--out", second, (".xlsx",))])
    real_fsync = os.fsync
    calls = []

    def failing_fsync(fd):
        calls.append(fd)
        if len(calls) == 2:
            raise OSError(28, "No space left on device")
        return real_fsync(fd)

    monkeypatch.setattr(os, "fsync", failing_fsync)
    with pytest.raises(OutputError, match=r"--out .*b\.xlsx: cannot write \(No space left on device\)"):
        outputs.write({"--json": "{}\n", "--out": b"PK"})
    assert first.read_bytes() == SENTINEL
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json"]


@pytest.mark.skipif(not os.path.isdir("/sys/kernel") or not os.access("/sys/kernel", os.W_OK | os.X_OK),
                    reason="needs a folder access() calls writable in which no file can be created (root in /sys)")
def test_a_folder_where_no_file_can_be_created_is_refused_before_the_run():
    """access() says yes to root for /sys (and for an immutable folder or root-squashed NFS); the output was
    refused only when written, after the whole computation. Now a file is created and deleted up front."""
    from catalog.errors import OutputError
    from catalog.outputs import Output, plan_outputs

    with pytest.raises(OutputError, match=r"--json /sys/kernel/plan\.json: cannot write in /sys/kernel \("):
        plan_outputs([Output("--json", "/sys/kernel/plan.json", (".json",))])


def test_the_up_front_write_check_leaves_no_file(tmp_path):
    from catalog.outputs import Output, plan_outputs

    plan_outputs([Output("--json", tmp_path / "a.json", (".json",)), Output("--out", tmp_path / "b.xlsx", (".xlsx",))])
    assert list(tmp_path.iterdir()) == []


def _replace_failing_for(monkeypatch, failing: set[Path], error: int = 30) -> list[tuple[str, str]]:
    """os.replace raising OSError(error) (30: read-only file system) for a destination in ``failing``;
    returns the (source, destination) of every call."""
    real_replace, calls = os.replace, []

    def replace(src, dst):
        calls.append((str(src), str(dst)))
        if Path(dst) in failing:
            raise OSError(error, os.strerror(error))
        return real_replace(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    return calls


@pytest.mark.parametrize("first_existed", [True, False])
def test_a_failed_second_rename_puts_the_first_output_back(tmp_path, monkeypatch, first_existed):
    """The JSON renamed into place, then the workbook's rename fails (its folder made read-only or full
    in between): the JSON was left replaced while the command reported failure. Now the JSON's previous
    file is put back (a new JSON is removed), no backup or temp file is left, and the error says so."""
    from catalog.errors import OutputError
    from catalog.outputs import Output, committed_outputs, plan_outputs

    first, second = tmp_path / "a.json", tmp_path / "b.xlsx"
    if first_existed:
        first.write_bytes(SENTINEL)
    second.write_bytes(SENTINEL)
    outputs = plan_outputs([Output("--json", first, (".json",)), Output("--out", second, (".xlsx",))])
    calls = _replace_failing_for(monkeypatch, {second})
    with pytest.raises(OutputError) as exc:
        outputs.write({"--json": "{}\n", "--out": b"PK"})
    assert str(exc.value) == (f"--out {second}: cannot write (Read-only file system); nothing was written: "
                              f"{first} and {second} are as they were")
    assert [dst for _src, dst in calls][:2] == [str(first), str(second)]  # the JSON was renamed first
    assert (first.read_bytes() if first_existed else first.exists()) == (SENTINEL if first_existed else False)
    assert second.read_bytes() == SENTINEL
    assert sorted(p.name for p in tmp_path.iterdir()) == (["a.json"] if first_existed else []) + ["b.xlsx"]
    assert committed_outputs() == []


def test_a_first_output_that_cannot_be_put_back_is_named_with_its_backup(tmp_path, monkeypatch):
    """If putting the JSON back fails too, the error says it was replaced and where its previous content is."""
    from catalog.errors import OutputError
    from catalog.outputs import Output, forget_signals, plan_outputs

    first, second = tmp_path / "a.json", tmp_path / "b.xlsx"
    first.write_bytes(SENTINEL)
    second.write_bytes(SENTINEL)
    outputs = plan_outputs([Output("--json", first, (".json",)), Output("--out", second, (".xlsx",))])
    real_replace, calls = os.replace, []

    def replace(src, dst):  # the JSON's rename works; the workbook's and the JSON's restore fail
        calls.append(dst)
        if len(calls) > 1:
            raise OSError(28, os.strerror(28))
        return real_replace(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    try:
        with pytest.raises(OutputError) as exc:
            outputs.write({"--json": "{}\n", "--out": b"PK"})
    finally:
        forget_signals()
    backups = [p for p in tmp_path.iterdir() if p.name.startswith(".a.json.") and p.name.endswith(".bak")]
    assert len(backups) == 1 and backups[0].read_bytes() == SENTINEL
    assert str(exc.value) == (f"--out {second}: cannot write (No space left on device); {second} is as it was; "
                              f"{first} was replaced and could not be put back (No space left on device; its "
                              f"previous content is in {tmp_path / backups[0].name})")
    assert first.read_bytes() == b"{}\n" and second.read_bytes() == SENTINEL


def test_optimize_whose_workbook_cannot_be_renamed_leaves_both_outputs(run_cli, tmp_path, monkeypatch):
    """Through the CLI: exit 1, one line naming both files as they were, both byte-identical."""
    plan = tmp_path / "plan.yaml"
    plan.write_text(PLAN)
    out_json, out_xlsx = tmp_path / "r.json", tmp_path / "r.xlsx"
    out_json.write_bytes(SENTINEL)
    out_xlsx.write_bytes(SENTINEL)
    _replace_failing_for(monkeypatch, {out_xlsx})
    r = run_cli("optimize", plan, "--json", out_json, "--out", out_xlsx)
    assert r.code == 1
    assert r.stderr == (f"error: --out {out_xlsx}: cannot write (Read-only file system); nothing was written: "
                        f"{out_json} and {out_xlsx} are as they were\n")
    assert out_json.read_bytes() == SENTINEL and out_xlsx.read_bytes() == SENTINEL
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plan.yaml", "r.json", "r.xlsx"]


@pytest.mark.parametrize("failing", [0, 1])
def test_a_failed_rename_leaves_no_backup_of_its_own_target(tmp_path, monkeypatch, failing):
    """Three outputs that all existed (what-if: --json, --out, --plot), the rename of the first or second
    fails: that target's own hidden backup (kept before the renames) was left behind as ``.NAME.*.bak``
    although the error says every output is as it was. Now no backup or temp file is left."""
    from catalog.errors import OutputError
    from catalog.outputs import Output, committed_outputs, plan_outputs

    paths = [tmp_path / "a.json", tmp_path / "b.xlsx", tmp_path / "c.png"]
    for p in paths:
        p.write_bytes(SENTINEL)
    outputs = plan_outputs([Output("--json", paths[0], (".json",)), Output("--out", paths[1], (".xlsx",)),
                            Output("--plot", paths[2], (".png",))])
    _replace_failing_for(monkeypatch, {paths[failing]})
    with pytest.raises(OutputError) as exc:
        outputs.write({"--json": "{}\n", "--out": b"PK", "--plot": b"PNG"})
    assert "nothing was written" in str(exc.value)
    assert all(p.read_bytes() == SENTINEL for p in paths)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json", "b.xlsx", "c.png"]
    assert committed_outputs() == []


def test_a_read_only_output_file_is_refused_before_the_run(tmp_path, monkeypatch):
    """Hostile round 23: an existing output made read-only (chmod 444) was replaced, as the rename needs only the
    folder's permission; `>` and `cp` refuse such a file. Root passes access() on any mode, so the check is shown
    as a user sees it: access() answers from the mode bits for this file."""
    from catalog.errors import OutputError
    from catalog.outputs import Output, plan_outputs

    out = tmp_path / "r.json"
    out.write_bytes(SENTINEL)
    out.chmod(0o444)
    real_access = os.access

    def access(path, mode, *args, **kwargs):
        if Path(path) == out and mode & os.W_OK:
            return bool(out.stat().st_mode & stat.S_IWUSR)
        return real_access(path, mode, *args, **kwargs)

    monkeypatch.setattr("catalog.outputs.os.access", access)
    with pytest.raises(OutputError, match=r"--json .*r\.json: is a read-only file; make it writable \(chmod u\+w\)"):
        plan_outputs([Output("--json", str(out), (".json",))])
    assert out.read_bytes() == SENTINEL and sorted(p.name for p in tmp_path.iterdir()) == ["r.json"]
    out.chmod(0o644)
    plan_outputs([Output("--json", str(out), (".json",))])  # writable again: accepted


def test_two_runs_writing_the_same_outputs_leave_one_runs_pair(tmp_path):
    """Hostile round 23: two runs writing the same --json and --out could interleave their renames (A-json, B-json,
    B-xlsx, A-xlsx) and leave the JSON of one beside the workbook of the other. A set of outputs is renamed under
    an exclusive flock of its folder: while another holder has it (the test, standing in for run A in the middle
    of its renames), a write waits and replaces nothing; released, it writes both."""
    import fcntl
    import threading

    from catalog.outputs import Output, plan_outputs

    json_out, xlsx_out = tmp_path / "r.json", tmp_path / "r.xlsx"
    json_out.write_bytes(b"A json")
    xlsx_out.write_bytes(b"A xlsx")
    outputs = plan_outputs([Output("--json", str(json_out), (".json",)), Output("--out", str(xlsx_out), (".xlsx",))])
    fd = os.open(tmp_path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        run_b = threading.Thread(target=outputs.write, args=({"--json": "B json", "--out": b"B xlsx"},))
        run_b.start()
        run_b.join(timeout=2.0)  # not a timing claim: without the lock the two renames take microseconds
        assert run_b.is_alive()
        assert (json_out.read_bytes(), xlsx_out.read_bytes()) == (b"A json", b"A xlsx")
    finally:
        os.close(fd)
    run_b.join()
    assert (json_out.read_bytes(), xlsx_out.read_bytes()) == (b"B json", b"B xlsx")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json", "r.xlsx"]
