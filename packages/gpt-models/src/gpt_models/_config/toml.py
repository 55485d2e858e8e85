"""Configs as text: dotted ``section.key`` names, ``--set`` overrides, presets by name, TOML files.

Values given as text (``--set train.lr=1e-3``) are parsed by the key's type; TOML values must have
the key's type already. Every problem is reported at once, with the valid keys and a did-you-mean.
"""

from __future__ import annotations

import dataclasses
import inspect
import itertools
import json
import math
import tomllib
import typing
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from core_primitives import did_you_mean, format_problems, list_alternatives

from .._errors import ConfigError
from .model import ModelConfig
from .presets import PRESETS
from .schema import CHOICES, Config
from .sources import DataSource, parse_sources, without_empty_names

# Flat views: "section.key" -> (field type, value)


def _sections(cfg: Config) -> dict[str, Any]:
    return {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg)}


def _field_types(section: Any) -> dict[str, type]:
    # The keys of the section's own class: a model section with LoRA folded in (LoRAModel) has
    # ModelConfig's keys, and its adapters are the [lora] section's.
    cls = ModelConfig if isinstance(section, ModelConfig) else type(section)
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls)}


def valid_keys(cfg: Config | None = None) -> list[str]:
    """Every dotted key a config accepts.

    Example:
        >>> 'model.d_model' in valid_keys()
        True
    """
    cfg = cfg or Config()
    return [f"{s}.{k}" for s, sec in _sections(cfg).items() for k in _field_types(sec)]


def to_dict(cfg: Config) -> dict[str, dict[str, Any]]:
    """The config as ``{section: {key: value}}``."""
    return {
        name: {k: _plain(getattr(sec, k)) for k in _field_types(sec)}
        for name, sec in _sections(cfg).items()
    }


def _plain(value: Any) -> Any:
    # Tuples of dataclasses (data.sources) as tables; everything else as it is.
    if isinstance(value, tuple) and value and dataclasses.is_dataclass(value[0]):
        return tuple(dataclasses.asdict(v) for v in value)
    return value


def _type_name(t: type) -> str:
    return {int: "an integer", float: "a number", bool: "true or false", str: "a string"}[t]


def _coerce(key: str, value: Any, t: type, *, from_text: bool) -> Any:
    """Convert one value to the field's type, or raise ConfigError saying what was expected."""
    shown = repr(value)
    out: Any
    if typing.get_args(t)[:1] == (DataSource,):  # data.sources: its own messages
        return parse_sources(value, from_text=from_text)
    try:
        if t is bool:
            out = _to_bool(value, from_text)
        elif t is int:
            out = _to_int(value, from_text)
        elif t is float:
            out = _to_float(value, from_text)
        else:
            if not isinstance(value, str):
                raise TypeError
            out = value
    except (TypeError, ValueError) as err:
        msg = f"Config key {key} got {shown}, expected {_type_name(t)}."
        if key in CHOICES:
            msg += f" Valid values: {list_alternatives(CHOICES[key])}."
        raise ConfigError(msg) from err
    return out  # a string outside CHOICES is reported by Config's own check


def _to_bool(value: Any, from_text: bool) -> bool:
    if isinstance(value, bool):
        return value
    if from_text and isinstance(value, str):
        words = {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}
        if value.lower() in words:
            return words[value.lower()]
    raise ValueError(value)


def _to_int(value: Any, from_text: bool) -> int:
    if isinstance(value, bool):  # bool is an int subclass; `steps = true` is a mistake, not 1.
        raise TypeError(value)
    if isinstance(value, int):
        return value
    if from_text and isinstance(value, str):
        number = float(value.replace("_", ""))  # accepts 1_000 and 1e3
        if number.is_integer():
            return int(number)
    raise ValueError(value)


def _to_float(value: Any, from_text: bool) -> float:
    if isinstance(value, bool):
        raise TypeError(value)
    if isinstance(value, int | float):
        return float(value)
    if from_text and isinstance(value, str):
        return float(value.replace("_", ""))
    raise ValueError(value)


# Keys that moved to the section their name says; an old config file or --set names the new key.
MOVED = {
    "train.init_from": "init.source",
    "train.eval_tasks": "eval.tasks",
    "train.peak_flops": "log.peak_flops",
}


