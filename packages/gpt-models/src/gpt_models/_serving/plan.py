"""The memory pre-flight of ``gpt serve``: the decoding step compiled for ``--max-batch`` slots of
``--max-len`` positions (the KV cache is its largest input), measured against the device before
the server binds its port; what does not fit is refused with the ``--max-batch`` that does.
"""

from __future__ import annotations

from typing import Any, TextIO

import jax
import jax.numpy as jnp

from .._compute.preflight import Plan, size
from .._compute.programs import Sized, one_device, one_device_mesh, plan_one_device
from .._config.schema import Config
from .._model.gpt import abstract_params
from .decode import Knobs, cache_bytes, empty_cache, split_cache, step


def compile_step(cfg: Config, slots: int, max_len: int) -> Any:
    """The decoding step for ``slots`` sequences of up to ``max_len`` tokens, compiled ahead of
    time from abstract params (nothing is allocated)."""
    weights = split_cache(abstract_params(cfg, one_device_mesh()))[0]
    cache = jax.eval_shape(lambda w: empty_cache(w, cfg.model, slots, max_len), weights)
    key = jax.eval_shape(lambda: jax.random.key_data(jax.random.key(0)))
    rows = jax.ShapeDtypeStruct((slots,), jnp.int32)
    specs: list[Any] = [
        jax.ShapeDtypeStruct((slots,), jnp.float32),
        jax.ShapeDtypeStruct((slots,), jnp.float32),
        rows,
        jax.ShapeDtypeStruct((slots, *key.shape), key.dtype),
    ]
    knobs = Knobs(*specs)
    return step.lower(cfg.model, weights, cache, rows, rows, knobs, rows).compile()


def plan_serve(cfg: Config, slots: int, max_len: int, stream: TextIO | None) -> Plan:
    """``gpt serve``'s step compiled for ``slots`` (the knob, ``--max-batch``), with a line for
    the KV cache it holds."""
    cfg = one_device(cfg)
    program = f"decoding step ({slots} sequences of up to {max_len} tokens, KV cache included)"
    sized = Sized(
        "gpt serve", program, "--max-batch", slots, lambda b: compile_step(cfg, b, max_len)
    )
    plan = plan_one_device(sized, cfg, stream)
    kv = cache_bytes(cfg.model, slots, max_len)
    plan.lines.insert(
        2, f"KV cache         {size(kv)} ({slots} slots x {max_len} positions, all layers)"
    )
    return plan
