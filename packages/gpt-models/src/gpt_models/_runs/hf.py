"""Hugging Face checkpoint folders in and out: ``GPT2LMHeadModel`` and ``LlamaForCausalLM``.

A folder is ``config.json`` plus ``model.safetensors`` (or shards listed in
``model.safetensors.index.json``). Tensors are read with the ``safetensors`` numpy API (no torch),
one at a time, straight into the model's layout: our params are stacked over layers
(``blocks/block/...`` with a leading ``layers`` axis) and split by heads, so each of our params is
assembled from the matching tensor of every layer, placed on the device and dropped from host
memory before the next one is read.

Layouts: GPT-2's ``Conv1D`` weights are ``(in, out)`` and ``c_attn`` holds query, key and value
side by side; Llama's ``nn.Linear`` weights are ``(out, in)``. Our RoPE rotates the half-split pairs
``(x[:d/2], x[d/2:])`` like transformers' ``rotate_half``, so Llama's query/key projections are
taken as they are (no permutation). A vocabulary that is not a multiple of 64 is padded with zero
rows and ``model.vocab_real`` masks the padded ids; export drops them again. The per-architecture
name, shape and config.json mappings are in ``hf_maps.py``; this module reads and writes folders.

Everything is checked (architecture, config, every tensor's name and shape) before anything is
written; export writes into a temporary folder beside the target and renames it into place.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jax
import numpy as np

import blox as bx

from .._config.schema import Config, ModelConfig
from .._data.run_tokenizer import TOKENIZER_FILE
from .._distributed.mesh import single_device_mesh
from .._errors import CheckpointFormatError as CheckpointFormatError
from .._errors import UsageError
from .._model.gpt import abstract_params
from .hf_maps import (
    BLOCK,
    PREFIX,
    Entry,
    entries,
    expected_names,
    export_arch,
    hf_config,
    model_config,
)

DTYPES = ("float32", "bfloat16")


# ----------------------------------------------------------------------------------------------------
# Reading tensors


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


class _Tensors:
    """The tensors of a folder by name, read one at a time (a name may live in any shard)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        index = folder / "model.safetensors.index.json"
        single = folder / "model.safetensors"
        if index.is_file():
            weight_map = _read_json(index).get("weight_map")
            if not isinstance(weight_map, dict):
                raise CheckpointFormatError(
                    f"{index} has no 'weight_map' object; expected the index transformers writes "
                    '({"weight_map": {"tensor name": "shard file", ...}}). Re-save the model with '
                    "save_pretrained."
                )
            files = {name: folder / str(f) for name, f in weight_map.items()}
        elif single.is_file():
            files = {}
        else:
            raise CheckpointFormatError(
                f"{folder} has neither model.safetensors nor model.safetensors.index.json. Expected "
                "a Hugging Face folder saved with save_pretrained(..., safe_serialization=True); "
                "convert .bin weights to safetensors first."
            )
        self._headers: dict[Path, tuple[int, dict[str, Any]]] = {}
        self.shapes: dict[str, tuple[int, ...]] = {}
        self.where: dict[str, Path] = {}
        for path in sorted(set(files.values())) if files else [single]:
            handle = self._open(path)
            for name in handle.keys():  # noqa: SIM118 (a safe_open handle is not iterable)
                self.shapes[name] = tuple(handle.get_slice(name).get_shape())
                self.where[name] = path
        missing = sorted(n for n, p in files.items() if self.where.get(n) != p)
        if missing:
            raise CheckpointFormatError(
                f"{index}: tensor {missing[0]!r} is listed in shard {files[missing[0]].name} but "
                "that file does not hold it. The index and the shards do not match; re-download or "
                "re-save the model."
            )

    def _open(self, path: Path) -> Any:
        from safetensors import safe_open

        if not path.is_file():
            raise CheckpointFormatError(
                f"{path} is missing (named by model.safetensors.index.json). Copy every shard of "
                "the checkpoint into the folder."
            )
        try:
            handle = safe_open(str(path), framework="numpy")
        except Exception as err:  # safetensors raises its own SafetensorError for a bad header
            raise CheckpointFormatError(
                f"{path} is not a readable safetensors file ({err}); it is probably truncated or "
                "damaged. Expected a complete file written by safetensors; copy it again."
            ) from err
        return handle

    def get(self, name: str, rows: int = 0) -> np.ndarray:
        """One tensor, read with ``pread`` into a fresh array.

        Not through safetensors' memory map: the mapped pages of every tensor read would count
        in this process's memory until the file is closed, a second copy of the model. ``rows``:
        read into the first rows of a zero array with that many (a padded vocabulary), in place.
        """
        path = self.where[name]
        try:
            start, dtype, shape, (begin, end) = self._layout(path, name)
            padded = (
                host_array((max(rows, shape[0]), *shape[1:]), dtype) if rows and shape else None
            )
            if padded is not None:
                padded[shape[0] :] = 0
            out = padded[: shape[0]] if padded is not None else host_array(shape, dtype)
            with open(path, "rb") as f:
                buffer: Any = out.reshape(-1).view(np.uint8)
                got = os.preadv(f.fileno(), [memoryview(buffer)], start + begin)
            if got != end - begin or out.nbytes != end - begin:
                raise ValueError(f"read {got} of {end - begin} bytes")
            return padded if padded is not None else out
        except Exception as err:
            raise CheckpointFormatError(
                f"{path}: tensor {name!r} could not be read ({err}); the file is probably "
                "truncated or damaged. Copy it again."
            ) from err

    def _layout(self, path: Path, name: str) -> tuple[int, Any, tuple[int, ...], list[int]]:
        if path not in self._headers:
            with open(path, "rb") as f:
                (size,) = struct.unpack("<Q", f.read(8))
                self._headers[path] = (8 + size, json.loads(f.read(size)))
        start, header = self._headers[path]
        entry = header[name]
        return start, _numpy_dtype(entry["dtype"]), tuple(entry["shape"]), entry["data_offsets"]


