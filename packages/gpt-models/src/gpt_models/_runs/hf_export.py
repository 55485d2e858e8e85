"""Hugging Face folders out: a folder transformers uses as it is, written whole or not at all.

The folder holds ``config.json`` and ``model.safetensors`` in the family's layout
(``_model/hf_gpt2.py``, ``_model/hf_llama.py`` and the families built on it), and with a
tokenizer also ``tokenizer.json``,
``tokenizer_config.json`` (the tokenizer class and its special bos/eos/pad tokens), and always
``generation_config.json``, so ``AutoTokenizer`` loads the tokenizer and ``generate`` stops at the
end of text. The bos/eos/pad ids are written in ``config.json`` and ``generation_config.json``,
``null`` where the tokenizer has none (a missing key lets transformers fill in its own defaults:
Llama's 1 and 2).

The end-of-text token is the tokenizer's own: NUL (id 0) for the byte tokenizer, which
``gpt prepare`` writes after each document; the first of ``<|endoftext|>``, ``<|end_of_text|>``,
``</s>``, ``<eos>`` in a BPE or Hugging Face tokenizer (``gpt prepare`` adds ``<|endoftext|>`` to
a BPE it trains); none in a BPE that ``gpt train`` trained on text (those runs never saw one).
The beginning-of-text token is the tokenizer's own when it has one, else the end-of-text token
(GPT-2's convention); padding is the end-of-text token.

A run trained on chat data also writes its chat template (``chat_template`` in
``tokenizer_config.json``, with the special tokens the template reads) and puts the token that
ends an assistant turn (``<|im_end|>``) first in ``eos_token_id``, a list with the end-of-text id:
``generate`` stops at the end of a reply instead of writing the next turns.
"""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path
from typing import Any

import jax
import numpy as np

import blox as bx

from .._config.model import ModelConfig
from .._data.bpe import BPETokenizer, end_of_text_id
from .._data.byte_tokenizer import ByteTokenizer
from .._data.chat_format import ChatFormat
from .._data.run_tokenizer import TOKENIZER_FILE
from .._errors import CheckpointFormatError, UsageError
from .._model.gpt import gpt
from .._model.hf_families import export_layout
from .._model.hf_layout import PREFIX, Layout
from .._model.lora import is_adapter
from .folders import check_new_path, new_folder
from .hf_folder import check_dtype, parse_tokenizer

BEGIN_OF_TEXT = ("<|begin_of_text|>", "<s>", "<bos>")
_NAMED = ("bos_token", "eos_token", "pad_token", "unk_token")
_FIX = "Pass a new folder path, e.g. gpt export RUN exported/NAME."
_WRITE_FIX = "Pass an OUT_DIR on a writable file system with space to spare."


