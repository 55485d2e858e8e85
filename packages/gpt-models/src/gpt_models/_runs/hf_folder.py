"""Hugging Face folders as they enter: one check of everything a folder holds, reading no weights.

:func:`check_hf_folder` is the one check of a folder, for ``gpt import``, ``import_hf`` and
``gpt train --init-from``, before a byte of weights is read or a folder is made: every file read
is a regular file, opened without blocking (a named pipe is refused, not waited on forever);
``config.json``'s values have their types (read by the family's layout in ``_model/``); each
safetensors header (an 8-byte length, a JSON header, then the data) is parsed here and every
tensor's name, dtype, shape and byte range is checked against ``config.json`` and the file's
size; shards named by an index stay inside the folder; a ``tokenizer.json`` is one, with no more
ids than the model has. The weights are read by ``hf_import.py``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import stat
import struct
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from .._config.model import ModelConfig
from .._config.schema import Config
from .._data.byte_tokenizer import ByteTokenizer
from .._data.run_tokenizer import TOKENIZER_FILE
from .._errors import CheckpointFormatError, UsageError
from .._model.hf_families import layout_of
from .._model.hf_layout import ConfigReader, Layout

DTYPES = ("float32", "bfloat16")
_FLOATS = {"F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16"}
_INDEX, _SINGLE = "model.safetensors.index.json", "model.safetensors"
_MAX_HEADER = 100 << 20  # safetensors' own limit on a header


@dataclasses.dataclass(frozen=True)
class Tensor:
    """Where one tensor's bytes are: ``nbytes`` from byte ``start`` of ``file``."""

    file: Path
    dtype: str
    shape: tuple[int, ...]
    start: int
    nbytes: int


@dataclasses.dataclass(frozen=True)
class HFFolder:
    """A checked Hugging Face folder: its family, the config that reproduces it, its tensors by
    the names ``layout`` uses (any saved prefix dropped) and its tokenizer (``"byte"``, the
    ``tokenizer.json`` path, or None when it has none)."""

    path: Path
    layout: Layout
    config: Config
    tensors: dict[str, Tensor]
    tokenizer: str | None


def check_dtype(dtype: str, flag: str = "dtype") -> str:
    """``dtype`` if params can be kept in it."""
    if dtype not in DTYPES:
        raise UsageError(f"{flag} = {dtype!r} must be one of {', '.join(DTYPES)}.")
    return dtype


def check_hf_folder(path: str | Path, *, dtype: str = "float32") -> HFFolder:
    """Check a Hugging Face folder whole, reading no weights: files, config.json, tensors,
    tokenizer.

    Raises:
        CheckpointFormatError: the first problem, naming the file (and tensor or key).
    """
    folder = Path(path)
    check_dtype(dtype)
    if not folder.is_dir():
        raise CheckpointFormatError(
            f"{folder} is not a folder. Expected a Hugging Face model folder (config.json and "
            "model.safetensors, what save_pretrained writes)."
        )
    source = folder / "config.json"
    if not os.path.lexists(source) and (folder / "config.toml").is_file():
        raise CheckpointFormatError(
            f"{folder} is a run folder made by gpt train (config.toml), not a Hugging Face model "
            "folder (config.json). Use it as it is: gpt sample/eval --run, gpt train --init-from "
            f"{folder}; or write it as a Hugging Face folder with gpt export."
        )
    raw = _read_json(source)
    layout = layout_of(raw, source)
    model = layout.model_config(ConfigReader(raw, source, layout.architecture), dtype)
    try:
        config = Config(model=model)
    except UsageError as err:
        raise CheckpointFormatError(f"{source} describes an invalid model: {err}") from err
    tensors = _check_tensors(folder, layout, model, _headers(folder))
    return HFFolder(folder, layout, config, tensors, _tokenizer(folder, model))


def numpy_dtype(name: str) -> np.dtype[Any]:
    """The numpy dtype of a safetensors dtype name (``F32``, ``BF16``, ...)."""
    if name == "BF16":
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(_FLOATS[name])


# ------------------------------------------------------------------------------------------------
# Files: regular ones only, JSON, safetensors headers


