"""GPT-2 (``GPT2LMHeadModel``) in this model's terms: its config.json and its tensors.

GPT-2's ``Conv1D`` weights are ``(in, out)``, as ours are, and ``c_attn`` holds the query, key and
value projections side by side (``(D, 3D)``), so one HF tensor makes three of our params. The
token embedding is tied to the output layer; the position embedding is learned.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from .._config.model import ModelConfig
from .hf_layout import BLOCK, ConfigReader, Entry, Layout, one, padded_vocab


class GPT2Layout(Layout):
    architecture = "GPT2LMHeadModel"
    model_type = "gpt2"
    name = "GPT-2"
    summary = "layernorm, learned, gelu, tied, biases"
    needs: ClassVar[dict[str, object]] = {
        "norm": "layernorm",
        "pos": "learned",
        "mlp": "gelu",
        "tie_embeddings": True,
        "bias": True,
    }
    # GPT2LMHeadModel saves its names under "transformer."; a bare GPT2Model folder does not.
    prefixes = ("transformer.", "")
    ignored = (".attn.bias", ".attn.masked_bias", "lm_head.weight")  # buffers; the tied head

    def model_config(self, read: ConfigReader, dtype: str) -> ModelConfig:
        act = read.text("activation_function", "gelu_new")
        odd = {
            k: read.flag(k, False)
            for k in ("scale_attn_by_inverse_layer_idx", "reorder_and_upcast_attn")
        }
        scaled, tied = read.flag("scale_attn_weights", True), read.flag("tie_word_embeddings", True)
        vocab, d = read.int("vocab_size"), read.int("n_embd")
        seq, layers, heads = read.int("n_positions"), read.int("n_layer"), read.int("n_head")
        d_ff, eps = read.int("n_inner", 0), read.float("layer_norm_epsilon", 1e-5)
        read.check()
        if act not in ("gelu_new", "gelu_pytorch_tanh"):
            read.refuse("activation_function", act, "'gelu_new', the tanh GELU")
        for key, value in odd.items():
            if value:
                read.refuse(key, value, "false")
        if not scaled:
            read.refuse("scale_attn_weights", False, "true")
        if not tied:
            read.refuse("tie_word_embeddings", False, "true for GPT-2")
        return ModelConfig(
            vocab_size=padded_vocab(vocab),
            vocab_real=vocab if padded_vocab(vocab) != vocab else 0,
            seq_len=seq,
            d_model=d,
            n_layers=layers,
            n_heads=heads,
            d_ff=d_ff or 4 * d,
            mlp="gelu",
            norm="layernorm",
            pos="learned",
            tie_embeddings=True,
            bias=True,
            norm_eps=eps,
            param_dtype=dtype,
        )

    def hf_config(self, m: ModelConfig, dtype: str) -> dict[str, Any]:
        return {
            "architectures": [self.architecture],
            "model_type": self.model_type,
            "vocab_size": m.real_vocab,
            "n_positions": m.seq_len,
            "n_ctx": m.seq_len,
            "n_embd": m.d_model,
            "n_layer": m.n_layers,
            "n_head": m.n_heads,
            "n_inner": m.ff_dim,
            "activation_function": "gelu_new",
            "layer_norm_epsilon": m.norm_eps,
            "resid_pdrop": 0.0,
            "embd_pdrop": 0.0,
            "attn_pdrop": 0.0,
            "tie_word_embeddings": True,
            "torch_dtype": dtype,
        }

    def lacking(self, m: ModelConfig) -> dict[str, object]:
        lacks = super().lacking(m)
        if m.n_kv_heads not in (0, m.n_heads):
            lacks["n_kv_heads"] = 0  # GPT-2 has no grouped-query attention
        if m.head_dim * m.n_heads != m.d_model:
            lacks["d_head"] = 0  # GPT-2's heads split the model's width
        return lacks

    def entries(self, m: ModelConfig) -> list[Entry]:
        D, H, hd, F, V = m.d_model, m.n_heads, m.head_dim, m.ff_dim, m.real_vocab
        layer = "h.{i}."
        e = [
            one(
                ("embed", "embedding"),
                "wte.weight",
                (V, D),
                stacked=False,
                vocab_rows=m.vocab_size,
                save=lambda a: a[:V],
            ),
            one(("pos_embed", "embedding"), "wpe.weight", (m.seq_len, D), stacked=False),
            one(("final_norm", "scale"), "ln_f.weight", (D,), stacked=False),
            one(("final_norm", "bias"), "ln_f.bias", (D,), stacked=False),
        ]
        for ours, theirs in (("attn_norm", "ln_1"), ("mlp_norm", "ln_2")):
            e.append(one((*BLOCK, ours, "scale"), f"{layer}{theirs}.weight", (D,)))
            e.append(one((*BLOCK, ours, "bias"), f"{layer}{theirs}.bias", (D,)))
        attn = [(*BLOCK, "attn", n) for n in ("query", "key", "value")]
        e += [
            Entry(
                tuple(attn),
                (f"{layer}attn.c_attn.weight",),
                ((D, 3 * D),),
                lambda w: tuple(p.reshape(D, H, hd) for p in np.split(w, 3, axis=-1)),
                lambda *qkv: (np.concatenate([a.reshape(D, D) for a in qkv], axis=1),),
                True,
            ),
            Entry(
                tuple((*p[:-1], f"{p[-1]}_bias") for p in attn),
                (f"{layer}attn.c_attn.bias",),
                ((3 * D,),),
                lambda b: tuple(p.reshape(H, hd) for p in np.split(b, 3)),
                lambda *qkv: (np.concatenate([a.reshape(D) for a in qkv]),),
                True,
            ),
            one(
                (*BLOCK, "attn", "out"),
                f"{layer}attn.c_proj.weight",
                (D, D),
                lambda w: w.reshape(H, hd, D),
                lambda a: a.reshape(D, D),
            ),
            one((*BLOCK, "attn", "out_bias"), f"{layer}attn.c_proj.bias", (D,)),
            one((*BLOCK, "mlp", "linear_0", "kernel"), f"{layer}mlp.c_fc.weight", (D, F)),
            one((*BLOCK, "mlp", "linear_0", "bias"), f"{layer}mlp.c_fc.bias", (F,)),
            one((*BLOCK, "mlp", "linear_1", "kernel"), f"{layer}mlp.c_proj.weight", (F, D)),
            one((*BLOCK, "mlp", "linear_1", "bias"), f"{layer}mlp.c_proj.bias", (D,)),
        ]
        return e


GPT2 = GPT2Layout()
