"""``to_csv``: scalar logs as one plain CSV table that pandas, a spreadsheet or ``csv`` reads as is.

The table is wide: one row per distinct combination of step values, one column per step name, then
one column per key. A key logged with ``step=i`` fills the row of step ``i``; keys logged at other
steps leave the cell empty. A key logged without steps is placed by its event number in an
``event`` column. When two events land on the same row (a resumed run re-logs the steps after its
last checkpoint), the later one wins, so the file shows what the run finally computed.
"""

from __future__ import annotations

import csv
import io
import math
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any, TextIO

import jax
import numpy as np

from core_primitives import list_alternatives

from ._logdict import logdict
from ._save import load

_EVENT = "event"


def to_csv(
    logs: logdict | str | os.PathLike[str],
    file: str | os.PathLike[str] | TextIO,
    *,
    keys: Iterable[str] | None = None,
) -> None:
    """Write the scalar events of ``logs`` (a logdict or a folder written by
    ``save``/``SaveLogger``) as CSV.

    Only ``file`` is written (created or replaced); nothing else is touched, whatever the key names.

    Args:
        logs: a ``logdict``, or the path of a folder written by ``lox.save`` or ``SaveLogger``.
        file: the CSV file path, or an open text stream.
        keys: the keys to export, in this column order (default: every key, in logdict order).

    Raises:
        TypeError: ``logs`` is neither a logdict nor a path.
        ValueError: a selected key is unknown or holds more than one number per event, or
            ``file`` is ``''`` or a folder.
        DamagedSaveError: ``logs`` names a damaged save folder (see ``lox.load``).

    Example:
        >>> import io, numpy as np, lox
        >>> logs = lox.logdict({"loss": np.array([2.5, 2.0]), "lr": np.array([0.1, 0.2])},
        ...                    steps={"loss": {"step": np.array([0, 1])},
        ...                           "lr": {"step": np.array([0, 1])}})
        >>> out = io.StringIO()
        >>> lox.to_csv(logs, out)
        >>> print(out.getvalue().strip())
        step,loss,lr
        0,2.5,0.1
        1,2.0,0.2
    """
    if not isinstance(logs, logdict | str | os.PathLike):
        raise TypeError(
            f"lox.to_csv: logs must be a lox.logdict or the folder of a save, got {logs!r:.60} "
            f"({type(logs).__name__}). Pass lox.spool's logs, or e.g. 'runs/x/metrics/run_0'."
        )
    data = logs if isinstance(logs, logdict) else load(logs)
    columns = _columns(data, keys)
    step_names = sorted({s for k in columns for s in data.steps[k]})
    use_event = any(not data.steps[k] for k in columns)
    index = step_names + ([_EVENT] if use_event else [])
    rows: dict[tuple[Any, ...], dict[str, Any]] = {}
    for key in columns:
        values = np.asarray(data[key]).reshape(-1)
        steps = {s: np.asarray(v).reshape(-1) for s, v in data.steps[key].items()}
        for i, value in enumerate(values.tolist()):
            at = {s: int(v[i]) for s, v in steps.items()} or {_EVENT: i}
            rows.setdefault(tuple(at.get(n) for n in index), {})[key] = value
    header = index + columns
    ordered = sorted(
        rows.items(), key=lambda kv: tuple(-math.inf if v is None else v for v in kv[0])
    )
    table = [header] + [[*_cells(at), *(_cell(r.get(k)) for k in columns)] for at, r in ordered]
    _write(table, file)


def _columns(data: logdict, keys: Iterable[str] | None) -> list[str]:
    if isinstance(keys, str):
        keys = [keys]
    columns = list(data) if keys is None else list(keys)
    unknown = [k for k in columns if k not in data]
    if unknown:
        raise ValueError(
            f"lox.to_csv: keys {unknown} are not in the logs. Keys: {list_alternatives(data)}."
        )
    wide = [k for k in columns if not _one_number_per_event(data[k])]
    if wide:
        raise ValueError(
            f"lox.to_csv writes one number per event and column, but keys {wide} hold arrays or "
            f"pytrees per event (shapes {[_shape(data[k]) for k in wide]}). Pick the scalar keys, "
            f"e.g. lox.to_csv(logs, file, keys=[...]), or reduce those values before logging them."
        )
    return columns


def _one_number_per_event(value: Any) -> bool:
    leaves = jax.tree.leaves(value)
    return (
        len(leaves) == 1 and not isinstance(value, dict | list | tuple) and np.ndim(leaves[0]) == 1
    )


def _shape(value: Any) -> Any:
    return jax.tree.map(np.shape, value)


def _cells(at: tuple[Any, ...]) -> list[str]:
    return ["" if v is None else str(v) for v in at]


def _cell(value: Any) -> str:
    if value is None:
        return ""
    return repr(float(value)) if isinstance(value, float) else str(value)


def _write(table: list[list[str]], file: str | os.PathLike[str] | TextIO) -> None:
    if isinstance(file, str | os.PathLike):
        path = Path(file)
        if os.fspath(file) == "":  # Path('') is '.', which would be reported as a folder
            raise ValueError(
                "lox.to_csv: file is '' (an empty string); pass the path of the CSV file to "
                "write, e.g. 'metrics.csv'."
            )
        if path.is_dir():
            raise ValueError(
                f"lox.to_csv: {path} is a folder; pass the path of the CSV file to write, "
                f"e.g. {path / 'metrics.csv'}."
            )
        with path.open("w", newline="", encoding="utf-8") as stream:
            csv.writer(stream, lineterminator="\n").writerows(table)
        return
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\n").writerows(table)
    file.write(buffer.getvalue())
