"""``ConsoleLogger``: one readable line per group of events that share their steps."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from core_primitives import dtype_shape, tree_paths

from ._logdict import logdict
from ._loggers import HostLogger


def _number(x: Any, precision: int) -> str:
    if isinstance(x, bool | np.bool_):
        return str(bool(x))
    if isinstance(x, int | np.integer):
        return str(int(x))
    return f"{float(x):.{precision}g}"


def summarize(x: np.ndarray, precision: int = 4) -> str:
    """A scalar as a number; an array as ``dtype[shape](mean=.. min=.. max=..)``.

    Example:
        >>> summarize(np.float32(0.123456))
        '0.1235'
        >>> summarize(np.arange(6.0).reshape(2, 3))
        'float64[2,3](mean=2.5 min=0 max=5)'
    """
    x = np.asarray(x)
    if x.size == 1:
        return _number(x.reshape(()).item(), precision)
    head = dtype_shape(x)
    if x.size == 0 or not np.issubdtype(x.dtype, np.number):
        return head
    stats = {"mean": np.mean(x), "min": np.min(x), "max": np.max(x)}
    return head + "(" + " ".join(f"{k}={_number(v, precision)}" for k, v in stats.items()) + ")"


def leaf_names(key: str, value: Any) -> list[tuple[str, np.ndarray]]:
    """``(name, leaf)`` for each leaf of a key's value: ``key`` itself, or ``key/a/b`` inside."""
    return [("/".join((key, *path)), leaf) for path, leaf in tree_paths(value)]


def _steps_text(steps: dict[str, np.ndarray], i: int) -> str:
    return " ".join(f"{name}={int(s[i])}" for name, s in steps.items())


def render(logs: logdict, precision: int = 4) -> list[str]:
    """Lines for ``logs`` (numpy values): events that share their steps share a line.

    Events without steps are shown one line per event index; a key whose events carry no
    steps and number more than one is summarised in one line.

    Example:
        >>> logs = logdict({'acc': np.array([0.5, 0.75]), 'loss': np.array([2.0, 1.0])},
        ...                {'acc': {'step': np.array([0, 1])}, 'loss': {'step': np.array([0, 1])}})
        >>> print('\\n'.join(render(logs)))
        step=0 | acc=0.5 | loss=2
        step=1 | acc=0.75 | loss=1
    """
    lines: dict[str, list[str]] = {}
    all_steps = logs.steps
    for key, value in logs.items():
        steps = all_steps[key]
        leaves = leaf_names(key, value)
        n = int(np.shape(leaves[0][1])[0]) if leaves else 0
        if not steps and n != 1:
            text = " | ".join(f"{name}={_events_summary(x, precision)}" for name, x in leaves)
            lines.setdefault(f"#{key}", []).append(text)
            continue
        for i in range(n):
            cells = [f"{name}={summarize(x[i], precision)}" for name, x in leaves]
            lines.setdefault(_steps_text(steps, i), []).extend(cells)
    return [_line(head, cells) for head, cells in lines.items()]


def _line(head: str, cells: list[str]) -> str:
    if head.startswith("#") or not head:
        return " | ".join(cells)
    return " | ".join([head, *cells])


def _events_summary(x: np.ndarray, precision: int) -> str:
    n = x.shape[0]
    if n == 0:
        return f"[0 events] {dtype_shape(x)}"
    return f"[{n} events] " + summarize(x, precision)


class ConsoleLogger(HostLogger):
    """Print logs as they arrive: scalars as numbers, arrays and pytrees summarised.

    Events that share their steps share a line (``step=3 | loss=0.25 | acc=0.9``); arrays
    show ``dtype[shape](mean=.. min=.. max=..)``; pytree leaves are named ``key/a/b``. With
    several runs open (``jax.vmap`` over states) each line starts with ``[run i]``.

    Args:
        print_fn: called with each line (default :func:`print`; e.g. ``logging.info``).
        precision: significant digits for floats.

    Example:
        >>> import jax.numpy as jnp, lox
        >>> logger = lox.ConsoleLogger()
        >>> state = logger.init()
        >>> logs = lox.logdict({'loss': jnp.array([0.25]), 'w': jnp.ones((1, 2))},
        ...                    {'loss': {'step': jnp.array([3])}})
        >>> state = logger.log(state, logs)
        step=3 | loss=0.25
        w=float32[2](mean=1 min=1 max=1)
        >>> logger.finish(state)
    """

    def __init__(self, print_fn: Callable[[str], Any] = print, precision: int = 4):
        super().__init__()
        self.print_fn = print_fn
        self.precision = precision

    def __repr__(self) -> str:
        return "ConsoleLogger()"

    def write_run(self, handle: Any, run: int, logs: logdict) -> None:
        prefix = f"[run {run}] " if len(self._runs) > 1 else ""
        for line in render(logs, self.precision):
            self.print_fn(prefix + line)
