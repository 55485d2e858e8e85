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
_PROJECTIONS = ("query", "key", "value", "out")


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


def check_biases(name: str, use_bias: Any) -> frozenset[str]:
    """The projections ``use_bias`` gives a bias: all four, none, or those it names."""
    if isinstance(use_bias, bool):
        return frozenset(_PROJECTIONS if use_bias else ())
    names = [use_bias] if isinstance(use_bias, str) else list(use_bias)
    unknown = sorted(str(n) for n in names if n not in _PROJECTIONS)
    if unknown:
        raise ValueError(
            f"{name}: use_bias names {unknown}, which are not projections of the layer; pass "
            f"True, False or some of {list(_PROJECTIONS)}, e.g. use_bias=('query', 'key', "
            f"'value') for Qwen2.{did_you_mean(unknown[0], _PROJECTIONS)}"
        )
    return frozenset(names)


def check_qk_norm(name: str, qk_norm: Any) -> str:
    """``qk_norm`` as ``""`` (off), ``"head"`` or ``"all"``."""
    if qk_norm is False or qk_norm is None:
        return ""
    if qk_norm is True:
        return "head"
    if qk_norm in ("head", "all"):
        return str(qk_norm)
    raise ValueError(
        f"{name}: qk_norm={qk_norm!r} is not a QK-norm; pass False, True or 'head' (each head "
        "over its head_dim), or 'all' (over all heads' features at once)."
    )


def check_softcap(name: str, cap: Any, implementation: str) -> float:
    """``cap`` as a float >= 0 that the chosen core can apply."""
    if isinstance(cap, bool) or not isinstance(cap, (int, float)) or not cap >= 0:
        raise ValueError(
            f"{name}: logit_softcap must be a number >= 0, got {cap!r}; it caps the attention "
            "logits at +-cap (cap * tanh(logits / cap)); 0 turns it off."
        )
    if cap > 0 and implementation in ("xla", "cudnn"):
        raise ValueError(
            f"{name}: logit_softcap={cap} needs the blocked attention core, but "
            f"implementation={implementation!r} runs jax.nn.dot_product_attention, which has "
            "no soft-cap. Use implementation='auto' (blocked with a cap) or 'blocked'."
        )
    return float(cap)


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
