"""Mixed precision: one rule for every layer's ``dtype`` / ``param_dtype`` options."""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp


def promote(dtype: Any, *arrays: Any) -> list[Any]:
    """Cast ``arrays`` to the computation dtype.

    ``dtype=None`` computes in the promoted dtype of the inputs and params (float32 params with
    bfloat16 inputs compute in float32); a given ``dtype`` (e.g. ``jnp.bfloat16``) casts all of
    them, which is how params stored in ``param_dtype=float32`` compute in half precision.
    """
    present = [a for a in arrays if a is not None]
    target = dtype if dtype is not None else jnp.result_type(*present)
    return [None if a is None else jnp.asarray(a, target) for a in arrays]
