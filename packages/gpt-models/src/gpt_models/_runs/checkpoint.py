"""Checkpoints with orbax: async saves, keep-N, and restore that falls back past a damaged step."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import traceback
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jax
import orbax.checkpoint as ocp

from .._distributed.processes import is_primary
from .._errors import UsageError
from .abandoned_reads import abandoned_reads_awaited
from .digest import (
    PendingDigest,
    check_shapes,
    prune_digests,
    read_digest,
    verify,
    write_digest,
)
from .runlog import append_inside
from .snapshot import stable_view

log = logging.getLogger(__name__)

# How many times a reader lists the steps again when the step it was reading is rotated away.
_ROTATION_RETRIES = 5
_ROTATED = object()


class CheckpointWarning(UserWarning):
    """A checkpoint could not be restored and an older one was used instead."""


class Checkpointer:
    """An orbax ``CheckpointManager`` for named pytrees ("items") plus a small JSON of metadata per
    step.

    Each item is stored in its own folder of the step, so a reader can restore some items without
    touching the others: ``gpt sample`` restores the ``params`` item and never reads the optimizer
    state (for Adam, twice the size of the params).

    Saves are asynchronous: ``save`` returns once the arrays are copied off the devices (the
    blocking part), and the files are written in the background. Orbax writes each step to a
    temporary folder and renames it when complete, so a crash never leaves a half-written step
    that looks finished.

    Args:
        directory: the ``checkpoints/`` folder of a run.
        keep: how many of the newest checkpoints to keep.
        async_save: write in the background (the default).

    Example:
        >>> import tempfile, jax.numpy as jnp
        >>> ckpt = Checkpointer(tempfile.mkdtemp(), keep=2)
        >>> ckpt.save(3, {"params": {"w": jnp.ones(2)}, "opt": {"m": jnp.ones(2)}}, {"step": 3})
        >>> ckpt.wait()
        >>> items, meta, step = ckpt.restore({"params": {"w": jnp.zeros(2)}})
        >>> items["params"]["w"].tolist(), list(items), meta, step
        ([1.0, 1.0], ['params'], {'step': 3}, 3)
        >>> ckpt.close()
    """

    def __init__(self, directory: str | Path, *, keep: int = 3, async_save: bool = True):
        self.directory = Path(directory).absolute()
        options = ocp.CheckpointManagerOptions(
            max_to_keep=keep, enable_async_checkpointing=async_save, create=True
        )
        with CapturedLogs():  # orbax logs each damaged step it lists; restore() reports them once
            self._manager = _open_manager(self.directory, options)
        self.skipped: list[int] = []  # steps the last restore could not read
        self._digests = True
        self._digest_thread: threading.Thread | None = None
        self._digest_error: Exception | None = None

    def steps(self) -> list[int]:
        """Saved steps, oldest first."""
        return sorted(self._manager.all_steps())

    def save(
        self, step: int, items: Mapping[str, Any], meta: dict[str, Any], *, force: bool = True
    ) -> None:
        """Start saving ``items`` (name -> pytree of arrays) and ``meta`` (JSON-able) as
        ``step``."""
        _check_item_names(items)
        # Dispatched before the next training step can overwrite (donate) the arrays; computed on
        # the devices and written from a thread while orbax writes the files, so that the save
        # blocks the training loop no longer than without it (benchmarks/gpt/checkpoint_digest.py).
        digest = PendingDigest(items) if self._digests else None
        args = {name: ocp.args.StandardSave(tree) for name, tree in items.items()}
        self._manager.save(
            step, args=ocp.args.Composite(**args, meta=ocp.args.JsonSave(meta)), force=force
        )
        if digest is not None and is_primary():
            self._wait_digest()
            self._digest_thread = threading.Thread(
                target=self._write_digest, args=(step, digest), name=f"digest-{step}", daemon=True
            )
            self._digest_thread.start()

    def _write_digest(self, step: int, digest: PendingDigest) -> None:
        try:
            write_digest(self.directory, step, digest.result())
            prune_digests(self.directory, sorted(self._manager.all_steps()))
        except Exception as err:  # e.g. a full disk: the step is then restored unverified
            self._digest_error = err

    def _wait_digest(self) -> None:
        if self._digest_thread is not None:
            self._digest_thread.join()
            self._digest_thread = None
        if self._digest_error is not None:
            err, self._digest_error = self._digest_error, None
            raise err

    def discard_damaged(self, restored: int) -> list[int]:
        """Delete the steps newer than ``restored`` that the last restore skipped as damaged.

        A resumed run saves those step numbers again; orbax refuses to save over an existing
        step, and a damaged step left newer than the good ones would be the first one read.
        """
        gone = [s for s in self.skipped if s > restored]
        for s in gone:
            self._manager.delete(s)
            (self.directory / ".digests" / f"{s}.json").unlink(missing_ok=True)
        self.skipped = []
        return gone

    def saving(self) -> bool:
        """Whether a save's background writes (orbax's or the digest's) are still going on."""
        thread = self._digest_thread
        return self._manager.is_saving_in_progress() or (thread is not None and thread.is_alive())

    def wait(self) -> None:
        """Block until background writes are done."""
        self._manager.wait_until_finished()
        self._wait_digest()

    def restore(
        self, targets: Mapping[str, Any], step: int | None = None
    ) -> tuple[dict[str, Any], dict[str, Any], int]:
        """Restore ``(items, meta, step)``: only the items named in ``targets``, onto their targets.

        A target is a pytree of arrays or ``ShapeDtypeStruct`` s (their shardings place the result).
        With ``step=None`` the newest checkpoint is tried first; if it cannot be read (a damaged or
        truncated file), a :class:`CheckpointWarning` names it and the next older one is tried. A
        step that a live run deletes while it is read (keep-N rotation) is not damage: the steps
        are listed again and the new newest is read.

        Raises:
            UsageError: there is no checkpoint, or none of them can be read.
        """
        _check_item_names(targets)
        self.skipped = []
        with CapturedLogs() as self._details:
            return self._restore(targets, step)

    def _restore(
        self, targets: Mapping[str, Any], step: int | None
    ) -> tuple[dict[str, Any], dict[str, Any], int]:
        errors: dict[int, str] = {}
        # The run may still be training and deleting old steps (keep-N). Each try reads a view of
        # hard links that those deletions cannot change; a step deleted while the view was made
        # shows as a change in the step list, which is not damage: the next try takes the newest.
        rounds = 1 if step is not None else _ROTATION_RETRIES
        for _ in range(rounds):
            before = _fresh_steps(self._manager)
            with _reading_view(self.directory) as view:
                if view == self.directory:
                    got = self._try_newest(self._manager, targets, step, before, errors)
                else:
                    reader = _open_reader(view)
                    try:
                        got = self._try_newest(reader, targets, step, before, errors)
                    finally:
                        reader.close()
            if got is None:
                break
            if got is not _ROTATED:
                return got
        if not errors and _fresh_steps(self._manager):
            raise UsageError(
                f"Could not restore a checkpoint from {self.directory}: the run writing it "
                f"replaced "
                f"its checkpoints during each of {rounds} reads. Try again, or raise "
                "train.checkpoint_every so that the run saves less often."
            )
        if not errors:
            raise UsageError(
                f"No checkpoint in {self.directory}: the run saved none yet (a run saves every "
                "train.checkpoint_every steps and at the end). A run still training writes its "
                "first one soon; one that stopped before that has nothing to read or resume: "
                f"train it again with its settings, gpt train --config "
                f"{self.directory.parent / 'config.toml'} --name NEW, or pick a run folder that "
                "has a checkpoint."
            )
        raise UsageError(
            f"No checkpoint in {self.directory} could be restored:\n  "
            + "\n  ".join(errors.values())
            + "\nThe files may be damaged or from a different model config."
            + (f" Details: {log}" if (log := self.directory / ERRORS_LOG).is_file() else "")
        )

    def _try_newest(
        self,
        manager: ocp.CheckpointManager,
        targets: Mapping[str, Any],
        step: int | None,
        before: list[int],
        errors: dict[int, str],
    ) -> Any:
        # (items, meta, step); None when every candidate failed; _ROTATED when the run writing
        # this folder saved or deleted a step meanwhile.
        listed = [step] if step is not None else _fresh_steps(manager)[::-1]
        candidates = [s for s in listed if s not in errors]
        for s in candidates:
            try:
                got = (*_restore_step(manager, s, targets, self.directory), s)
            except Exception as err:  # orbax/tensorstore raise many types for damaged files
                if step is None and _fresh_steps(self._manager) != before:
                    return _ROTATED
                errors[s] = f"step {s}: {type(err).__name__}: {str(err)[:300]}"
                self.skipped = sorted(errors)
                logged = self._details.write(self.directory / ERRORS_LOG, s, err)
                if s != candidates[-1]:
                    warnings.warn(
                        f"Checkpoint step {s} in {self.directory} could not be restored "
                        f"({type(err).__name__}: {str(err)[:200]}); falling back to the "
                        f"previous one.{logged}",
                        CheckpointWarning,
                        stacklevel=4,
                    )
            else:
                return got
        return None

    def close(self) -> None:
        """Wait for pending writes and release the manager's threads."""
        try:
            self.wait()
        finally:
            self._manager.close()