def open_regular(path: Path) -> BinaryIO:
    """``path`` opened for reading if it is a regular file (symlinks to one count).

    Opened with ``O_NONBLOCK`` and checked with ``fstat`` on that same descriptor: a plain
    ``open`` of a named pipe waits for a writer forever, and a check before opening could be
    answered by another file than the one then opened.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        kind = {
            stat.S_IFIFO: "a named pipe",
            stat.S_IFDIR: "a folder",
            stat.S_IFSOCK: "a socket",
            stat.S_IFCHR: "a device",
            stat.S_IFBLK: "a device",
        }.get(stat.S_IFMT(mode), "special")
        raise CheckpointFormatError(
            f"{path} is {kind}, not a regular file. A Hugging Face folder holds plain files; "
            "put the real file there (a symbolic link to one is fine)."
        )
    return os.fdopen(fd, "rb")


def _read_json(path: Path) -> dict[str, Any]:
    try:
        with open_regular(path) as f:
            data = json.loads(f.read().decode("utf-8"))
    except CheckpointFormatError:
        raise  # not a regular file
    except FileNotFoundError:
        raise CheckpointFormatError(
            f"{path} does not exist. Expected a Hugging Face model folder with config.json and "
            "model.safetensors (what save_pretrained writes)."
        ) from None
    except (OSError, ValueError) as err:
        raise CheckpointFormatError(f"{path} is not valid JSON ({err}).") from err
    if not isinstance(data, dict):
        raise CheckpointFormatError(f"{path} must hold a JSON object, got {type(data).__name__}.")
    return data


def _headers(folder: Path) -> dict[str, Tensor]:
    """Every tensor of the folder by its saved name, from the single file or the index's shards."""
    index, single = folder / _INDEX, folder / _SINGLE
    if not os.path.lexists(index):
        if not os.path.lexists(single):
            raise CheckpointFormatError(
                f"{folder} has neither {_SINGLE} nor {_INDEX}. Expected a Hugging Face folder "
                "saved with save_pretrained(..., safe_serialization=True); convert .bin weights "
                "to safetensors first."
            )
        return _header(single)
    weight_map = _read_json(index).get("weight_map")
    if not isinstance(weight_map, dict) or not all(isinstance(f, str) for f in weight_map.values()):
        raise CheckpointFormatError(
            f"{index} has no 'weight_map' object; expected the index transformers writes "
            '({"weight_map": {"tensor name": "shard file", ...}}). Re-save the model with '
            "save_pretrained."
        )
    shards: dict[str, dict[str, Tensor]] = {}
    for name, file in weight_map.items():
        if Path(file).name != file or file in ("", ".", ".."):
            raise CheckpointFormatError(
                f"{index} names the shard {file!r} for tensor {name!r}; a shard must be a file "
                "name inside the folder (no '/' or '..'). Re-save the model with save_pretrained."
            )
        if file not in shards:
            shards[file] = _header(folder / file, named_by=index)
        if name not in shards[file]:
            raise CheckpointFormatError(
                f"{index}: tensor {name!r} is listed in shard {file} but that file does not "
                "hold it. The index and the shards do not match; re-download or re-save the model."
            )
    return {n: t for shard in shards.values() for n, t in shard.items()}


def _header(path: Path, named_by: Path | None = None) -> dict[str, Tensor]:
    """The tensors of one safetensors file, each checked to lie inside the file."""
    try:
        with open_regular(path) as f:
            size = os.fstat(f.fileno()).st_size
            if size < 8:
                raise ValueError(f"it holds {size} bytes, less than the 8 of a header's length")
            (length,) = struct.unpack("<Q", f.read(8))
            if length > min(size - 8, _MAX_HEADER):
                raise ValueError(f"its header claims {length} bytes, the file holds {size}")
            header = json.loads(f.read(length).decode("utf-8"))
            if not isinstance(header, dict):
                raise ValueError("its header is not a JSON object")
    except CheckpointFormatError:
        raise  # not a regular file
    except FileNotFoundError:
        raise CheckpointFormatError(
            f"{path} is missing (named by {named_by}). Copy every shard of the checkpoint into "
            "the folder."
        ) from None
    except (ValueError, struct.error) as err:
        raise CheckpointFormatError(
            f"{path} is not a readable safetensors file ({err}); it is probably truncated or "
            "damaged. Expected a complete file written by safetensors; copy it again."
        ) from err
    header.pop("__metadata__", None)
    return {name: _tensor(path, name, info, 8 + length, size) for name, info in header.items()}


def _tensor(path: Path, name: str, info: Any, data_start: int, size: int) -> Tensor:
    try:
        dtype, shape, (begin, end) = info["dtype"], tuple(info["shape"]), info["data_offsets"]
        ok = all(isinstance(n, int) and n >= 0 for n in (*shape, begin, end)) and begin <= end
    except (TypeError, KeyError, ValueError):
        ok = False
    if not ok:
        raise CheckpointFormatError(
            f"{path} is not a readable safetensors file: tensor {name!r} has the header entry "
            f"{json.dumps(info)[:80]}, not a dtype, shape and data_offsets. Copy the file again."
        )
    if dtype not in _FLOATS:
        raise CheckpointFormatError(
            f"{path}: tensor {name!r} has dtype {dtype}; weights must be floating point "
            f"({', '.join(_FLOATS)}). The file belongs to another kind of model."
        )
    nbytes = int(np.prod(shape, dtype=np.int64)) * numpy_dtype(dtype).itemsize
    if end - begin != nbytes:
        raise CheckpointFormatError(
            f"{path} is not a readable safetensors file: tensor {name!r} ({dtype}, shape "
            f"{shape}) needs {nbytes} bytes but its data_offsets span {end - begin}. Copy the "
            "file again."
        )
    if data_start + end > size:
        raise CheckpointFormatError(
            f"{path} is not a readable safetensors file: tensor {name!r} ends at byte "
            f"{data_start + end}, but the file holds {size} bytes, so it is truncated. Copy the "
            "complete file again."
        )
    return Tensor(path, dtype, shape, data_start + begin, nbytes)


