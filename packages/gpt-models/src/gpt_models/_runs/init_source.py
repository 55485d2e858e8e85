"""``init.source``: the weights a new run starts from, a run folder or a Hugging Face folder, read
once when the run is resolved and carried in its :class:`~gpt_models.Run` as an :class:`InitSource`.

The source's architecture becomes the run's (the keys that only say how the same weights are
computed, ``FREE_KEYS``, stay the run's own), its tokenizer the run's tokenizer, and on data that
is not chat a chat model's template stays with the run.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from .._config.model import ModelConfig
from .._config.schema import BUILTIN_TOKENIZERS, Config
from .._config.toml import load_config, parse_value
from .._data.chat_format import ChatFormat, trained_on
from .._data.corpus import Tokenizer
from .._errors import ConfigError, DataError
from .chat_file import data_chat_format, kept_chat_format
from .hf_import import folder_chat_format, read_hf_config

# Model keys that may differ from the weights a run starts from or resumes: how the same weights
# are computed (the attention kernel, compute dtype, remat, scan), stored or regularised (dropout).
FREE_KEYS = ("dtype", "param_dtype", "remat", "scan_layers", "init_std", "dropout", "attention")
ARCH_KEYS = tuple(f.name for f in dataclasses.fields(ModelConfig) if f.name not in FREE_KEYS)
# Where resolving says what it decided: one line at a time.
Say = Callable[[str], None]


@dataclasses.dataclass(frozen=True)
class InitSource:
    """The weights a run starts from (``init.source``): a run folder or a Hugging Face folder.

    ``model`` is its architecture; ``tokenizer`` its ``tokenizer.json`` (None: the byte tokenizer,
    or a Hugging Face folder without one).
    """

    path: Path
    kind: str  # "run" or "hf"
    model: ModelConfig
    tokenizer: Path | None


def read_init_source(path: str) -> InitSource:
    """The init source at ``path`` (absolute, or against the working directory).

    Raises:
        ConfigError: ``path`` is neither a run folder nor a Hugging Face model folder.
        CheckpointFormatError: a Hugging Face folder whose config.json cannot be used.
    """
    folder = Path(os.path.abspath(os.path.expanduser(path)))  # '..' folded, as data.path is
    tokenizer = folder / "tokenizer.json"
    tokenizer_file = tokenizer if tokenizer.is_file() else None
    if (folder / "config.toml").is_file():
        model = load_config(str(folder / "config.toml"), run_folder=True).model
        return InitSource(folder, "run", model, tokenizer_file)
    if (folder / "config.json").is_file():
        return InitSource(folder, "hf", read_hf_config(folder)[1].model, tokenizer_file)
    raise ConfigError(
        f"init.source = {path!r} is neither a run folder (config.toml) nor a Hugging Face "
        "model folder (config.json + model.safetensors). Pass one of those, e.g. --init-from "
        "runs/<name>."
    )


def check_init_source(cfg: Config, tokenizer: Tokenizer, source: InitSource) -> None:
    """Refuse a model section or a tokenizer that does not fit ``cfg.init.source``'s weights."""
    for key in ARCH_KEYS:
        if key == "seq_len" and cfg.model.seq_len != source.model.seq_len:
            raise ConfigError(_seq_len_refusal(cfg.model.seq_len, source, "model.seq_len"))
        if getattr(cfg.model, key) != getattr(source.model, key):
            raise ConfigError(
                f"model.{key} = {getattr(cfg.model, key)!r} changes the architecture of "
                f"init.source = {str(source.path)!r}, which has model.{key} = "
                f"{getattr(source.model, key)!r}. A run started from its weights keeps its "
                f"architecture: drop the --set model.{key} (train/data/sample keys and "
                f"model.{'/'.join(FREE_KEYS)} may change)."
            )
    if tokenizer.vocab_size > source.model.real_vocab:
        raise ConfigError(
            f"The tokenizer (data.tokenizer = {cfg.data.tokenizer!r}) has {tokenizer.vocab_size} "
            f"ids but init.source = {str(source.path)!r} has a vocabulary of "
            f"{source.model.real_vocab}: its ids would index past the model's embeddings. Use "
            "the source's tokenizer."
        )


def finetune_window(source: InitSource, overrides: Mapping[str, Any], say: Say) -> dict[str, Any]:
    """The ``--set`` values of a fine-tune from ``source``, with its training window settled.

    The source's positions (``model.seq_len``) stay the model's: a shorter ``model.seq_len`` is
    the window a practitioner means (TRL's ``max_length``, axolotl's ``sequence_len``), so it is
    taken as ``data.seq_len``, with a note (``say``). A window longer than the source's
    positions, either way, is refused in one line naming both numbers.

    Raises:
        ConfigError: a window longer than the source's positions, or ``model.seq_len`` and
            ``data.seq_len`` both set to different windows.
    """
    out, base = dict(overrides), source.model.seq_len
    if "model.seq_len" in out:
        given = out.pop("model.seq_len")
        asked = parse_value("model.seq_len", given)
        if asked > base or asked < 1:
            raise ConfigError(_seq_len_refusal(asked, source, "model.seq_len"))
        window = out.get("data.seq_len")
        if asked < base and window is not None and parse_value("data.seq_len", window) != asked:
            raise ConfigError(
                f"--set model.seq_len={given} and --set data.seq_len={window} both set the "
                f"training window of this fine-tune of init.source = {str(source.path)!r} (which "
                f"keeps its {base} positions). Pass only --set data.seq_len=N, N from 1 to {base}."
            )
        if asked < base:
            out["data.seq_len"] = asked
            say(
                f"note: --set model.seq_len={asked} on a fine-tune sets its training window, "
                f"data.seq_len = {asked}; the model keeps the {base} positions of init.source "
                f"{source.path} (gpt sample and gpt export use all of them)."
            )
    window = parse_value("data.seq_len", out.get("data.seq_len", 0))
    if window > base:
        raise ConfigError(_seq_len_refusal(window, source, "data.seq_len"))
    return out


