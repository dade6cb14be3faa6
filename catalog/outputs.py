"""The one way every command writes its output files: validated up front, written all-or-nothing.

A command declares its outputs and its inputs before doing any work::

    outputs = plan_outputs([Output("--json", json_path, (".json",), stdout_ok=True),
                            Output("--out", out, (".xlsx",))], inputs=(plan_path, catalog))
    ...                                   # load, solve, build
    outputs.write({"--json": text, "--out": workbook})

:func:`plan_outputs` refuses, before anything is written, an output that

- has the wrong extension, or is ``-`` where stdout is not supported;
- is a directory, a device, a FIFO or a socket (or a symlink to one: writing
  ``--json /dev/stdout`` must not replace the node with a regular file), or a dangling symlink;
- sits in a directory that does not exist or cannot be written;
- is the same file as **any** input of the command (plan, base plans named by a scenario
  file, ``--catalog``, ``--params``, ``--model-config``, ``--capacity-table``, measurements,
  plan result), compared by resolved path and by device/inode (hard links);
- is the same file as another output.

:meth:`Outputs.write` then writes every payload to a temporary file next to its target,
flushed to disk, and only when all of them exist renames them over their targets: an error
or interrupt before the renames leaves every earlier file as it was and no temp file behind;
an interrupt during the renames is held until the last one is done (never half the set
replaced), and :func:`committed_outputs` names what was written. A rename that fails after an
earlier one succeeded (the second folder made read-only or full meanwhile) puts the earlier
targets' previous files back (hidden ``.NAME.*.bak`` backups kept beside them during the renames,
removed after; a new target is removed), and the error says which files are as they were.
New files get the permissions of any normally created file, ``0o666 & ~umask`` (0644 under
umask 022), not ``mkstemp``'s 0600. A symlink to a regular file is written through (the
link stays, its target is replaced). Every OSError becomes an :class:`OutputError` naming
the file.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import sys
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from catalog.errors import OutputError


class Interrupted(BaseException):  # noqa: N818 - a signal, not an error of the program
    """SIGINT/SIGTERM (raised by the CLI's handler). Not a KeyboardInterrupt: click would swallow that."""


# Signals received in this process. A handler that raises can be swallowed where Python ignores
# exceptions (seen: the SIGINT of an interrupted `optimize` landed in logging's at-fork hook while the
# candidate stage forked its workers, and the run finished with exit 0); so the CLI also records the
# signal here and :meth:`Outputs.write` refuses to commit any output once one was received.
_SIGNALS_RECEIVED: list[int] = []


def note_signal(signum: int) -> None:
    """Record a received SIGINT/SIGTERM (the CLI's handler calls this before raising)."""
    _SIGNALS_RECEIVED.append(signum)


def forget_signals() -> None:
    """Start a command with no signal and no committed output recorded (``main`` also runs in-process, in tests)."""
    _SIGNALS_RECEIVED.clear()
    _COMMITTED.clear()
    _RAISE_NEXT[0] = True


# Whether the next signal is raised at once. After the first Interrupted of a command is raised, a second
# Ctrl-C (a held key, an impatient user: 20 SIGINTs 0.5 ms apart) must not raise another one inside the
# cleanup of the first (killing the pool, main's except and finally, the executor's finalisers): that printed
# "During handling of the above exception" tracebacks and exit 1. Later signals are only noted.
_RAISE_NEXT = [True]


def take_signal(signum: int) -> bool:
    """Note ``signum``; True when the CLI's handler should raise :class:`Interrupted` now: not inside
    :func:`deferred_interrupts`, and no Interrupted of this command raised yet (then it is only noted)."""
    note_signal(signum)
    if _DEFERRING[0] > 0 or not _RAISE_NEXT[0]:
        return False
    _RAISE_NEXT[0] = False
    return True


def interrupt_lost() -> None:
    """An Interrupted was swallowed where Python ignores exceptions (``sys.unraisablehook``): the next signal
    raises again, so a second Ctrl-C still stops a run whose first one was lost."""
    _RAISE_NEXT[0] = True


# Outputs renamed into place by this command (as the user wrote them): an interrupt that arrives after
# :meth:`Outputs.write` committed them must not say "earlier outputs are left as they were" (cli.app).
_COMMITTED: list[str] = []


def committed_outputs() -> list[str]:
    """The outputs this command has already replaced (``forget_signals`` starts a command with none)."""
    return list(_COMMITTED)


def raise_if_interrupted() -> None:
    """Raise :class:`Interrupted` if a signal was received, even one whose exception was swallowed."""
    if _SIGNALS_RECEIVED:
        _RAISE_NEXT[0] = False
        raise Interrupted(_SIGNALS_RECEIVED[0])


_DEFERRING = [0]  # depth of deferred_interrupts blocks in this process


def interrupts_deferred() -> bool:
    """Inside :func:`deferred_interrupts`: the CLI's handler notes a signal and does not raise."""
    return _DEFERRING[0] > 0


@contextlib.contextmanager
def deferred_interrupts() -> Iterator[None]:
    """A block in which a SIGINT/SIGTERM is only noted (``note_signal``) and raised as :class:`Interrupted`
    when the block ends: for code in which Python runs callbacks that can only print and ignore an
    exception, i.e. ``os.fork`` and its at-fork hooks (logging's ``_releaseLock`` raised the handler's
    Interrupted there, printed "Exception ignored in" and left its lock state to chance). Not a signal
    mask, which holds a signal only from the thread that sets it: the Python handler always runs in the
    main thread, so a flag it reads holds whichever thread the kernel picks."""
    _DEFERRING[0] += 1
    try:
        yield
    finally:
        _DEFERRING[0] -= 1
    raise_if_interrupted()

STDOUT = "-"
_STDOUT_CLOSED = [False]  # the CLI found stdout closed (``>&-``) and gave it the null device (cli.app)


def set_stdout_closed(closed: bool) -> None:
    """Record that stdout was closed when the command started: an output to ``-`` is then refused up front,
    not sent to the null device with exit 0."""
    _STDOUT_CLOSED[0] = closed


@dataclass(frozen=True)
class Output:
    """One output a command may write: its option name, path (None = not asked), allowed suffixes."""

    option: str
    path: Path | str | None
    suffixes: tuple[str, ...] = ()
    stdout_ok: bool = False


@dataclass(frozen=True)
class _Target:
    option: str
    shown: str             # the path as the user wrote it, for messages
    real: Path | None      # resolved path; None = stdout


def _umask() -> int:
    """The process umask, read without changing it where /proc allows."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _same_file(a: Path, b: Path) -> bool:
    if a == b:
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _check(spec: Output, inputs: list[Path]) -> _Target:
    shown = str(spec.path)
    if shown == STDOUT:
        if not spec.stdout_ok:
            raise OutputError(f"{spec.option} -: this output cannot go to stdout; give a file name")
        if _STDOUT_CLOSED[0]:
            raise OutputError(f"{spec.option} -: stdout is closed; give a file name or open stdout")
        return _Target(spec.option, shown, None)
    if not shown.strip():
        raise OutputError(f"{spec.option} {shown!r}: is an empty path; give a file name, e.g. {spec.option} "
                          f"out{spec.suffixes[0] if spec.suffixes else ''}")
    path = Path(spec.path)  # type: ignore[arg-type]
    if shown.endswith(os.sep) and not os.path.isdir(shown):
        # 'out.json/' names a directory (POSIX: a trailing slash resolves as one); writing 'out.json' would not
        # be what was typed, and `cp x out.json/` refuses it too
        raise OutputError(f"{spec.option} {shown}: ends with '{os.sep}', which names a directory; "
                          f"drop the '{os.sep}' to write the file {shown.rstrip(os.sep) or os.sep}")
    if not path.name or shown.endswith(os.sep):
        raise OutputError(f"{spec.option} {shown}: is a directory; give a file name")
    real = Path(os.path.realpath(path))
    for src in inputs:
        if _same_file(real, src):
            raise OutputError(f"{spec.option} {shown}: output path is the input file {src}; "
                              "choose another output path")
    if os.path.lexists(path):
        try:
            st = os.stat(path)
        except OSError as exc:
            what = "a loop of symlinks" if exc.errno == errno.ELOOP else "a symlink to a missing file"
            raise OutputError(f"{spec.option} {shown}: is {what}; remove it or give another path") from None
        if stat.S_ISDIR(st.st_mode):
            raise OutputError(f"{spec.option} {shown}: is a directory; give a file name")
        if not stat.S_ISREG(st.st_mode):
            kind = "a FIFO" if stat.S_ISFIFO(st.st_mode) else "a device or socket"
            raise OutputError(f"{spec.option} {shown}: is {kind}, not a regular file; give a file path"
                              + (" (or - for stdout)" if spec.stdout_ok else ""))
        if not os.access(path, os.W_OK):
            # the rename would replace it all the same (it needs only the folder): a file made read-only, or
            # immutable, is one its owner protected; `>` and `cp` refuse it too
            raise OutputError(f"{spec.option} {shown}: is a read-only file; make it writable (chmod u+w) or "
                              "choose another output path")
    if spec.suffixes and path.suffix.lower() not in spec.suffixes:
        example = f"out{spec.suffixes[0]}"
        raise OutputError(f"{spec.option} {shown}: needs the {' or '.join(spec.suffixes)} extension; "
                          f"e.g. {spec.option} {example}")
    parent = real.parent
    if not parent.is_dir():
        if parent.exists():  # 'plan.yaml/out.json': the 'directory' is a file; 'create it first' would not do
            raise OutputError(f"{spec.option} {shown}: {path.parent} is a file, not a directory; "
                              "give a path in a directory")
        raise OutputError(f"{spec.option} {shown}: directory {path.parent} does not exist; create it first")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise OutputError(f"{spec.option} {shown}: directory {path.parent} is not writable; "
                          "choose another output path")
    # access() answers yes where creating fails (root in /sys, an immutable folder, root-squashed NFS): create
    # and delete a file now, so the run stops before it computes, not after
    with deferred_interrupts():
        try:
            fd, probe = tempfile.mkstemp(prefix=f".{real.name}.", suffix=".tmp", dir=parent)
        except OSError as exc:
            raise OutputError(f"{spec.option} {shown}: cannot write in {path.parent} ({exc.strerror}); "
                              "choose another output path") from None
        os.close(fd)
        os.unlink(probe)
    return _Target(spec.option, shown, real)


class Outputs:
    """The validated outputs of one command; :meth:`write` writes them all or none."""

    def __init__(self, targets: dict[str, _Target]):
        self._targets = targets

    def __contains__(self, option: str) -> bool:
        return option in self._targets

    def to_stdout(self, option: str) -> bool:
        """True if ``option`` was given as ``-``."""
        target = self._targets.get(option)
        return target is not None and target.real is None

    def shown(self, option: str) -> str:
        return self._targets[option].shown

    def write(self, payloads: Mapping[str, bytes | str]) -> list[str]:
        """Write each payload to its option's target; all renames happen after all temp files exist.

        Options not in ``payloads`` are left alone (e.g. no workbook for an infeasible plan).
        Returns the paths written, as the user wrote them. Stdout payloads go out last.
        """
        unknown = set(payloads) - set(self._targets)
        if unknown:
            raise ValueError(f"outputs not declared: {sorted(unknown)}")
        raise_if_interrupted()
        mode = 0o666 & ~_umask()
        staged: list[tuple[str, _Target]] = []
        to_stdout: list[bytes | str] = []
        try:
            for option, data in payloads.items():
                target = self._targets[option]
                if target.real is None:
                    to_stdout.append(data)
                    continue
                blob = data.encode("utf-8") if isinstance(data, str) else data
                staged.append((_stage(target, blob, mode), target))
            raise_if_interrupted()  # a signal while staging: no rename, the temp files go
            # All renames or none: a signal between two of them (json replaced, workbook not) is only noted
            # by the CLI's handler and raised once the last is done; the CLI then names them as written.
            with _folders_locked(staged):  # waited for with interrupts live: Ctrl-C still ends a stuck wait
                raise_if_interrupted()
                _DEFERRING[0] += 1
                try:
                    _commit(staged)
                finally:
                    _DEFERRING[0] -= 1
            raise_if_interrupted()
        finally:
            for tmp, _target in staged:
                if os.path.lexists(tmp):
                    try:
                        os.unlink(tmp)
                    except OSError:
                        pass
        for data in to_stdout:
            if isinstance(data, str):
                sys.stdout.write(data)
            else:
                sys.stdout.flush()
                sys.stdout.buffer.write(data)
            sys.stdout.flush()
        return [t.shown for _tmp, t in staged]


def _keep_previous(target: _Target) -> str | None:
    """A hidden backup of the target's current file in its folder (``.NAME.XXXXXXXX.bak``): a hard link (no
    copy; the old file's inode, mode and owner), or a copy where the file system has no hard links. None
    when there is no previous file. OutputError when it cannot be made (nothing has been replaced yet)."""
    real = target.real
    assert real is not None
    if not os.path.lexists(real):
        return None
    backup = str(real.parent / f".{real.name}.{os.urandom(4).hex()}.bak")
    try:
        try:
            os.link(real, backup)
        except OSError:  # no hard links here (FAT, some network file systems), or not allowed: a copy
            import shutil

            shutil.copy2(real, backup)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(backup)
        raise OutputError(f"{target.option} {target.shown}: cannot keep the previous file while the outputs are "
                          f"replaced ({exc.strerror}); nothing was written") from None
    return backup


@contextlib.contextmanager
def _folders_locked(staged: list[tuple[str, _Target]]) -> Iterator[None]:
    """Hold an exclusive ``flock`` on each output's folder (in path order: no two runs wait on each other)
    while a set of two or more outputs is renamed, so that two runs writing the same ``--json`` and ``--out``
    at once leave one run's pair, never the JSON of one beside the workbook of the other (renames A-json,
    B-json, B-xlsx, A-xlsx). Best effort: a folder that cannot be opened or locked (no flock on the file
    system) is renamed into unlocked, as before. One output needs no lock: one rename is atomic."""
    try:
        import fcntl
    except ImportError:  # Windows
        fcntl = None
    if len(staged) < 2 or fcntl is None:
        yield
        return

    fds: list[int] = []
    try:
        for folder in sorted({str(t.real.parent) for _tmp, t in staged if t.real is not None}):
            try:
                fd = os.open(folder, os.O_RDONLY)
            except OSError:
                continue
            fds.append(fd)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
            except OSError:
                pass
        yield
    finally:
        for fd in fds:
            os.close(fd)  # closing the last descriptor of an open file releases its lock


def _commit(staged: list[tuple[str, _Target]]) -> None:
    """Rename each staged temp file over its target, all or none as far as the file system allows.

    A rename can fail after an earlier one succeeded (the second folder made read-only, full, or gone in
    between): the previous file of every target but the last is kept first (:func:`_keep_previous`), and on
    a failure the targets already replaced get it back (a new one is removed), so the error can say every
    output is as it was. The backups are removed once all renames are done. A single output needs none:
    one rename is atomic."""
    backups: list[str | None] = []
    try:
        for _tmp, target in staged[:-1]:
            backups.append(_keep_previous(target))
    except OutputError:
        _drop(backups)
        raise
    backups.append(None)
    for i, (tmp, target) in enumerate(staged):
        try:
            os.replace(tmp, target.real)  # type: ignore[arg-type]
        except OSError as exc:
            _drop(backups[i:])  # the failed and later targets were never replaced
            state = _roll_back(staged[:i], backups[:i], [t for _tmp, t in staged[i:]])
            raise OutputError(f"{target.option} {target.shown}: cannot write ({exc.strerror}); {state}") from None
        _COMMITTED.append(target.shown)
    _drop(backups)  # the outputs themselves are all written


def _drop(backups: list[str | None]) -> None:
    """Remove these hidden backups (None: a target that had no previous file); one that cannot be removed is
    left behind, hidden: it is never an output's content."""
    for backup in backups:
        if backup is not None:
            with contextlib.suppress(OSError):
                os.unlink(backup)


