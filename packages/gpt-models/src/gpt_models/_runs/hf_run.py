"""``gpt import``'s run folder: a Hugging Face folder's weights at step 0, and its tokenizer.

The weights are read by :func:`import_hf` (``hf.py``); the folder's ``tokenizer.json``, when it has
one, is checked against the model's vocabulary and kept as the run's tokenizer.
"""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

from .._config.schema import ModelConfig
from .._data.bpe import BPETokenizer
from .._data.run_tokenizer import TOKENIZER_FILE
from .._errors import CheckpointFormatError, DataError, UsageError
from .hf import import_hf, read_hf_config


def import_run(source: str | Path, run_dir: str | Path, *, dtype: str = "float32") -> Path:
    """Make a run folder at step 0 from a Hugging Face folder: ``config.toml`` and the params.

    ``gpt sample``, ``gpt eval`` and :func:`load_run` read it like a trained run. The folder's
    ``tokenizer.json``, when it has one, is kept as the run's tokenizer (``data.tokenizer`` names
    the run's copy), so the run decodes real text. Everything is read and checked before
    ``run_dir`` is created; a failure while writing removes it again.

    Raises:
        CheckpointFormatError: see :func:`import_hf`; also a tokenizer.json that is not one, or
            that has more ids than the model's vocabulary.
        UsageError: ``run_dir`` exists already.
    """
    from .._config.toml import dumps
    from .checkpoint import Checkpointer

    run = Path(run_dir)
    if run.exists():
        raise UsageError(
            f"{run} exists already; gpt import makes a new run folder. Choose another --name or "
            "--out, or delete the old folder first."
        )
    tokenizer = _folder_tokenizer(Path(source), read_hf_config(source, dtype=dtype)[1].model)
    cfg, params = import_hf(source, dtype=dtype)
    if tokenizer is not None:
        data = dataclasses.replace(cfg.data, tokenizer=str((run / TOKENIZER_FILE).absolute()))
        cfg = dataclasses.replace(cfg, data=data)
    run.mkdir(parents=True)
    try:
        if tokenizer is not None:
            tokenizer.save(run / TOKENIZER_FILE)
        header = f"# Imported from the Hugging Face folder {Path(source).resolve()}\n"
        (run / "config.toml").write_text(header + dumps(cfg), encoding="utf-8")
        ckpt = Checkpointer(run / "checkpoints", keep=cfg.train.keep_checkpoints, async_save=False)
        try:
            ckpt.save(0, {"params": params}, {"step": 0, "source": str(Path(source).resolve())})
            ckpt.wait()
        finally:
            ckpt.close()
    except BaseException:
        shutil.rmtree(run, ignore_errors=True)
        raise
    return run


def _folder_tokenizer(folder: Path, m: ModelConfig) -> BPETokenizer | None:
    """The folder's ``tokenizer.json`` (None: it has none), refused if the model cannot use it."""
    file = folder / TOKENIZER_FILE
    if not file.is_file():
        return None
    try:
        tok = BPETokenizer.from_file(file, what="tokenizer file")
    except DataError as err:
        raise CheckpointFormatError(str(err)) from err
    if tok.vocab_size > m.real_vocab:
        raise CheckpointFormatError(
            f"{file} has {tok.vocab_size} token ids, but the model's vocabulary (config.json "
            f"vocab_size) is {m.real_vocab}: ids {m.real_vocab}..{tok.vocab_size - 1} would index "
            "past its embeddings. Put the tokenizer.json the model was trained with in the folder, "
            "or remove it to import the weights alone (the run then uses the byte tokenizer)."
        )
    return tok
