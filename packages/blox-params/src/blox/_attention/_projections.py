"""The four projections of ``MultiHeadAttention``: ``query``, ``key``, ``value`` in, ``out`` out.

Functions of the layer (``mha``): they read its kernels (and biases) with ``mha.get_param``, so
the parameters live under the layer's path.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import jax

from .._dense import dense
from .._dtypes import promote
from .._lora import lora_delta
from .._params import Params

if TYPE_CHECKING:
    from ._layer import MultiHeadAttention


def project(
    mha: MultiHeadAttention,
    params: Params,
    name: str,
    x: jax.Array,
    heads: int,
    is_training: bool | None,
) -> tuple[jax.Array, Params]:
    """``x (..., D)`` through the kernel ``name`` ``(D, heads, head_dim)``: ``(..., heads, hd)``.

    Plus the LoRA path of the kernel when the layer's ``lora`` targets it.
    """
    shape = (x.shape[-1], heads, mha.head_dim)
    w, params = mha.get_param(
        params,
        name,
        shape,
        mha.kernel_init,
        mha.param_dtype,
        metadata=mha.metadata.get(name),
    )
    b = None
    if name in mha.biased:
        b, params = mha.get_param(
            params,
            f"{name}_bias",
            shape[1:],
            jax.nn.initializers.zeros,
            mha.param_dtype,
            metadata=mha.metadata.get(f"{name}_bias"),
        )
    delta, params = lora_delta(mha.lora, mha, params, name, x, 1, shape[1:], is_training)
    x, w, b = promote(mha.dtype, x, w, b)
    y = dense(x, w)
    y = y if delta is None else y + delta
    return (y + b if b is not None else y), params


def output(
    mha: MultiHeadAttention,
    params: Params,
    out: jax.Array,
    size: int,
    is_training: bool | None,
) -> tuple[jax.Array, Params]:
    """The heads ``out (..., H, hd)`` through the kernel ``out`` ``(H, hd, size)`` (and LoRA)."""
    shape = (mha.num_heads, mha.head_dim, size)
    w, params = mha.get_param(
        params, "out", shape, mha.out_init, mha.param_dtype, metadata=mha.metadata.get("out")
    )
    b = None
    if "out" in mha.biased:
        b, params = mha.get_param(
            params,
            "out_bias",
            (size,),
            jax.nn.initializers.zeros,
            mha.param_dtype,
            metadata=mha.metadata.get("out_bias"),
        )
    delta, params = lora_delta(mha.lora, mha, params, "out", out, 2, (size,), is_training)
    out, w, b = promote(mha.dtype, out, w, b)
    y = dense(out, w, in_axes=2)
    y = y if delta is None else y + delta
    return (y + b if b is not None else y), params
