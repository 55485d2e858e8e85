"""Llama (``LlamaForCausalLM``) in this model's terms: its config.json and its tensors.

Llama's ``nn.Linear`` weights are ``(out, in)``, ours ``(in, out)`` split by heads. Our RoPE
rotates the half-split pairs ``(x[:d/2], x[d/2:])`` like transformers' ``rotate_half``, so the
query and key projections are taken as they are (no permutation). Grouped-query attention, an
untied head, RMSNorm and SwiGLU; no biases.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from .._config.schema import ModelConfig
from .hf_layout import BLOCK, ConfigReader, Entry, Layout, json_text, one, padded_vocab


class LlamaLayout(Layout):
    architecture = "LlamaForCausalLM"
    model_type = "llama"
    name = "Llama"
    summary = "rmsnorm, rope, swiglu, no bias"
    needs: ClassVar[dict[str, object]] = {
        "norm": "rmsnorm",
        "pos": "rope",
        "mlp": "swiglu",
        "bias": False,
    }
    ignored = ("rotary_emb.inv_freq",)  # a buffer older transformers saved

    def model_config(self, read: ConfigReader, dtype: str) -> ModelConfig:
        act = read.text("hidden_act", "silu")
        biases = {k: read.flag(k, False) for k in ("attention_bias", "mlp_bias")}
        rope = read.raw.get("rope_parameters") or {}  # transformers >= 5 keeps rope_theta here
        if not isinstance(rope, dict):
            read.problems.append(f"rope_parameters = {json_text(rope)} (expected an object)")
            rope = {}
        theta = rope.get("rope_theta", read.raw.get("rope_theta"))
        if theta is not None and not (isinstance(theta, (int, float)) and theta > 0):
            read.problems.append(f"rope_theta = {json_text(theta)} (expected a positive number)")
        vocab, d = read.int("vocab_size"), read.int("hidden_size")
        heads, layers = read.int("num_attention_heads"), read.int("num_hidden_layers")
        kv, head_dim = read.int("num_key_value_heads", 0), read.int("head_dim", 0)
        seq, d_ff = read.int("max_position_embeddings"), read.int("intermediate_size")
        eps, tied = read.float("rms_norm_eps", 1e-6), read.flag("tie_word_embeddings", False)
        read.check()
        if act != "silu":
            read.refuse("hidden_act", act, "'silu'")
        for key, value in biases.items():
            if value:
                read.refuse(key, value, "false")
        if read.raw.get("rope_scaling"):
            read.refuse("rope_scaling", read.raw["rope_scaling"], "null (plain RoPE)")
        if rope.get("rope_type", "default") != "default":
            read.refuse("rope_parameters.rope_type", rope["rope_type"], "'default' (plain RoPE)")
        if head_dim and head_dim * heads != d:
            read.refuse("head_dim", head_dim, f"hidden_size / num_attention_heads = {d // heads}")
        return ModelConfig(
            vocab_size=padded_vocab(vocab), vocab_real=vocab if padded_vocab(vocab) != vocab else 0,
            seq_len=seq, d_model=d, n_layers=layers, n_heads=heads, n_kv_heads=kv or heads,
            d_ff=d_ff, mlp="swiglu", norm="rmsnorm", pos="rope",
            rope_theta=float(theta if theta is not None else 10000.0), tie_embeddings=tied,
            bias=False, norm_eps=eps, param_dtype=dtype,
        )  # fmt: skip

    def hf_config(self, m: ModelConfig, dtype: str) -> dict[str, Any]:
        return {
            "architectures": [self.architecture], "model_type": self.model_type,
            "vocab_size": m.real_vocab, "hidden_size": m.d_model, "intermediate_size": m.ff_dim,
            "num_hidden_layers": m.n_layers, "num_attention_heads": m.n_heads,
            "num_key_value_heads": m.kv_heads, "head_dim": m.head_dim,
            "max_position_embeddings": m.seq_len, "rms_norm_eps": m.norm_eps,
            "rope_theta": m.rope_theta, "rope_scaling": None, "hidden_act": "silu",
            "rope_parameters": {"rope_theta": m.rope_theta, "rope_type": "default"},
            "attention_bias": False, "mlp_bias": False, "tie_word_embeddings": m.tie_embeddings,
            "torch_dtype": dtype,
        }  # fmt: skip

    def entries(self, m: ModelConfig) -> list[Entry]:
        D, H, K, hd, F, V = m.d_model, m.n_heads, m.kv_heads, m.head_dim, m.ff_dim, m.real_vocab
        layer = "model.layers.{i}."
        e = [
            one(("embed", "embedding"), "model.embed_tokens.weight", (V, D), stacked=False,
                vocab_rows=m.vocab_size, save=lambda a: a[:V]),
            one(("final_norm", "scale"), "model.norm.weight", (D,), stacked=False),
        ]  # fmt: skip
        if not m.tie_embeddings:
            e.append(one(("unembed", "kernel"), "lm_head.weight", (V, D), lambda w: w.T,
                         lambda a: a.T[:V], stacked=False, vocab_rows=m.vocab_size))  # fmt: skip
        for ours, theirs in (
            ("attn_norm", "input_layernorm"),
            ("mlp_norm", "post_attention_layernorm"),
        ):
            e.append(one((*BLOCK, ours, "scale"), f"{layer}{theirs}.weight", (D,)))
        for ours, theirs, heads in (("query", "q_proj", H), ("key", "k_proj", K),
                                    ("value", "v_proj", K)):  # fmt: skip
            e.append(one((*BLOCK, "attn", ours), f"{layer}self_attn.{theirs}.weight",
                         (heads * hd, D), _split_heads(D, heads, hd),
                         lambda a: a.reshape(D, -1).T))  # fmt: skip
        e += [
            one((*BLOCK, "attn", "out"), f"{layer}self_attn.o_proj.weight", (D, H * hd),
                lambda w: w.T.reshape(H, hd, D), lambda a: a.reshape(H * hd, D).T),
            one((*BLOCK, "mlp", "gate_0", "kernel"), f"{layer}mlp.gate_proj.weight", (F, D),
                _transpose, _transpose),
            one((*BLOCK, "mlp", "linear_0", "kernel"), f"{layer}mlp.up_proj.weight", (F, D),
                _transpose, _transpose),
            one((*BLOCK, "mlp", "linear_1", "kernel"), f"{layer}mlp.down_proj.weight", (D, F),
                _transpose, _transpose),
        ]  # fmt: skip
        return e


def _transpose(a: np.ndarray) -> np.ndarray:
    return a.T


def _split_heads(d: int, heads: int, head_dim: int) -> Any:
    return lambda w: w.T.reshape(d, heads, head_dim)


LLAMA = LlamaLayout()
