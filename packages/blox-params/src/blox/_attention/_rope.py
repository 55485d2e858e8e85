"""Rotary position embeddings, and the positions of tokens packed into segments."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp


def rope(x: jax.Array, positions: jax.Array, base: float | jax.Array = 10000.0) -> jax.Array:
    """Rotary position embedding of ``x`` ``(..., T, heads, head_dim)`` at ``positions``.

    Rotates pairs ``(x[..., :d/2], x[..., d/2:])`` by angles ``position / base**(2i/d)``.

    Args:
        x: queries or keys, ``(..., T, heads, head_dim)`` with an even ``head_dim``.
        positions: one position per token: ``(T,)`` (the same for every row) or ``(..., T)``
            matching ``x``'s leading axes (e.g. ``(batch, T)``, positions that restart in each
            example of a packed row).
        base: the frequency base.

    Raises:
        ValueError: ``positions`` does not give one position per token of ``x``.

    Example:
        >>> import jax.numpy as jnp
        >>> x = jnp.ones((3, 1, 4))
        >>> bool(jnp.allclose(rope(x, jnp.arange(3))[0], x[0]))  # position 0 is unrotated
        True
        >>> packed = rope(jnp.ones((1, 4, 1, 4)), jnp.array([[0, 1, 0, 1]]))  # two examples
        >>> bool(jnp.allclose(packed[:, :2], packed[:, 2:]))
        True
    """
    positions = jnp.asarray(positions)
    check_positions(positions, x.shape[:-2], "rope")
    half = x.shape[-1] // 2
    freqs = base ** (-jnp.arange(half, dtype=jnp.float32) / half)
    angles = positions.astype(jnp.float32)[..., None] * freqs  # (..., T, half)
    sin, cos = jnp.sin(angles)[..., None, :], jnp.cos(angles)[..., None, :]  # (..., T, 1, half)
    x1, x2 = x[..., :half].astype(jnp.float32), x[..., half:].astype(jnp.float32)
    rotated = jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)
    return rotated.astype(x.dtype)


def check_positions(positions: Any, tokens: tuple[int, ...], where: str) -> None:
    """Refuse ``positions`` that are not ``(T,)`` or ``(..., T)`` for ``tokens`` ``(..., T)``.

    Any real dtype passes: fractional positions (interpolated RoPE) are legitimate.
    """
    shape = tuple(positions.shape)
    if _broadcasts(shape, tokens) and shape[-1:] == tokens[-1:]:
        return
    raise ValueError(
        f"{where}: positions of shape {shape} do not give one position per token of the "
        f"inputs, whose tokens have shape {tokens} (..., T). Pass (T,) = {tokens[-1:]} for the "
        f"same positions in every row, or {tokens} for positions per row."
    )


def _broadcasts(shape: tuple[int, ...], target: tuple[int, ...]) -> bool:
    try:
        return jnp.broadcast_shapes(shape, target) == target
    except ValueError:
        return False


def segment_positions(segment_ids: jax.Array) -> jax.Array:
    """Each token's position within its segment: how many earlier tokens share its id.

    For segments laid out one after another, ``[7, 7, 7, 2, 2]`` gives ``[0, 1, 2, 0, 1]``;
    counting (rather than subtracting where the segment starts) also holds for a segment that
    comes back later in the row, and matches what the segment mask lets each token see.
    A model with learned position embeddings looks its packed rows' positions up with it.

    Example:
        >>> import jax.numpy as jnp
        >>> import blox as bx
        >>> bx.segment_positions(jnp.array([[1, 1, 1, 2, 2, 0]])).tolist()
        [[0, 1, 2, 0, 1, 0]]
    """
    # O(T log T), not a (T, T) comparison: a stable sort groups equal ids in row order, a
    # token's rank within its group is its position, and the inverse permutation puts it back.
    T = segment_ids.shape[-1]
    order = jnp.argsort(segment_ids, axis=-1, stable=True)
    grouped = jnp.take_along_axis(segment_ids, order, axis=-1)
    index = jnp.broadcast_to(jnp.arange(T, dtype=jnp.int32), grouped.shape)
    starts = jnp.concatenate(
        [jnp.ones_like(grouped[..., :1], bool), grouped[..., 1:] != grouped[..., :-1]], axis=-1
    )
    first = jax.lax.cummax(jnp.where(starts, index, 0), axis=grouped.ndim - 1)
    back = jnp.argsort(order, axis=-1)
    return jnp.take_along_axis(index - first, back, axis=-1)


def call_positions(
    name: str,
    use_rope: bool,
    positions: Any,
    segment_ids: jax.Array | None,
    tokens: tuple[int, ...],
    cross: bool,
    decode: bool,
) -> jax.Array | None:
    """The RoPE positions of a self-attention call's tokens ``(..., T)``; ``None`` without RoPE.

    ``positions`` as given (checked), else each token's position in its segment with
    ``segment_ids``, else ``0..T-1``. Refused where they cannot apply: without RoPE, with
    ``kv`` (the keys' positions are unknown) and while decoding (the cache's index decides).
    """
    if positions is None:
        if not use_rope:
            return None
        return jnp.arange(tokens[-1]) if segment_ids is None else segment_positions(segment_ids)
    if not use_rope:
        raise ValueError(
            f"{name}: positions only move RoPE, and this layer has use_rope=False. Drop "
            "positions (or build the layer with use_rope=True); learned position embeddings "
            "take them before the attention."
        )
    if cross:
        raise ValueError(
            f"{name}: positions are for self-attention (queries and keys are the same tokens); "
            "with kv the keys' positions are unknown. Rotate queries and keys yourself with "
            "bx.rope, or drop kv."
        )
    if decode:
        raise ValueError(
            f"{name}: decode=True rotates by the cache's own positions (cache_index + 0..T-1); "
            "drop positions when decoding."
        )
    positions = jnp.asarray(positions)
    check_positions(positions, tokens, name)
    return positions
