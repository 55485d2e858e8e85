"""Hugging Face folders in: the weights of a checked folder, as params or as ``gpt import``'s run.

A folder is checked whole first (``hf_folder.py``). Its weights are then read one tensor at a time
with ``pread`` (a memory map's pages would all count in this process until the file closes: a
second copy of the model) straight into our layout, stacked over layers, placed on the device and
dropped from host memory one by one. ``gpt import`` keeps them as a run at step 0 with the
folder's tokenizer: its ``tokenizer.json`` copied as it is (``data.tokenizer`` names the copy), or
``data.tokenizer = "byte"`` when it is the byte tokenizer ``gpt export`` writes for a byte-level
run, so that run comes back as it left.

An instruct model's folder carries its chat template (``chat_template`` in
``tokenizer_config.json``, or ``chat_template.jinja``). ``gpt import`` records it as ``gpt prepare``
records a chat store's (``_data/chat_format.py``: the template, the special tokens it reads, the
token that ends an assistant turn) and keeps it as the run's ``chat_format.json``, so ``gpt sample``
writes a prompt as a user turn and ``gpt export`` writes the template back. A template that cannot
be read (not valid Jinja, a damaged config) is left out with a note: the weights still import.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

import jax
import numpy as np

import blox as bx

from .._config.model import ModelConfig
from .._config.schema import Config
from .._data.chat_format import ChatFormat, chat_format_of, plain_template
from .._data.chat_template import find_chat_template
from .._data.encoder import Encoder
from .._data.run_tokenizer import TOKENIZER_FILE
from .._distributed.mesh import single_device_mesh
from .._errors import CheckpointFormatError, DataError
from .._model.gpt import abstract_params
from .._model.hf_layout import PREFIX, Entry
from .chat_file import keep_chat_format
from .folders import check_new_path, new_folder
from .hf_folder import HFFolder, Tensor, check_dtype, check_hf_folder, numpy_dtype, open_regular

_FIX = "Choose another --name or --out, or delete the old folder first."
_WRITE_FIX = "Choose an --out folder on a writable file system with space to spare."


def read_hf_config(path: str | Path, *, dtype: str = "float32") -> tuple[str, Config]:
    """``(architecture, Config)`` of a Hugging Face folder, after :func:`check_hf_folder`."""
    checked = check_hf_folder(path, dtype=dtype)
    return checked.layout.architecture, checked.config


def import_hf(path: str | Path, *, dtype: str = "float32") -> tuple[Config, bx.Params]:
    """Load a Hugging Face folder of a family ``_model/hf_families.py`` lists: GPT-2, Llama,
    Qwen2/2.5, Qwen3, Mistral, OLMo 2, Gemma 2 or Gemma 3 (``...ForCausalLM``).

    Returns ``(config, params)``: a :class:`Config` whose model section reproduces the checkpoint
    (other sections at their defaults) and the params on the first device, in ``dtype``
    (float32 or bfloat16). The folder is checked whole first (:func:`check_hf_folder`), then
    tensors are read and placed one at a time.

    Raises:
        CheckpointFormatError: an unknown architecture, an unsupported option or a mistyped
            value in config.json, a missing, extra or misshapen tensor, a truncated safetensors
            file, a file that is not a regular file, or a tokenizer.json that does not fit.
    """
    return read_weights(check_hf_folder(path, dtype=dtype))


def read_weights(checked: HFFolder) -> tuple[Config, bx.Params]:
    """The config and params of a folder :func:`check_hf_folder` accepted."""
    cfg, m = checked.config, checked.config.model
    dtype = m.param_dtype
    abstract = abstract_params(cfg, single_device_mesh())
    out: dict[tuple[str, ...], Any] = {}
    for entry, arrays in _stream(checked.layout.entries(m), m, checked.tensors):
        for ours, array in zip(entry.ours, arrays, strict=True):
            target = abstract[(*PREFIX, *ours)]
            value = jax.device_put(array.astype(np.dtype(dtype), copy=False), target.value.sharding)
            out[(*PREFIX, *ours)] = target.replace(value=value)
        del arrays, array, value  # one param's host copy at a time
    return cfg, bx.Params({k: out[k] for k in abstract}).locked()


def _stream(
    entries: list[Entry], m: ModelConfig, tensors: dict[str, Tensor]
) -> Iterator[tuple[Entry, tuple[np.ndarray, ...]]]:
    for entry in entries:
        if not entry.stacked:
            yield entry, entry.load(*(_read(tensors[n], entry.vocab_rows) for n in entry.hf))
            continue
        stacked: list[np.ndarray] = []
        for i in range(m.n_layers):
            layer = entry.load(*(_read(tensors[n.format(i=i)]) for n in entry.hf))
            if not stacked:
                stacked = [host_array((m.n_layers, *a.shape), a.dtype) for a in layer]
            for whole, part in zip(stacked, layer, strict=True):
                whole[i] = part
            del layer
        yield entry, tuple(stacked)
        del stacked


def host_array(shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """An uninitialised host array whose data starts on a 64-byte boundary.

    ``jax.device_put`` onto a CPU device shares such an array's memory instead of copying it
    (numpy's own large arrays start 16 bytes into their pages, so they are copied): each imported
    param then exists once, and the import's peak stays near the parameter bytes.
    """
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    raw = np.empty(nbytes + 64, np.uint8)
    start = -raw.ctypes.data % 64
    return raw[start : start + nbytes].view(dtype).reshape(shape)


def _read(t: Tensor, rows: int = 0) -> np.ndarray:
    """One tensor's bytes, read into a fresh array (``rows``: the first rows of a zero array)."""
    dtype = numpy_dtype(t.dtype)
    whole = host_array((max(rows, t.shape[0]), *t.shape[1:]) if rows else t.shape, dtype)
    if rows:
        whole[t.shape[0] :] = 0
    out = whole[: t.shape[0]] if rows else whole
    buffer: Any = out.reshape(-1).view(np.uint8)
    with open_regular(t.file) as f:
        got = os.preadv(f.fileno(), [memoryview(buffer)], t.start)
    if got != t.nbytes:  # the file shrank since it was checked
        raise CheckpointFormatError(
            f"{t.file} is not a readable safetensors file: read {got} of a tensor's {t.nbytes} "
            "bytes; it is truncated. Copy the complete file again."
        )
    return whole


IMPORTED_FROM = "# Imported from the Hugging Face folder "  # config.toml's first line


def imported_from(run: Path) -> Path | None:
    """The Hugging Face folder ``gpt import`` made ``run`` from (its config.toml's first line), or
    None for a run that ``gpt train`` made."""
    try:
        with open(run / "config.toml", encoding="utf-8") as f:
            first = f.readline()
    except (OSError, UnicodeDecodeError):
        return None
    return (
        Path(first[len(IMPORTED_FROM) :].rstrip("\n")) if first.startswith(IMPORTED_FROM) else None
    )


def import_run(
    source: str | Path, run_dir: str | Path, *, dtype: str = "float32", notes: TextIO | None = None
) -> Path:
    """Make a run folder at step 0 from a Hugging Face folder: ``config.toml`` and the params.

    ``gpt sample``, ``gpt eval`` and :func:`load_run` read it like a trained run, with the
    folder's tokenizer and chat template (``chat_format.json``, see the module docstring).
    Everything is read and checked before ``run_dir`` is created; a failure while writing removes
    it again, with any parent folder made for it. ``notes`` gets a line where the folder's chat
    template is not kept, or ends no assistant turn with one token.

    Raises:
        CheckpointFormatError: see :func:`import_hf`.
        UsageError: ``run_dir`` exists already (or is a link), a parent is a file, or it cannot
            be written.
    """
    from .._config.toml import dumps
    from .checkpoint import Checkpointer

    run, folder = Path(run_dir), Path(source)
    check_dtype(dtype, "--dtype")
    check_new_path(run, what="--out/--name", fix=_FIX)
    checked = check_hf_folder(folder, dtype=dtype)
    tokenizer = checked.tokenizer
    chat, why = folder_chat_format(folder, tokenizer)
    if chat is not None and not chat.end_of_turn_ids:
        why = chat.note  # kept all the same, as gpt prepare keeps it: prompts are still turns
    cfg, params = read_weights(checked)
    if tokenizer is not None:
        kind = "byte" if tokenizer == "byte" else str((run / TOKENIZER_FILE).absolute())
        cfg = dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, tokenizer=kind))
    with new_folder(run, what="--out/--name", fix=_FIX, write_fix=_WRITE_FIX):
        if tokenizer not in (None, "byte"):
            shutil.copyfile(folder / TOKENIZER_FILE, run / TOKENIZER_FILE)
        header = f"{IMPORTED_FROM}{folder.resolve()}\n"
        (run / "config.toml").write_text(header + dumps(cfg), encoding="utf-8")
        keep_chat_format(chat, run)
        ckpt = Checkpointer(run / "checkpoints", keep=cfg.train.keep_checkpoints, async_save=False)
        try:
            ckpt.save(0, {"params": params}, {"step": 0, "source": str(folder.resolve())})
            ckpt.wait()
        finally:
            ckpt.close()
    if notes is not None and why:
        print(f"note: {why}", file=notes)
    return run


