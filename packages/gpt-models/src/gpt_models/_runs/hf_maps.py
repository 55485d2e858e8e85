"""The two Hugging Face layouts, tensor by tensor and key by key: GPT-2 and Llama.

Each of our params (a path under ``gpt/model``) is an :class:`Entry` naming the HF tensors it is
built from (``{i}`` = layer) and the functions that convert one layer between the two layouts;
:func:`model_config` reads ``config.json`` into a :class:`ModelConfig` (refusing what our model
cannot reproduce exactly) and :func:`hf_config` writes it back. Reading and writing the folders
themselves is ``hf.py``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from .._config.schema import ModelConfig
from .._errors import CheckpointFormatError

ARCHITECTURES = ("GPT2LMHeadModel", "LlamaForCausalLM")
PREFIX = ("gpt", "model")
BLOCK = ("blocks", "block")


@dataclasses.dataclass(frozen=True)
class Entry:
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


def _gpt2_entries(m: ModelConfig) -> list[Entry]:
    D, H, hd, V = m.d_model, m.n_heads, m.head_dim, m.vocab_size

    def qkv(part: int, bias: bool) -> Callable[..., np.ndarray]:
        def load(w: np.ndarray) -> np.ndarray:
            piece = w[..., part * D : (part + 1) * D]
            return piece.reshape(H, hd) if bias else piece.reshape(D, H, hd)

        return load

    layer = "h.{i}."
    e = [
        Entry(("embed", "embedding"), ("wte.weight",), lambda w: _pad_rows(w, V),
               lambda a: (a[: m.real_vocab],), False),
        Entry(("pos_embed", "embedding"), ("wpe.weight",), _same, lambda a: (a,), False),
        Entry(("final_norm", "scale"), ("ln_f.weight",), _same, lambda a: (a,), False),
        Entry(("final_norm", "bias"), ("ln_f.bias",), _same, lambda a: (a,), False),
    ]  # fmt: skip
    for ours, theirs in (("attn_norm", "ln_1"), ("mlp_norm", "ln_2")):
        for p, t in (("scale", "weight"), ("bias", "bias")):
            e.append(Entry((*BLOCK, ours, p), (f"{layer}{theirs}.{t}",), _same,
                            lambda a: (a,), True))  # fmt: skip
    for part, name in enumerate(("query", "key", "value")):
        e.append(Entry((*BLOCK, "attn", name), (f"{layer}attn.c_attn.weight",),
                        qkv(part, False), None, True))  # type: ignore[arg-type]  # fmt: skip
        e.append(Entry((*BLOCK, "attn", f"{name}_bias"), (f"{layer}attn.c_attn.bias",),
                        qkv(part, True), None, True))  # type: ignore[arg-type]  # fmt: skip
    e += [
        Entry((*BLOCK, "attn", "out"), (f"{layer}attn.c_proj.weight",),
               lambda w: w.reshape(H, hd, D), lambda a: (a.reshape(D, D),), True),
        Entry((*BLOCK, "attn", "out_bias"), (f"{layer}attn.c_proj.bias",), _same,
               lambda a: (a,), True),
        Entry((*BLOCK, "mlp", "linear_0", "kernel"), (f"{layer}mlp.c_fc.weight",), _same,
               lambda a: (a,), True),
        Entry((*BLOCK, "mlp", "linear_0", "bias"), (f"{layer}mlp.c_fc.bias",), _same,
               lambda a: (a,), True),
        Entry((*BLOCK, "mlp", "linear_1", "kernel"), (f"{layer}mlp.c_proj.weight",), _same,
               lambda a: (a,), True),
        Entry((*BLOCK, "mlp", "linear_1", "bias"), (f"{layer}mlp.c_proj.bias",), _same,
               lambda a: (a,), True),
    ]  # fmt: skip
    return e


def _llama_entries(m: ModelConfig) -> list[Entry]:
    D, H, K, hd, V = m.d_model, m.n_heads, m.kv_heads, m.head_dim, m.vocab_size
    layer = "model.layers.{i}."

    def proj(heads: int) -> tuple[Callable[..., np.ndarray], Callable[..., tuple[np.ndarray]]]:
        return (lambda w: w.T.reshape(D, heads, hd), lambda a: (a.reshape(D, heads * hd).T,))

    e = [
        Entry(("embed", "embedding"), ("model.embed_tokens.weight",), lambda w: _pad_rows(w, V),
               lambda a: (a[: m.real_vocab],), False),
        Entry(("final_norm", "scale"), ("model.norm.weight",), _same, lambda a: (a,), False),
    ]  # fmt: skip
    if not m.tie_embeddings:
        e.append(Entry(("unembed", "kernel"), ("lm_head.weight",), lambda w: _pad_rows(w, V).T,
                        lambda a: (a.T[: m.real_vocab],), False))  # fmt: skip
    for ours, theirs in (
        ("attn_norm", "input_layernorm"),
        ("mlp_norm", "post_attention_layernorm"),
    ):
        e.append(Entry((*BLOCK, ours, "scale"), (f"{layer}{theirs}.weight",), _same,
                        lambda a: (a,), True))  # fmt: skip
    for ours, theirs, heads in (
        ("query", "q_proj", H),
        ("key", "k_proj", K),
        ("value", "v_proj", K),
    ):
        load, save = proj(heads)
        e.append(Entry((*BLOCK, "attn", ours), (f"{layer}self_attn.{theirs}.weight",), load,
                        save, True))  # fmt: skip
    e += [
        Entry((*BLOCK, "attn", "out"), (f"{layer}self_attn.o_proj.weight",),
               lambda w: w.T.reshape(H, hd, D), lambda a: (a.reshape(H * hd, D).T,), True),
        Entry((*BLOCK, "mlp", "gate_0", "kernel"), (f"{layer}mlp.gate_proj.weight",),
               lambda w: w.T, lambda a: (a.T,), True),
        Entry((*BLOCK, "mlp", "linear_0", "kernel"), (f"{layer}mlp.up_proj.weight",),
               lambda w: w.T, lambda a: (a.T,), True),
        Entry((*BLOCK, "mlp", "linear_1", "kernel"), (f"{layer}mlp.down_proj.weight",),
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


def model_config(raw: dict[str, Any], source: Path, dtype: str) -> tuple[str, ModelConfig]:
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


def entries(arch: str, m: ModelConfig) -> list[Entry]:
    return _gpt2_entries(m) if arch == "GPT2LMHeadModel" else _llama_entries(m)


def expected_names(arch: str, m: ModelConfig, strip: str) -> dict[str, None]:
    names: dict[str, None] = {}
    for entry in entries(arch, m):
        for i in range(m.n_layers if entry.stacked else 1):
            for name in entry.hf:
                names[strip + name.format(i=i)] = None
    return names


# ----------------------------------------------------------------------------------------------------
# Export: which layout a model has, and its config.json


def export_arch(m: ModelConfig) -> str:
    """The Hugging Face class ``m`` exports as, or a :class:`CheckpointFormatError` that names
    every ``--set`` flag a run needs to train an exportable model of each kind."""
    gpt2 = {"norm": "layernorm", "pos": "learned", "mlp": "gelu", "tie_embeddings": True,
            "bias": True}  # fmt: skip
    llama = {"norm": "rmsnorm", "pos": "rope", "mlp": "swiglu", "bias": False}
    common = {"qk_norm": False, "logit_softcap": 0.0}
    archs = {"GPT2LMHeadModel": gpt2, "LlamaForCausalLM": llama}

    def lacking(arch: str) -> dict[str, object]:
        """The settings ``m`` lacks for ``arch``: the kind's own, then those both share."""
        needs = {**archs[arch], **common}
        if arch == "GPT2LMHeadModel" and m.n_kv_heads not in (0, m.n_heads):
            needs["n_kv_heads"] = 0  # GPT-2 has no grouped-query attention
        return {k: v for k, v in needs.items() if getattr(m, k) != v}

    lacks = {arch: lacking(arch) for arch in archs}
    gpt2_flags, llama_flags = (
        " ".join(f"--set model.{k}={str(v).lower()}" for k, v in lacks[arch].items())
        for arch in archs
    )
    fix = (
        f"The architecture is fixed when a run starts: train one with {gpt2_flags} (GPT-2) or "
        f"{llama_flags} (Llama); this run stays readable by gpt sample and gpt eval."
    )
    for arch, want in archs.items():
        if all(getattr(m, k) == v for k, v in want.items()):
            if lacks[arch]:
                key, value = next(iter(lacks[arch].items()))
                raise CheckpointFormatError(
                    f"model.{key} = {getattr(m, key)!r} has no {arch} equivalent; only models "
                    f"with model.{key} = {value!r} can be exported. {fix}"
                )
            return arch
    raise CheckpointFormatError(
        f"This model (model.norm = {m.norm!r}, pos = {m.pos!r}, mlp = {m.mlp!r}, tie_embeddings = "
        f"{m.tie_embeddings}, bias = {m.bias}) is neither GPT-2 (layernorm, learned, gelu, tied, biases) "
        f"nor Llama (rmsnorm, rope, swiglu, no bias); only those two can be exported. {fix}"
    )


def hf_config(arch: str, m: ModelConfig, dtype: str) -> dict[str, Any]:
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