def export_hf(
    config: Any,
    params: bx.Params,
    path: str | Path,
    *,
    dtype: str = "float32",
    tokenizer: str | Path | ByteTokenizer | BPETokenizer | None = None,
    chat: ChatFormat | None = None,
) -> Path:
    """Write ``params`` as a Hugging Face folder that transformers loads and generates with.

    ``config`` is a :class:`Config` or its ``ModelConfig``; the params of a run trained with LoRA
    (a ``Config`` with ``lora.rank > 0``) are written with their adapters merged into the
    weights (``W + alpha / rank * a @ b``): a plain model. The model must be GPT-2-shaped
    (layernorm, learned positions, gelu, tied head, biases), Llama-shaped (rmsnorm, rope,
    swiglu, no biases) or one of the Llama-like families (Qwen2, Qwen3, Mistral, OLMo 2,
    Gemma 2 and 3, Mixtral, Qwen3-MoE) by its options; it is written as the first family that
    has them all. ``tokenizer`` (a tokenizer, or a tokenizer.json file, copied as it is)
    adds ``tokenizer.json``, ``tokenizer_config.json`` and its special-token ids. ``chat``, the
    chat format of a run trained on chat data (``gpt export`` passes the run's), adds its template
    to ``tokenizer_config.json`` (``chat_template``, with the special tokens it reads) and its
    end-of-turn id to ``eos_token_id``, so that ``apply_chat_template`` writes prompts as the run
    read them and ``generate`` stops at the end of the reply. ``path`` must
    not exist; the folder is written beside it and renamed into place, with modes from the umask,
    so a failure leaves nothing behind.

    Raises:
        CheckpointFormatError: the model has no equivalent in any family, or the tokenizer has
            more ids than the model.
        UsageError: ``path`` exists (or is a link, or lies below a file), or cannot be written.
    """
    m = getattr(config, "model", config)
    check_dtype(dtype)
    layout = export_layout(m)
    target = Path(path)
    check_new_path(target, what="OUT_DIR", fix=_FIX)
    params = merged_params(config, params)
    files, special = _tokenizer_files(tokenizer, m, chat)
    hf_config = {**layout.hf_config(m, dtype), **special}
    files = {"config.json": hf_config, "generation_config.json": special, **files}
    tensors = _hf_tensors(layout, m, params, dtype)
    return write_folder(target, "model.safetensors", tensors, files)


def write_folder(
    target: Path, weights: str, tensors: dict[str, np.ndarray], files: dict[str, Any]
) -> Path:
    """Write the folder ``target`` whole or not at all: ``weights`` (a safetensors file of
    ``tensors``) and ``files`` (name -> text, or an object written as JSON).

    The folder is filled beside ``target`` and renamed into place; files and folder get their
    modes from the umask.
    """
    from safetensors.numpy import save_file

    partial = target.parent / f".{target.name}.{os.getpid()}-{secrets.token_hex(3)}.partial"
    with new_folder(partial, what="OUT_DIR", fix=_FIX, write_fix=_WRITE_FIX, shown=target):
        save_file(tensors, str(partial / weights), metadata={"format": "pt"})
        # safetensors creates its file 0600; a file made by open() here gets 0666 less the
        # umask, which the folder's mode (0777 less the umask) shows without touching the umask.
        os.chmod(partial / weights, os.stat(partial).st_mode & 0o666)
        for name, content in files.items():
            text = content if isinstance(content, str) else json.dumps(content, indent=2) + "\n"
            (partial / name).write_text(text, encoding="utf-8")
        os.rename(partial, target)
    return target


def merged_params(config: Any, params: bx.Params) -> bx.Params:
    """``params`` with the LoRA adapters of ``config`` merged into their kernels (a plain model's
    params); without LoRA, ``params`` as they are.

    Raises:
        CheckpointFormatError: ``params`` hold adapters but ``config`` is no LoRA run's config.
    """
    lora = gpt(config).lora
    if lora is not None:
        return lora.merge(params)
    if any(is_adapter(path) for path in params):
        raise CheckpointFormatError(
            "params hold LoRA adapters (*lora_a, *lora_b), but the config has no [lora] section "
            "with rank > 0 (or is a bare ModelConfig), so they would be left out of the export. "
            "Pass the run's whole Config (load_run gives it) to merge them into the weights."
        )
    return params


def _hf_tensors(
    layout: Layout, m: ModelConfig, params: bx.Params, dtype: str
) -> dict[str, np.ndarray]:
    """Every HF tensor of ``params``, named as ``layout`` saves them."""
    prefix, out = layout.prefixes[0], {}
    for entry in layout.entries(m):
        values = []
        for ours in entry.ours:
            param = params.get((*PREFIX, *ours))
            if param is None:
                raise CheckpointFormatError(
                    f"params have no {'/'.join((*PREFIX, *ours))}, which the model's config needs; "
                    "pass the params of this config (init_params, load_run or import_hf)."
                )
            values.append(np.asarray(jax.device_get(param.value), np.float32))
        for i in range(m.n_layers if entry.stacked else 1):
            layer = [v[i] for v in values] if entry.stacked else values
            for name, array in zip(entry.hf, entry.save(*layer), strict=True):
                out[prefix + name.format(i=i)] = _to_numpy(array, dtype)
    return out


