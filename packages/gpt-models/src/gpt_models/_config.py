"""Config dataclasses, presets, TOML load/dump and dotted ``section.key=value`` overrides.

A config is plain data (frozen dataclasses of ints, floats, bools and strings) so that it is hashable
(a static argument of ``jax.jit``), round-trips through TOML, and every key can be set from the CLI.
"""

from __future__ import annotations

import dataclasses
import json
import math
import tomllib
import typing
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from core_primitives import did_you_mean, format_problems, list_alternatives

from ._errors import ConfigError

# String-valued keys that only accept a few values: checked on load, on --set and in validate().
CHOICES: dict[str, tuple[str, ...]] = {
    "model.mlp": ("gelu", "relu2", "swiglu"),
    "model.norm": ("rmsnorm", "layernorm"),
    "model.pos": ("rope", "learned"),
    "model.dtype": ("auto", "float32", "bfloat16", "float16"),
    "model.param_dtype": ("float32", "bfloat16"),
    "model.remat": ("none", "full", "dots"),
    "train.optimizer": ("adamw", "muon"),
    "log.wandb": ("disabled", "offline", "online"),
    "data.tokenizer": ("byte", "bpe"),
}


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """Shapes and options of the transformer.

    ``n_kv_heads = 0`` means "same as ``n_heads``" (multi-head attention); a smaller divisor of
    ``n_heads`` gives grouped-query attention. ``d_ff = 0`` means ``4 * d_model``.
    ``dtype`` is the compute dtype; ``"auto"`` is bfloat16 on GPU/TPU and float32 on CPU.
    ``logit_softcap = 0`` disables the ``cap * tanh(logits / cap)`` soft-cap.
    """

    vocab_size: int = 256
    seq_len: int = 256
    d_model: int = 128
    n_layers: int = 4
    n_heads: int = 4
    n_kv_heads: int = 0
    d_ff: int = 0
    mlp: str = "gelu"
    norm: str = "layernorm"
    pos: str = "learned"
    rope_theta: float = 10000.0
    qk_norm: bool = False
    logit_softcap: float = 0.0
    tie_embeddings: bool = True
    dtype: str = "auto"
    param_dtype: str = "float32"
    remat: str = "none"
    scan_layers: bool = True
    init_std: float = 0.02

    @property
    def kv_heads(self) -> int:
        return self.n_kv_heads or self.n_heads

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    @property
    def ff_dim(self) -> int:
        return self.d_ff or 4 * self.d_model


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """Optimisation and bookkeeping. ``batch_size`` is the global batch per optimizer step.

    Each step splits it into ``grad_accum`` micro-batches. ``checkpoint_every = 0`` saves only at the end;
    ``peak_flops`` is FLOP/s per device for MFU; 0 looks the device kind up (no MFU on CPU; see
    ``docs/gpt_models.md``).
    """

    steps: int = 600
    batch_size: int = 32
    lr: float = 3e-3
    min_lr_ratio: float = 0.1
    warmup_steps: int = 50
    weight_decay: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.95
    grad_clip: float = 1.0
    grad_accum: int = 1
    optimizer: str = "adamw"
    eval_every: int = 200
    eval_batches: int = 8
    checkpoint_every: int = 200
    keep_checkpoints: int = 3
    seed: int = 0
    peak_flops: float = 0.0


@dataclasses.dataclass(frozen=True)
class DataConfig:
    """``path = ""`` is the embedded corpus; else a text file, a folder of text, or a ``.bin`` file.

    The last ``val_fraction`` of the tokens is the validation split (fixed, never sampled for training).
    A folder holding nanoGPT's ``train.bin`` and ``val.bin`` uses those two files as the split.
    ``tokenizer``: ``"byte"`` (UTF-8 bytes, 256 ids) or ``"bpe"`` (byte-level BPE with
    ``bpe_vocab_size`` ids, trained on the train split of text data and kept in the run folder as
    ``tokenizer.json``). With text data, or a ``.bin`` whose sidecar names its tokenizer,
    ``model.vocab_size`` follows the tokenizer (rounded up to a multiple of 64 for BPE).
    """

    path: str = ""
    val_fraction: float = 0.1
    tokenizer: str = "byte"
    bpe_vocab_size: int = 2048