def _reading_view(directory: Path) -> contextlib.AbstractContextManager[Path]:
    # A multi-process job restores only when it resumes, holding the run lock, so no one else
    # writes; and orbax's collective barriers need every process to open the same managers in
    # the same order. It reads in place.
    if jax.process_count() > 1:
        return contextlib.nullcontext(directory)
    return stable_view(directory)


def _open_manager(directory: Path, options: ocp.CheckpointManagerOptions) -> ocp.CheckpointManager:
    # Opening lists the steps and stats each one; a live run can delete one in between.
    for _ in range(_ROTATION_RETRIES - 1):
        try:
            return ocp.CheckpointManager(directory, options=options)
        except FileNotFoundError:
            continue
    return ocp.CheckpointManager(directory, options=options)


ERRORS_LOG = "restore-errors.log"


class CapturedLogs(logging.Filter):
    """Orbax's (absl's) log lines while a restore, or the clean-up after a failed run, runs: kept
    for the log file, not printed.

    A damaged step makes orbax and tensorstore log errors (and their background threads whole
    tracebacks) before the exception reaches us; printed, they buried the one message that says
    which step was skipped. They go to ``checkpoints/restore-errors.log`` with the exception.
    """

    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []
        self.records: list[logging.LogRecord] = []
        self._passing: set[int] = set()  # ids of the records being replayed

    def filter(self, record: logging.LogRecord) -> bool:
        if id(record) in self._passing:
            return True
        self.lines.append(logging.Formatter("%(levelname)s %(name)s: %(message)s").format(record))
        self.records.append(record)
        return False

    def replay(self, count: int | None = None) -> None:
        """Log what was held back after all (the block it guarded went well): the first ``count``
        records (all by default), which are then no longer held. Inside the block too: what other
        threads log meanwhile is still held (a save that fails on a full disk reports from its
        writer threads just as the previous save's reports are replayed)."""
        count = len(self.records) if count is None else count
        records, self.records, self.lines = (
            self.records[:count],
            self.records[count:],
            self.lines[count:],
        )
        for record in records:
            self._passing.add(id(record))
            try:
                logging.getLogger("absl").handle(record)
            finally:
                self._passing.discard(id(record))

    def __enter__(self) -> CapturedLogs:
        logging.getLogger("absl").addFilter(self)
        return self

    def __exit__(self, *exc: object) -> None:
        logging.getLogger("absl").removeFilter(self)

    def write(self, path: Path, step: int, err: BaseException) -> str:
        """Append the details of ``step``'s failure to ``path``; a note naming it, or ""."""
        text = "".join(traceback.format_exception(err))
        lines, self.lines = self.lines, []
        entry = f"--- {time.strftime('%Y-%m-%dT%H:%M:%S')} step {step}\n"
        entry += "".join(line + "\n" for line in lines) + text
        # Never through a link; a read-only run folder: the warning is all there is.
        written = append_inside(path.parent, path.name, entry)
        return f" Details: {path}" if written else ""


