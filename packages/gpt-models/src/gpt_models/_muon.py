"""Muon for the hidden weight matrices, AdamW for the rest (``train.optimizer = "muon"``).

Muon orthogonalises each matrix's momentum with a few Newton-Schulz iterations; it is defined for the
matrices that map one hidden representation to another. The embedding table (a lookup, not a matrix
product), the untied output head, the position table and the norm scales are trained by AdamW, as in
the Muon reference recipe. We use optax's implementation (``optax.contrib.muon``).
"""

from __future__ import annotations

import inspect
from typing import Any

import jax
import optax

from core_primitives import keypath_to_path

from ._errors import ConfigError

MIN_OPTAX = "0.2.7"

# optax.contrib.muon arguments we rely on, and the optax release that first has them all: per-leaf
# dimension numbers (0.2.6) and consistent_rms (0.2.7).
_NEEDED_ARGS = ("muon_weight_dimension_numbers", "consistent_rms", "adam_weight_decay")

# Update RMS that makes a Muon step as large as an AdamW step (Liu et al. 2025, "Muon is scalable for
# LLM training"): with it, train.lr and train.weight_decay mean the same for both optimizers, so a
# config switches optimizer without retuning the learning rate.
_ADAMW_MATCHED_RMS = 0.2

# Hidden matrices by parameter name -> (reduction axes, output axes), counted from the end so that the
# leading "layers" axis of stacked blocks is a batch axis (each layer is orthogonalised on its own).
# wq/wk/wv: (embed -> heads, head_dim); wo: (heads, head_dim -> embed); MLP: (in -> out).
_MATRICES: dict[str, tuple[tuple[int, ...], tuple[int, ...]]] = {
    "wq": ((-3,), (-2, -1)),
    "wk": ((-3,), (-2, -1)),
    "wv": ((-3,), (-2, -1)),
    "wo": ((-3, -2), (-1,)),
    "w_in": ((-2,), (-1,)),
    "w_gate": ((-2,), (-1,)),
    "w_out": ((-2,), (-1,)),
}


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
        f"dimension numbers and consistent_rms); the installed optax is {version}. Upgrade it, e.g. "
        f"`uv pip install -U 'optax>={MIN_OPTAX}'`, or train with --set train.optimizer=adamw."
    )


def muon_dimension_numbers(params: Any) -> Any:
    """Per leaf: Muon's ``(reduction, output)`` axes for a hidden matrix, ``None`` for AdamW leaves.

    Example:
        >>> import jax, dataclasses
        >>> from gpt_models import PRESETS, init_params
        >>> cfg = dataclasses.replace(PRESETS["tiny"].model, n_layers=1)
        >>> dims = muon_dimension_numbers(init_params(cfg, jax.random.key(0)))
        >>> dims.embed is None, dims.blocks.attn.wo
        (True, MuonDimensionNumbers(reduction_axis=(-3, -2), output_axis=(-1,)))
    """
    from optax.contrib import MuonDimensionNumbers

    def pick(keypath: Any, leaf: Any) -> Any:
        axes = _MATRICES.get(keypath_to_path(keypath)[-1])
        if axes is None or len(leaf.shape) < len(axes[0]) + len(axes[1]):
            return None
        return MuonDimensionNumbers(reduction_axis=axes[0], output_axis=axes[1])

    return jax.tree_util.tree_map_with_path(pick, params)


def make_muon(
    schedule: optax.Schedule, *, b1: float, b2: float, weight_decay: float
) -> optax.GradientTransformation:
    """Muon on the hidden matrices; AdamW (``b1``, ``b2``) on the rest, one learning-rate schedule.

    Muon keeps optax's defaults (Nesterov momentum 0.95, 5 Newton-Schulz steps), the reference values.

    Raises:
        ConfigError: the installed optax has no suitable Muon (the message names the version needed).
    """
    _require_muon()
    # AdamW's leaves are embeddings and norm scales: no weight decay (decaying a norm scale towards 0
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
