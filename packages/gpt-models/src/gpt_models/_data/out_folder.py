"""Where ``gpt prepare`` may write, and how a refused prepare takes back what it wrote.

``gpt prepare`` writes only into a folder that it creates, that is empty (hidden files such as
``.DS_Store`` aside), or that holds its own unfinished output, told by the progress file it writes
before anything else (``.prepare-state.json``); a finished store (``manifest.json``) is only read.
There it writes and removes only the names it owns: the progress file, the manifest, the
tokenizer file and the shards (token ids; for chat and completion data also loss masks,
example lengths and origins; each also as ``NAME.tmp`` while it is written). A folder holding
anything else (a user's own ``train-00000.bin``, another tokenizer's ``tokenizer.json``) is refused
before a byte is written, with the names found.
"""

from __future__ import annotations

import re
from pathlib import Path

from core_primitives import list_alternatives

from .._errors import DataError
from .manifest import MANIFEST

STATE = ".prepare-state.json"
TOKENIZER_JSON = "tokenizer.json"
_OWNED = re.compile(
    rf"({re.escape(STATE)}|{re.escape(MANIFEST)}|{re.escape(TOKENIZER_JSON)}|"
    r"(train|val)(-mask|-examples|-origins)?-\d{5}\.bin)(\.tmp)?"
)


def claim(out: Path) -> list[Path]:
    """Make ``out`` ready for a fresh prepare: create it (and missing parents), or accept it empty.

    Returns:
        The folders created, outermost first (what :func:`discard` removes again).

    Raises:
        DataError: ``out`` holds files gpt prepare did not write; the message names them.
    """
    if out.is_dir():
        foreign = [p.name for p in out.iterdir() if not p.name.startswith(".")]
        if foreign:
            raise DataError(
                f"--out {out} already holds files gpt prepare did not write "
                f"({list_alternatives(foreign, limit=5)}). It writes "
                "only into a new or empty folder, or into its own unfinished output (marked by "
                f"{STATE}), so that nothing of yours is overwritten or mixed into the store. Give "
                f"a new folder, e.g. --out {out.parent / (out.name + '-store')}, or move those "
                "files out."
            )
        return []
    created = [p for p in (out, *out.parents) if not p.exists()][::-1]
    out.mkdir(parents=True)
    return created


def discard(out: Path, created: list[Path]) -> None:
    """Remove what gpt prepare owns in ``out`` (see the module docstring), then the folders it
    created if they are empty: a refused prepare leaves the folder as it found it."""
    if out.is_dir():
        for p in out.iterdir():
            if _OWNED.fullmatch(p.name) and (p.is_file() or p.is_symlink()):
                p.unlink()
    for folder in reversed(created):
        try:
            folder.rmdir()
        except OSError:  # not empty (something else was put there meanwhile): kept
            break