class _ReadOnlyNotices(logging.Filter):
    # Orbax announces, at WARNING, the settings that read_only=True implies; we asked for them.
    def filter(self, record: logging.LogRecord) -> bool:
        text = str(record.msg)
        return not text.startswith(
            ("CheckpointManagerOptions.read_only=True", "Given directory is read only")
        )


def _open_reader(view: Path) -> ocp.CheckpointManager:
    # read_only: the view's files are hard links to the run's, so nothing may write to them.
    absl = logging.getLogger("absl")
    notices = _ReadOnlyNotices()
    absl.addFilter(notices)
    try:
        return _open_manager(view, ocp.CheckpointManagerOptions(read_only=True))
    finally:
        absl.removeFilter(notices)


def _fresh_steps(manager: ocp.CheckpointManager) -> list[int]:
    # The manager caches the step list when it opens; another process may have saved since. A live
    # run may delete a step (keep-N) between orbax listing it and reading its commit time: the
    # listing raced a rotation, not damage, so it is taken again.
    for _ in range(_ROTATION_RETRIES):
        try:
            manager.reload()
            return sorted(manager.all_steps())
        except FileNotFoundError as err:
            gone = err
    raise UsageError(
        f"Could not list the checkpoints in {manager.directory}: the run writing them deleted a "
        f"step while it was listed, {_ROTATION_RETRIES} times in a row ({gone}). Try again, or "
        "raise train.checkpoint_every so that the run saves less often."
    )


def _restore_step(
    manager: ocp.CheckpointManager, step: int, targets: Mapping[str, Any], directory: Path
) -> tuple[dict[str, Any], dict[str, Any]]:
    recorded = read_digest(directory, step)  # before the restore: a damaged file fails fast
    if recorded is not None:
        check_shapes(targets, recorded)  # so does a changed model config: no read is started
    args = {name: ocp.args.StandardRestore(target) for name, target in targets.items()}
    with abandoned_reads_awaited():
        out = manager.restore(step, args=ocp.args.Composite(**args, meta=ocp.args.JsonRestore()))
    items = {name: out[name] for name in targets}
    if recorded is not None:
        verify(items, recorded)
    return items, dict(out["meta"])


def _check_item_names(items: Mapping[str, Any]) -> None:
    # "meta" is the JSON item every step carries; an array item of that name would overwrite it.
    if "meta" in items:
        raise ValueError(
            f"Checkpoint item names {sorted(items)} include the reserved name 'meta' (the step's "
            "JSON metadata). Rename that item, e.g. to 'extra'."
        )
