"""The attention cores ``MultiHeadAttention(implementation=...)`` picks from, and the pick.

Each core computes softmax attention of ``q (..., T, H, hd)`` over ``k``, ``v``
``(..., S, KVH, hd)`` with the layer's boolean mask (``_masks.layer_mask``) and causal flag,
and gives the same result up to float rounding. Head counts and sizes are read off the shapes.
"""

from __future__ import annotations

from typing import Literal, NamedTuple, cast

import jax
import jax.numpy as jnp

from ._masks import flat_mask

# The attention cores `implementation=` picks from; `auto` resolves per backend (`choose`).
IMPLEMENTATIONS = ("auto", "blocked", "xla", "cudnn")
_Fused = Literal["xla", "cudnn"]  # those that go through jax.nn.dot_product_attention
# Causal attention on CPU: query rows per block, and at most this many blocks
# (benchmarks/gpt/PROFILE.md).
_CPU_BLOCK_ROWS, _CPU_MAX_BLOCKS = 64, 8


class Logits(NamedTuple):
    """How the attention logits are formed: ``q . k * scale`` (``None``: ``head_dim ** -0.5``),
    then ``softcap * tanh(logits / softcap)`` when ``softcap > 0`` (``blocked`` core only)."""

    scale: float | None = None
    softcap: float = 0.0


_PLAIN = Logits()


def choose(implementation: str, name: str, q: jax.Array, k: jax.Array, dropping: bool) -> str:
    """``implementation`` with ``auto`` resolved; ``cudnn`` refused off GPU, by the layer's name.

    While dropping, ``auto`` is ``blocked``: the only core that applies dropout (``xla`` and
    ``cudnn`` with a dropout rate are refused when the layer is built).

    ``auto`` is the measured best per backend (benchmarks/gpt/RESULTS.md and RESULTS-gpu.md):
    ``cudnn`` on a GPU for 16-bit self-attention (queries as long as the keys) with a head
    size the kernel takes (a multiple of 8, at most 128): 0.88x blocked's step time on an H200
    and, unlike the other cores, no ``(T, S)`` logits in memory. ``blocked`` everywhere else.
    """
    backend = jax.default_backend()
    if implementation == "cudnn" and backend != "gpu":
        raise ValueError(
            f"{name}: implementation='cudnn' is NVIDIA's fused attention kernel, which "
            f"runs on GPUs only; this computation runs on {backend!r}. Use "
            "implementation='auto' (picks per backend), 'blocked' or 'xla'."
        )
    if implementation != "auto":
        return implementation
    if dropping:
        return "blocked"
    head_dim = q.shape[-1]
    fused_ok = (
        backend == "gpu"
        and q.dtype in (jnp.bfloat16, jnp.float16)
        and q.shape[-3] == k.shape[-3]
        and head_dim % 8 == 0
        and head_dim <= 128
    )
    return "cudnn" if fused_ok else "blocked"


def attend(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    mask: jax.Array | None,
    causal: bool,
    core: str,
    causal_block: int | None = None,
    dropout: tuple[jax.Array, float] | None = None,
    logits: Logits = _PLAIN,
) -> jax.Array:
    """Attention through ``core`` (resolved by ``choose``); ``dropout`` is ``(key, rate)``."""
    if q.shape[-3] == 0:  # no queries (an empty prefill): nothing to attend, an empty result
        return jnp.zeros((*q.shape[:-1], v.shape[-1]), v.dtype)
    if core != "blocked":
        return _fused(q, k, v, mask, causal, cast(_Fused, core), logits.scale)
    T, S = q.shape[-3], k.shape[-3]
    rows = _block_rows(T, S, causal_block) if causal else T
    return _blocked(q, k, v, mask, causal, rows, dropout, logits)


