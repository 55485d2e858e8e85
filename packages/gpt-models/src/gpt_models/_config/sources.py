"""``data.sources``: the weighted sources of a data mixture, as config values.

A mixture is written in a config TOML as an array of tables, or inline through ``--set``::

    [[data.sources]]
    path = "stores/web"
    weight = 0.8

    [[data.sources]]
    path = "stores/code"
    weight = 0.2

    gpt train --set 'data.sources=[{path="stores/web", weight=0.8}, {path="stores/code",
    weight=0.2}]'

Each source is a frozen :class:`DataSource`, so a config holding them stays hashable. Its ``name``
labels its metrics (``loss/<name>``, ``tokens/<name>``, ``val_loss/<name>``); left out, it is the
last component of ``path`` without its suffix (an empty ``name = ""`` is refused, as every empty
value is). ``kind`` is recorded when a run starts, as
``data.kind`` is for ``data.path``.
"""

from __future__ import annotations

import dataclasses
import math
import re
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import PurePath
from typing import Any

from core_primitives import did_you_mean, list_alternatives

from .._errors import ConfigError

SOURCE_KINDS = ("", "embedded", "text", "bin", "store")
# Characters a metric name keeps as they are; others become "_" (TensorBoard tags, CSV columns).
_NAME_CHARS = re.compile(r"[^A-Za-z0-9_.-]")
_EXAMPLE = 'data.sources=[{path="stores/web", weight=0.8}, {path="stores/code", weight=0.2}]'


@dataclasses.dataclass(frozen=True)
class DataSource:
    """One source of a mixture: where its tokens are and how often a row is drawn from it.

    Attributes:
        path: a text file or folder, a nanoGPT .bin file (or folder) or a token store, as
            ``data.path`` takes them; recorded absolute in a run's config.toml.
        weight: the share of rows drawn from this source (> 0); weights are normalised to sum to 1.
        name: the label of its metrics; "" = the last part of ``path`` without its suffix.
        kind: what ``path`` holds, recorded when a run starts ("" = find out).

    Example:
        >>> DataSource("stores/web.v2", 0.8).label
        'web'
    """

    path: str
    weight: float
    name: str = ""
    kind: str = ""

    @property
    def label(self) -> str:
        """``name``, or the name made from ``path``: what the metrics call this source."""
        if self.name:
            return self.name
        part = PurePath(self.path.rstrip("/\\") or ".")
        stem = part.name.split(".")[0] or part.name
        return _NAME_CHARS.sub("_", stem) or "source"


def source_problems(sources: Sequence[DataSource], path: str) -> list[str]:
    """What is wrong with ``data.sources`` (next to ``data.path``), one line per problem."""
    if not sources:
        return []
    problems = []
    if path:
        problems.append(
            f"data.path = {path!r} and data.sources are both set; a run reads one or the other. "
            f"Fix: drop data.path (--set data.path=) to train on the "
            "mixture, or drop data.sources (--set data.sources=[]) to train on data.path alone."
        )
    for i, src in enumerate(sources):
        where = f"data.sources[{i}] ({src.path!r})"
        if not src.path:
            problems.append(f"{where} has an empty path; each source needs the path of its data.")
        if not (math.isfinite(src.weight) and src.weight > 0):
            zero = " Leave a source out instead of giving it weight 0." if src.weight == 0 else ""
            problems.append(
                f"{where} has weight = {src.weight}; a weight must be a finite number > 0 (the "
                f"share of rows drawn from it, e.g. 0.8 and 0.2).{zero}"
            )
        if src.name and _NAME_CHARS.search(src.name):
            problems.append(
                f"{where} has name = {src.name!r}; a name labels metrics, so it may hold only "
                'letters, digits and _.- (e.g. name = "web").'
            )
        if src.kind not in SOURCE_KINDS:
            problems.append(
                f"{where} has kind = {src.kind!r}, expected one of "
                f"{list_alternatives(SOURCE_KINDS)}."
            )
    seen: dict[str, int] = {}
    for i, src in enumerate(sources):
        if src.label in seen:
            j = seen[src.label]
            problems.append(
                f"data.sources[{j}] ({sources[j].path!r}) and data.sources[{i}] ({src.path!r}) "
                f"are both named {src.label!r}, and each source's metrics need their own name. "
                f'Give one a name, e.g. name = "{src.label}_{i}" in its table.'
            )
        seen.setdefault(src.label, i)
    return problems