def _seq_len_refusal(asked: int, source: InitSource, key: str) -> str:
    """One line: ``key`` = ``asked`` does not fit the source's positions (its model.seq_len)."""
    base, where = source.model.seq_len, f"init.source = {str(source.path)!r}"
    if 0 < asked < base:  # a config file's model section: the window is data.seq_len
        return (
            f"{key} = {asked} changes the {base} positions of {where} (its model.seq_len): a "
            f"fine-tune keeps its base's positions. For a training window of {asked} tokens, set "
            f"data.seq_len = {asked} and leave model.seq_len at {base}."
        )
    what = "longer than" if asked > base else "not a window within"
    return (
        f"{key} = {asked} is {what} the {base} positions of {where} (its model.seq_len): a "
        f"fine-tune keeps its base's positions and trains at any length up to them. Use --set "
        f"data.seq_len=N with N from 1 to {base} (the training window)."
    )


def source_chat_format(cfg: Config, source: InitSource, say: Say) -> ChatFormat | None:
    """The chat format of ``cfg.init.source`` (a run's kept one, a Hugging Face folder's
    template), for a run that starts from it on data that is not chat, with its tokenizer: the
    weights are still the chat model's, and its exports should still carry its template. A note
    (``say``) says so, or why a damaged one is not kept."""
    if not _same_tokenizer(cfg.data.tokenizer, source.tokenizer):
        return None  # another tokenizer: the template's text would not be the ids it was for
    try:
        if source.kind == "hf":
            tokenizer = None if source.tokenizer is None else str(source.tokenizer)
            chat = folder_chat_format(source.path, tokenizer)[0]
        else:
            chat = kept_chat_format(source.path)
    except DataError as err:
        say(f"note: {err} This run keeps no chat template of its own.")
        return None
    if chat is None:
        return None
    # Recorded, so that gpt sample continues prompts as this run's data was written.
    chat = dataclasses.replace(chat, data=trained_on(cfg.data))
    say(
        f"note: the data is {chat.data}, not chat, so this run keeps the chat template of "
        f"init.source {source.path} (from {chat.template_file}) for gpt export to carry; gpt "
        "sample continues a prompt as plain text, as the data was written."
    )
    return chat


def _same_tokenizer(tokenizer: str, source: Path | None) -> bool:
    """Whether ``data.tokenizer`` is the source's (None: the byte tokenizer), by content: the
    same JSON copied elsewhere, or written with other spacing, is the same tokenizer."""
    if source is None or tokenizer in BUILTIN_TOKENIZERS:
        return source is None and tokenizer == "byte"
    try:
        return bool(json.loads(Path(tokenizer).read_bytes()) == json.loads(source.read_bytes()))
    except (OSError, ValueError):  # the run's own tokenizer check says what is wrong with it
        return False


def start_config(
    folder: Path, config: Config | str | None, *, resume: bool, init_from: str | None
) -> tuple[Config, InitSource | None]:
    """The config a run starts from, before ``--set``: ``config`` (a ``Config``, a preset or a
    TOML file), or the run's own ``config.toml`` (``resume``), or ``finetune`` (``init_from``)
    or ``tiny``; with ``init_from``, that source (read once) and its architecture and tokenizer.

    Raises:
        ConfigError: ``resume`` with ``init_from``, or with a ``config`` to load.
    """
    if resume and init_from:
        raise ConfigError(
            "--init-from starts a new run; --resume continues one. Pass only one of them."
        )
    source = read_init_source(init_from) if init_from else None
    if isinstance(config, Config):
        base = config
    elif resume and config is not None:
        raise ConfigError("--resume takes the run's own config.toml; do not pass --config with it.")
    elif resume:
        base = load_config(str(folder / "config.toml"), run_folder=True)
    else:  # a fine-tune's schedule, not pre-training's, unless the config says otherwise
        base = load_config(config or ("finetune" if init_from else "tiny"))
    if source is None:
        return base, None
    # The source's architecture and tokenizer, before --set (which may still change the free
    # model keys and data.tokenizer); the free model keys stay the config's.
    free = {k: getattr(base.model, k) for k in FREE_KEYS if k != "init_std"}
    data = base.data
    if source.tokenizer is not None:
        data = dataclasses.replace(data, tokenizer=str(source.tokenizer))
    init = dataclasses.replace(base.init, source=str(source.path))
    model = dataclasses.replace(source.model.base, **free)
    return dataclasses.replace(base, model=model, data=data, init=init), source


def training_chat_format(
    cfg: Config, folder: Path, source: InitSource | None, say: Say
) -> ChatFormat | None:
    """The chat format a run trains with: its chat store's; a chat store that cannot give it
    (prepared before stores recorded it) still trains, with a note saying how to fix it for later
    (a resumed run keeps the format it kept). On data that is not chat, a run started from a chat
    model keeps that model's format (None where the source was moved since: the kept one)."""
    try:
        chat = data_chat_format(cfg)
    except DataError as err:
        kept = _kept(folder)
        if kept is None:
            say(f"note: {err} Until then, sample.txt continues sample.prompt as plain text.")
        return kept
    if chat is not None or not cfg.init.source:
        return chat
    if source is None:  # a resumed run whose source was moved or changed since
        return _kept(folder)
    return source_chat_format(cfg, source, say)


def _kept(folder: Path) -> ChatFormat | None:
    try:  # a damaged kept file: as if there were none
        return kept_chat_format(folder)
    except DataError:
        return None