# ------------------------------------------------------------------------------------------------
# The folder against config.json: names, shapes; the tokenizer against the vocabulary


def _check_tensors(
    folder: Path, layout: Layout, m: ModelConfig, saved: dict[str, Tensor]
) -> dict[str, Tensor]:
    """``saved`` under the layout's names (prefix dropped), once every name and shape fits."""
    first = next(iter(layout.expected(m, "")))
    prefix = next((p for p in layout.prefixes if p + first in saved), layout.prefixes[-1])
    expected = layout.expected(m, prefix)
    missing = [n for n in expected if n not in saved]
    extra = sorted(n for n in saved if n not in expected and not layout.skipped(n, m))
    arch = layout.architecture
    if missing:
        raise CheckpointFormatError(
            f"{folder}: tensor {missing[0]!r} is missing ({len(missing)} missing in all) from the "
            f"safetensors files; config.json ({arch}, {m.n_layers} layers) needs it. The weights "
            "are incomplete or belong to another model."
        )
    if extra:
        raise CheckpointFormatError(
            f"{folder}: tensor {extra[0]!r} ({len(extra)} unexpected in all) is not part of a "
            f"{arch} with this config.json; expected only the {len(expected)} tensors of that "
            "layout. The weights belong to another model or architecture."
        )
    wrong = [n for n, shape in expected.items() if saved[n].shape != shape]
    if wrong:
        name = wrong[0]
        raise CheckpointFormatError(
            f"{saved[name].file}: tensor {name!r} has shape {saved[name].shape}, but config.json "
            f"({arch}: vocab_size {m.real_vocab}, width {m.d_model}, {m.n_layers} layers, "
            f"context {m.seq_len}) needs {expected[name]} ({len(wrong)} misshapen in all). The "
            "weights and config.json come from different models."
        )
    return {n[len(prefix) :]: saved[n] for n in expected}


def parse_tokenizer(text: str | bytes, what: str) -> tuple[Any, int]:
    """A tokenizers JSON text as a ``tokenizers.Tokenizer`` and its number of ids (added ones too).

    Raises:
        CheckpointFormatError: ``what`` is not a tokenizers JSON file.
    """
    from tokenizers import Tokenizer

    try:
        tok = Tokenizer.from_str(text.decode("utf-8") if isinstance(text, bytes) else text)
    except Exception as err:  # tokenizers raises its own Exception type on malformed JSON
        raise CheckpointFormatError(
            f"{what} is not a tokenizers JSON file ({err}). Expected a tokenizer.json as written "
            "by the tokenizers library (a Hugging Face model's, or gpt export's)."
        ) from err
    return tok, max(tok.get_vocab(with_added_tokens=True).values(), default=-1) + 1


def folder_tokenizer(folder: Path) -> Path | None:
    """The ``tokenizer.json`` of a Hugging Face folder (or of a run folder), or None: none there.

    Where ``gpt import`` finds a folder's tokenizer; ``gpt prepare --tokenizer FOLDER`` looks there
    too. The file must be a regular file (a link to one counts).

    Raises:
        CheckpointFormatError: ``tokenizer.json`` is there but is a folder, a pipe or a device.
    """
    file = folder / TOKENIZER_FILE
    if not os.path.lexists(file):
        return None
    open_regular(file).close()
    return file


def _tokenizer(folder: Path, m: ModelConfig) -> str | None:
    """``"byte"`` (an export of a byte-level run), the tokenizer.json path, or None: none there."""
    file = folder_tokenizer(folder)
    if file is None:
        return None
    with open_regular(file) as f:
        tok, ids = parse_tokenizer(f.read(), str(file))
    if ids > m.real_vocab:
        raise CheckpointFormatError(
            f"{file} has {ids} token ids, but the model's vocabulary (config.json vocab_size) is "
            f"{m.real_vocab}: ids {m.real_vocab}..{ids - 1} would index past its embeddings. Put "
            "the tokenizer.json the model was trained with in the folder, or remove it to import "
            "the weights alone (the run then uses the byte tokenizer)."
        )
    return "byte" if tok.to_str(pretty=False) == ByteTokenizer().to_json() else str(file)