_DTYPES = {"F64": "float64", "F32": "float32", "F16": "float16", "I64": "int64", "I32": "int32",
           "I16": "int16", "I8": "int8", "U8": "uint8", "BOOL": "bool"}  # fmt: skip


def _numpy_dtype(name: str) -> Any:
    if name == "BF16":
        return _bf16()
    if name not in _DTYPES:
        raise ValueError(f"unsupported tensor dtype {name}")
    return np.dtype(_DTYPES[name])


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
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


# ----------------------------------------------------------------------------------------------------
# Import


def _check_dtype(dtype: str, flag: str) -> str:
    if dtype not in DTYPES:
        raise UsageError(f"{flag} = {dtype!r} must be one of {', '.join(DTYPES)}.")
    return dtype


def read_hf_config(path: str | Path, *, dtype: str = "float32") -> tuple[str, Config]:
    """``(architecture, Config)`` of a Hugging Face folder, from its ``config.json`` alone."""
    folder = Path(path)
    _check_dtype(dtype, "dtype")
    if not folder.is_dir():
        raise CheckpointFormatError(
            f"{folder} is not a folder. Expected a Hugging Face model folder (config.json and "
            "model.safetensors, what save_pretrained writes)."
        )
    source = folder / "config.json"
    if not source.exists() and (folder / "config.toml").is_file():
        raise CheckpointFormatError(
            f"{folder} is a run folder made by gpt train (config.toml), not a Hugging Face model "
            "folder (config.json). Use it as it is: gpt sample/eval --run, gpt train --init-from "
            f"{folder}; or write it as a Hugging Face folder with gpt export."
        )
    arch, model = model_config(_read_json(source), source, dtype)
    try:
        return arch, Config(model=model)
    except UsageError as err:
        raise CheckpointFormatError(f"{source} describes an invalid model: {err}") from err


