"""Checkpoints with orbax: async saves, keep-N, and restore that falls back past a damaged step."""

from __future__ import annotations

import logging
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import orbax.checkpoint as ocp

from ._errors import UsageError

log = logging.getLogger(__name__)


class CheckpointWarning(UserWarning):
    """A checkpoint could not be restored and an older one was used instead."""


class Checkpointer:
    """An orbax ``CheckpointManager`` for named pytrees ("items") plus a small JSON of metadata per step.

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
        self._manager = ocp.CheckpointManager(self.directory, options=options)

    def steps(self) -> list[int]:
        """Saved steps, oldest first."""
        return sorted(self._manager.all_steps())

    def save(
        self, step: int, items: Mapping[str, Any], meta: dict[str, Any], *, force: bool = True
    ) -> None:
        """Start saving ``items`` (name -> pytree of arrays) and ``meta`` (JSON-able) as ``step``."""
        _check_item_names(items)
        args = {name: ocp.args.StandardSave(tree) for name, tree in items.items()}
        self._manager.save(
            step, args=ocp.args.Composite(**args, meta=ocp.args.JsonSave(meta)), force=force
        )

    def wait(self) -> None:
        """Block until background writes are done."""
        self._manager.wait_until_finished()

    def restore(
        self, targets: Mapping[str, Any], step: int | None = None
    ) -> tuple[dict[str, Any], dict[str, Any], int]:
        """Restore ``(items, meta, step)``: only the items named in ``targets``, onto their targets.

        A target is a pytree of arrays or ``ShapeDtypeStruct`` s (their shardings place the result).
        With ``step=None`` the newest checkpoint is tried first; if it cannot be read (a damaged or
        truncated file), a :class:`CheckpointWarning` names it and the next older one is tried.

        Raises:
            UsageError: there is no checkpoint, or none of them can be read.
        """
        _check_item_names(targets)
        candidates = [step] if step is not None else self.steps()[::-1]
        if not candidates:
            raise UsageError(
                f"No checkpoint in {self.directory}: the run saved none yet (a run saves every "
                "train.checkpoint_every steps and at the end). Train it further, or pick a run "
                "folder that has one."
            )
        errors = []
        for s in candidates:
            try:
                return (*self._restore_step(s, targets), s)
            except Exception as err:  # orbax/tensorstore raise many types for damaged files
                errors.append(f"step {s}: {type(err).__name__}: {str(err)[:300]}")
                if s != candidates[-1]:
                    warnings.warn(
                        f"Checkpoint step {s} in {self.directory} could not be restored "
                        f"({type(err).__name__}: {str(err)[:200]}); falling back to the previous one.",
                        CheckpointWarning,
                        stacklevel=2,
                    )
        raise UsageError(
            f"No checkpoint in {self.directory} could be restored:\n  "
            + "\n  ".join(errors)
            + "\nThe files may be damaged or from a different model config."
        )

    def _restore_step(
        self, step: int, targets: Mapping[str, Any]
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        args = {name: ocp.args.StandardRestore(target) for name, target in targets.items()}
        out = self._manager.restore(
            step, args=ocp.args.Composite(**args, meta=ocp.args.JsonRestore())
        )
        return {name: out[name] for name in targets}, dict(out["meta"])

    def close(self) -> None:
        """Wait for pending writes and release the manager's threads."""
        self._manager.wait_until_finished()
        self._manager.close()


def _check_item_names(items: Mapping[str, Any]) -> None:
    # "meta" is the JSON item every step carries; an array item of that name would overwrite it.
    if "meta" in items:
        raise ValueError(
            f"Checkpoint item names {sorted(items)} include the reserved name 'meta' (the step's "
            "JSON metadata). Rename that item, e.g. to 'extra'."
        )