def _blocked(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    mask: jax.Array | None,
    causal: bool,
    rows: int,
    dropout: tuple[jax.Array, float] | None,
    form: Logits,
) -> jax.Array:
    """The pure-JAX core: softmax attention in blocks of ``rows`` query rows.

    The products run heads-major, ``(..., H, T, hd)``, as batched matmuls over contiguous
    heads. Causal attention runs each block over the keys up to its last row only: the skipped
    keys are the ones the causal mask would zero, so the result is the same. With ``dropout``
    the softmax weights of each block are dropped with a mask drawn from
    ``fold_in(key, first row of the block)``.
    """
    T, S, heads, head_dim = q.shape[-3], k.shape[-3], q.shape[-2], q.shape[-1]
    kv_heads = k.shape[-2]
    groups = heads // kv_heads
    q, k, v = (jnp.moveaxis(a, -3, -2) for a in (q, k, v))  # (..., heads, T or S, hd)
    if groups > 1:
        q = q.reshape(*q.shape[:-3], kv_heads, groups, T, head_dim)
        scores, combine = "...kgtd,...ksd->...kgts", "...kgts,...ksd->...kgtd"
    else:
        scores, combine = "...htd,...hsd->...hts", "...hts,...hsd->...htd"
    scale = jnp.float32(head_dim**-0.5 if form.scale is None else form.scale)
    outs = []
    for start in range(0, T, rows):
        stop = min(T, start + rows)
        keys = stop + S - T if causal else S  # the last key any query of the block sees
        logits = jnp.einsum(scores, q[..., start:stop, :], k[..., :keys, :])
        logits = logits.astype(jnp.float32) * scale
        if form.softcap > 0:
            logits = form.softcap * jnp.tanh(logits / form.softcap)
        block_mask = None
        if mask is not None:
            block_mask = mask[..., start:stop, :] if mask.ndim > 1 and mask.shape[-2] > 1 else mask
            block_mask = block_mask[..., :keys] if block_mask.shape[-1] > 1 else block_mask
        if causal:
            seen = jnp.arange(start, stop)[:, None] + (S - T) >= jnp.arange(keys)[None, :]
            block_mask = seen if block_mask is None else block_mask & seen
        if block_mask is not None:
            logits = jnp.where(block_mask, logits, jnp.finfo(jnp.float32).min)
        weights = jax.nn.softmax(logits, axis=-1)
        if dropout is not None:
            weights = _drop(jax.random.fold_in(dropout[0], start), dropout[1], weights)
        weights = weights.astype(v.dtype)
        outs.append(jnp.einsum(combine, weights, v[..., :keys, :]))
    out = outs[0] if len(outs) == 1 else jnp.concatenate(outs, axis=-2)
    if groups > 1:
        out = out.reshape(*out.shape[:-4], heads, T, head_dim)
    return jnp.moveaxis(out, -2, -3)


def _drop(key: jax.Array, rate: float, weights: jax.Array) -> jax.Array:
    """Zero each weight with probability ``rate``, scale the kept ones up."""
    keep = jax.random.bernoulli(key, 1.0 - rate, weights.shape)
    return jnp.where(keep, weights / (1.0 - rate), 0.0)


def _fused(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    mask: jax.Array | None,
    causal: bool,
    implementation: _Fused,
    scale: float | None = None,
) -> jax.Array:
    """Attention through ``jax.nn.dot_product_attention``, which wants one batch axis.

    Its ``is_causal`` aligns query ``t`` with key ``t``; ours aligns the queries to the end
    of the keys (decoding with a cache), so with ``T != S`` the causal part is a mask. Segment
    ids arrive inside ``mask``: the function has no argument of its own for them in any JAX
    this package supports (0.7.2 to 0.12).
    """
    batch, (T, S) = q.shape[:-3], (q.shape[-3], k.shape[-3])
    heads, head_dim = q.shape[-2], q.shape[-1]
    q, k, v = (a.reshape(-1, *a.shape[-3:]) for a in (q, k, v))  # (B, T or S, heads, hd)
    full = None if mask is None else flat_mask(mask, batch, grouped=heads > k.shape[-2])
    is_causal = causal and T == S
    if causal and T != S:
        seen = jnp.arange(T)[:, None] + (S - T) >= jnp.arange(S)[None, :]
        full = seen[None, None] if full is None else full & seen
    if full is not None and implementation == "cudnn":  # cudnn wants the query axis whole
        full = jnp.broadcast_to(full, (*full.shape[:2], T, S))
    out = jax.nn.dot_product_attention(
        q, k, v, mask=full, is_causal=is_causal, scale=scale, implementation=implementation
    )
    return out.reshape(*batch, T, heads, head_dim)


def _block_rows(T: int, S: int, causal_block: int | None) -> int:
    """Query rows per block of causal attention (``T``: one block)."""
    if T > S:  # the first queries see no key: one block keeps their (uniform) weights
        return T
    if causal_block is not None:
        return causal_block
    if jax.default_backend() != "cpu":
        return T
    return max(_CPU_BLOCK_ROWS, -(-T // _CPU_MAX_BLOCKS))
