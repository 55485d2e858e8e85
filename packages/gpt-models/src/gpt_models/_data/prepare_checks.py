"""What ``gpt prepare`` (``prepare.py``) checks besides writing: that a store or an unfinished
prepare already in ``--out`` was made with the same inputs and settings (an unfinished one's
progress state loaded, its finished shards verified), the ``--tokenizer`` file it names, and that
the finished store has both splits."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .._errors import DataError
from .out_folder import STATE
from .sources import SourceFile
from .store import check_shards, file_sha256
from .val_split import empty_val_fix


def sha_of_file(path: str) -> str:
    """The sha256 of the ``--tokenizer`` file (what the settings record of it)."""
    p = Path(path)
    if not p.is_file():
        raise DataError(
            f"--tokenizer {path!r} is neither 'byte', 'bpe' nor an existing tokenizer.json file. "
            "Give byte, bpe (trained on the corpus) or the path of a tokenizers JSON file."
        )
    return file_sha256(p)


def same_settings(out: Path, old: Any, new: dict[str, Any], what: str) -> None:
    """Refuse ``what`` in ``out`` (a store, an unfinished prepare) made with other settings."""
    if old == new:
        return
    diffs = sorted(k for k in new if not isinstance(old, dict) or old.get(k) != new[k])
    raise DataError(
        f"{out} already holds {what} from other inputs or settings (differing: "
        f"{', '.join(diffs) or 'all'}; e.g. another tokenizer or changed files). Prepare into a "
        "new --out folder, or delete this one to start over."
    )


def load_state(out: Path, settings: dict[str, Any]) -> dict[str, Any]:
    path = out / STATE
    try:
        state: Any = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise DataError(
            f"{path} (the progress of an unfinished gpt prepare) is not valid JSON ({err}). "
            "Delete the folder and start over."
        ) from err
    same_settings(
        out,
        state.get("settings") if isinstance(state, dict) else None,
        settings,
        "an unfinished prepare",
    )
    for writer in state["writers"].values():  # every stream's (ids, masks, lengths, origins)
        check_shards(out, writer.get("finished", []), full_hash=True)
    return dict(state)


def check_split(manifest: dict[str, Any], state: dict[str, Any], sources: list[SourceFile]) -> str:
    """Refuse a store with nothing to train on, or an empty validation split that was asked for.

    Returns:
        For ``val_fraction`` 0 (no split asked for): what would give one, for a warning.
    """
    docs, given = manifest["documents"], manifest["split"]["val_fraction"]
    if manifest["tokens"]["train"] == 0 and docs["val"] == 0:
        raise DataError(
            f"The corpus {', '.join(s.name for s in sources)} holds no text (no documents, or "
            "only empty ones), so there is nothing to train on. Check the inputs and --text-field."
        )
    if docs["val"] and docs["train"]:
        return ""
    only = sources[0] if len(sources) == 1 and sources[0].kind == "text" else None
    fix = empty_val_fix(
        state["smallest_keys"],
        docs["train"] + docs["val"],
        given,
        None if only is None else str(only.path),
    )
    if docs["val"] == 0 and given == 0:
        return fix
    empty, full = ("validation", "train") if docs["val"] == 0 else ("train", "validation")
    n = docs["train"] + docs["val"]
    raise DataError(
        f"gpt prepare --val-fraction {given} leaves the {empty} split empty: "
        f"{'the one document' if n == 1 else f'all {n:,} documents'} went to the {full} split "
        "(a document's split is a hash of its file and position), and gpt train needs both. "
        f"Fix: {fix}. Nothing was written."
    )
