"""One transformer block of the GPT (:class:`Block`), and what every layer of a model shares.

The block holds the options of the model families (``hf_*.py``): norms before, after or around
each sublayer, Gemma's ``1 + w`` norms, biases on some projections, a QK-norm per head or over
all heads, a sliding window and RoPE base per layer (:func:`per_layer`, handed to each copy by
``blox.Repeat``), and a mixture of experts in place of the MLP (``model.n_experts``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

import blox as bx

from .._config.model import ModelConfig

Array = jax.Array

RESIDUAL = ("batch", "seq", "act_embed")

_MLP_ACTIVATIONS: dict[str, Callable[[jax.Array], jax.Array]] = {
    "gelu": jax.nn.gelu,
    "relu2": lambda x: jnp.square(jax.nn.relu(x)),
    "swiglu": jax.nn.silu,  # gated: silu(gate(x)) * up(x)
    "geglu": jax.nn.gelu,  # gated, tanh GELU: Gemma's gelu_pytorch_tanh
}
_GATED = ("swiglu", "geglu")


def compute_dtype(cfg: ModelConfig) -> Any:
    """``model.dtype`` resolved: ``auto`` is bfloat16 on GPU/TPU and float32 on CPU.

    Example:
        >>> from gpt_models import ModelConfig
        >>> compute_dtype(ModelConfig(dtype="bfloat16")).name
        'bfloat16'
    """
    if cfg.dtype != "auto":
        return jnp.dtype(cfg.dtype)
    return jnp.dtype(jnp.float32 if jax.default_backend() == "cpu" else jnp.bfloat16)


def axes(*names: str | None) -> dict[str, Any]:
    """Param metadata naming its logical axes (what paramspec's rules shard by)."""
    return {"logical_axes": names}


def no_constraint(x: Array, logical_axes: tuple) -> Array:
    """The default ``constrain``: activations stay where XLA puts them (no mesh given)."""
    return x


class Common:
    """What every layer of one model shares: dtypes, initializers, the norm class."""

    def __init__(self, cfg: ModelConfig) -> None:
        self.dtype, self.param_dtype = compute_dtype(cfg), jnp.dtype(cfg.param_dtype)
        self.init = jax.nn.initializers.normal(cfg.init_std)
        # Projections back into the residual stream: smaller, so the stream's variance does not
        # grow with depth (GPT-2).
        self.out_init = jax.nn.initializers.normal(cfg.init_std / math.sqrt(2 * cfg.n_layers))
        self.layernorm = cfg.norm == "layernorm"
        self.eps = cfg.norm_eps
        self.plus_one = cfg.norm_plus_one

    def norm(self, graph: bx.Graph) -> bx.Module:
        kwargs = {
            "eps": self.eps,
            "scale_metadata": axes(None),
            "dtype": self.dtype,
            "param_dtype": self.param_dtype,
        }
        if self.layernorm:
            return bx.LayerNorm(graph, bias_metadata=axes(None), **kwargs)
        if self.plus_one:  # Gemma: stored as w, multiplies by 1 + w
            kwargs |= {"scale_offset": 1.0, "scale_init": jax.nn.initializers.zeros}
        return bx.RMSNorm(graph, **kwargs)


def per_layer(cfg: ModelConfig) -> dict[str, list[Any]]:
    """What differs between the blocks: the sliding window (0 = none) and, where the windowed
    layers have a RoPE base of their own, each layer's base."""
    if not cfg.sliding_window:
        return {}
    windowed = [cfg.windowed(i) for i in range(cfg.n_layers)]
    out: dict[str, list[Any]] = {"window": [cfg.sliding_window if w else 0 for w in windowed]}
    if cfg.rope_local_theta and cfg.pos == "rope":
        out["rope_base"] = [cfg.rope_local_theta if w else cfg.rope_theta for w in windowed]
    return out


def rope_scaling(cfg: ModelConfig) -> bx.RopeScaling | None:
    """The ``bx.RopeScaling`` of ``model.rope_scaling`` and its values (``None`` at none)."""
    if cfg.rope_scaling == "none":
        return None
    return bx.RopeScaling(
        cfg.rope_scaling,
        cfg.rope_scaling_factor,
        low_freq_factor=cfg.rope_low_freq_factor,
        high_freq_factor=cfg.rope_high_freq_factor,
        original_max_positions=cfg.rope_original_max_positions,
    )


def _query_norm_axes(cfg: ModelConfig) -> dict[str, dict[str, Any]]:
    if cfg.qk_norm_scope == "all":
        return {"query_norm": axes("heads", "head_dim"), "key_norm": axes("kv_heads", "head_dim")}
    return {"query_norm": axes(None), "key_norm": axes(None)}


class Block(bx.Module):
    """Pre-norm transformer block: ``x + drop(attn(norm(x)))``, then ``x + drop(mlp(norm(x)))``.

    ``model.norm_placement`` moves the norms: ``post`` normalises each sublayer's output
    instead (``x + norm(attn(x))``: OLMo 2), ``sandwich`` does both (Gemma 2 and 3).
    ``window`` and ``rope_base`` are this layer's sliding window and RoPE base
    (:func:`per_layer`; ``Repeat`` hands each block its own).

    ``y, params = block(params, x, segment_ids=None, decode=False, is_training=False,
    constrain=...)``; ``constrain(x, logical_axes)`` places the residual stream it returns (the
    trainer passes ``paramspec.constrain``). ``segment_ids`` ``(B, T)`` label the examples of
    packed rows: attention stays within each (blox's ``MultiHeadAttention``). With
    ``model.dropout`` and ``is_training=True`` the attention probabilities and both branch outputs
    are dropped, each with its own key from ``rng``; ``is_training`` reaches the MLP too.
    ``lora`` (a ``bx.LoRA``) adds adapters to the attention and MLP kernels it targets.
    A block of experts (``model.n_experts > 0``) returns ``((y, stats), params)``: ``stats`` is
    its ``bx.MoE``'s ``expert_fraction`` and ``router_prob`` (what the model's load-balancing loss
    is made of), which ``blox.Repeat(collect=True)`` stacks over the layers.
    """

    def __init__(
        self, graph: bx.Graph, cfg: ModelConfig, rng: bx.Rng, lora: bx.LoRA | None = None
    ) -> None:
        super().__init__(graph)
        c = Common(cfg)
        pre, post = cfg.norm_placement != "post", cfg.norm_placement != "pre"
        self.attn_norm = c.norm(graph / "attn_norm") if pre else None
        self.attn_out_norm = c.norm(graph / "attn_out_norm") if post else None
        self.mlp_norm = c.norm(graph / "mlp_norm") if pre else None
        self.mlp_out_norm = c.norm(graph / "mlp_out_norm") if post else None
        qkv = ("query", "key", "value") if cfg.qkv_bias else ()
        self.attn = bx.MultiHeadAttention(
            graph / "attn",
            cfg.n_heads,
            cfg.head_dim,
            rng=rng,
            num_kv_heads=cfg.kv_heads,
            use_rope=cfg.pos == "rope",
            rope_base=cfg.rope_theta,
            rope_scaling=rope_scaling(cfg),
            kernel_init=c.init,
            out_init=c.out_init,
            qk_norm=cfg.qk_norm and cfg.qk_norm_scope,
            qk_norm_eps=cfg.norm_eps,
            qk_norm_offset=1.0 if cfg.norm_plus_one else 0.0,
            scale=cfg.attn_scalar**-0.5 if cfg.attn_scalar else None,
            logit_softcap=cfg.attn_softcap,
            use_bias=cfg.bias or qkv,
            implementation=cfg.attention,
            dropout_rate=cfg.dropout,
            metadata={
                "query": axes("embed", "heads", "head_dim"),
                "key": axes("embed", "kv_heads", "head_dim"),
                "value": axes("embed", "kv_heads", "head_dim"),
                "out": axes("heads", "head_dim", "embed"),
                "query_bias": axes("heads", "head_dim"),
                "key_bias": axes("kv_heads", "head_dim"),
                "value_bias": axes("kv_heads", "head_dim"),
                "out_bias": axes("embed"),
                **_query_norm_axes(cfg),
            },
            dtype=c.dtype,
            param_dtype=c.param_dtype,
            lora=lora,
        )
        self.drop = bx.Dropout(graph / "drop", cfg.dropout, rng=rng)  # no params: used twice
        self.mlp = (
            _moe(graph / "moe", cfg, rng, c)
            if cfg.n_experts
            else bx.MLP(
                graph / "mlp",
                [cfg.ff_dim, cfg.d_model],
                rng=rng,
                activation=_MLP_ACTIVATIONS[cfg.mlp],
                gated=cfg.mlp in _GATED,
                use_bias=cfg.bias,
                kernel_init=[c.init, c.out_init],
                kernel_metadata=[axes("embed", "mlp"), axes("mlp", "embed")],
                bias_metadata=[axes("mlp"), axes("embed")],
                dtype=c.dtype,
                param_dtype=c.param_dtype,
                lora=lora,
            )
        )

    def __call__(
        self,
        params: bx.Params,
        x: Array,
        *,
        segment_ids: Array | None = None,
        decode: bool = False,
        is_training: bool = False,
        constrain: Any = no_constraint,
        window: Any = None,
        rope_base: Any = None,
    ) -> tuple[Any, bx.Params]:
        h, params = _maybe(self.attn_norm, params, x)
        h, params = self.attn(
            params,
            h,
            causal=True,
            decode=decode,
            segment_ids=segment_ids,
            is_training=is_training,
            window=window,
            rope_base=rope_base,
        )
        h, params = _maybe(self.attn_out_norm, params, h)
        h, params = self.drop(params, h, is_training=is_training)
        x = x + h
        h, params = _maybe(self.mlp_norm, params, x)
        stats = None
        if isinstance(self.mlp, bx.MoE):
            (h, stats), params = self.mlp(params, h)
        else:
            h, params = self.mlp(params, h, is_training=is_training)
        h, params = _maybe(self.mlp_out_norm, params, h)
        h, params = self.drop(params, h, is_training=is_training)
        y = constrain(x + h, RESIDUAL)
        if stats is None:
            return y, params
        return (y, {k: stats[k] for k in ("expert_fraction", "router_prob")}), params


def _moe(graph: bx.Graph, cfg: ModelConfig, rng: bx.Rng, c: Common) -> bx.MoE:
    """The mixture of SwiGLU experts that replaces the MLP (``model.n_experts > 0``)."""
    expert = {
        "gate": axes("expert", "embed", "mlp"),
        "up": axes("expert", "embed", "mlp"),
        "down": axes("expert", "mlp", "embed"),
        "router": axes("embed", None),
    }
    return bx.MoE(
        graph,
        cfg.n_experts,
        cfg.experts_per_token,
        cfg.moe_d_ff or cfg.ff_dim,
        rng=rng,
        normalize_top_k=cfg.moe_norm_topk,
        kernel_init=c.init,
        out_init=c.out_init,
        metadata=expert,
        dtype=c.dtype,
        param_dtype=c.param_dtype,
    )


def _maybe(norm: bx.Module | None, params: bx.Params, x: Array) -> tuple[Array, bx.Params]:
    return (x, params) if norm is None else norm(params, x)
