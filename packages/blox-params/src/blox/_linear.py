"""``Linear`` and ``Embed``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp

from ._checks import positive_int
from ._dense import dense
from ._dtypes import promote
from ._graph import Graph
from ._lora import LoRA, check_lora, lora_delta
from ._module import Initializer, Module
from ._params import Params
from ._rng import Rng

Metadata = Mapping[str, Any] | None


class Linear(Module):
    """``y = x @ kernel + bias`` over the last axis; any leading axes are batch axes.

    Args:
        graph: the node to bind to.
        output_size: the number of output features.
        rng: the ``Rng`` that draws init keys (needed by the default random ``kernel_init``).
        use_bias: add a bias.
        kernel_init: ``init(key, shape, dtype)``; default LeCun normal.
        bias_init: default zeros.
        kernel_metadata: metadata of the ``(in, out)`` kernel, e.g.
            ``{'logical_axes': ('embed', 'mlp')}`` for paramspec sharding.
        bias_metadata: metadata of the ``(out,)`` bias.
        dtype: computation dtype (``None``: promote inputs and params).
        param_dtype: storage dtype of the params.
        lora: a ``bx.LoRA``: low-rank adapters ``lora_a``, ``lora_b`` next to the kernel
            (when its ``targets`` select this kernel's path). With LoRA dropout, every call
            says ``is_training=``.

    Example:
        >>> import jax.numpy as jnp
        >>> import blox as bx
        >>> graph = bx.Graph('net')
        >>> rng = bx.Rng(graph / 'rng')
        >>> lin = bx.Linear(graph / 'lin', 4, rng=rng)
        >>> y, params = lin(rng.seed(bx.Params(), seed=0), jnp.ones((2, 3)))
        >>> y.shape, params[('net', 'lin', 'kernel')].shape
        ((2, 4), (3, 4))
    """

    def __init__(
        self,
        graph: Graph,
        output_size: int,
        *,
        rng: Rng | None = None,
        use_bias: bool = True,
        kernel_init: Initializer | None = None,
        bias_init: Initializer = jax.nn.initializers.zeros,
        kernel_metadata: Metadata = None,
        bias_metadata: Metadata = None,
        dtype: Any = None,
        param_dtype: Any = jnp.float32,
        lora: LoRA | None = None,
    ) -> None:
        super().__init__(graph)
        self.output_size = positive_int(output_size, "output_size", self)
        self.rng = rng
        self.use_bias = use_bias
        self.kernel_init = kernel_init or jax.nn.initializers.lecun_normal()
        self.bias_init = bias_init
        self.kernel_metadata = kernel_metadata
        self.bias_metadata = bias_metadata
        self.dtype = dtype
        self.param_dtype = param_dtype
        self.lora = check_lora(lora, self)

    def __call__(
        self, params: Params, x: jax.Array, *, is_training: bool | None = None
    ) -> tuple[jax.Array, Params]:
        """``x @ kernel + bias`` (plus the LoRA path); ``is_training`` switches LoRA dropout."""
        x = _at_least_1d(x, self)
        kernel, bias, params = kernel_and_bias(self, params, (x.shape[-1], self.output_size))
        delta, params = lora_delta(
            self.lora, self, params, "kernel", x, 1, (self.output_size,), is_training
        )
        x, kernel, bias = promote(self.dtype, x, kernel, bias)
        y = dense(x, kernel)
        y = y if delta is None else y + delta
        return (y + bias if bias is not None else y), params


class Embed(Module):
    """A lookup table: integer ids ``(...)`` -> vectors ``(..., embed_dim)``; ``attend`` ties it.

    Args:
        graph: the node to bind to.
        vocab_size: number of rows.
        embed_dim: vector size.
        rng: the ``Rng`` that draws the init key.
        embedding_init: default normal with stddev 1.
        metadata: metadata of the ``(vocab_size, embed_dim)`` table.
        dtype: computation dtype of the outputs (``None``: the table's dtype).
        param_dtype: storage dtype.

    Example:
        >>> import jax.numpy as jnp
        >>> import blox as bx
        >>> graph = bx.Graph('lm')
        >>> rng = bx.Rng(graph / 'rng')
        >>> embed = bx.Embed(graph / 'embed', vocab_size=10, embed_dim=4, rng=rng)
        >>> h, params = embed(rng.seed(bx.Params(), seed=0), jnp.array([1, 2, 3]))
        >>> logits, params = embed.attend(params, h)  # weight tying
        >>> h.shape, logits.shape
        ((3, 4), (3, 10))
    """

    def __init__(
        self,
        graph: Graph,
        vocab_size: int,
        embed_dim: int,
        *,
        rng: Rng | None = None,
        embedding_init: Initializer | None = None,
        metadata: Metadata = None,
        dtype: Any = None,
        param_dtype: Any = jnp.float32,
    ) -> None:
        super().__init__(graph)
        self.vocab_size = positive_int(vocab_size, "vocab_size", self)
        self.embed_dim = positive_int(embed_dim, "embed_dim", self)
        self.rng = rng
        self.embedding_init = embedding_init or jax.nn.initializers.normal(stddev=1.0)
        self.metadata = metadata
        self.dtype = dtype
        self.param_dtype = param_dtype

    def _table(self, params: Params) -> tuple[jax.Array, Params]:
        shape = (self.vocab_size, self.embed_dim)
        return self.get_param(
            params,
            "embedding",
            shape,
            self.embedding_init,
            self.param_dtype,
            metadata=self.metadata,
        )

    def __call__(self, params: Params, ids: jax.Array) -> tuple[jax.Array, Params]:
        ids = jnp.asarray(ids)
        if not jnp.issubdtype(ids.dtype, jnp.integer):
            raise TypeError(
                f"{self.name} looks up integer ids, got dtype {ids.dtype}. Cast the ids with "
                ".astype(jnp.int32); for a dense projection use Linear or embed.attend."
            )
        table, params = self._table(params)
        (table,) = promote(self.dtype, table)
        return jnp.take(table, ids, axis=0), params

    def attend(self, params: Params, x: jax.Array) -> tuple[jax.Array, Params]:
        """Tied-weight logits ``x @ table.T``: ``(..., embed_dim)`` -> ``(..., vocab_size)``."""
        x = jnp.asarray(x)
        table, params = self._table(params)
        if x.shape[-1:] != (self.embed_dim,):
            raise ValueError(
                f"{self.name}.attend: inputs have {x.shape[-1:] or 'no'} features (shape "
                f"{x.shape}), expected {self.embed_dim} (embed_dim) in the last axis."
            )
        x, table = promote(self.dtype, x, table)
        return dense(x, table.T), params


def kernel_and_bias(
    module: Any, params: Params, shape: tuple[int, ...]
) -> tuple[jax.Array, jax.Array | None, Params]:
    """The ``kernel`` of ``shape`` and, with ``use_bias``, a ``bias`` over its last axis.

    Shared by the layers that carry the same kernel/bias options (``Linear``, ``Conv``,
    ``ConvTranspose``): ``kernel_init``, ``bias_init``, ``*_metadata``, ``param_dtype``.
    """
    kernel, params = module.get_param(
        params,
        "kernel",
        shape,
        module.kernel_init,
        module.param_dtype,
        metadata=module.kernel_metadata,
    )
    if not module.use_bias:
        return kernel, None, params
    bias, params = module.get_param(
        params,
        "bias",
        shape[-1:],
        module.bias_init,
        module.param_dtype,
        metadata=module.bias_metadata,
    )
    return kernel, bias, params


def _at_least_1d(x: Any, module: Module) -> jax.Array:
    x = jnp.asarray(x)
    if x.ndim == 0:
        raise ValueError(
            f"{module.name} needs inputs with a feature axis, got a scalar. Use x[None] for one "
            "feature."
        )
    return x