@dataclasses.dataclass(frozen=True)
class MeshConfig:
    """Device mesh axes; ``-1`` on one axis means "all devices not used by the others"."""

    data: int = -1
    fsdp: int = 1
    tensor: int = 1


@dataclasses.dataclass(frozen=True)
class LogConfig:
    """``every``: steps between console/metric updates. ``wandb``: disabled, offline or online."""

    every: int = 10
    wandb: str = "disabled"
    wandb_project: str = "gpt-models"


@dataclasses.dataclass(frozen=True)
class SampleConfig:
    """The sample written to ``sample.txt`` at the end of training (``top_k = 0`` / ``top_p = 1``: off)."""

    prompt: str = "The "
    max_new_tokens: int = 200
    temperature: float = 0.8
    top_k: int = 0
    top_p: float = 1.0


@dataclasses.dataclass(frozen=True)
class Config:
    """The whole config of a run; ``config.toml`` in a run folder is this, resolved.

    Example:
        >>> from gpt_models import PRESETS
        >>> cfg = PRESETS["tiny"]
        >>> cfg.model.vocab_size, cfg.data.path
        (256, '')
    """

    model: ModelConfig = ModelConfig()
    train: TrainConfig = TrainConfig()
    data: DataConfig = DataConfig()
    mesh: MeshConfig = MeshConfig()
    log: LogConfig = LogConfig()
    sample: SampleConfig = SampleConfig()


def _tiny() -> Config:
    # Tuned so that the default `gpt train` ends in a few minutes on a 2-core CPU (docs/gpt_models.md
    # has the measurements): ReLU², RMSNorm, RoPE and QK-norm tolerate a high learning rate, which
    # matters more than size when the budget is ~1M tokens. No scan over 4 layers: on CPU the
    # unrolled loop is ~25% faster (XLA fuses across layers), and compile time is still seconds.
    model = ModelConfig(
        seq_len=128, d_model=128, n_layers=4, n_heads=4, mlp="relu2", norm="rmsnorm", pos="rope",
        qk_norm=True, tie_embeddings=True, scan_layers=False,
    )  # fmt: skip
    train = TrainConfig(
        steps=300, batch_size=32, lr=3e-3, warmup_steps=30, eval_every=100, checkpoint_every=100
    )
    return Config(model=model, train=train)


def _gpt2(d_model: int, n_layers: int, n_heads: int) -> Config:
    # GPT-2 shapes: vocab padded to a multiple of 64 (50257 -> 50304) for fast matmuls, learned
    # positions, LayerNorm, GELU, tied embeddings; no linear biases (they add ~0.1% parameters).
    model = ModelConfig(
        vocab_size=50304, seq_len=1024, d_model=d_model, n_layers=n_layers, n_heads=n_heads,
        mlp="gelu", norm="layernorm", pos="learned", tie_embeddings=True, remat="none",
    )  # fmt: skip
    train = TrainConfig(
        steps=5000, batch_size=512, lr=6e-4, warmup_steps=700, grad_accum=8, eval_every=250,
        checkpoint_every=1000, beta2=0.95,
    )  # fmt: skip
    return Config(model=model, train=train)


PRESETS: Mapping[str, Config] = {
    "tiny": _tiny(),
    "gpt2-small": _gpt2(768, 12, 12),
    "gpt2-medium": _gpt2(1024, 24, 16),
}


# ----------------------------------------------------------------------------------------------------
# Flat views: "section.key" -> (field type, value)


def _sections(cfg: Config) -> dict[str, Any]:
    return {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg)}