def _to_numpy(array: np.ndarray, dtype: str) -> np.ndarray:
    if dtype == "bfloat16":
        import ml_dtypes

        return np.ascontiguousarray(array.astype(ml_dtypes.bfloat16))
    return np.ascontiguousarray(array.astype(np.float32))


def _tokenizer_files(
    tokenizer: str | Path | ByteTokenizer | BPETokenizer | None,
    m: ModelConfig,
    chat: ChatFormat | None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The tokenizer's files (name -> text or JSON object) and the special-token ids."""
    special: dict[str, Any] = dict.fromkeys(("bos_token_id", "eos_token_id", "pad_token_id"))
    if tokenizer is None:
        return {}, _end_of_turn(special, chat)
    text = _tokenizer_text(tokenizer)
    tok, ids = parse_tokenizer(text, f"export_hf(tokenizer={tokenizer!r})")
    if ids > m.real_vocab:
        raise CheckpointFormatError(
            f"The tokenizer has {ids} token ids but the model's vocabulary is {m.real_vocab}: ids "
            f"{m.real_vocab}..{ids - 1} have no embedding. Export with the tokenizer the model "
            "was trained with (gpt export takes the run's own)."
        )
    eos = ByteTokenizer.eot_id if text == ByteTokenizer().to_json() else end_of_text_id(tok)
    bos = next((i for n in BEGIN_OF_TEXT if (i := tok.token_to_id(n)) is not None), eos)
    special.update(bos_token_id=bos, eos_token_id=eos, pad_token_id=eos)
    # Only added (special) tokens are named: transformers splits a named token out of any text
    # before encoding it, so naming the byte tokenizer's NUL, spelt "Ā" in byte-level BPE, would
    # encode every "Ā" of a text as NUL. Its id still stands in config.json and generation_config.
    added = {t.get("content") for t in json.loads(text).get("added_tokens") or []}
    names = {
        key: token
        for key in ("bos_token", "eos_token", "pad_token")
        if (i := special[f"{key}_id"]) is not None and (token := tok.id_to_token(i)) in added
    }
    if chat is not None:  # the special tokens as the template saw them (e.g. eos_token <|im_end|>)
        names |= {k: v for k, v in chat.variables.items() if k in _NAMED and v in added}
    tokenizer_config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": m.seq_len,
        "clean_up_tokenization_spaces": False,
        **names,
        **({} if chat is None else {"chat_template": chat.template}),
    }
    files = {TOKENIZER_FILE: text, "tokenizer_config.json": tokenizer_config}
    return files, _end_of_turn(special, chat)


def _end_of_turn(special: dict[str, Any], chat: ChatFormat | None) -> dict[str, Any]:
    """``special`` with a chat's end-of-turn id first in ``eos_token_id`` (a list with the
    end-of-text id after it: transformers' generate stops at any of them)."""
    if chat is None or not chat.end_of_turn_ids:
        return special
    ids = [*chat.end_of_turn_ids, special["eos_token_id"]]
    ids = list(dict.fromkeys(i for i in ids if i is not None))
    return special | {"eos_token_id": ids[0] if len(ids) == 1 else ids}


def _tokenizer_text(tokenizer: str | Path | ByteTokenizer | BPETokenizer) -> str:
    if isinstance(tokenizer, (ByteTokenizer, BPETokenizer)):
        return tokenizer.to_json()
    path = Path(tokenizer)
    if not path.is_file():
        raise UsageError(
            f"export_hf(tokenizer={str(path)!r}): no such file. Pass a tokenizer.json file, a "
            "ByteTokenizer or BPETokenizer, or None."
        )
    return path.read_text(encoding="utf-8")
