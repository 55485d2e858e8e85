"""Attention masks: the user's boolean mask and packed rows' segment ids, shaped for each core.

Inside the layer a mask is boolean and broadcastable to the logits: ``(..., H, T, S)``, or
``(..., KVH, G, T, S)`` with grouped heads (``G = H // KVH`` query heads per key/value head).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp


def layer_mask(
    name: str,
    mask: Any,
    batch: tuple[int, ...],
    heads: tuple[int, int],
    T: int,
    S: int,
    segment_ids: jax.Array | None = None,
) -> jax.Array | None:
    """The user mask and the segment mask, combined and shaped for the logits.

    Args:
        name: the layer, for errors.
        mask: the user's mask (``True`` = attend; numbers are read as ``!= 0``), or ``None``.
        batch: the leading axes of the queries.
        heads: ``(num_heads, num_kv_heads)``.
        T: queries. S: keys.
        segment_ids: ``(*batch, T)`` ids checked by ``check_segment_ids`` (self-attention,
            so ``S == T``), or ``None``.

    A mask is broadcast to every head only where grouped heads need its head axis split.
    """
    num_heads, kv_heads = heads
    full = (*batch, num_heads, T, S)
    combined = None if mask is None else _user_mask(name, mask, full)
    if segment_ids is not None:
        same = segment_ids[..., :, None] == segment_ids[..., None, :]  # (*batch, T, T)
        same = same[..., None, :, :]  # one for every head
        combined = same if combined is None else combined & same
    if combined is None:
        return None
    groups = num_heads // kv_heads
    if groups == 1:
        return combined
    if combined.ndim < 3 or combined.shape[-3] == 1:  # the same for every head
        return combined[..., None, :, :]
    combined = jnp.broadcast_to(combined, full)
    return combined.reshape(*combined.shape[:-3], kv_heads, groups, T, S)


def window_mask(query_positions: jax.Array, key_positions: jax.Array, window: Any) -> jax.Array:
    """``(T, S)``: which keys lie within ``window`` positions of each query (the query's own
    position included, later ones too: the causal part is the caller's). ``window <= 0``: all.
    """
    distance = query_positions[:, None] - key_positions[None, :]
    window = jnp.asarray(window)
    return (distance < window) | (window <= 0)


def _user_mask(name: str, mask: Any, full: tuple[int, ...]) -> jax.Array:
    combined = jnp.asarray(mask).astype(bool)
    try:
        if jnp.broadcast_shapes(combined.shape, full) != full:
            raise ValueError("the mask would broaden the logits")
    except ValueError as err:
        raise ValueError(
            f"{name}: mask of shape {combined.shape} does not broadcast to "
            f"(*batch, num_heads, T, S) = {full}. A key padding mask (batch, S) goes in "
            "as mask[:, None, None, :]; a (T, S) mask as mask[None, None]."
        ) from err
    return combined


def check_segment_ids(
    name: str, segment_ids: Any, tokens: tuple[int, ...], cross: bool, decode: bool
) -> jax.Array:
    """``segment_ids`` as an integer array ``(*batch, T)`` for the tokens ``tokens`` of ``x``.

    Refused with cross-attention (the keys would need ids of their own) and with cached
    decoding (the cache holds one sequence per row, and no ids for the keys it has seen).
    """
    if cross:
        raise ValueError(
            f"{name}: segment_ids label the tokens of x for self-attention over packed rows, "
            "but kv was given too (cross-attention), whose keys have no ids. For "
            "cross-attention pass a boolean mask (..., num_heads, T, S) instead."
        )
    if decode:
        raise ValueError(
            f"{name}: segment_ids are for packed rows in training and evaluation; cached "
            "decoding (decode=True) runs one sequence per row. Decode each example in its own "
            "row and drop segment_ids."
        )
    ids = jnp.asarray(segment_ids)
    if not jnp.issubdtype(ids.dtype, jnp.integer):
        raise TypeError(
            f"{name}: segment_ids must be integers (one example id per token), got dtype "
            f"{ids.dtype}. Cast them with .astype(jnp.int32)."
        )
    if ids.shape != tokens:
        raise ValueError(
            f"{name}: segment_ids of shape {ids.shape} must have one id per token of x, whose "
            f"tokens have shape {tokens} (*batch, T). Build them per row, e.g. "
            "[0, 0, 0, 1, 1, 2, ...] for examples of 3, 2, ... tokens packed in one row."
        )
    return ids


def flat_mask(mask: jax.Array, batch: tuple[int, ...], grouped: bool) -> jax.Array:
    """``layer_mask``'s mask as the 4-D ``(B or 1, H or 1, T or 1, S or 1)`` JAX's kernel takes.

    ``grouped``: the mask has the grouped heads' split head axis (``num_heads > num_kv_heads``).
    """
    if grouped and mask.ndim >= 4:  # undo the grouped-heads split
        mask = mask.reshape(*mask.shape[:-4], -1, *mask.shape[-2:])
    mask = mask.reshape((1,) * (len(batch) + 3 - mask.ndim) + mask.shape)
    if all(n == 1 for n in mask.shape[: len(batch)]):
        return mask.reshape(1, *mask.shape[-3:])
    return jnp.broadcast_to(mask, (*batch, *mask.shape[-3:])).reshape(-1, *mask.shape[-3:])
