"""The chat format a run keeps in its folder (``chat_format.json``): written when a run trained on
chat data (or started from a chat model) is launched or imported, read by ``gpt sample`` and
``gpt export``."""

from __future__ import annotations

import json
from pathlib import Path

from .._config.schema import Config
from .._data.chat_format import ChatFormat, manifest_chat_format, read_chat_format
from .._data.store import is_store, read_manifest

# Where a run trained on chat data keeps the chat format of its data (``_data/chat_format.py``).
CHAT_FILE = "chat_format.json"


def data_chat_format(cfg: Config) -> ChatFormat | None:
    """The chat format of the data ``cfg`` (resolved) trains on: a chat store's; None for any other
    data (text, completion examples, a mixture, which holds no example stores).

    Raises:
        DataError: a chat store prepared before stores recorded it, or a damaged record.
    """
    store = Path(cfg.data.path)
    if cfg.data.kind != "store" or not is_store(store):
        return None
    manifest = read_manifest(store)
    return manifest_chat_format(manifest, store) if manifest.get("kind") == "chat" else None


def kept_chat_format(run: Path) -> ChatFormat | None:
    """The chat format kept in ``run`` (None: none kept).

    Raises:
        DataError: the kept file is damaged.
    """
    return read_chat_format(run / CHAT_FILE) if (run / CHAT_FILE).is_file() else None


def run_chat_format(run: str | Path, cfg: Config) -> ChatFormat | None:
    """The chat format a run was trained with (None: not on chat data): the one ``gpt train``
    kept in the run folder, or for a run trained before runs kept it, its data's.

    Raises:
        DataError: the kept file is damaged, or the run's chat store does not record it.
    """
    kept = kept_chat_format(Path(run))
    return kept if kept is not None else data_chat_format(cfg)


def keep_chat_format(chat: ChatFormat | None, run: Path) -> None:
    """Keep ``chat`` in the run folder (or remove an earlier one: the data is not chat now)."""
    if chat is None:
        (run / CHAT_FILE).unlink(missing_ok=True)
        return
    (run / CHAT_FILE).write_text(json.dumps(chat.to_json(), indent=1) + "\n", encoding="utf-8")