def _field_types(section: Any) -> dict[str, type]:
    hints = typing.get_type_hints(type(section))
    return {f.name: hints[f.name] for f in dataclasses.fields(section)}


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
    return {name: dataclasses.asdict(sec) for name, sec in _sections(cfg).items()}


def _type_name(t: type) -> str:
    return {int: "an integer", float: "a number", bool: "true or false", str: "a string"}[t]


def _coerce(key: str, value: Any, t: type, *, from_text: bool) -> Any:
    """Convert one value to the field's type, or raise ConfigError saying what was expected."""
    shown = repr(value)
    out: Any
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
    if key in CHOICES and out not in CHOICES[key]:
        raise ConfigError(
            f"Config key {key} got {shown}, expected one of {list_alternatives(CHOICES[key])}."
            + did_you_mean(str(out), CHOICES[key], n=1)
        )
    return out


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


def _unknown_key(key: str, cfg: Config) -> ConfigError:
    keys = valid_keys(cfg)
    section = key.split(".")[0]
    same_section = [k for k in keys if k.startswith(section + ".")]
    listed = same_section or list(_sections(cfg))
    what = f"keys in [{section}]" if same_section else "sections"
    return ConfigError(
        f"Unknown config key {key!r}.{did_you_mean(key, keys, n=1)} Valid {what}: "
        f"{list_alternatives(listed, limit=40)}. Keys are written section.key, e.g. model.d_model=256."
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


def validate(cfg: Config) -> Config:
    """Check that the values fit together; raise one ConfigError listing every problem.

    Example:
        >>> from gpt_models import PRESETS
        >>> validate(PRESETS["tiny"]) == PRESETS["tiny"]
        True
    """
    m, t = cfg.model, cfg.train
    problems = [f"{k} = {v!r} must be > 0" for k, v in _positives(cfg).items() if not v > 0]
    if m.d_model % max(m.n_heads, 1):
        problems.append(
            f"model.d_model = {m.d_model} must be divisible by model.n_heads = {m.n_heads}"
        )
    if m.n_kv_heads < 0 or (m.n_kv_heads and m.n_heads % m.n_kv_heads):
        problems.append(
            f"model.n_kv_heads = {m.n_kv_heads} must divide model.n_heads = {m.n_heads} "
            "(0 means equal to n_heads)"
        )
    divisible = m.d_model > 0 and m.n_heads > 0 and not m.d_model % m.n_heads
    if m.pos == "rope" and divisible and m.head_dim % 2:
        problems.append(f"RoPE needs an even head dim; d_model / n_heads = {m.head_dim}")
    if t.batch_size % max(t.grad_accum, 1):
        problems.append(
            f"train.batch_size = {t.batch_size} must be divisible by train.grad_accum = {t.grad_accum}"
        )
    if not 0.0 < cfg.data.val_fraction < 1.0:
        problems.append(f"data.val_fraction = {cfg.data.val_fraction} must be between 0 and 1")
    if t.warmup_steps < 0 or t.warmup_steps >= t.steps:
        problems.append(f"train.warmup_steps = {t.warmup_steps} must be in [0, train.steps)")
    if not 257 <= cfg.data.bpe_vocab_size <= 65536:
        problems.append(f"data.bpe_vocab_size = {cfg.data.bpe_vocab_size} must be in 257..65536")
    s = cfg.sample
    problems += sampling_problems("sample.", s.max_new_tokens, s.temperature, s.top_k, s.top_p)
    for key, values in CHOICES.items():
        section, name = key.split(".")
        value = getattr(getattr(cfg, section), name)
        if value not in values:
            problems.append(f"{key} = {value!r} is not one of {list_alternatives(values)}")
    if problems:
        raise ConfigError(format_problems("Invalid config", problems))
    return cfg


def sampling_problems(
    prefix: str, max_new_tokens: int, temperature: float, top_k: int | None, top_p: float | None
) -> list[str]:
    """What is wrong with sampling options (``[sample]`` or ``generate``'s arguments), if anything.

    A negative temperature would silently invert the distribution (the least likely token first),
    so it is refused rather than sampled from.

    Example:
        >>> sampling_problems("sample.", 10, -1.0, 0, 1.0)
        ['sample.temperature = -1.0 must be a finite number >= 0 (0 is greedy)']
    """
    problems = []
    if max_new_tokens < 0:
        problems.append(f"{prefix}max_new_tokens = {max_new_tokens} must be >= 0")
    if not (math.isfinite(temperature) and temperature >= 0):
        problems.append(
            f"{prefix}temperature = {temperature} must be a finite number >= 0 (0 is greedy)"
        )
    if top_k is not None and top_k < 0:
        problems.append(f"{prefix}top_k = {top_k} must be >= 0 (0 keeps every token)")
    if top_p is not None and not 0.0 < top_p <= 1.0:
        problems.append(f"{prefix}top_p = {top_p} must be in (0, 1] (1 keeps every token)")
    return problems


def _positives(cfg: Config) -> dict[str, float]:
    m, t = cfg.model, cfg.train
    names = {
        "model.vocab_size": m.vocab_size, "model.seq_len": m.seq_len, "model.d_model": m.d_model,
        "model.n_layers": m.n_layers, "model.n_heads": m.n_heads, "train.steps": t.steps,
        "train.batch_size": t.batch_size, "train.lr": t.lr, "train.grad_accum": t.grad_accum,
        "train.eval_batches": t.eval_batches, "train.keep_checkpoints": t.keep_checkpoints,
        "train.eval_every": t.eval_every, "log.every": cfg.log.every,
    }  # fmt: skip
    return names


# ----------------------------------------------------------------------------------------------------
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


def load_config(source: str) -> Config:
    """A preset name or a TOML file path; a TOML file may name its base with ``preset = "..."``.

    Keys the file leaves out keep the base preset's values (``tiny`` when it names none).

    Raises:
        ConfigError: an unknown preset, a missing or malformed file, unknown keys or bad values.

    Example:
        >>> load_config("gpt2-small").model.d_model
        768
    """
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
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as err:
        raise ConfigError(f"Config file {source} is not valid TOML: {err}.") from err
    return from_dict(data, source=source)


def from_dict(data: Mapping[str, Any], *, source: str = "config") -> Config:
    """Build a config from ``{section: {key: value}}`` on top of the ``preset`` it names (default tiny)."""
    data = dict(data)
    base = data.pop("preset", "tiny")
    cfg = get_preset(str(base))
    flat: dict[str, Any] = {}
    for section, values in data.items():
        if not isinstance(values, Mapping):
            flat[section] = values  # reported as an unknown key below
            continue
        flat.update({f"{section}.{k}": v for k, v in values.items()})
    try:
        return validate(apply_overrides(cfg, flat))
    except ConfigError as err:
        raise ConfigError(f"In {source}: {err}") from err


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)  # JSON strings are valid TOML basic strings
    return str(value)


def dumps(cfg: Config) -> str:
    """The config as TOML text (every key, so the file alone reproduces the run).

    Example:
        >>> from gpt_models import PRESETS
        >>> text = dumps(PRESETS["tiny"])
        >>> loads(text) == PRESETS["tiny"]
        True
    """
    lines = ["# Resolved gpt-models config: every key, so this file alone reproduces the run."]
    for section, values in to_dict(cfg).items():
        lines.append(f"\n[{section}]")
        lines += [f"{k} = {_toml_value(v)}" for k, v in values.items()]
    return "\n".join(lines) + "\n"


def loads(text: str, *, source: str = "config") -> Config:
    """Parse TOML text written by :func:`dumps` (or by hand)."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"{source} is not valid TOML: {err}.") from err
    return from_dict(data, source=source)