def _unknown_key(key: str, cfg: Config) -> ConfigError:
    if key in MOVED:
        new = MOVED[key]
        section, name = new.split(".")
        return ConfigError(
            f"Config key {key!r} moved to {new!r}. Use --set {new}=..., or in a TOML file "
            f"[{section}] {name} = ... in place of {key}."
        )
    keys = valid_keys(cfg)
    section = key.split(".")[0]
    same_section = [k for k in keys if k.startswith(section + ".")]
    listed = same_section or list(_sections(cfg))
    what = f"keys in [{section}]" if same_section else "sections"
    return ConfigError(
        f"Unknown config key {key!r}.{did_you_mean(key, keys, n=1)} Valid {what}: "
        f"{list_alternatives(listed, limit=40)}. Keys are written section.key, e.g. "
        f"model.d_model=256."
    )


def apply_overrides(cfg: Config, values: Mapping[str, Any], *, from_text: bool = False) -> Config:
    """Return ``cfg`` with dotted keys replaced; all problems are reported at once.

    Args:
        cfg: the base config.
        values: ``{"model.d_model": 256, ...}``.
        from_text: values are strings from the command line and are parsed by the key's type.

    Raises:
        ConfigError: an unknown key or a value of the wrong type (the message lists the valid ones).

    Example:
        >>> from gpt_models import PRESETS
        >>> cfg = apply_overrides(PRESETS["tiny"], {"model.d_model": "256"}, from_text=True)
        >>> cfg.model.d_model
        256
    """
    sections = _sections(cfg)
    updates: dict[str, dict[str, Any]] = {}
    problems: list[str] = []
    for key, value in values.items():
        section, _, name = key.partition(".")
        types = _field_types(sections[section]) if section in sections else {}
        if name not in types:
            problems.append(str(_unknown_key(key, cfg)))
            continue
        try:
            updates.setdefault(section, {})[name] = _coerce(
                key, value, types[name], from_text=from_text
            )
        except ConfigError as err:
            problems.append(str(err))
    if problems:
        raise ConfigError(
            problems[0] if len(problems) == 1 else format_problems("Bad config", problems)
        )
    new = {s: dataclasses.replace(sections[s], **updates[s]) for s in updates}
    return dataclasses.replace(cfg, **new)


def parse_value(key: str, value: Any, *, from_text: bool = True) -> Any:
    """``value`` of the valid key ``key`` as :func:`apply_overrides` parses it.

    Example:
        >>> parse_value("data.seq_len", "1e2")
        100
    """
    section, _, name = key.partition(".")
    types = _field_types(_sections(Config())[section])
    return _coerce(key, value, types[name], from_text=from_text)


def parse_set(items: Iterable[str]) -> dict[str, str]:
    """Split ``["model.d_model=256", ...]`` (from ``--set``) into a dict.

    Example:
        >>> parse_set(["train.lr=1e-3", "sample.prompt=a=b"])
        {'train.lr': '1e-3', 'sample.prompt': 'a=b'}
    """
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(
                f"--set expects KEY=VALUE, got {item!r}. Example: --set model.d_model=256 "
                f"(valid keys include {list_alternatives(valid_keys()[:6])}, ...)."
            )
        out[key.strip()] = value
    return out


# ------------------------------------------------------------------------------------------------
# Presets and TOML


def get_preset(name: str) -> Config:
    """A preset by name, with a did-you-mean error listing the presets.

    Example:
        >>> get_preset("tiny").model.n_layers
        4
    """
    if name not in PRESETS:
        raise ConfigError(
            f"Unknown preset {name!r}.{did_you_mean(name, PRESETS, n=1)} Valid presets: "
            f"{list_alternatives(PRESETS)}; or pass a path to a .toml file."
        )
    return PRESETS[name]


def load_config(source: str, *, run_folder: bool = False) -> Config:
    """A preset name or a TOML file path; a TOML file may name its base with ``preset = "..."``.

    Keys the file leaves out keep the base preset's values (``tiny`` when it names none). With
    ``run_folder``, the file is a run folder's ``config.toml``, written by gpt itself: keys that an
    older version wrote in their old section (``MOVED``) are read in their new one, so runs made
    before a key moved keep working; anywhere else an old key is refused with its new name.

    Raises:
        ConfigError: an unknown preset, a missing or malformed file, unknown keys or bad values.

    Example:
        >>> load_config("gpt2-small").model.d_model
        768
    """
    if not source.strip():
        raise ConfigError(
            f"Config '' is empty. Pass a preset ({list_alternatives(PRESETS)}) or a TOML file, "
            "or leave --config out for tiny."
        )
    if source in PRESETS or not (source.endswith(".toml") or Path(source).exists()):
        return get_preset(source)
    path = Path(source)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as err:
        raise ConfigError(
            f"Config file {source} does not exist. Pass a preset ({list_alternatives(PRESETS)}) "
            "or the path of a TOML file, e.g. runs/<name>/config.toml."
        ) from err
    except IsADirectoryError as err:
        raise ConfigError(
            f"Config {source} is a folder, not a TOML file or a preset. Pass a file, e.g. "
            f"--config {path / 'config.toml'}, or a preset ({list_alternatives(PRESETS)})."
        ) from err
    except PermissionError as err:
        raise ConfigError(
            f"Config file {source} cannot be read ({err.strerror}). Make it readable or pass "
            "another file."
        ) from err
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as err:
        raise ConfigError(f"Config file {source} is not valid TOML: {err}.") from err
    return from_dict(data, source=source, run_folder=run_folder)