def import_hf(path: str | Path, *, dtype: str = "float32") -> tuple[Config, bx.Params]:
    """Load a Hugging Face ``GPT2LMHeadModel`` or ``LlamaForCausalLM`` folder.

    Returns ``(config, params)``: a :class:`Config` whose model section reproduces the checkpoint
    (other sections at their defaults) and the params on the first device, in ``dtype``
    (float32 or bfloat16). Tensors are read and placed one at a time.

    Raises:
        CheckpointFormatError: an unknown architecture, an unsupported option, a missing, extra
            or misshapen tensor, or an unreadable (e.g. truncated) safetensors file.
    """
    folder = Path(path)
    arch, cfg = read_hf_config(folder, dtype=dtype)
    m = cfg.model
    tensors = _Tensors(folder)
    strip = _check_names(arch, m, tensors)
    abstract = abstract_params(cfg, single_device_mesh())
    out: dict[tuple[str, ...], Any] = {}
    for entry, array in _stream(arch, m, tensors, strip):
        target = abstract[(*PREFIX, *entry.path)]
        if array.shape != target.value.shape:
            hf_name = strip + entry.hf[0].format(i=0)
            raise CheckpointFormatError(
                f"{tensors.where[hf_name]}: tensor {hf_name!r} has shape {tensors.shapes[hf_name]}, "
                f"which does not fit config.json ({arch}: our {'/'.join(entry.path)} needs "
                f"{target.value.shape}). The weights and config.json come from different models."
            )
        value = jax.device_put(array.astype(np.dtype(dtype), copy=False), target.value.sharding)
        out[(*PREFIX, *entry.path)] = target.replace(value=value)
        del array, value  # one param's host copy at a time
    return cfg, bx.Params({k: out[k] for k in abstract}).locked()


def _check_names(arch: str, m: ModelConfig, tensors: _Tensors) -> str:
    names = set(tensors.shapes)
    strip = (
        "transformer." if arch == "GPT2LMHeadModel" and "transformer.wte.weight" in names else ""
    )
    expected = expected_names(arch, m, strip)
    ignored = {n for n in names if n.endswith((".attn.bias", ".attn.masked_bias"))}
    ignored |= {n for n in names if n.endswith("rotary_emb.inv_freq")}
    if arch == "GPT2LMHeadModel" or m.tie_embeddings:
        ignored |= {"lm_head.weight"}  # a tied head saved anyway
    missing = [n for n in expected if n not in names]
    extra = sorted(names - set(expected) - ignored)
    where = tensors.folder
    if missing:
        raise CheckpointFormatError(
            f"{where}: tensor {missing[0]!r} is missing ({len(missing)} missing in all) from the "
            f"safetensors files; config.json ({arch}, {m.n_layers} layers) needs it. The weights "
            "are incomplete or belong to another model."
        )
    if extra:
        raise CheckpointFormatError(
            f"{where}: tensor {extra[0]!r} ({len(extra)} unexpected in all) is not part of a "
            f"{arch} with this config.json; expected only the {len(expected)} tensors of that "
            "layout. The weights belong to another model or architecture."
        )
    return strip


def _stream(
    arch: str, m: ModelConfig, tensors: _Tensors, strip: str
) -> Iterator[tuple[Entry, np.ndarray]]:
    for entry in entries(arch, m):
        if not entry.stacked:
            rows = m.vocab_size if entry.path[0] in ("embed", "unembed") else 0
            yield entry, entry.load(*(tensors.get(strip + n, rows) for n in entry.hf))
            continue
        stacked = None
        for i in range(m.n_layers):
            layer = entry.load(*(tensors.get(strip + n.format(i=i)) for n in entry.hf))
            if stacked is None:
                stacked = host_array((m.n_layers, *layer.shape), layer.dtype)
            stacked[i] = layer
            del layer
        assert stacked is not None  # n_layers >= 1 (checked by Config)
        yield entry, stacked
        del stacked


# ----------------------------------------------------------------------------------------------------
# Export


def _to_numpy(array: Any, dtype: str) -> np.ndarray:
    out = np.asarray(jax.device_get(array))
    return np.ascontiguousarray(out.astype(np.dtype(dtype) if dtype == "float32" else _bf16()))


