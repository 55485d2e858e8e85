"""Rotary position embeddings."""

from __future__ import annotations

import jax
import jax.numpy as jnp


def rope(x: jax.Array, positions: jax.Array, base: float = 10000.0) -> jax.Array:
    """Rotary position embedding of ``x`` ``(..., T, heads, head_dim)`` at ``positions`` ``(T,)``.

    Rotates pairs ``(x[..., :d/2], x[..., d/2:])`` by angles ``position / base**(2i/d)``.

    Example:
        >>> import jax.numpy as jnp
        >>> x = jnp.ones((3, 1, 4))
        >>> bool(jnp.allclose(rope(x, jnp.arange(3))[0], x[0]))  # position 0 is unrotated
        True
    """
    half = x.shape[-1] // 2
    freqs = base ** (-jnp.arange(half, dtype=jnp.float32) / half)
    angles = positions.astype(jnp.float32)[:, None] * freqs  # (T, half)
    sin, cos = jnp.sin(angles)[:, None, :], jnp.cos(angles)[:, None, :]  # (T, 1, half)
    x1, x2 = x[..., :half].astype(jnp.float32), x[..., half:].astype(jnp.float32)
    rotated = jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)
    return rotated.astype(x.dtype)