def from_dict(
    data: Mapping[str, Any], *, source: str = "config", run_folder: bool = False
) -> Config:
    """Build a config from ``{section: {key: value}}`` on top of the ``preset`` it names (default
    tiny); ``run_folder``: read moved keys in their new place (see ``load_config``)."""
    data = dict(data)
    base = data.pop("preset", "tiny")
    cfg = get_preset(str(base))
    flat: dict[str, Any] = {}
    for section, values in data.items():
        if not isinstance(values, Mapping):
            flat[section] = values  # reported as an unknown key below
            continue
        flat.update({f"{section}.{k}": v for k, v in values.items()})
    if run_folder:
        flat = {MOVED.get(k, k): v for k, v in flat.items()}
        if "data.sources" in flat:
            flat["data.sources"] = without_empty_names(flat["data.sources"])
    try:
        return apply_overrides(cfg, flat)
    except ConfigError as err:
        raise ConfigError(f"In {source}: {err}") from err


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)  # JSON strings are valid TOML basic strings
    if isinstance(value, list | tuple):  # an empty data.sources
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return str(value)


def dumps(cfg: Config) -> str:
    """The config as TOML text: every key, each with its meaning as a comment.

    The file alone reproduces the run (it is a run folder's ``config.toml``), and it is what
    ``gpt config show`` prints, so its output can be edited and passed back with ``--config``.

    Example:
        >>> from gpt_models import PRESETS
        >>> text = dumps(PRESETS["tiny"])
        >>> print(text.splitlines()[3])
        vocab_size = 256  # number of token ids (256 for the byte tokenizer).
        >>> loads(text) == PRESETS["tiny"]
        True
    """
    meanings = key_meanings()
    lines = ["# Resolved gpt-models config: every key, so this file alone reproduces the run."]
    for section, values in to_dict(cfg).items():
        lines.append(f"\n[{section}]")
        tables = {k: v for k, v in values.items() if isinstance(v, list | tuple) and v}
        lines += [
            f"{k} = {_toml_value(v)}  # {meanings[f'{section}.{k}']}"
            for k, v in values.items()
            if k not in tables
        ]
        # A non-empty array of tables ([[data.sources]]) comes after the section's plain keys:
        # TOML puts every key written after a [[table]] header into that table.
        for key, rows in tables.items():
            lines.append(f"# {key}: {meanings[f'{section}.{key}']}")
            for row in rows:
                lines.append(f"[[{section}.{key}]]")
                # An unnamed source is written without a name: `name = ""` is refused on reading.
                lines += [
                    f"{k} = {_toml_value(v)}" for k, v in row.items() if v != "" or k != "name"
                ]
    return "\n".join(lines) + "\n"


def key_meanings() -> dict[str, str]:
    """``{"section.key": one-line meaning}`` for every key, from the sections' ``Attributes:``
    lists.

    Example:
        >>> key_meanings()["train.steps"]
        'optimizer steps of the whole run.'
    """
    out: dict[str, str] = {}
    for section, value in _sections(Config()).items():
        doc = inspect.getdoc(type(value)) or ""
        listed = doc.partition("Attributes:\n")[2]
        name = ""
        for line in itertools.takewhile(lambda x: x.startswith("    "), listed.splitlines()):
            if line.startswith("     ") and name:  # a continuation line of the entry above
                out[f"{section}.{name}"] += " " + line.strip()
                continue
            name, _, meaning = line.strip().partition(": ")
            out[f"{section}.{name}"] = meaning
    return {key: out.get(key, "") for key in valid_keys()}


def loads(text: str, *, source: str = "config") -> Config:
    """Parse TOML text written by :func:`dumps` (or by hand)."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"{source} is not valid TOML: {err}.") from err
    return from_dict(data, source=source)
