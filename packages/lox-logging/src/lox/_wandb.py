"""``WandbLogger``: one wandb run per logger run (per lane under ``vmap``), never fatal."""

from __future__ import annotations

from typing import Any

import numpy as np

from ._console import leaf_names
from ._logdict import logdict
from ._loggers import HostLogger, warn


def _import_wandb() -> Any:
    try:
        import wandb
    except ImportError as err:
        raise ImportError(
            "WandbLogger needs the wandb package, which is not installed. Install the extra: "
            "pip install 'lox-logging[wandb]'."
        ) from err
    return wandb


def rows(logs: logdict, histogram: Any = None) -> list[dict[str, Any]]:
    """One ``wandb.log`` row per group of events that share their steps, in first-seen order.

    Step values are columns of the row (``step``, ``epoch``), so wandb plots against them
    with ``define_metric``; events of keys without steps are grouped by event index. A
    one-element value becomes a Python number; a larger array becomes ``histogram(array)``
    (``wandb.Histogram``) when given, else stays an array.

    Example:
        >>> logs = logdict({'loss': np.array([2.0, 1.0])}, {'loss': {'step': np.array([5, 6])}})
        >>> rows(logs)
        [{'step': 5, 'loss': 2.0}, {'step': 6, 'loss': 1.0}]
    """
    grouped: dict[tuple[Any, ...], dict[str, Any]] = {}
    all_steps = logs.steps
    for key, value in logs.items():
        steps = all_steps[key]
        for name, leaf in leaf_names(key, value):
            for i in range(np.shape(leaf)[0]):
                event = {n: int(s[i]) for n, s in steps.items()}
                group = tuple(event.items()) if steps else (("#event", i),)
                row = grouped.setdefault(group, dict(event))
                row[name] = _cell(np.asarray(leaf[i]), histogram)
    return list(grouped.values())


def _cell(x: np.ndarray, histogram: Any) -> Any:
    if x.size == 1:
        return x.reshape(()).item()
    return histogram(x) if histogram is not None else x


class WandbLogger(HostLogger):
    """Log to Weights & Biases: each ``init`` (each lane of ``jax.vmap(logger.init)``) is a run.

    ``wandb`` is imported only when a run starts (install ``lox-logging[wandb]``). Runs are
    created with ``reinit="create_new"`` so several can be open at once (wandb >= 0.19).
    Set ``WANDB_MODE=offline`` or ``disabled`` to keep off the network. A wandb failure,
    at init, log or finish, only warns (once per run and phase): it never stops training.

    Rows: events that share their steps are one ``run.log`` call, with the step values as
    columns; tell wandb which to plot against, e.g. ``run.define_metric('*',
    step_metric='step')`` through :meth:`runs`.

    Args:
        **wandb_init_kwargs: passed to ``wandb.init`` for every run (``project``, ``group``,
            ``config``, ``dir``, ``mode``, ...).

    Example:
        >>> import jax.numpy as jnp, lox
        >>> logger = lox.WandbLogger(project='demo', mode='disabled')
        >>> state = logger.init()
        >>> state = logger.log(state, lox.logdict({'loss': jnp.array([0.5])}))
        >>> logger.finish(state)
    """

    def __init__(self, **wandb_init_kwargs: Any):
        _import_wandb()  # fail here, clearly, rather than warn at every init
        super().__init__()
        self.init_kwargs = {"reinit": "create_new", **wandb_init_kwargs}
        self._warned: set[tuple[int, str]] = set()

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.init_kwargs.items() if k != "reinit")
        return f"WandbLogger({args})"

    def runs(self) -> dict[int, Any]:
        """The open wandb runs by run id (``None`` where ``wandb.init`` failed)."""
        with self._lock:
            return dict(self._runs)

    def _fail(self, run: int, phase: str, err: BaseException) -> None:
        if (run, phase) in self._warned:
            return
        self._warned.add((run, phase))
        warn(
            f"WandbLogger: wandb {phase} failed for run {run} with {type(err).__name__}: {err}. "
            "Training continues; this run's wandb data may be incomplete (further "
            f"{phase} errors for this run are not reported). Check the wandb setup, or set "
            "WANDB_MODE=offline to log locally."
        )

    def open_run(self, run: int, key: np.ndarray | None) -> Any:
        try:
            return _import_wandb().init(**self.init_kwargs)
        except Exception as err:
            self._fail(run, "init", err)
            return None

    def write_run(self, handle: Any, run: int, logs: logdict) -> None:
        if handle is None:  # init failed and warned already
            return
        try:
            histogram = _import_wandb().Histogram
            for row in rows(logs, histogram):
                handle.log(row)
        except Exception as err:
            self._fail(run, "log", err)

    def close_run(self, handle: Any, run: int) -> None:
        if handle is None:
            return
        try:
            handle.finish()
        except Exception as err:
            self._fail(run, "finish", err)

    def _handle(self, run: int) -> Any:
        # A state from a finished run or another logger must not stop training either.
        try:
            return super()._handle(run)
        except ValueError as err:
            self._fail(run, "log", err)
            return None
