"""Llama (``LlamaForCausalLM``) in this model's terms, and the layout every Llama-like family
shares (Qwen2, Qwen3, Mistral, OLMo 2, Gemma 2 and 3 subclass :class:`LlamaLayout`).

Llama's ``nn.Linear`` weights are ``(out, in)``, ours ``(in, out)`` split by heads. Our RoPE
rotates the half-split pairs ``(x[:d/2], x[d/2:])`` like transformers' ``rotate_half``, so the
query and key projections are taken as they are (no permutation). Grouped-query attention, an
untied head, RMSNorm and SwiGLU; no biases. A family adds to the shared config.json reads
(:meth:`LlamaLayout.family_reads`, then :meth:`LlamaLayout.family_settings` once every read was
checked), to the shared config.json it writes (:meth:`LlamaLayout.family_config`) and to the
tensors (query/key/value biases, QK-norm scales, norms after the sublayers: all named here as
transformers names them, picked by the model's settings).
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from .._config.model import ModelConfig
from .hf_layout import BLOCK, ConfigReader, Entry, Layout, json_text, one, padded_vocab

# Our norms and transformers' names for them, by model.norm_placement.
_NORMS = {
    "pre": (("attn_norm", "input_layernorm"), ("mlp_norm", "post_attention_layernorm")),
    "post": (("attn_out_norm", "post_attention_layernorm"),
             ("mlp_out_norm", "post_feedforward_layernorm")),
    "sandwich": (("attn_norm", "input_layernorm"), ("attn_out_norm", "post_attention_layernorm"),
                 ("mlp_norm", "pre_feedforward_layernorm"),
                 ("mlp_out_norm", "post_feedforward_layernorm")),
}  # fmt: skip
SLIDING, FULL = "sliding_attention", "full_attention"


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
    free: tuple[str, ...] = ("d_head", "rope_scaling")
    # RoPE scalings a config.json may ask for (rope_parameters or the older rope_scaling): each
    # is a frequency transform of blox's RoPE, applied to every layer as transformers does.
    rope_kinds: tuple[str, ...] = ("linear", "llama3")
    ignored = ("rotary_emb.inv_freq",)  # a buffer older transformers saved
    activation = ("hidden_act", "silu")  # the config key and the one value we reproduce
    false_flags: tuple[str, ...] = ("attention_bias", "mlp_bias")  # options we do not have
    tied = False  # tie_word_embeddings when config.json leaves it out

    def model_config(self, read: ConfigReader, dtype: str) -> ModelConfig:
        act = read.text(self.activation[0], self.activation[1])
        flags = {k: read.flag(k, False) for k in self.false_flags}
        vocab, d = read.int("vocab_size"), read.int("hidden_size")
        heads, layers = read.int("num_attention_heads"), read.int("num_hidden_layers")
        kv, head_dim = read.int("num_key_value_heads", 0), read.int("head_dim", 0)
        seq, d_ff = read.int("max_position_embeddings"), read.int("intermediate_size")
        eps, tied = read.float("rms_norm_eps", 1e-6), read.flag("tie_word_embeddings", self.tied)
        family = self.family_reads(read)
        theta = self.rope_theta(read)
        scaling = self.rope_scaling(read, seq)
        read.check()
        if act != self.activation[1]:
            read.refuse(self.activation[0], act, repr(self.activation[1]))
        for key, value in flags.items():
            if value:
                read.refuse(key, value, "false")
        needs: dict[str, Any] = {
            k: v for k, v in self.needs.items() if k not in ("norm", "pos", "mlp", "bias")
        }
        return ModelConfig(
            vocab_size=padded_vocab(vocab),
            vocab_real=vocab if padded_vocab(vocab) != vocab else 0,
            seq_len=seq,
            d_model=d,
            n_layers=layers,
            n_heads=heads,
            n_kv_heads=kv or heads,
            d_head=head_dim if head_dim and head_dim * heads != d else 0,
            d_ff=d_ff,
            mlp=str(self.needs["mlp"]),
            norm="rmsnorm",
            pos="rope",
            rope_theta=theta,
            **scaling,
            tie_embeddings=tied,
            bias=False,
            norm_eps=eps,
            param_dtype=dtype,
            **needs,
            **self.family_settings(read, family, layers),
        )

    def family_reads(self, read: ConfigReader) -> dict[str, Any]:
        """The family's own config.json values, read (and so type-checked) before ``check``."""
        return {}

    def family_settings(self, read: ConfigReader, reads: dict[str, Any], layers: int) -> dict:
        """The family's model settings from its checked ``reads`` (refusing what we lack),
        beyond its ``needs``, which every import of it has."""
        return {}

    def rope_theta(self, read: ConfigReader, section: str | None = None) -> float:
        """The RoPE base: ``rope_parameters`` (transformers >= 5; per layer type with
        ``section``, plain RoPE only there), else ``rope_theta``; a scaling is
        :meth:`rope_scaling`'s."""
        rope = read.raw.get("rope_parameters") or {}
        if section is not None and isinstance(rope, dict):
            rope, where = rope.get(section) or {}, f"rope_parameters.{section}"
        else:
            where = "rope_parameters"
        if not isinstance(rope, dict):
            read.problems.append(f"{where} = {json_text(rope)} (expected an object)")
            rope = {}
        theta = rope.get("rope_theta", read.raw.get("rope_theta"))
        if theta is not None and not (isinstance(theta, (int, float)) and theta > 0):
            read.problems.append(f"rope_theta = {json_text(theta)} (expected a positive number)")
            return 0.0
        if section is not None and rope.get("rope_type", "default") != "default":
            read.refuse(f"{where}.rope_type", rope["rope_type"], "'default' (plain RoPE)")
        return float(theta if theta is not None else 10000.0)

    def rope_scaling(self, read: ConfigReader, seq_len: int) -> dict[str, Any]:
        """``model.rope_scaling`` and its values from ``rope_parameters`` (transformers >= 5)
        or the older ``rope_scaling``; ``{}`` for plain RoPE. A type we do not implement is
        refused by name (``yarn``, ``dynamic``, ...)."""
        params, legacy = read.raw.get("rope_parameters"), read.raw.get("rope_scaling")
        where, spec = "rope_parameters", params
        if not (isinstance(params, dict) and _rope_type(params) != "default") and legacy:
            where, spec = "rope_scaling", legacy
        if not isinstance(spec, dict):
            if spec is not None and where == "rope_scaling":
                read.problems.append(f"rope_scaling = {json_text(spec)} (expected an object)")
            return {}
        kind = _rope_type(spec)
        if kind == "default" or any(k in spec for k in (FULL, SLIDING)):
            return {}  # plain RoPE; per layer type, rope_theta refuses any other
        if kind not in self.rope_kinds:
            kinds = ", ".join(repr(k) for k in ("default", *self.rope_kinds))
            read.refuse(f"{where}.rope_type", kind, kinds if self.rope_kinds else kinds + " only")
        number = lambda key, default=None: _positive(read, spec, where, key, default)
        out: dict[str, Any] = {"rope_scaling": kind, "rope_scaling_factor": number("factor")}
        if kind == "llama3":
            out |= {
                "rope_low_freq_factor": number("low_freq_factor"),
                "rope_high_freq_factor": number("high_freq_factor"),
                "rope_original_max_positions": int(
                    number("original_max_position_embeddings", seq_len) or 0
                ),
            }
        return out

    def hf_config(self, m: ModelConfig, dtype: str) -> dict[str, Any]:
        return {
            "architectures": [self.architecture],
            "model_type": self.model_type,
            "vocab_size": m.real_vocab,
            "hidden_size": m.d_model,
            "intermediate_size": m.ff_dim,
            "num_hidden_layers": m.n_layers,
            "num_attention_heads": m.n_heads,
            "num_key_value_heads": m.kv_heads,
            "head_dim": m.head_dim,
            "max_position_embeddings": m.seq_len,
            "rms_norm_eps": m.norm_eps,
            "rope_theta": m.rope_theta,
            "rope_scaling": hf_rope_scaling(m),  # what transformers < 5 reads
            self.activation[0]: self.activation[1],
            "rope_parameters": {
                "rope_theta": m.rope_theta,
                **(hf_rope_scaling(m) or {"rope_type": "default"}),
            },
            **dict.fromkeys(self.false_flags, False),
            "tie_word_embeddings": m.tie_embeddings,
            "torch_dtype": dtype,
            **self.family_config(m),
        }

    def family_config(self, m: ModelConfig) -> dict[str, Any]:
        """The family's own config.json keys (overriding the shared ones)."""
        return {}

    def entries(self, m: ModelConfig) -> list[Entry]:
        D, H, K, hd, F, V = m.d_model, m.n_heads, m.kv_heads, m.head_dim, m.ff_dim, m.real_vocab
        layer = "model.layers.{i}."
        e = [
            one(
                ("embed", "embedding"),
                "model.embed_tokens.weight",
                (V, D),
                stacked=False,
                vocab_rows=m.vocab_size,
                save=lambda a: a[:V],
            ),
            one(("final_norm", "scale"), "model.norm.weight", (D,), stacked=False),
        ]
        if not m.tie_embeddings:
            e.append(
                one(
                    ("unembed", "kernel"),
                    "lm_head.weight",
                    (V, D),
                    lambda w: w.T,
                    lambda a: a.T[:V],
                    stacked=False,
                    vocab_rows=m.vocab_size,
                )
            )
        for ours, theirs in _NORMS[m.norm_placement]:
            e.append(one((*BLOCK, ours, "scale"), f"{layer}{theirs}.weight", (D,)))
        for ours, theirs, heads in (("query", "q", H), ("key", "k", K), ("value", "v", K)):
            proj = f"{layer}self_attn.{theirs}_proj"
            e.append(
                one(
                    (*BLOCK, "attn", ours),
                    f"{proj}.weight",
                    (heads * hd, D),
                    _split_heads(D, heads, hd),
                    lambda a: a.reshape(D, -1).T,
                )
            )
            if m.qkv_bias:
                e.append(
                    one(
                        (*BLOCK, "attn", f"{ours}_bias"),
                        f"{proj}.bias",
                        (heads * hd,),
                        _reshape(heads, hd),
                        _reshape(-1),
                    )
                )
            if m.qk_norm and ours != "value":
                scope = (heads, hd) if m.qk_norm_scope == "all" else (hd,)
                e.append(
                    one(
                        (*BLOCK, "attn", f"{ours}_norm", "scale"),
                        f"{layer}self_attn.{theirs}_norm.weight",
                        (int(np.prod(scope)),),
                        _reshape(*scope),
                        _reshape(-1),
                    )
                )
        e += [
            one(
                (*BLOCK, "attn", "out"),
                f"{layer}self_attn.o_proj.weight",
                (D, H * hd),
                lambda w: w.T.reshape(H, hd, D),
                lambda a: a.reshape(H * hd, D).T,
            ),
            one(
                (*BLOCK, "mlp", "gate_0", "kernel"),
                f"{layer}mlp.gate_proj.weight",
                (F, D),
                _transpose,
                _transpose,
            ),
            one(
                (*BLOCK, "mlp", "linear_0", "kernel"),
                f"{layer}mlp.up_proj.weight",
                (F, D),
                _transpose,
                _transpose,
            ),
            one(
                (*BLOCK, "mlp", "linear_1", "kernel"),
                f"{layer}mlp.down_proj.weight",
                (D, F),
                _transpose,
                _transpose,
            ),
        ]
        return e


