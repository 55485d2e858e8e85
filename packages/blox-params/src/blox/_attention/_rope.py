"""Rotary position embeddings, and the positions of tokens packed into segments."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import jax
import jax.numpy as jnp

_KINDS = ("linear", "llama3")


@dataclasses.dataclass(frozen=True)
class RopeScaling:
    """A stretch of RoPE's frequencies, so a model sees positions past its training length.

    ``kind="linear"`` divides every frequency by ``factor`` (position interpolation: position
    ``p`` rotates as ``p / factor`` did). ``kind="llama3"`` (Llama 3.1 and 3.2) divides only
    the low frequencies, those whose wavelength ``2 pi / freq`` exceeds
    ``original_max_positions / low_freq_factor``, by ``factor``; keeps the high ones, whose
    wavelength is under ``original_max_positions / high_freq_factor``; and blends the two in
    between, by how many turns the wavelength makes in ``original_max_positions``.

    Args:
        kind: ``"linear"`` or ``"llama3"``.
        factor: how much longer the positions are, > 0 (Llama 3.2: 32).
        low_freq_factor: ``llama3`` only (Llama 3: 1).
        high_freq_factor: ``llama3`` only, > ``low_freq_factor`` (Llama 3: 4).
        original_max_positions: ``llama3`` only: the context the model was pre-trained with
            (Llama 3: 8192).

    Raises:
        ValueError: an unknown ``kind`` or a value out of range, named.

    Example:
        >>> import jax.numpy as jnp
        >>> import blox as bx
        >>> bx.RopeScaling("linear", 4.0).frequencies(jnp.array([1.0, 0.5])).tolist()
        [0.25, 0.125]
    """

    kind: str
    factor: float
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_max_positions: int = 8192

    def __post_init__(self) -> None:
        problems = []
        if self.kind not in _KINDS:
            problems.append(f"kind={self.kind!r} is not one of {list(_KINDS)}")
        if not (math.isfinite(self.factor) and self.factor > 0):
            problems.append(f"factor={self.factor} must be a finite number > 0")
        if self.kind == "llama3":
            low, high = self.low_freq_factor, self.high_freq_factor
            if not (math.isfinite(low) and math.isfinite(high) and 0 < low < high):
                problems.append(
                    f"low_freq_factor={low} and high_freq_factor={high} must be finite with "
                    "0 < low_freq_factor < high_freq_factor"
                )
            if not self.original_max_positions > 0:
                problems.append(f"original_max_positions={self.original_max_positions} must be > 0")
        if problems:
            raise ValueError(
                f"RopeScaling: {'; '.join(problems)}. Llama 3.2's is RopeScaling('llama3', "
                "32.0, low_freq_factor=1.0, high_freq_factor=4.0, original_max_positions=8192)."
            )

    def frequencies(self, freqs: jax.Array) -> jax.Array:
        """``freqs`` (RoPE's ``base ** (-2i / d)``, float32) stretched."""
        if self.kind == "linear":
            return freqs / self.factor
        old = float(self.original_max_positions)
        wavelength = 2 * math.pi / freqs
        low, high = self.low_freq_factor, self.high_freq_factor
        stretched = jnp.where(wavelength > old / low, freqs / self.factor, freqs)
        # Between the two wavelengths: a blend by how often the wave turns in the old context.
        smooth = (old / wavelength - low) / (high - low)
        blended = (1 - smooth) * stretched / self.factor + smooth * stretched
        middle = (wavelength >= old / high) & (wavelength <= old / low)
        return jnp.where(middle, blended, stretched)


def rope(
    x: jax.Array,
    positions: jax.Array,
    base: float | jax.Array = 10000.0,
    scaling: RopeScaling | None = None,
) -> jax.Array:
    """Rotary position embedding of ``x`` ``(..., T, heads, head_dim)`` at ``positions``.

    Rotates pairs ``(x[..., :d/2], x[..., d/2:])`` by angles ``position * freq_i`` with
    ``freq_i = base**(-2i/d)``, stretched by ``scaling`` when given.

    Args:
        x: queries or keys, ``(..., T, heads, head_dim)`` with an even ``head_dim``.
        positions: one position per token: ``(T,)`` (the same for every row) or ``(..., T)``
            matching ``x``'s leading axes (e.g. ``(batch, T)``, positions that restart in each
            example of a packed row).
        base: the frequency base.
        scaling: a :class:`RopeScaling` of the frequencies (Llama 3's ``llama3``, ``linear``).

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
    if scaling is not None:
        freqs = scaling.frequencies(freqs)
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
