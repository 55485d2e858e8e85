"""Checks of ``MultiHeadAttention``'s constructor options, each refused by the layer's name."""

from __future__ import annotations

from typing import Any

from core_primitives import did_you_mean

from .._dropout import _is_rate
from .._errors import RngError
from .._rng import Rng
from ._cores import IMPLEMENTATIONS

# Parameter names of MultiHeadAttention whose metadata can be given, for the `metadata` option.
_PARAM_NAMES = ("query", "key", "value", "out", "query_bias", "key_bias", "value_bias", "out_bias")


def check_implementation(name: str, implementation: Any) -> str:
    """``implementation`` if it names an attention core, else the choices."""
    if implementation not in IMPLEMENTATIONS:
        raise ValueError(
            f"{name}: implementation={implementation!r} is not an attention core; "
            f"choose one of {list(IMPLEMENTATIONS)}."
            f"{did_you_mean(str(implementation), IMPLEMENTATIONS)}"
        )
    return str(implementation)


def check_dropout(name: str, rate: Any, implementation: str, rng: Rng | None) -> float:
    """``rate`` as a float in ``[0, 1)`` that the chosen core can apply, with an ``Rng``."""
    if not _is_rate(rate):
        raise ValueError(
            f"{name}: dropout_rate must be in [0, 1), got {rate!r}. It is the "
            "probability of zeroing an attention weight; 0 turns dropout off."
        )
    rate = float(rate)
    if rate > 0 and implementation in ("xla", "cudnn"):
        raise ValueError(
            f"{name}: dropout_rate={rate} needs the blocked attention core, but "
            f"implementation={implementation!r} runs jax.nn.dot_product_attention, which has "
            "no dropout. Use implementation='auto' (blocked while dropping, the backend's "
            "best otherwise) or 'blocked', or dropout_rate=0."
        )
    if rate > 0 and rng is None:
        raise RngError(
            f"{name}: dropout_rate={rate} needs an Rng to draw its masks. Pass the "
            "model's: bx.MultiHeadAttention(graph / 'attn', ..., rng=rng, dropout_rate=rate)."
        )
    return rate


def check_metadata(name: str, metadata: Any) -> dict[str, Any]:
    """``metadata`` as a dict keyed by the layer's parameter names (unknown names refused)."""
    metadata = dict(metadata or {})
    known = (*_PARAM_NAMES, "query_norm", "key_norm")
    unknown = sorted(set(metadata) - set(known))
    if unknown:
        raise ValueError(
            f"{name}: metadata names unknown parameters {unknown}; the known ones are "
            f"{list(known)}.{did_you_mean(unknown[0], known)}"
        )
    return metadata
