"""The key/value cache of ``MultiHeadAttention``: creating it, and one cached decoding step.

Functions of the layer (``mha``), as ``kernel_and_bias`` is of the layers sharing it: the layer
keeps its public ``init_cache`` method and docstring and calls these.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

import jax
import jax.numpy as jnp

from .._checks import positive_int
from .._errors import MissingParamError
from .._params import Params
from ._masks import layer_mask, window_mask
from ._rope import rope

if TYPE_CHECKING:
    from ._layer import MultiHeadAttention

_CACHE_NAMES = ("cache_key", "cache_value", "cache_index")


def _is_path(wanted: tuple[str, ...], path: tuple[str, ...], _: Any) -> bool:
    return path == wanted


def init_cache(
    mha: MultiHeadAttention,
    params: Params,
    batch_shape: tuple[int, ...],
    max_length: int,
    dtype: Any = None,
) -> Params:
    """``params`` plus an empty cache (see ``MultiHeadAttention.init_cache``)."""
    max_length = positive_int(max_length, "max_length", mha)
    dtype = dtype or mha.dtype or mha.param_dtype
    shape = (*tuple(batch_shape), max_length, mha.num_kv_heads, mha.head_dim)
    was_locked = params.is_locked
    params = params.unlocked()
    for name, value in (
        ("cache_key", jnp.zeros(shape, dtype)),
        ("cache_value", jnp.zeros(shape, dtype)),
        ("cache_index", jnp.zeros((), jnp.int32)),
    ):
        old = (*mha.path, name)
        if old in params:  # a fresh cache of another size replaces the old one
            params = params.split(functools.partial(_is_path, old))[1]
        _, params = mha.get_param(params, name, value.shape, value, value.dtype, False)
    return params.locked() if was_locked else params


def _cache(mha: MultiHeadAttention, params: Params) -> tuple[jax.Array, jax.Array, jax.Array]:
    entries = [params.get((*mha.path, name)) for name in _CACHE_NAMES]
    if any(e is None for e in entries):
        raise MissingParamError(
            f"{mha.name} was called with decode=True but its params hold no KV cache. "
            "Create one first: params = mha.init_cache(params, batch_shape, max_length)."
        )
    k, v, i = (e.value for e in entries)
    return k, v, i


def append(
    mha: MultiHeadAttention,
    params: Params,
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    mask: Any,
    window: Any = None,
    base: Any = None,
) -> tuple[tuple[jax.Array, jax.Array, jax.Array, jax.Array | None], Params]:
    """Rotate ``q``/``k`` at the cache index (RoPE base ``base``), append ``k``/``v`` there,
    advance the index.

    Returns ``(q, keys, values, mask)`` to attend over (the whole cache, queries causally
    aligned to their positions and, with ``window``, to their newest keys; ``mask`` shaped by
    ``layer_mask``) and the updated params. The whole cache stays: a window only masks it.
    """
    cache_k, cache_v, index = _cache(mha, params)
    T, S = q.shape[-3], cache_k.shape[-3]
    if cache_k.shape[:-3] != k.shape[:-3]:
        raise ValueError(
            f"{mha.name}: the KV cache was made for batch shape {cache_k.shape[:-3]}, but the "
            f"inputs have batch shape {k.shape[:-3]}. Call init_cache with the inputs' "
            "leading axes."
        )
    positions = index + jnp.arange(T)
    if mha.use_rope:
        base = mha.rope_base if base is None else base
        q = rope(q, positions, base, mha.rope_scaling)
        k = rope(k, positions, base, mha.rope_scaling)
    axis = k.ndim - 3
    cache_k = jax.lax.dynamic_update_slice_in_dim(cache_k, k.astype(cache_k.dtype), index, axis)
    cache_v = jax.lax.dynamic_update_slice_in_dim(cache_v, v.astype(cache_v.dtype), index, axis)
    # Query t (at positions[t]) sees the slots written so far, up to its own position; slots
    # beyond it are either the future or still empty.
    visible = jnp.arange(S)[None, :] <= positions[:, None]  # (T, S)
    if window is not None:
        visible = visible & window_mask(positions, jnp.arange(S), window)
    user = visible if mask is None else jnp.asarray(mask).astype(bool) & visible
    heads = (mha.num_heads, mha.num_kv_heads)
    full = layer_mask(mha.name, user, q.shape[:-3], heads, T, S)
    params = mha.set_param(params, "cache_key", cache_k)
    params = mha.set_param(params, "cache_value", cache_v)
    params = mha.set_param(params, "cache_index", index + T)
    return (q, cache_k.astype(q.dtype), cache_v.astype(v.dtype), full), params
