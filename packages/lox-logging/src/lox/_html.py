"""``logdict`` as HTML for notebooks: keys as a tree (split at ``/``), one row per key.

Each row shows the value's dtype and shape per event, the number of events, the steps (first
to last) and, for a scalar series held on the host, its last value and a sparkline. The page is
one self-contained string (inline ``<style>`` and SVG, no JavaScript), and every key is escaped.
Traced values (a logdict inside ``jit``) show their shapes only.
"""

from __future__ import annotations

import html
from typing import Any

import jax
import numpy as np

from core_primitives import dtype_shape, html_tree

Cell = tuple[str, str]


def _host(leaf: Any) -> np.ndarray | None:
    """``leaf`` as a NumPy array, or ``None`` when it is traced (no values to show)."""
    try:
        return np.asarray(leaf)
    except (jax.errors.TracerArrayConversionError, jax.errors.ConcretizationTypeError):
        return None


def _sparkline(values: np.ndarray) -> str:
    finite = values[np.isfinite(values)]
    if values.size < 2 or finite.size == 0:
        return ""
    low, high = float(finite.min()), float(finite.max())
    span = high - low or 1.0
    clipped = np.clip(np.nan_to_num(values, nan=low, posinf=high, neginf=low), low, high)
    step = 100.0 / (values.size - 1)
    points = " ".join(
        f"{i * step:.1f},{16 - 14 * (v - low) / span:.1f}" for i, v in enumerate(clipped)
    )
    return f'<svg width="100" height="18" viewBox="0 0 100 18"><polyline points="{points}"/></svg>'


def _last_and_line(value: Any) -> tuple[str, str]:
    leaves = jax.tree.leaves(value)
    if len(leaves) != 1:
        return "", ""
    data = _host(leaves[0])
    if data is None or data.ndim != 1 or not np.issubdtype(data.dtype, np.number):
        return "", ""
    if data.size == 0:
        return "", ""
    last = data[-1]
    shown = f"{last:.4g}" if np.issubdtype(data.dtype, np.floating) else str(last)
    series = data.astype(np.float64) if not np.iscomplexobj(data) else np.abs(data)
    return shown, _sparkline(series)


def _steps(steps: dict[str, Any]) -> str:
    parts = []
    for name, values in steps.items():
        data = _host(values)
        if data is None or data.size == 0:
            parts.append(name)
        else:
            first, last = int(data.reshape(-1)[0]), int(data.reshape(-1)[-1])
            parts.append(f"{name} {first}" if first == last else f"{name} {first}…{last}")
    return ", ".join(parts)


def _row(key: str, value: Any, steps: dict[str, Any]) -> tuple[tuple[str, ...], list[Cell]]:
    leaves = jax.tree.leaves(value)
    kinds = ", ".join(dtype_shape(leaf, drop_leading=1) for leaf in leaves)
    events = getattr(leaves[0], "shape", (0,))[0] if leaves else 0
    last, line = _last_and_line(value)
    cells = [
        ("kind", html.escape(kinds)),
        ("num", f"{events} event{'' if events == 1 else 's'}"),
        ("meta", html.escape(_steps(steps))),
        ("num", html.escape(last)),
        ("", line),
    ]
    return _path(key), cells


def _path(key: str) -> tuple[str, ...]:
    """``'train/loss'`` as the group ``train/`` and the row ``loss``.

    A key with no inner ``/`` (``loss``, ``/x``, ``x/``) is one row under its full name.
    """
    if "/" not in key.strip("/"):
        return (key,)
    *groups, name = key.split("/")
    return (*(f"{g}/" for g in groups), name)


def logdict_html(logs: Any) -> str:
    """The HTML a notebook shows for a ``logdict``.

    Example:
        >>> import jax.numpy as jnp, lox
        >>> logs = lox.logdict({'train/loss': jnp.array([3.0, 2.0])},
        ...                    steps={'train/loss': {'step': jnp.array([0, 1])}})
        >>> page = logdict_html(logs)
        >>> '<span class="cp-node">train/</span>' in page and 'step 0…1' in page
        True
    """
    rows = [_row(key, logs[key], logs.steps[key]) for key in logs]
    return html_tree(rows, head=f'logdict<span class="cp-sum">{len(logs)} keys</span>')
