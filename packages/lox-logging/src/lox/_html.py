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

_STYLE = """
<style>
.lox-logdict { font-family: ui-sans-serif, system-ui, sans-serif; font-size: 13px;
  line-height: 1.45; color: inherit; }
.lox-logdict .lx-head { font-weight: 600; margin-bottom: 4px; }
.lox-logdict .lx-sum { color: #6e7781; margin-left: 8px; font-weight: 400; }
.lox-logdict details { margin-left: 14px; }
.lox-logdict summary { cursor: pointer; font-weight: 600; font-family: ui-monospace, monospace; }
.lox-logdict table { border-collapse: collapse; margin: 2px 0 4px 18px; }
.lox-logdict td { padding: 1px 10px 1px 0; vertical-align: middle; text-align: left; }
.lox-logdict td.lx-name, .lox-logdict td.lx-kind { font-family: ui-monospace, monospace; }
.lox-logdict td.lx-num { text-align: right; color: #6e7781; }
.lox-logdict td.lx-steps { color: #6e7781; font-family: ui-monospace, monospace; }
.lox-logdict polyline { fill: none; stroke: #0969da; stroke-width: 1.2; }
</style>
"""


def _host(leaf: Any) -> np.ndarray | None:
    """``leaf`` as a NumPy array, or ``None`` when it is traced (no values to show)."""
    try:
        return np.asarray(leaf)
    except (jax.errors.TracerArrayConversionError, jax.errors.ConcretizationTypeError):
        return None


def _kind(leaf: Any) -> str:
    dtype, shape = getattr(leaf, "dtype", None), getattr(leaf, "shape", None)
    if dtype is None or shape is None:
        return type(leaf).__name__
    return f"{np.dtype(dtype).name}[{','.join(str(d) for d in shape[1:])}]"


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


def _row(name: str, value: Any, steps: dict[str, Any]) -> str:
    leaves = jax.tree.leaves(value)
    kinds = ", ".join(_kind(leaf) for leaf in leaves)
    events = getattr(leaves[0], "shape", (0,))[0] if leaves else 0
    last, line = _last_and_line(value)
    cells = [
        f'<td class="lx-name">{html.escape(name)}</td>',
        f'<td class="lx-kind">{html.escape(kinds)}</td>',
        f'<td class="lx-num">{events} event{"" if events == 1 else "s"}</td>',
        f'<td class="lx-steps">{html.escape(_steps(steps))}</td>',
        f'<td class="lx-num">{html.escape(last)}</td>',
        f"<td>{line}</td>",
    ]
    return f"<tr>{''.join(cells)}</tr>"


class _Group:
    """Keys sharing a ``/``-separated prefix: rows here, and sub-groups, in key order."""

    def __init__(self) -> None:
        self.rows: list[tuple[str, str]] = []  # (shown name, full key)
        self.groups: dict[str, _Group] = {}

    def add(self, key: str) -> None:
        # A key with no inner "/" ("loss", "/x", "x/") is one row under its full name.
        *prefix, name = key.split("/") if "/" in key.strip("/") else [key]
        group = self
        for part in prefix:
            group = group.groups.setdefault(part, _Group())
        group.rows.append((name, key))

    def html(self, logs: Any) -> str:
        rows = "".join(_row(name, logs[key], logs.steps[key]) for name, key in self.rows)
        table = f"<table>{rows}</table>" if rows else ""
        return table + "".join(
            f"<details open><summary>{html.escape(name)}/</summary>{group.html(logs)}</details>"
            for name, group in self.groups.items()
        )


def logdict_html(logs: Any) -> str:
    """The HTML a notebook shows for a ``logdict``.

    Example:
        >>> import jax.numpy as jnp, lox
        >>> logs = lox.logdict({'train/loss': jnp.array([3.0, 2.0])},
        ...                    steps={'train/loss': {'step': jnp.array([0, 1])}})
        >>> page = logdict_html(logs)
        >>> '<summary>train/</summary>' in page and 'step 0…1' in page
        True
    """
    root = _Group()
    for key in logs:
        root.add(key)
    head = f'<div class="lx-head">logdict<span class="lx-sum">{len(logs)} keys</span></div>'
    return f'{_STYLE}<div class="lox-logdict">{head}{root.html(logs)}</div>'
