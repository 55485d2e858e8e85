"""``TensorBoardLogger``: one TensorBoard run (a subfolder of event files) per logger run."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import numpy as np

from ._console import leaf_names
from ._logdict import logdict
from ._loggers import HostLogger
from ._save_index import folder_path, refuse_link


def _import_tensorboardx() -> Any:
    try:
        import tensorboardX
    except ImportError as err:
        raise ImportError(
            "TensorBoardLogger needs the tensorboardX package, which is not installed. Install "
            "the extra: pip install 'lox-logging[tensorboard]'."
        ) from err
    return tensorboardX


class _Run:
    """A run's writer and, per tag without steps, how many events it has written."""

    def __init__(self, writer: Any):
        self.writer = writer
        self.counts: dict[str, int] = {}

    def next_index(self, tag: str) -> int:
        i = self.counts.get(tag, 0)
        self.counts[tag] = i + 1
        return i


class TensorBoardLogger(HostLogger):
    """Write TensorBoard event files: each ``init`` (each lane of ``jax.vmap``) is one run.

    Run ``i`` writes to ``path/run_<i>``, so ``tensorboard --logdir path`` shows one curve per
    run (per seed under ``vmap``). A value of one element is a scalar; a larger array is a
    histogram of its values; ``text`` is written to every run as it starts (e.g. the config).
    The x-axis of an event is its step named ``step`` (the first step name the key has when it
    has no ``step``); a key logged without steps counts its events 0, 1, 2, ... per run.
    Files are written by ``tensorboardX`` (install ``lox-logging[tensorboard]``) in a
    background thread, flushed every ``flush_secs`` and at ``finish``. A run folder that is a
    symbolic link raises ``lox.DamagedSaveError``: nothing is written outside ``path``.

    Args:
        path: the parent folder of the run folders (TensorBoard's ``--logdir``).
        step: the step name to plot against.
        text: ``{tag: markdown}`` written to each run at step 0.
        flush_secs: seconds between flushes to disk.

    Example:
        >>> import tempfile, jax.numpy as jnp, lox
        >>> from tbparse import SummaryReader
        >>> folder = tempfile.mkdtemp()
        >>> logger = lox.TensorBoardLogger(folder)
        >>> state = logger.init()
        >>> steps = {'loss': {'step': jnp.array([1, 2])}}
        >>> logs = lox.logdict({'loss': jnp.array([0.5, 0.25])}, steps)
        >>> state = logger.log(state, logs)
        >>> logger.finish(state)
        >>> SummaryReader(f'{folder}/run_0').scalars[['step', 'tag', 'value']].values.tolist()
        [[1, 'loss', 0.5], [2, 'loss', 0.25]]
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        step: str = "step",
        text: Mapping[str, str] | None = None,
        flush_secs: float = 10.0,
    ):
        path = folder_path("TensorBoardLogger", path, "TensorBoardLogger('runs/tb')")
        text = dict(text or {})
        bad = {k: type(v).__name__ for k, v in text.items() if not isinstance(v, str)}
        if bad or not all(isinstance(k, str) for k in text):
            raise TypeError(
                f"TensorBoardLogger: text must map str tags to str texts, got {bad or text!r:.200} "
                "(the types of the values that are not str). Example: text={'config': "
                "json.dumps(config, indent=2)}."
            )
        if not isinstance(flush_secs, int | float) or flush_secs <= 0:
            raise ValueError(
                f"TensorBoardLogger: flush_secs must be a positive number of seconds, got "
                f"{flush_secs!r}. Example: flush_secs=10."
            )
        self._tbx = _import_tensorboardx()  # fail here, clearly, not inside a callback
        super().__init__()
        self.path = os.fspath(path)
        self.step = step
        self.text = text
        self.flush_secs = float(flush_secs)

    def __repr__(self) -> str:
        return f"TensorBoardLogger({self.path!r}, step={self.step!r})"

    def run_path(self, run: int) -> str:
        """The folder of run number ``run`` (one TensorBoard run)."""
        return os.path.join(self.path, f"run_{int(run)}")

    def open_run(self, run: int, key: np.ndarray | None) -> _Run:
        os.makedirs(self.path, exist_ok=True)
        refuse_link("TensorBoardLogger", self.path, os.path.basename(self.run_path(run)))
        writer = self._tbx.SummaryWriter(self.run_path(run), flush_secs=self.flush_secs)
        for tag, body in self.text.items():
            writer.add_text(tag, body, global_step=0)
        return _Run(writer)

    def write_run(self, handle: _Run, run: int, logs: logdict) -> None:
        all_steps = logs.steps
        for key, value in logs.items():
            steps = all_steps[key]
            x_axis = steps.get(self.step, next(iter(steps.values()), None))
            for tag, leaf in leaf_names(key, value):
                for i in range(np.shape(leaf)[0]):
                    at = int(x_axis[i]) if x_axis is not None else handle.next_index(tag)
                    self._add(handle.writer, tag, np.asarray(leaf[i]), at)

    @staticmethod
    def _add(writer: Any, tag: str, x: np.ndarray, step: int) -> None:
        if x.size == 1:
            writer.add_scalar(tag, float(x.reshape(())), global_step=step)
        elif x.size:
            writer.add_histogram(tag, x.astype(np.float64).ravel(), global_step=step)

    def flush_run(self, handle: _Run, run: int) -> None:
        handle.writer.flush()

    def close_run(self, handle: _Run | None, run: int) -> None:
        if handle is not None:
            handle.writer.close()
