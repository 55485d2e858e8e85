"""A flag that tells a site's first run from the copy ``jax.checkpoint`` recomputes.

``tap`` puts a host callback where a site was. When that happens before differentiation
(``grad(tap(f))``), the site is gone by the time remat copies the forward pass into the backward
pass, so the ``lox_p`` no-recompute mark cannot help, and JAX deliberately runs a debug callback
in both copies. The callback therefore also gets ``fresh()``: a primitive whose recomputed copy
(marked by the same no-recompute rule) returns False, and the host skips the call.
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
import numpy as np

from core_primitives import compat


def _value(flag: Any, *, recomputed: bool) -> Any:
    return jnp.logical_and(flag, not recomputed)


fresh_p = compat.Primitive("lox_fresh")
fresh_p.def_impl(_value)
fresh_p.def_abstract_eval(lambda aval, **params: aval)
compat.register_lowering(fresh_p, _value, multiple_results=False)
compat.register_batching(fresh_p, lambda args, dims, **p: (fresh_p.bind(*args, **p), dims[0]))
compat.register_no_recompute(fresh_p, mark=lambda p: {**p, "recomputed": True})


def fresh() -> Any:
    """A bool scalar: True, except in remat's recomputed copy of the code that binds it.

    It must reach the host directly as a callback operand: an op combining it with another
    value could be saved as a residual by a checkpoint policy, and the copy would see True.
    """
    return fresh_p.bind(np.bool_(True), recomputed=False)
