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
rows and ``model.vocab_real`` masks the padded ids; export drops them again.

Everything is checked (architecture, config, every tensor's name and shape) before anything is
written; export writes into a temporary folder beside the target and renames it into place.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import struct
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import jax
import numpy as np

import blox as bx

from .._config.schema import Config, ModelConfig
from .._distributed.mesh import single_device_mesh
from .._errors import UsageError
from .._model.gpt import abstract_params

ARCHITECTURES = ("GPT2LMHeadModel", "LlamaForCausalLM")
DTYPES = ("float32", "bfloat16")
_PREFIX = ("gpt", "model")
_BLOCK = ("blocks", "block")


class CheckpointFormatError(UsageError):
    """A Hugging Face folder that cannot be imported, or a model that cannot be exported as one."""


# ----------------------------------------------------------------------------------------------------
# Reading tensors


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
            padded = np.zeros((max(rows, shape[0]), *shape[1:]), dtype) if rows and shape else None
            out = padded[: shape[0]] if padded is not None else np.empty(shape, dtype)
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
# The two layouts: our param (path under gpt/model) <- HF tensors


@dataclasses.dataclass(frozen=True)
class _Entry:
    """One of our params: where it lives and how to build it from one HF layer's tensors.

    ``hf`` lists the HF tensor names it reads (``{i}`` = layer); ``load(arrays) -> array`` turns
    those tensors into our layout, ``save(array) -> arrays`` the reverse.
    """

    path: tuple[str, ...]
    hf: tuple[str, ...]
    load: Callable[..., np.ndarray]
    save: Callable[[np.ndarray], tuple[np.ndarray, ...]]
    stacked: bool


def _same(a: np.ndarray) -> np.ndarray:
    return a


def _gpt2_entries(m: ModelConfig) -> list[_Entry]:
    D, H, hd, V = m.d_model, m.n_heads, m.head_dim, m.vocab_size

    def qkv(part: int, bias: bool) -> Callable[..., np.ndarray]:
        def load(w: np.ndarray) -> np.ndarray:
            piece = w[..., part * D : (part + 1) * D]
            return piece.reshape(H, hd) if bias else piece.reshape(D, H, hd)

        return load

    layer = "h.{i}."
    e = [
        _Entry(("embed", "embedding"), ("wte.weight",), lambda w: _pad_rows(w, V),
               lambda a: (a[: m.real_vocab],), False),
        _Entry(("pos_embed", "embedding"), ("wpe.weight",), _same, lambda a: (a,), False),
        _Entry(("final_norm", "scale"), ("ln_f.weight",), _same, lambda a: (a,), False),
        _Entry(("final_norm", "bias"), ("ln_f.bias",), _same, lambda a: (a,), False),
    ]  # fmt: skip
    for ours, theirs in (("attn_norm", "ln_1"), ("mlp_norm", "ln_2")):
        for p, t in (("scale", "weight"), ("bias", "bias")):
            e.append(_Entry((*_BLOCK, ours, p), (f"{layer}{theirs}.{t}",), _same,
                            lambda a: (a,), True))  # fmt: skip
    for part, name in enumerate(("query", "key", "value")):
        e.append(_Entry((*_BLOCK, "attn", name), (f"{layer}attn.c_attn.weight",),
                        qkv(part, False), None, True))  # type: ignore[arg-type]  # fmt: skip
        e.append(_Entry((*_BLOCK, "attn", f"{name}_bias"), (f"{layer}attn.c_attn.bias",),
                        qkv(part, True), None, True))  # type: ignore[arg-type]  # fmt: skip
    e += [
        _Entry((*_BLOCK, "attn", "out"), (f"{layer}attn.c_proj.weight",),
               lambda w: w.reshape(H, hd, D), lambda a: (a.reshape(D, D),), True),
        _Entry((*_BLOCK, "attn", "out_bias"), (f"{layer}attn.c_proj.bias",), _same,
               lambda a: (a,), True),
        _Entry((*_BLOCK, "mlp", "linear_0", "kernel"), (f"{layer}mlp.c_fc.weight",), _same,
               lambda a: (a,), True),
        _Entry((*_BLOCK, "mlp", "linear_0", "bias"), (f"{layer}mlp.c_fc.bias",), _same,
               lambda a: (a,), True),
        _Entry((*_BLOCK, "mlp", "linear_1", "kernel"), (f"{layer}mlp.c_proj.weight",), _same,
               lambda a: (a,), True),
        _Entry((*_BLOCK, "mlp", "linear_1", "bias"), (f"{layer}mlp.c_proj.bias",), _same,
               lambda a: (a,), True),
    ]  # fmt: skip
    return e


def _llama_entries(m: ModelConfig) -> list[_Entry]:
    D, H, K, hd, V = m.d_model, m.n_heads, m.kv_heads, m.head_dim, m.vocab_size
    layer = "model.layers.{i}."

    def proj(heads: int) -> tuple[Callable[..., np.ndarray], Callable[..., tuple[np.ndarray]]]:
        return (lambda w: w.T.reshape(D, heads, hd), lambda a: (a.reshape(D, heads * hd).T,))

    e = [
        _Entry(("embed", "embedding"), ("model.embed_tokens.weight",), lambda w: _pad_rows(w, V),
               lambda a: (a[: m.real_vocab],), False),
        _Entry(("final_norm", "scale"), ("model.norm.weight",), _same, lambda a: (a,), False),
    ]  # fmt: skip
    if not m.tie_embeddings:
        e.append(_Entry(("unembed", "kernel"), ("lm_head.weight",), lambda w: _pad_rows(w, V).T,
                        lambda a: (a.T[: m.real_vocab],), False))  # fmt: skip
    for ours, theirs in (
        ("attn_norm", "input_layernorm"),
        ("mlp_norm", "post_attention_layernorm"),
    ):
        e.append(_Entry((*_BLOCK, ours, "scale"), (f"{layer}{theirs}.weight",), _same,
                        lambda a: (a,), True))  # fmt: skip
    for ours, theirs, heads in (
        ("query", "q_proj", H),
        ("key", "k_proj", K),
        ("value", "v_proj", K),
    ):
        load, save = proj(heads)
        e.append(_Entry((*_BLOCK, "attn", ours), (f"{layer}self_attn.{theirs}.weight",), load,
                        save, True))  # fmt: skip
    e += [
        _Entry((*_BLOCK, "attn", "out"), (f"{layer}self_attn.o_proj.weight",),
               lambda w: w.T.reshape(H, hd, D), lambda a: (a.reshape(H * hd, D).T,), True),
        _Entry((*_BLOCK, "mlp", "gate_0", "kernel"), (f"{layer}mlp.gate_proj.weight",),
               lambda w: w.T, lambda a: (a.T,), True),
        _Entry((*_BLOCK, "mlp", "linear_0", "kernel"), (f"{layer}mlp.up_proj.weight",),
               lambda w: w.T, lambda a: (a.T,), True),
        _Entry((*_BLOCK, "mlp", "linear_1", "kernel"), (f"{layer}mlp.down_proj.weight",),
               lambda w: w.T, lambda a: (a.T,), True),
    ]  # fmt: skip
    return e


def _pad_rows(w: np.ndarray, rows: int) -> np.ndarray:
    if w.shape[0] == rows:
        return w
    return np.concatenate([w, np.zeros((rows - w.shape[0], *w.shape[1:]), w.dtype)])


def _padded(vocab: int) -> int:
    return -(-vocab // 64) * 64


# ----------------------------------------------------------------------------------------------------
# config.json <-> ModelConfig


def _get(raw: dict[str, Any], key: str, default: Any, source: Path) -> Any:
    value = raw.get(key, default)
    if value is None and default is None:
        raise CheckpointFormatError(
            f"{source} has no {key!r}; a {raw.get('architectures')} config.json needs it. Re-save "
            "the model with save_pretrained."
        )
    return value


def _refuse(source: Path, key: str, value: Any, expected: str) -> None:
    raise CheckpointFormatError(
        f"{source}: {key} = {value!r} is not supported (expected {expected}); gpt_models models "
        "cannot represent it exactly, so the import would not reproduce the model."
    )


def _model_config(raw: dict[str, Any], source: Path, dtype: str) -> tuple[str, ModelConfig]:
    archs = raw.get("architectures") or [raw.get("model_type", "?")]
    arch = archs[0] if isinstance(archs, list) and archs else archs
    if arch not in ARCHITECTURES:
        raise CheckpointFormatError(
            f"{source}: architecture {arch!r} cannot be imported; supported: "
            f"{', '.join(ARCHITECTURES)} (config.json 'architectures')."
        )
    if arch == "GPT2LMHeadModel":
        act = raw.get("activation_function", "gelu_new")
        if act not in ("gelu_new", "gelu_pytorch_tanh"):
            _refuse(source, "activation_function", act, "'gelu_new', the tanh GELU")
        for key in ("scale_attn_by_inverse_layer_idx", "reorder_and_upcast_attn"):
            if raw.get(key, False):
                _refuse(source, key, raw[key], "false")
        if not raw.get("scale_attn_weights", True):
            _refuse(source, "scale_attn_weights", False, "true")
        vocab, d = (
            int(_get(raw, "vocab_size", None, source)),
            int(_get(raw, "n_embd", None, source)),
        )
        model = ModelConfig(
            vocab_size=_padded(vocab), vocab_real=vocab if _padded(vocab) != vocab else 0,
            seq_len=int(_get(raw, "n_positions", None, source)), d_model=d,
            n_layers=int(_get(raw, "n_layer", None, source)),
            n_heads=int(_get(raw, "n_head", None, source)), d_ff=int(raw.get("n_inner") or 4 * d),
            mlp="gelu", norm="layernorm", pos="learned", tie_embeddings=True, bias=True,
            norm_eps=float(raw.get("layer_norm_epsilon", 1e-5)), param_dtype=dtype,
        )  # fmt: skip
        if not raw.get("tie_word_embeddings", True):
            _refuse(source, "tie_word_embeddings", False, "true for GPT-2")
        return arch, model
    act = raw.get("hidden_act", "silu")
    if act != "silu":
        _refuse(source, "hidden_act", act, "'silu'")
    for key in ("attention_bias", "mlp_bias"):
        if raw.get(key, False):
            _refuse(source, key, raw[key], "false")
    if raw.get("rope_scaling"):
        _refuse(source, "rope_scaling", raw["rope_scaling"], "null (plain RoPE)")
    rope = raw.get("rope_parameters") or {}  # transformers >= 5 keeps rope_theta in here
    if rope.get("rope_type", "default") != "default":
        _refuse(source, "rope_parameters.rope_type", rope["rope_type"], "'default' (plain RoPE)")
    theta = float(rope.get("rope_theta", raw.get("rope_theta", 10000.0)))
    vocab, d = (
        int(_get(raw, "vocab_size", None, source)),
        int(_get(raw, "hidden_size", None, source)),
    )
    heads = int(_get(raw, "num_attention_heads", None, source))
    head_dim = raw.get("head_dim") or d // heads
    if head_dim * heads != d:
        _refuse(source, "head_dim", head_dim, f"hidden_size / num_attention_heads = {d // heads}")
    model = ModelConfig(
        vocab_size=_padded(vocab), vocab_real=vocab if _padded(vocab) != vocab else 0,
        seq_len=int(_get(raw, "max_position_embeddings", None, source)), d_model=d,
        n_layers=int(_get(raw, "num_hidden_layers", None, source)), n_heads=heads,
        n_kv_heads=int(raw.get("num_key_value_heads") or heads),
        d_ff=int(_get(raw, "intermediate_size", None, source)), mlp="swiglu", norm="rmsnorm",
        pos="rope", rope_theta=theta,
        tie_embeddings=bool(raw.get("tie_word_embeddings", False)), bias=False,
        norm_eps=float(raw.get("rms_norm_eps", 1e-6)), param_dtype=dtype,
    )  # fmt: skip
    return arch, model


def _entries(arch: str, m: ModelConfig) -> list[_Entry]:
    return _gpt2_entries(m) if arch == "GPT2LMHeadModel" else _llama_entries(m)


def _expected_names(arch: str, m: ModelConfig, strip: str) -> dict[str, None]:
    names: dict[str, None] = {}
    for entry in _entries(arch, m):
        for i in range(m.n_layers if entry.stacked else 1):
            for name in entry.hf:
                names[strip + name.format(i=i)] = None
    return names


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
    arch, model = _model_config(_read_json(source), source, dtype)
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
        target = abstract[(*_PREFIX, *entry.path)]
        if array.shape != target.value.shape:
            hf_name = strip + entry.hf[0].format(i=0)
            raise CheckpointFormatError(
                f"{tensors.where[hf_name]}: tensor {hf_name!r} has shape {tensors.shapes[hf_name]}, "
                f"which does not fit config.json ({arch}: our {'/'.join(entry.path)} needs "
                f"{target.value.shape}). The weights and config.json come from different models."
            )
        value = jax.device_put(array.astype(np.dtype(dtype), copy=False), target.value.sharding)
        out[(*_PREFIX, *entry.path)] = target.replace(value=value)
        del array, value  # one param's host copy at a time
    return cfg, bx.Params({k: out[k] for k in abstract}).locked()


def _check_names(arch: str, m: ModelConfig, tensors: _Tensors) -> str:
    names = set(tensors.shapes)
    strip = (
        "transformer." if arch == "GPT2LMHeadModel" and "transformer.wte.weight" in names else ""
    )
    expected = _expected_names(arch, m, strip)
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
) -> Iterator[tuple[_Entry, np.ndarray]]:
    for entry in _entries(arch, m):
        if not entry.stacked:
            rows = m.vocab_size if entry.path[0] in ("embed", "unembed") else 0
            yield entry, entry.load(*(tensors.get(strip + n, rows) for n in entry.hf))
            continue
        stacked = None
        for i in range(m.n_layers):
            layer = entry.load(*(tensors.get(strip + n.format(i=i)) for n in entry.hf))
            if stacked is None:
                stacked = np.empty((m.n_layers, *layer.shape), layer.dtype)
            stacked[i] = layer
            del layer
        assert stacked is not None  # n_layers >= 1 (checked by Config)
        yield entry, stacked
        del stacked


# ----------------------------------------------------------------------------------------------------
# Export


def _export_arch(m: ModelConfig) -> str:
    gpt2 = {"norm": "layernorm", "pos": "learned", "mlp": "gelu", "tie_embeddings": True}
    llama = {"norm": "rmsnorm", "pos": "rope", "mlp": "swiglu", "bias": False}
    common = {"qk_norm": False, "logit_softcap": 0.0}
    for arch, want in (("GPT2LMHeadModel", gpt2), ("LlamaForCausalLM", llama)):
        if all(getattr(m, k) == v for k, v in want.items()):
            wrong = {k: getattr(m, k) for k, v in common.items() if getattr(m, k) != v}
            if arch == "GPT2LMHeadModel" and m.n_kv_heads not in (0, m.n_heads):
                wrong["n_kv_heads"] = m.n_kv_heads
            if wrong:
                key, value = next(iter(wrong.items()))
                raise CheckpointFormatError(
                    f"model.{key} = {value!r} has no {arch} equivalent; only models without it "
                    f"can be exported (expected {common.get(key, 0)!r})."
                )
            return arch
    raise CheckpointFormatError(
        f"This model (model.norm = {m.norm!r}, pos = {m.pos!r}, mlp = {m.mlp!r}, tie_embeddings = "
        f"{m.tie_embeddings}, bias = {m.bias}) is neither GPT-2 (layernorm, learned, gelu, tied) "
        "nor Llama (rmsnorm, rope, swiglu, no bias); only those two can be exported."
    )


def _hf_config(arch: str, m: ModelConfig, dtype: str) -> dict[str, Any]:
    if arch == "GPT2LMHeadModel":
        return {
            "architectures": [arch], "model_type": "gpt2", "vocab_size": m.real_vocab,
            "n_positions": m.seq_len, "n_ctx": m.seq_len, "n_embd": m.d_model,
            "n_layer": m.n_layers, "n_head": m.n_heads, "n_inner": m.ff_dim,
            "activation_function": "gelu_new", "layer_norm_epsilon": m.norm_eps,
            "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0,
            "tie_word_embeddings": True, "torch_dtype": dtype,
            # GPT-2's <|endoftext|> when the vocabulary has it (transformers' defaults name it)
            "bos_token_id": 50256 if m.real_vocab > 50256 else None,
            "eos_token_id": 50256 if m.real_vocab > 50256 else None,
        }  # fmt: skip
    return {
        "architectures": [arch], "model_type": "llama", "vocab_size": m.real_vocab,
        "hidden_size": m.d_model, "intermediate_size": m.ff_dim,
        "num_hidden_layers": m.n_layers, "num_attention_heads": m.n_heads,
        "num_key_value_heads": m.kv_heads, "head_dim": m.head_dim,
        "max_position_embeddings": m.seq_len, "rms_norm_eps": m.norm_eps,
        "rope_theta": m.rope_theta, "rope_scaling": None, "hidden_act": "silu",
        "rope_parameters": {"rope_theta": m.rope_theta, "rope_type": "default"},
        "attention_bias": False, "mlp_bias": False, "tie_word_embeddings": m.tie_embeddings,
        "torch_dtype": dtype,
    }  # fmt: skip


def _to_numpy(array: Any, dtype: str) -> np.ndarray:
    out = np.asarray(jax.device_get(array))
    return np.ascontiguousarray(out.astype(np.dtype(dtype) if dtype == "float32" else _bf16()))


def _bf16() -> Any:
    import ml_dtypes

    return ml_dtypes.bfloat16


def export_hf(config: Any, params: bx.Params, path: str | Path, *, dtype: str = "float32") -> Path:
    """Write ``params`` as a Hugging Face folder (``config.json`` + ``model.safetensors``).

    ``config`` is a :class:`Config` or its ``ModelConfig``; the model must be GPT-2-shaped
    (layernorm, learned positions, gelu, tied head; missing biases are written as zeros) or
    Llama-shaped (rmsnorm, rope, swiglu, no biases). ``path`` must not exist yet: the folder is
    written beside it and renamed into place, so a failure leaves nothing behind.

    Raises:
        CheckpointFormatError: the model has no GPT-2 or Llama equivalent.
        UsageError: ``path`` exists already.
    """
    from safetensors.numpy import save_file

    m = getattr(config, "model", config)
    _check_dtype(dtype, "dtype")
    arch = _export_arch(m)
    target = Path(path)
    if target.exists():
        raise UsageError(
            f"{target} exists already; export writes a new folder. Pass a path that does not "
            "exist, or delete the old folder first."
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    tensors: dict[str, np.ndarray] = {}
    prefix = "transformer." if arch == "GPT2LMHeadModel" else ""
    for entry in _entries(arch, m):
        key = (*_PREFIX, *entry.path)
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
        text = json.dumps(_hf_config(arch, m, dtype), indent=2) + "\n"
        (tmp / "config.json").write_text(text, encoding="utf-8")
        os.replace(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return target


def _fuse_qkv(
    tensors: dict[str, np.ndarray], params: bx.Params, m: ModelConfig, dtype: str, prefix: str
) -> None:
    D = m.d_model
    attn = (*_PREFIX, *_BLOCK, "attn")
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


# ----------------------------------------------------------------------------------------------------
# Run folders


def import_run(source: str | Path, run_dir: str | Path, *, dtype: str = "float32") -> Path:
    """Make a run folder at step 0 from a Hugging Face folder: ``config.toml`` and the params.

    ``gpt sample``, ``gpt eval`` and :func:`load_run` read it like a trained run. Everything is read
    and checked before ``run_dir`` is created; a failure while writing removes it again.

    Raises:
        CheckpointFormatError: see :func:`import_hf`.
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
    cfg, params = import_hf(source, dtype=dtype)
    run.mkdir(parents=True)
    try:
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