def folder_chat_format(folder: Path, tokenizer: str | None) -> tuple[ChatFormat | None, str]:
    """The chat format of ``folder``'s chat template, recorded as ``gpt prepare`` records a chat
    store's, for the folder's ``tokenizer`` (as :class:`HFFolder` names it).

    Returns ``(format, "")``; ``(None, "")`` when the folder has no template; ``(None, why)`` when
    it has one that cannot be kept, ``why`` saying so.
    """
    try:
        template = find_chat_template(folder / TOKENIZER_FILE)
    except DataError as err:  # a damaged config or template must not cost the user the weights
        return None, (
            f"{err} The imported run keeps no chat template (gpt sample continues a prompt as "
            "plain text, gpt export writes none); fix the template and import again to keep it."
        )
    if template is None:
        return None, ""
    if tokenizer is None:
        return None, (
            f"{template.file} holds a chat template, but {folder} has no {TOKENIZER_FILE}, so the "
            "imported run (on the byte tokenizer) keeps no chat template: its token ids would not "
            f"be the ones the template was written for. Put the model's {TOKENIZER_FILE} in the "
            "folder and import again to keep it."
        )
    if tokenizer == "byte":
        enc = Encoder("byte")
    else:
        from tokenizers import Tokenizer

        enc = Encoder("bpe", Tokenizer.from_file(tokenizer))
    # An export of a run trained on chats without a template of their own: the same record again.
    if template.source == plain_template(enc.eot_text):
        return chat_format_of(enc, None), ""
    if enc.tok is None:  # the end of a turn is found among a tokenizer.json's added tokens
        return None, (
            f"{template.file} holds a chat template other than the plain one, but {folder}'s "
            "tokenizer is the byte tokenizer, which has no special token to end an assistant "
            "turn, so the imported run keeps no chat template. Prepare chat data with a "
            "tokenizer.json that has one (gpt prepare --tokenizer) to train a chat model."
        )
    return chat_format_of(enc, template), ""
