"""The GPT model as paramspec spec-tree layers, and its pure forward pass.

Each layer is a ``pytree_dataclass`` whose ``param_specs(cfg)`` classmethod returns the same class
filled with ``paramspec.ParamSpec`` leaves; ``paramspec.init`` turns that tree into arrays of the same
structure. Transformer blocks are stored stacked (a leading ``layers`` axis) whether or not the
forward pass scans over them, so a checkpoint does not depend on ``model.scan_layers``.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any

import jax
import jax.numpy as jnp

import paramspec as ps
from core_primitives import pytree_dataclass
from paramspec import ParamSpec

from ._config import ModelConfig

Array = jax.Array


@functools.cache
def _normal(std: float) -> Any:
    # One initializer object per std, so equal configs give equal (hashable) spec trees and paramspec
    # reuses its compiled init program.
    return jax.nn.initializers.normal(std)


_ONES = jax.nn.initializers.ones
_ZEROS = jax.nn.initializers.zeros


def _spec(
    cfg: ModelConfig, shape: tuple[int, ...], axes: tuple[str | None, ...], init: Any
) -> ParamSpec:
    return ParamSpec(shape, axes, dtype=jnp.dtype(cfg.param_dtype), initializer=init)


@pytree_dataclass
class Norm:
    """RMSNorm (``scale``) or LayerNorm (``scale`` and ``bias``) over the last axis."""

    scale: Any
    bias: Any = None

    @classmethod
    def param_specs(cls, cfg: ModelConfig, lead: tuple[int, ...] = (), size: int = 0) -> Norm:
        size = size or cfg.d_model
        axes = ("layers",) * len(lead) + (None,)
        scale = _spec(cfg, (*lead, size), axes, _ONES)
        bias = _spec(cfg, (*lead, size), axes, _ZEROS) if cfg.norm == "layernorm" else None
        return cls(scale=scale, bias=bias)


@pytree_dataclass
class Attention:
    """Causal self-attention; ``n_kv_heads < n_heads`` is grouped-query attention."""

    wq: Any
    wk: Any
    wv: Any
    wo: Any
    q_norm: Any = None
    k_norm: Any = None

    @classmethod
    def param_specs(cls, cfg: ModelConfig, lead: tuple[int, ...] = ()) -> Attention:
        la = ("layers",) * len(lead)
        d, h, kv, hd = cfg.d_model, cfg.n_heads, cfg.kv_heads, cfg.head_dim
        init, out_init = _normal(cfg.init_std), _normal(cfg.init_std / math.sqrt(2 * cfg.n_layers))
        qk = (
            Norm.param_specs(dataclasses.replace(cfg, norm="rmsnorm"), lead, hd)
            if cfg.qk_norm
            else None
        )
        return cls(
            wq=_spec(cfg, (*lead, d, h, hd), (*la, "embed", "heads", "head_dim"), init),
            wk=_spec(cfg, (*lead, d, kv, hd), (*la, "embed", "kv_heads", "head_dim"), init),
            wv=_spec(cfg, (*lead, d, kv, hd), (*la, "embed", "kv_heads", "head_dim"), init),
            wo=_spec(cfg, (*lead, h, hd, d), (*la, "heads", "head_dim", "embed"), out_init),
            q_norm=qk.scale if qk else None,
            k_norm=qk.scale if qk else None,
        )


@pytree_dataclass
class MLP:
    """GELU or ReLU² (``w_in``, ``w_out``) or SwiGLU (plus ``w_gate``)."""

    w_in: Any
    w_out: Any
    w_gate: Any = None

    @classmethod
    def param_specs(cls, cfg: ModelConfig, lead: tuple[int, ...] = ()) -> MLP:
        la = ("layers",) * len(lead)
        d, f = cfg.d_model, cfg.ff_dim
        init, out_init = _normal(cfg.init_std), _normal(cfg.init_std / math.sqrt(2 * cfg.n_layers))
        gate = (
            _spec(cfg, (*lead, d, f), (*la, "embed", "mlp"), init) if cfg.mlp == "swiglu" else None
        )
        return cls(
            w_in=_spec(cfg, (*lead, d, f), (*la, "embed", "mlp"), init),
            w_out=_spec(cfg, (*lead, f, d), (*la, "mlp", "embed"), out_init),
            w_gate=gate,
        )


@pytree_dataclass
class Block:
    """Pre-norm transformer block: ``x + attn(norm(x))``, then ``x + mlp(norm(x))``."""

    attn_norm: Norm
    attn: Attention
    mlp_norm: Norm
    mlp: MLP

    @classmethod
    def param_specs(cls, cfg: ModelConfig, lead: tuple[int, ...] = ()) -> Block:
        return cls(
            attn_norm=Norm.param_specs(cfg, lead),
            attn=Attention.param_specs(cfg, lead),
            mlp_norm=Norm.param_specs(cfg, lead),
            mlp=MLP.param_specs(cfg, lead),
        )


@pytree_dataclass
class GPT:
    """The whole model: token (and position) embeddings, stacked blocks, final norm, unembedding.

    Example:
        >>> from gpt_models import PRESETS
        >>> specs = GPT.param_specs(PRESETS["tiny"].model)
        >>> specs.blocks.attn.wq.shape, specs.blocks.attn.wq.logical_axes
        ((4, 128, 4, 32), ('layers', 'embed', 'heads', 'head_dim'))
    """

    embed: Any
    blocks: Block
    final_norm: Norm
    pos_embed: Any = None
    unembed: Any = None

    @classmethod
    def param_specs(cls, cfg: ModelConfig) -> GPT:
        init = _normal(cfg.init_std)
        pos = (
            _spec(cfg, (cfg.seq_len, cfg.d_model), (None, "embed"), init)
            if cfg.pos == "learned"
            else None
        )
        unembed = (
            None
            if cfg.tie_embeddings
            else _spec(cfg, (cfg.d_model, cfg.vocab_size), ("embed", "vocab"), init)
        )
        return cls(
            embed=_spec(cfg, (cfg.vocab_size, cfg.d_model), ("vocab", "embed"), init),
            blocks=Block.param_specs(cfg, (cfg.n_layers,)),
            final_norm=Norm.param_specs(cfg),
            pos_embed=pos,
            unembed=unembed,
        )


# ----------------------------------------------------------------------------------------------------
# Forward pass


def compute_dtype(cfg: ModelConfig) -> Any:
    """``model.dtype`` resolved: ``auto`` is bfloat16 on GPU/TPU and float32 on CPU."""
    if cfg.dtype != "auto":
        return jnp.dtype(cfg.dtype)
    return jnp.dtype(jnp.float32 if jax.default_backend() == "cpu" else jnp.bfloat16)


def _norm(p: Norm, x: Array, kind: str, eps: float = 1e-6) -> Array:
    # Statistics in float32 whatever the compute dtype: bf16 variance loses too many bits.
    x32 = x.astype(jnp.float32)
    if kind == "layernorm":
        x32 = x32 - x32.mean(-1, keepdims=True)
    y = x32 * jax.lax.rsqrt((x32 * x32).mean(-1, keepdims=True) + eps)
    y = y * p.scale.astype(jnp.float32)
    if p.bias is not None:
        y = y + p.bias.astype(jnp.float32)
    return y.astype(x.dtype)


def _rms(x: Array, scale: Array, eps: float = 1e-6) -> Array:
    return _norm(Norm(scale=scale), x, "rmsnorm", eps)


def _rope(x: Array, positions: Array, theta: float) -> Array:
    """Rotary embedding on ``x: (B, T, N, H)`` at integer ``positions: (T,)`` (halves convention)."""
    half = x.shape[-1] // 2
    freqs = theta ** (-jnp.arange(half, dtype=jnp.float32) / half)
    angles = positions.astype(jnp.float32)[:, None] * freqs[None, :]  # (T, half)
    sin, cos = jnp.sin(angles)[None, :, None, :], jnp.cos(angles)[None, :, None, :]
    x1, x2 = jnp.split(x.astype(jnp.float32), 2, axis=-1)
    out = jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)
    return out.astype(x.dtype)


def _attention(
    p: Attention, x: Array, positions: Array, cfg: ModelConfig, cache: Any
) -> tuple[Array, Any]:
    q = jnp.einsum("btd,dnh->btnh", x, p.wq)
    k = jnp.einsum("btd,dnh->btnh", x, p.wk)
    v = jnp.einsum("btd,dnh->btnh", x, p.wv)
    if cfg.qk_norm:
        q, k = _rms(q, p.q_norm), _rms(k, p.k_norm)
    if cfg.pos == "rope":
        q, k = _rope(q, positions, cfg.rope_theta), _rope(k, positions, cfg.rope_theta)
    if cache is None:
        out = jax.nn.dot_product_attention(q, k, v, is_causal=True)
    else:
        # Write this chunk's keys/values at its positions, then attend over the whole cache; the
        # mask hides both the future and the cache slots not written yet.
        k_all = jax.lax.dynamic_update_slice_in_dim(
            cache[0], k.astype(cache[0].dtype), positions[0], 1
        )
        v_all = jax.lax.dynamic_update_slice_in_dim(
            cache[1], v.astype(cache[1].dtype), positions[0], 1
        )
        mask = jnp.arange(k_all.shape[1])[None, :] <= positions[:, None]  # (T, S)
        out = jax.nn.dot_product_attention(
            q, k_all.astype(q.dtype), v_all.astype(q.dtype), mask=mask[None, None]
        )
        cache = (k_all, v_all)
    return jnp.einsum("btnh,nhd->btd", out, p.wo), cache


def _mlp(p: MLP, x: Array, kind: str) -> Array:
    h = x @ p.w_in
    if kind == "gelu":
        h = jax.nn.gelu(h)
    elif kind == "relu2":
        h = jnp.square(jax.nn.relu(h))
    else:  # swiglu
        h = jax.nn.silu(x @ p.w_gate) * h
    return h @ p.w_out


def _block(p: Block, x: Array, positions: Array, cfg: ModelConfig, cache: Any) -> tuple[Array, Any]:
    h, cache = _attention(p.attn, _norm(p.attn_norm, x, cfg.norm), positions, cfg, cache)
    x = x + h
    x = x + _mlp(p.mlp, _norm(p.mlp_norm, x, cfg.norm), cfg.mlp)
    return x, cache


_REMAT_POLICIES = {
    "full": None,  # save nothing: recompute the whole block in the backward pass
    "dots": jax.checkpoint_policies.dots_with_no_batch_dims_saveable,
}


def _blocks(
    blocks: Block, x: Array, positions: Array, cfg: ModelConfig, cache: Any, constrain: Any
) -> tuple[Array, Any]:
    def body(x: Array, layer: tuple[Block, Any]) -> tuple[Array, Any]:
        p, c = layer
        x, c = _block(p, x, positions, cfg, c)
        return constrain(x, _RESIDUAL), c

    if cfg.remat != "none":
        body = jax.checkpoint(body, policy=_REMAT_POLICIES[cfg.remat])
    if cfg.scan_layers:
        return jax.lax.scan(body, x, (blocks, cache))
    outs = []
    for i in range(cfg.n_layers):
        layer = jax.tree.map(lambda a, i=i: a[i], (blocks, cache))
        x, c = body(x, layer)
        outs.append(c)
    new_cache = None if cache is None else jax.tree.map(lambda *cs: jnp.stack(cs), *outs)
    return x, new_cache


def _cast(params: GPT, dtype: Any) -> GPT:
    return jax.tree.map(
        lambda a: a.astype(dtype) if jnp.issubdtype(a.dtype, jnp.floating) else a, params
    )


_RESIDUAL = ("batch", "seq", "act_embed")


def _no_constraint(x: Array, logical_axes: tuple) -> Array:
    return x


def apply(
    params: GPT,
    tokens: Array,
    cfg: ModelConfig,
    *,
    positions: Array | None = None,
    cache: Any = None,
    constrain: Any = _no_constraint,
) -> tuple[Array, Any]:
    """Logits ``(B, T, vocab)`` in float32 and the updated KV cache (``None`` without one).

    ``constrain(x, logical_axes)`` places intermediates (the trainer passes ``paramspec.constrain``
    with its mesh and rules): the residual stream after every block is batch-sharded, and the
    embedding table is gathered whole before the lookup (a gather from a table sharded on both
    axes makes XLA replicate it anyway, with a warning). ``positions`` defaults to ``0..T-1``.
    """
    dtype = compute_dtype(cfg)
    p = _cast(params, dtype)
    if positions is None:
        positions = jnp.arange(tokens.shape[1])
    x = constrain(p.embed, (None, None))[tokens]
    if cfg.pos == "learned":
        x = x + p.pos_embed[positions][None]
    x, cache = _blocks(p.blocks, constrain(x, _RESIDUAL), positions, cfg, cache, constrain)
    x = _norm(p.final_norm, x, cfg.norm)
    unembed = p.embed.T if cfg.tie_embeddings else p.unembed
    logits = jnp.einsum("btd,dv->btv", x, unembed, preferred_element_type=jnp.float32)
    if cfg.logit_softcap > 0:
        logits = cfg.logit_softcap * jnp.tanh(logits / cfg.logit_softcap)
    return logits, cache


def forward(params: GPT, tokens: Array, config: Any) -> Array:
    """Next-token logits ``(batch, seq, vocab)`` (float32) for integer ``tokens: (batch, seq)``.

    Args:
        params: the model parameters (``init_params`` or a checkpoint).
        tokens: token ids, at most ``model.seq_len`` long.
        config: a :class:`Config` or its ``ModelConfig``.

    Example:
        >>> import jax, jax.numpy as jnp, dataclasses
        >>> from gpt_models import PRESETS, forward, init_params
        >>> cfg = dataclasses.replace(PRESETS["tiny"].model, d_model=32, n_layers=1, n_heads=2)
        >>> params = init_params(cfg, jax.random.key(0))
        >>> forward(params, jnp.zeros((2, 5), jnp.int32), cfg).shape
        (2, 5, 256)
    """
    cfg = getattr(config, "model", config)
    return apply(params, tokens, cfg)[0]


def loss_fn(params: GPT, batch: Array, cfg: ModelConfig, constrain: Any = _no_constraint) -> Array:
    """Mean next-token cross-entropy (nats per token) of ``batch: (B, T + 1)``."""
    inputs, targets = batch[:, :-1], batch[:, 1:]
    logits = apply(params, inputs, cfg, constrain=constrain)[0]
    logz = jax.nn.logsumexp(logits, axis=-1)
    picked = jnp.take_along_axis(logits, targets[..., None], axis=-1)[..., 0]
    return (logz - picked).mean()


def param_count(cfg: ModelConfig) -> int:
    """Number of parameters of the model ``cfg`` describes.

    Example:
        >>> from gpt_models import PRESETS
        >>> round(param_count(PRESETS["gpt2-small"].model) / 1e6)
        124
    """
    specs = GPT.param_specs(cfg)
    return sum(math.prod(s.shape) for s in jax.tree.leaves(specs))


def flops_per_token(cfg: ModelConfig) -> float:
    """Training FLOPs per token: ``6 * N_matmul + 12 * n_layers * d_model * seq_len``.

    ``N_matmul`` counts the weights of every matrix multiply (attention and MLP projections and the
    output projection onto the vocabulary, tied or not) and excludes the embedding lookups; the
    second term is the attention scores and weighted sum (forward 2 + backward 4 FLOPs per multiply-add,
    over the full ``seq_len`` square, as in the PaLM paper's MFU definition).

    Example:
        >>> from gpt_models import PRESETS
        >>> f"{flops_per_token(PRESETS['gpt2-small'].model):.3g}"
        '8.55e+08'
    """
    d, f, L = cfg.d_model, cfg.ff_dim, cfg.n_layers
    attn = d * (cfg.n_heads + 2 * cfg.kv_heads) * cfg.head_dim + cfg.n_heads * cfg.head_dim * d
    mlp = (3 if cfg.mlp == "swiglu" else 2) * d * f
    n_matmul = L * (attn + mlp) + d * cfg.vocab_size
    return 6.0 * n_matmul + 12.0 * L * d * cfg.seq_len


def init_params(config: Any, key: Any, mesh: Any = None, rules: Any = None) -> GPT:
    """Fresh parameters, created in one jitted computation directly in their sharded layout.

    Args:
        config: a :class:`Config` or its ``ModelConfig``.
        key: a ``jax.random.key``.
        mesh: the mesh (default: the first device alone).
        rules: logical-axis rules (default: the trainer's data/fsdp/tensor rules).

    Example:
        >>> import jax, dataclasses
        >>> from gpt_models import PRESETS, init_params
        >>> cfg = dataclasses.replace(PRESETS["tiny"].model, n_layers=1)
        >>> init_params(cfg, jax.random.key(0)).embed.shape
        (256, 128)
    """
    from . import _parallel

    cfg = getattr(config, "model", config)
    mesh = mesh if mesh is not None else _parallel.single_device_mesh()
    return ps.init(GPT.param_specs(cfg), key, mesh, rules if rules is not None else _parallel.RULES)
