"""Gemma 2 (``Gemma2ForCausalLM``) and Gemma 3 (``Gemma3ForCausalLM``, the text model) in this
model's terms: Llama's layout with Gemma's differences.

Both: RMSNorms stored as ``w`` that multiply by ``1 + w`` (``norm_plus_one``), a norm before and
after each sublayer (``norm_placement = "sandwich"``), token embeddings scaled by
``sqrt(hidden_size)`` (``embed_scale``), a gated tanh-GELU MLP (``mlp = "geglu"``), attention
logits scaled by ``query_pre_attn_scalar ** -0.5`` (``attn_scalar``), a tied head by default,
and sliding-window layers by ``layer_types`` (every ``global_every``-th layer global). Gemma 2
soft-caps the attention logits (``attn_logit_softcapping``: ``attn_softcap``) and the output
logits (``final_logit_softcapping``: ``logit_softcap``); Gemma 3 normalises each head's queries
and keys (``qk_norm``, also ``1 + w``) and gives its windowed layers a RoPE base of their own
(``rope_parameters.sliding_attention``: ``rope_local_theta``).
"""

from __future__ import annotations

from typing import Any, ClassVar

from .._config.model import ModelConfig
from .hf_layout import ConfigReader
from .hf_llama import FULL, SLIDING, LlamaLayout, layer_types, window_pattern

_GEMMA_NEEDS: dict[str, object] = {
    **LlamaLayout.needs, "mlp": "geglu", "norm_plus_one": True, "embed_scale": True,
    "norm_placement": "sandwich",
}  # fmt: skip


class Gemma2Layout(LlamaLayout):
    architecture = "Gemma2ForCausalLM"
    model_type = "gemma2"
    name = "Gemma 2"
    summary = "1 + w norms around each sublayer, scaled embeddings, geglu, soft-caps, windows"
    needs: ClassVar[dict[str, object]] = _GEMMA_NEEDS
    free: tuple[str, ...] = (
        "d_head",
        "sliding_window",
        "global_every",
        "attn_softcap",
        "logit_softcap",
        "attn_scalar",
    )
    activation = ("hidden_activation", "gelu_pytorch_tanh")
    false_flags = ("attention_bias", "use_bidirectional_attention")
    tied = True
    # Gemma 3 scales the global layers' RoPE only (its local layers have a base of their own);
    # our scaling applies to every layer, so neither Gemma imports one.
    rope_kinds: tuple[str, ...] = ()

    def family_reads(self, read: ConfigReader) -> dict[str, Any]:
        return {
            "scalar": read.float("query_pre_attn_scalar", 0.0),
            "window": read.int("sliding_window", 0),
            "attn_softcap": read.float("attn_logit_softcapping", 0.0),
            "logit_softcap": read.float("final_logit_softcapping", 0.0),
        }

    def family_settings(self, read: ConfigReader, reads: dict[str, Any], layers: int) -> dict:
        heads, d = read.raw["num_attention_heads"], read.raw["hidden_size"]
        head_dim = read.raw.get("head_dim") or d // heads
        return {
            **window_pattern(read, layers, reads["window"]),
            # the default scalar (the head size) is kept as 0, so a model exports as it came
            "attn_scalar": 0.0 if reads["scalar"] in (0.0, head_dim) else reads["scalar"],
            "attn_softcap": reads["attn_softcap"],
            "logit_softcap": reads["logit_softcap"],
        }

    def family_config(self, m: ModelConfig) -> dict[str, Any]:
        return {
            "query_pre_attn_scalar": _number(m.attn_scalar or m.head_dim),
            "sliding_window": m.sliding_window or None,
            "layer_types": layer_types(m),
            "attn_logit_softcapping": m.attn_softcap or None,
            "final_logit_softcapping": m.logit_softcap or None,
        }


class Gemma3Layout(Gemma2Layout):
    architecture = "Gemma3ForCausalLM"
    model_type = "gemma3_text"
    name = "Gemma 3"
    summary = "Gemma 2 with a QK-norm per head and a RoPE base of its own on windowed layers"
    needs: ClassVar[dict[str, object]] = {**_GEMMA_NEEDS, "qk_norm": True, "qk_norm_scope": "head"}
    free = (*Gemma2Layout.free, "rope_local_theta")

    def rope_theta(self, read: ConfigReader, section: str | None = None) -> float:
        rope = read.raw.get("rope_parameters")
        if isinstance(rope, dict) and FULL in rope and section is None:
            section = FULL  # transformers >= 5: one RoPE per layer type
        return super().rope_theta(read, section)

    def family_settings(self, read: ConfigReader, reads: dict[str, Any], layers: int) -> dict:
        out = super().family_settings(read, reads, layers)
        rope = read.raw.get("rope_parameters")
        if isinstance(rope, dict) and SLIDING in rope:
            local = self.rope_theta(read, SLIDING)
        else:  # the config of transformers 4
            local = read.float("rope_local_base_freq", 10000.0)
            read.check()
        glob = self.rope_theta(read)
        return {**out, "rope_local_theta": 0.0 if local == glob else local}

    def family_config(self, m: ModelConfig) -> dict[str, Any]:
        local = m.rope_local_theta or m.rope_theta
        rope = {
            FULL: {"rope_type": "default", "rope_theta": m.rope_theta},
            SLIDING: {"rope_type": "default", "rope_theta": local},
        }
        return {**super().family_config(m), "rope_parameters": rope, "rope_local_base_freq": local}


def _number(x: float) -> float | int:
    """``x`` as an int where it is whole (transformers' Gemma configs want an int scalar)."""
    return int(x) if float(x).is_integer() else x


GEMMA2 = Gemma2Layout()
GEMMA3 = Gemma3Layout()
