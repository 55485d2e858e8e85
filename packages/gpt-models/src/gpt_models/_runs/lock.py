"""One live training process per run folder: an exclusive ``flock`` on ``<run>/lock``.

Why ``flock`` and not a pid file: the kernel drops the lock when its process dies, however it dies
(``kill -9`` included), so a lock can never be left stuck by a dead process on a local filesystem,
and taking it is atomic, so two launches a moment apart cannot both get it. The file also holds JSON
naming the holder (pid, host, start time, command) so a refused launch can say who runs the folder;
a file left by a process that died is how we recognise (and report) a take-over.

A multi-process job trains one run: its process 0 holds the lock and writes the folder, and the
others join it (:func:`check_joinable`). They take no lock, but one that finds the folder held by
a live process of another job (the JSON names the holder's job) is refused like a second launch.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import shlex
import socket
import sys
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

from .._distributed.processes import job_identity
from .._errors import UsageError

LOCK_NAME = "lock"


class RunInUseError(UsageError):
    """Another live process is training in this run folder (the CLI exits with status 2)."""


def _holder() -> dict[str, Any]:
    return {
        "pid": os.getpid(),
        "hostname": socket.gethostname(),
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "command": shlex.join(sys.argv),
        "job": job_identity(),
    }


def _read_holder(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None  # absent, or written only partly when its process was killed
    return data if isinstance(data, dict) else None


def _describe(holder: dict[str, Any] | None) -> str:
    if not holder:
        return "another process (it has not written its details yet)"
    return (
        f"pid {holder.get('pid')} on host {holder.get('hostname')} (started "
        f"{holder.get('started')}: {holder.get('command')})"
    )


def _in_use(path: Path) -> RunInUseError:
    return RunInUseError(
        f"Run folder {path.parent} is in use: {_describe(_read_holder(path))} is training "
        "in it. Two processes writing one run would interleave its checkpoints and metrics. "
        "Wait for it to finish (or stop it), then `gpt train --resume "
        f"{path.parent}`; or start a new run with another --name."
    )


def check_not_in_use(run: Path) -> None:
    """Refuse, naming the holder, if a live process holds ``run``'s lock now (takes nothing).

    A launch checks this before it judges the folder's contents: a run being trained gains
    checkpoints while a second launch looks, and "in use" is the true reason to refuse it.

    Raises:
        RunInUseError: a live process holds the lock.
    """
    path = run / LOCK_NAME
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    except OSError:
        return  # no lock file (no one holds it), or a link that taking the lock refuses later
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise _in_use(path) from None
    except OSError:
        return  # a filesystem without flock: run_lock warns when it is taken
    finally:
        os.close(fd)  # closing drops a lock we took


def check_joinable(run: Path) -> None:
    """Refuse a process > 0 of a multi-process job if a live process of another job holds ``run``
    (takes nothing: this job's own process 0 holds, or is about to take, the lock).

    Raises:
        RunInUseError: the holder's job is not this process's job, and it is alive.
    """
    path = run / LOCK_NAME
    holder = _read_holder(path)
    if holder is None or holder.get("job") == job_identity():
        return  # free, not written yet, or held by this job's process 0: join it
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    except OSError:
        return
    try:
        # A shared probe, dropped at once; process 0 retries a probe it meets (_open_locked).
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        raise _in_use(path) from None
    except OSError:
        return
    finally:
        os.close(fd)


@contextlib.contextmanager
def join_run(run: Path) -> Iterator[None]:
    """What a process > 0 holds while it trains: nothing, once :func:`check_joinable` passed."""
    check_joinable(run)
    yield


def _flock_patiently(fd: int) -> None:
    """An exclusive flock, retried for a moment: a joining process's probe holds it briefly."""
    for _ in range(_PROBE_RETRIES):
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            time.sleep(0.05)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)


_PROBE_RETRIES = 10


def _open_locked(path: Path) -> int:
    """An fd of ``path`` holding its exclusive flock, or RunInUseError if another process holds
    it."""
    while True:
        try:
            # O_NOFOLLOW: a lock that is a symbolic link would truncate whatever it points to.
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644)
        except OSError as err:
            if err.errno != errno.ELOOP:
                raise
            raise UsageError(
                f"Run folder lock {path} is a symbolic link (to {os.readlink(path)}); it is not "
                "followed, since taking the lock writes the file. Remove the link, then launch "
                "again."
            ) from None
        try:
            _flock_patiently(fd)
        except BlockingIOError:
            os.close(fd)
            raise _in_use(path) from None
        except OSError:
            os.close(fd)
            raise
        # The holder unlinks the file when it finishes: if that happened between our open and our
        # flock, we locked a file no one else will ever see; open the path again.
        try:
            same = os.stat(path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:
            return fd
        os.close(fd)


@contextlib.contextmanager
def run_lock(run: Path, *, stream: TextIO | None = None) -> Iterator[None]:
    """Hold the run folder's lock for the duration of the block (the folder must exist).

    Raises:
        RunInUseError: a live process holds it; the message names that process.
    """
    path = run / LOCK_NAME
    try:
        fd = _open_locked(path)
    except OSError as err:
        if err.errno not in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS):
            raise
        # Some network/FUSE filesystems refuse flock; training unprotected beats not training.
        warnings.warn(
            f"Cannot lock run folder {run} ({err.strerror}): nothing stops a second process from "
            "training in it at the same time.",
            RuntimeWarning,
            stacklevel=3,
        )
        yield
        return
    left = _read_holder(path)
    if left is not None:
        print(
            f"note: {run} was last held by {_describe(left)}, which is no longer running; "
            "taking it over.",
            file=stream or sys.stderr,
        )
    os.ftruncate(fd, 0)
    os.pwrite(fd, json.dumps(_holder()).encode(), 0)
    try:
        yield
    finally:
        # Unlink before closing: a clean exit leaves no file, so a leftover one always means a
        # holder that died.
        with contextlib.suppress(OSError):
            path.unlink()
        os.close(fd)