def hf_rope_scaling(m: ModelConfig) -> dict[str, Any] | None:
    """config.json's ``rope_scaling`` of ``m``: ``None`` for plain RoPE."""
    if m.rope_scaling == "none":
        return None
    out: dict[str, Any] = {"rope_type": m.rope_scaling, "factor": m.rope_scaling_factor}
    if m.rope_scaling == "llama3":
        out |= {
            "low_freq_factor": m.rope_low_freq_factor,
            "high_freq_factor": m.rope_high_freq_factor,
            "original_max_position_embeddings": m.rope_original_max_positions,
        }
    return out


def _rope_type(spec: dict[str, Any]) -> Any:
    return spec.get("rope_type", spec.get("type", "default"))  # "type": older transformers


def _positive(
    read: ConfigReader, spec: dict[str, Any], where: str, key: str, default: Any = None
) -> float:
    """``spec[key]``, a positive number (``default`` when absent and given), else a problem."""
    value = spec.get(key, default)
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
        return float(value)
    read.problems.append(f"{where}.{key} = {json_text(value)} (expected a positive number)")
    return 0.0


def window_pattern(read: ConfigReader, layers: int, window: int) -> dict[str, int]:
    """``sliding_window`` and ``global_every`` from config.json's ``layer_types`` (every layer
    windowed without one), refusing a pattern other than every N-th layer global."""
    types = read.raw.get("layer_types")
    if types is None:
        return {"sliding_window": window, "global_every": 0}
    if not (isinstance(types, list) and len(types) == layers and set(types) <= {SLIDING, FULL}):
        read.refuse(
            "layer_types", json_text(types), f"{layers} entries, each {SLIDING!r} or {FULL!r}"
        )
    windowed = [t == SLIDING for t in types]
    if not any(windowed):
        return {"sliding_window": 0, "global_every": 0}
    if not window:
        read.refuse("sliding_window", window, "a positive integer: layer_types has windowed layers")
    every = 0 if all(windowed) else windowed.index(False) + 1
    if every and windowed != [(i + 1) % every != 0 for i in range(layers)]:
        wanted = f"layers {every}, {2 * every}, ... {FULL!r} and the others {SLIDING!r}"
        read.refuse("layer_types", json_text(types), wanted)
    return {"sliding_window": window, "global_every": every}


def layer_types(m: ModelConfig) -> list[str]:
    """config.json's ``layer_types`` of ``m``."""
    return [SLIDING if m.windowed(i) else FULL for i in range(m.n_layers)]


def _transpose(a: np.ndarray) -> np.ndarray:
    return a.T


def _reshape(*shape: int) -> Any:
    return lambda a: a.reshape(shape)


def _split_heads(d: int, heads: int, head_dim: int) -> Any:
    return lambda w: w.T.reshape(d, heads, head_dim)


LLAMA = LlamaLayout()