def _roll_back(done: list[tuple[str, _Target]], backups: list[str | None], untouched: list[_Target]) -> str:
    """Put back the previous file of each target in ``done`` (remove it if it is new); returns what the error
    says about the outputs: which are as they were, and any that could not be put back."""
    kept = [t.shown for t in untouched]
    lost = []
    for (_tmp, target), backup in reversed(list(zip(done, backups, strict=True))):
        try:
            if backup is None:
                os.unlink(target.real)  # type: ignore[arg-type]
            else:
                os.replace(backup, target.real)  # type: ignore[arg-type]
        except OSError as exc:
            before = ("it did not exist before" if backup is None else
                      f"its previous content is in {os.path.join(os.path.dirname(target.shown), os.path.basename(backup))}")
            lost.append(f"{target.shown} was replaced and could not be put back ({exc.strerror}; {before})")
        else:
            kept.insert(0, target.shown)
            _COMMITTED.remove(target.shown)
    state = f"{_and(kept)} {'is as it was' if len(kept) == 1 else 'are as they were'}"  # the failed one is in kept
    return "; ".join([state, *lost]) if lost else f"nothing was written: {state}"


def _and(names: list[str]) -> str:
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def _stage(target: _Target, blob: bytes, mode: int) -> str:
    """Write ``blob`` to a new temp file beside the target; return its path."""
    real = target.real
    assert real is not None
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{real.name}.", suffix=".tmp", dir=real.parent)
    except OSError as exc:
        raise OutputError(f"{target.option} {target.shown}: cannot write in {real.parent} ({exc.strerror}); "
                          "choose another output path") from None
    try:
        with os.fdopen(fd, "wb") as fh:
            os.fchmod(fh.fileno(), mode)
            fh.write(blob)
            fh.flush()
            os.fsync(fh.fileno())
    except OSError as exc:
        os.unlink(tmp)
        raise OutputError(f"{target.option} {target.shown}: cannot write ({exc.strerror})") from None
    except BaseException:
        os.unlink(tmp)
        raise
    return tmp


def plan_outputs(specs: Iterable[Output], inputs: Iterable[Path | str | None] = ()) -> Outputs:
    """Validate every output that was asked for (``path`` not None) against the rules above.

    Raises OutputError (one line: option, path, what is wrong, the fix) on the first bad one.
    """
    real_inputs = [Path(os.path.realpath(p)) for p in inputs if p is not None and str(p) != STDOUT]
    targets: dict[str, _Target] = {}
    for spec in specs:
        if spec.path is None:
            continue
        target = _check(spec, real_inputs)
        for other in targets.values():
            if target.real is not None and other.real is not None and _same_file(target.real, other.real):
                raise OutputError(f"{spec.option} {target.shown}: is also the {other.option} output; "
                                  "give each output its own path")
        targets[spec.option] = target
    return Outputs(targets)


def write_atomic(path: Path | str, data: bytes | str, inputs: tuple[Path | str, ...] = (),
                 option: str = "output") -> Path:
    """Write one file through :func:`plan_outputs` (validated, temp file + rename, umask permissions)."""
    outputs = plan_outputs([Output(option, path)], inputs)
    outputs.write({option: data})
    return Path(path)