def _bf16() -> Any:
    import ml_dtypes

    return ml_dtypes.bfloat16


def export_hf(
    config: Any,
    params: bx.Params,
    path: str | Path,
    *,
    dtype: str = "float32",
    tokenizer: str | Path | None = None,
) -> Path:
    """Write ``params`` as a Hugging Face folder (``config.json`` + ``model.safetensors``).

    ``config`` is a :class:`Config` or its ``ModelConfig``; the model must be GPT-2-shaped
    (layernorm, learned positions, gelu, tied head; missing biases are written as zeros) or
    Llama-shaped (rmsnorm, rope, swiglu, no biases). ``tokenizer``, a tokenizer.json file (a run
    folder's), is copied in as ``tokenizer.json``. ``path`` must not exist yet: the folder is
    written beside it and renamed into place, so a failure leaves nothing behind.

    Raises:
        CheckpointFormatError: the model has no GPT-2 or Llama equivalent.
        UsageError: ``path`` exists already.
    """
    from safetensors.numpy import save_file

    m = getattr(config, "model", config)
    _check_dtype(dtype, "dtype")
    arch = export_arch(m)
    target = Path(path)
    if target.exists():
        raise UsageError(
            f"{target} exists already; export writes a new folder. Pass a path that does not "
            "exist, or delete the old folder first."
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    tensors: dict[str, np.ndarray] = {}
    prefix = "transformer." if arch == "GPT2LMHeadModel" else ""
    for entry in entries(arch, m):
        key = (*PREFIX, *entry.path)
        param = params.get(key)
        if param is None and entry.path[-1].endswith("bias"):  # GPT-2 without biases: zeros
            shape = abstract_params(m, single_device_mesh())[key].value.shape
            value = np.zeros(shape, np.float32)
        elif param is None:
            raise CheckpointFormatError(
                f"params have no {'/'.join(key)}, which the model's config needs; pass the params "
                "of this config (init_params, load_run or import_hf)."
            )
        else:
            value = np.asarray(jax.device_get(param.value), np.float32)
        for i in range(m.n_layers if entry.stacked else 1):
            layer = value[i] if entry.stacked else value
            if entry.save is None:  # GPT-2 c_attn: query, key and value side by side
                continue
            for name, array in zip(entry.hf, entry.save(layer)):
                tensors[prefix + name.format(i=i)] = _to_numpy(array, dtype)
    if arch == "GPT2LMHeadModel":
        _fuse_qkv(tensors, params, m, dtype, prefix)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        save_file(tensors, str(tmp / "model.safetensors"), metadata={"format": "pt"})
        text = json.dumps(hf_config(arch, m, dtype), indent=2) + "\n"
        (tmp / "config.json").write_text(text, encoding="utf-8")
        if tokenizer is not None:
            shutil.copyfile(tokenizer, tmp / TOKENIZER_FILE)
        os.replace(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return target


def _fuse_qkv(
    tensors: dict[str, np.ndarray], params: bx.Params, m: ModelConfig, dtype: str, prefix: str
) -> None:
    D = m.d_model
    attn = (*PREFIX, *BLOCK, "attn")
    w = [
        np.asarray(jax.device_get(params[(*attn, n)].value), np.float32)
        for n in ("query", "key", "value")
    ]
    b = [
        np.asarray(jax.device_get(params[(*attn, f"{n}_bias")].value), np.float32)
        if (*attn, f"{n}_bias") in params
        else np.zeros((m.n_layers, m.n_heads, m.head_dim), np.float32)
        for n in ("query", "key", "value")
    ]
    for i in range(m.n_layers):
        weight = np.concatenate([x[i].reshape(D, D) for x in w], axis=1)
        bias = np.concatenate([x[i].reshape(D) for x in b])
        tensors[f"{prefix}h.{i}.attn.c_attn.weight"] = _to_numpy(weight, dtype)
        tensors[f"{prefix}h.{i}.attn.c_attn.bias"] = _to_numpy(bias, dtype)
