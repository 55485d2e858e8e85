"""Muon for the hidden weight matrices, AdamW for the rest (``train.optimizer = "muon"``).

Muon orthogonalises each matrix's momentum with a few Newton-Schulz iterations; it is defined for
the
matrices that map one hidden representation to another. The embedding table (a lookup, not a matrix
product), the untied output head, the position table and the norm scales are trained by AdamW, as in
the Muon reference recipe. We use optax's implementation (``optax.contrib.muon``).
"""

from __future__ import annotations

import inspect
from typing import Any

import optax

import blox as bx

from .._errors import ConfigError

MIN_OPTAX = "0.2.7"

# optax.contrib.muon arguments we rely on, and the optax release that first has them all: per-leaf
# dimension numbers (0.2.6) and consistent_rms (0.2.7).
_NEEDED_ARGS = ("muon_weight_dimension_numbers", "consistent_rms", "adam_weight_decay")

# Update RMS that makes a Muon step as large as an AdamW step (Liu et al. 2025, "Muon is scalable
# for
# LLM training"): with it, train.lr and train.weight_decay mean the same for both optimizers, so a
# config switches optimizer without retuning the learning rate.
_ADAMW_MATCHED_RMS = 0.2

# Hidden matrices are chosen by their logical axes, not their names: every axis (after the leading
# stacked "layers" axes, which are batch axes: each layer is orthogonalised on its own) is one of
# these, grouped so that a matrix's leading group is its input (reduction) side. An axis outside the
# table ("vocab" of the embedding and output head, None of the position table and norm scales)
# leaves the parameter to AdamW.
_AXIS_GROUPS = {
    "embed": "embed",
    "mlp": "mlp",
    "heads": "heads",
    "kv_heads": "heads",
    "head_dim": "heads",
}
_BATCH_AXES = ("layers",)


def muon_available() -> bool:
    """Whether the installed optax has a Muon with every argument :func:`make_muon` passes."""
    contrib = getattr(optax, "contrib", None)
    muon = getattr(contrib, "muon", None)
    if muon is None:
        return False
    params = inspect.signature(muon).parameters
    return all(name in params for name in _NEEDED_ARGS)


def _require_muon() -> None:
    if muon_available():
        return
    version = getattr(optax, "__version__", "unknown")
    raise ConfigError(
        f"train.optimizer = 'muon' needs optax >= {MIN_OPTAX} (optax.contrib.muon with per-matrix "
        f"dimension numbers and consistent_rms); the installed optax is {version}. Upgrade it, "
        f"e.g. "
        f"`uv pip install -U 'optax>={MIN_OPTAX}'`, or train with --set train.optimizer=adamw."
    )


def _dimension_numbers(logical_axes: Any) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """``(reduction, output)`` axes, counted from the end, of a hidden matrix; else ``None``."""
    if not logical_axes:
        return None
    axes = list(logical_axes)
    while axes and axes[0] in _BATCH_AXES:
        axes.pop(0)
    if len(axes) < 2 or any(a not in _AXIS_GROUPS for a in axes):
        return None
    n_in = 1
    while n_in < len(axes) and _AXIS_GROUPS[axes[n_in]] == _AXIS_GROUPS[axes[0]]:
        n_in += 1
    if n_in == len(axes):
        return None
    first = -len(axes)
    return tuple(range(first, first + n_in)), tuple(range(first + n_in, 0))


def muon_dimension_numbers(params: Any) -> Any:
    """Per parameter: Muon's ``(reduction, output)`` axes for a hidden matrix, ``None`` for AdamW.

    Read from each parameter's logical axes: ``(embed, heads, head_dim)`` reduces ``embed``,
    ``(heads, head_dim, embed)`` reduces the two head axes, ``(embed, mlp)``/``(mlp, embed)``
    reduce their first axis; leading ``layers`` axes are batch axes; anything with ``vocab`` or
    an unnamed axis (embeddings, output head, norm scales) goes to AdamW.

    Args:
        params: the model's ``blox.Params`` (arrays or ``ShapeDtypeStruct`` s).

    Example:
        >>> import dataclasses
        >>> from gpt_models import PRESETS, param_specs
        >>> dims = muon_dimension_numbers(param_specs(PRESETS["tiny"]))
        >>> dims[("gpt", "model", "embed", "embedding")].value is None
        True
        >>> dims[("gpt", "model", "blocks", "block", "attn", "out")].value
        MuonDimensionNumbers(reduction_axis=(-3, -2), output_axis=(-1,))
    """
    from optax.contrib import MuonDimensionNumbers

    if not isinstance(params, bx.Params):
        raise TypeError(
            f"muon_dimension_numbers: expected the model's blox.Params (Muon reads each "
            f"parameter's logical axes), got {type(params).__name__}."
        )

    def pick(param: bx.Param) -> Any:
        dims = _dimension_numbers(param.logical_axes)
        if dims is None:
            return None
        return MuonDimensionNumbers(reduction_axis=dims[0], output_axis=dims[1])

    return params.map(pick)


def make_muon(
    schedule: optax.Schedule, *, b1: float, b2: float, weight_decay: float
) -> optax.GradientTransformation:
    """Muon on the hidden matrices; AdamW (``b1``, ``b2``) on the rest, one learning-rate schedule.

    Muon keeps optax's defaults (Nesterov momentum 0.95, 5 Newton-Schulz steps), the reference
    values.

    Raises:
        ConfigError: the installed optax has no suitable Muon (the message names the version
            needed).
    """
    _require_muon()
    # AdamW's leaves are embeddings and norm scales: no weight decay (decaying a norm scale towards
    # 0
    # fights the normalisation; the reference recipe does not decay embeddings either).
    return optax.contrib.muon(
        schedule,
        weight_decay=weight_decay,
        adam_b1=b1,
        adam_b2=b2,
        adam_weight_decay=0.0,
        muon_weight_dimension_numbers=muon_dimension_numbers,
        consistent_rms=_ADAMW_MATCHED_RMS,
    )