def parse_sources(value: Any, *, from_text: bool) -> tuple[DataSource, ...]:
    """``data.sources`` from TOML (a list of tables) or from ``--set`` text (an inline TOML array).

    Raises:
        ConfigError: text that is not a TOML array, an entry that is not a table, an unknown key,
            a missing ``path`` or ``weight``, a value of the wrong type, or an empty ``name``.

    Example:
        >>> web, code = parse_sources(
        ...     '[{path = "web", weight = 0.8}, {path = "code", weight = 1}]', from_text=True
        ... )
        >>> web
        DataSource(path='web', weight=0.8, name='', kind='')
        >>> code.weight
        1.0
    """
    if from_text and isinstance(value, str):
        try:
            value = tomllib.loads(f"sources = {value}")["sources"]
        except tomllib.TOMLDecodeError as err:
            raise ConfigError(
                f"Config key data.sources got {value!r}, which is not an inline TOML array "
                f"({err}). "
                f"Expected e.g. --set '{_EXAMPLE}'."
            ) from err
    if not isinstance(value, list | tuple):
        raise ConfigError(
            f"Config key data.sources got {value!r}, expected an array of tables with path and "
            f"weight: [[data.sources]] tables in a TOML file, or --set '{_EXAMPLE}'."
        )
    return tuple(_one_source(i, entry) for i, entry in enumerate(value))


def without_empty_names(value: Any) -> Any:
    """``data.sources`` as a run folder's config.toml holds it, with ``name = ""`` left out.

    Run folders written before empty names were refused hold ``name = ""`` for every source
    left unnamed; what they meant is "not given".

    Example:
        >>> without_empty_names([{"path": "web", "weight": 1.0, "name": ""}])
        [{'path': 'web', 'weight': 1.0}]
    """
    if not isinstance(value, list):
        return value
    return [
        {k: v for k, v in e.items() if not (k == "name" and v == "")} if isinstance(e, dict) else e
        for e in value
    ]


def _one_source(i: int, entry: Any) -> DataSource:
    if isinstance(entry, DataSource):
        return entry
    if not isinstance(entry, Mapping):
        raise ConfigError(
            f"data.sources[{i}] is {entry!r}, expected a table with path and weight, e.g. "
            '{path = "stores/web", weight = 0.8}.'
        )
    keys = [f.name for f in dataclasses.fields(DataSource)]
    unknown = [k for k in entry if k not in keys]
    if unknown:
        raise ConfigError(
            f"data.sources[{i}] has an unknown key {unknown[0]!r}."
            f"{did_you_mean(str(unknown[0]), keys, n=1)} A source takes {list_alternatives(keys)}."
        )
    missing = [k for k in ("path", "weight") if k not in entry]
    if missing:
        raise ConfigError(
            f"data.sources[{i}] has no {missing[0]}; each source needs path and weight, e.g. "
            '{path = "stores/web", weight = 0.8}.'
        )
    weight = entry["weight"]
    if isinstance(weight, bool) or not isinstance(weight, int | float):
        raise ConfigError(
            f"data.sources[{i}] has weight = {weight!r}, expected a number > 0 (e.g. 0.8)."
        )
    for key in ("path", "name", "kind"):
        if not isinstance(entry.get(key, ""), str):
            raise ConfigError(f"data.sources[{i}] has {key} = {entry[key]!r}, expected a string.")
    if "name" in entry and not entry["name"].strip():  # not "no name": the docs refuse ""
        named = DataSource(path=entry["path"], weight=float(weight)).label
        raise ConfigError(
            f"data.sources[{i}] ({entry['path']!r}) has name = {entry['name']!r}, which is empty; "
            f'a name labels the source\'s metrics. Give one (e.g. name = "{named}") or leave the '
            f"name key out to name the source after its path ({named!r})."
        )
    return DataSource(
        path=entry["path"],
        weight=float(weight),
        name=entry.get("name", ""),
        kind=entry.get("kind", ""),
    )
