"""Attention masks: the user's boolean mask, shaped for each core.

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
) -> jax.Array | None:
    """The user mask shaped for the logits.

    Args:
        name: the layer, for errors.
        mask: the user's mask (``True`` = attend; numbers are read as ``!= 0``), or ``None``.
        batch: the leading axes of the queries.
        heads: ``(num_heads, num_kv_heads)``.
        T: queries. S: keys.

    A mask is broadcast to every head only where grouped heads need its head axis split.
    """
    num_heads, kv_heads = heads
    full = (*batch, num_heads, T, S)
    combined = None if mask is None else _user_mask(name, mask, full)
    if combined is None:
        return None
    groups = num_heads // kv_heads
    if groups == 1:
        return combined
    if combined.ndim < 3 or combined.shape[-3] == 1:  # the same for every head
        return combined[..., None, :, :]
    combined = jnp.broadcast_to(combined, full)
    return combined.reshape(*combined.shape[:-3], kv_heads, groups, T, S)


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
