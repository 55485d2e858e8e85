"""N-d ``Conv`` and ``ConvTranspose`` on channels-last inputs ``(*batch, *spatial, channels)``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp

from ._checks import check_padding, positive_int, positive_ints
from ._dtypes import promote
from ._graph import Graph
from ._linear import kernel_and_bias
from ._module import Initializer, Module
from ._params import Params
from ._rng import Rng

Padding = str | int | Sequence[tuple[int, int]]


def _tuple(value: int | Sequence[int], n: int, what: str, module: Module) -> tuple[int, ...]:
    if isinstance(value, int):
        return (value,) * n
    value = tuple(value)
    if len(value) != n:
        raise ValueError(
            f"{module.name}: {what} {value} has {len(value)} entries, but the inputs have "
            f"{n} spatial dimensions. Give one entry per spatial dimension or a single int."
        )
    return value


def _padding(padding: Any, n: int, module: Module) -> str | list[tuple[int, int]]:
    """``padding`` as ``lax`` takes it; it was checked in ``__init__`` but for its length."""
    if isinstance(padding, str):
        return padding
    if isinstance(padding, int):
        return [(padding, padding)] * n
    if len(padding) != n:
        raise ValueError(
            f"{module.name}: padding {padding} has {len(padding)} (low, high) pairs, but the "
            f"inputs have {n} spatial dimensions. Give one pair per spatial dimension."
        )
    return list(padding)


def _dimension_numbers(n: int) -> jax.lax.ConvDimensionNumbers:
    # channels-last activations (N, *spatial, C) and kernels (*spatial, in, out)
    spatial = tuple(range(1, n + 1))
    return jax.lax.ConvDimensionNumbers(
        lhs_spec=(0, n + 1, *spatial),
        rhs_spec=(n + 1, n, *range(n)),
        out_spec=(0, n + 1, *spatial),
    )


class _ConvBase(Module):
    def __init__(
        self,
        graph: Graph,
        output_channels: int,
        kernel_size: int | Sequence[int],
        *,
        rng: Rng | None = None,
        strides: int | Sequence[int] = 1,
        padding: Padding = "SAME",
        kernel_dilation: int | Sequence[int] = 1,
        use_bias: bool = True,
        kernel_init: Initializer | None = None,
        bias_init: Initializer = jax.nn.initializers.zeros,
        kernel_metadata: Mapping[str, Any] | None = None,
        bias_metadata: Mapping[str, Any] | None = None,
        dtype: Any = None,
        param_dtype: Any = jnp.float32,
    ) -> None:
        super().__init__(graph)
        self.output_channels = positive_int(output_channels, "output_channels", self)
        self.kernel_size = positive_ints(kernel_size, "kernel_size", self)
        self.rng = rng
        self.strides = positive_ints(strides, "strides", self)
        self.padding = check_padding(padding, self)
        self.kernel_dilation = positive_ints(kernel_dilation, "kernel_dilation", self)
        self.use_bias = use_bias
        self.kernel_init = kernel_init or jax.nn.initializers.lecun_normal()
        self.bias_init = bias_init
        self.kernel_metadata = kernel_metadata
        self.bias_metadata = bias_metadata
        self.dtype = dtype
        self.param_dtype = param_dtype

    def _fold_batch(self, x: jax.Array) -> tuple[jax.Array, tuple[int, ...], int]:
        """``(x as (prod(batch), *spatial, channels), the batch shape, the spatial rank)``.

        ``lax`` convolutions take exactly one batch axis, so any number of leading batch axes
        (none included) are folded into one here and unfolded from the output.
        """
        if isinstance(self.kernel_size, int):
            n = x.ndim - 2
            if n < 1:
                raise ValueError(
                    f"{self.name} expects inputs (batch, *spatial, channels), got shape "
                    f"{x.shape}. With an int kernel_size the spatial rank is ndim - 2; pass a "
                    "tuple kernel_size (e.g. (3, 3)) to also accept unbatched inputs or several "
                    "batch axes."
                )
        else:
            n = len(self.kernel_size)
            if x.ndim < n + 1:
                raise ValueError(
                    f"{self.name} has a {n}-d kernel {tuple(self.kernel_size)}, so it expects "
                    f"inputs (*batch, {n} spatial dims, channels) with any number of leading "
                    f"batch axes (none included); got shape {x.shape}."
                )
        batch = x.shape[: x.ndim - n - 1]
        return x.reshape(-1, *x.shape[x.ndim - n - 1 :]), batch, n


class Conv(_ConvBase):
    """An N-d convolution over channels-last inputs ``(*batch, *spatial, in)``.

    The spatial rank comes from ``kernel_size`` (a tuple: then any number of leading batch axes,
    none included) or, for an int (the same size on every spatial axis), from ``x.ndim - 2``
    (exactly one batch axis).
    The kernel has shape ``(*kernel_size, in // feature_group_count, output_channels)``.

    Keyword arguments passed on as in the base layer:

    - ``rng``: draws the init key.
    - ``strides``: int or per-dim.
    - ``padding``: ``'SAME'``, ``'VALID'``, an int, or ``[(lo, hi), ...]`` per dim.
    - ``kernel_dilation``: int or per-dim (``rhs_dilation``, atrous convolution).
    - ``use_bias``, ``kernel_init``, ``bias_init``, ``kernel_metadata``, ``bias_metadata``,
      ``dtype``, ``param_dtype``: as in ``Linear``.

    Args:
        graph: the node to bind to.
        output_channels: output features.
        kernel_size: an int (same in every spatial dim) or one int per spatial dim.
        input_dilation: int or per-dim (``lhs_dilation``).
        feature_group_count: grouped / depthwise convolutions.

    Example:
        >>> import jax.numpy as jnp
        >>> import blox as bx
        >>> graph = bx.Graph('net')
        >>> rng = bx.Rng(graph / 'rng')
        >>> conv = bx.Conv(graph / 'conv', 8, (3, 3), rng=rng, strides=2)
        >>> y, params = conv(rng.seed(bx.Params(), seed=0), jnp.ones((2, 16, 16, 3)))
        >>> y.shape
        (2, 8, 8, 8)
    """

    def __init__(
        self,
        graph: Graph,
        output_channels: int,
        kernel_size: int | Sequence[int],
        *,
        input_dilation: int | Sequence[int] = 1,
        feature_group_count: int = 1,
        **kwargs: Any,
    ) -> None:
        super().__init__(graph, output_channels, kernel_size, **kwargs)
        self.input_dilation = positive_ints(input_dilation, "input_dilation", self)
        self.feature_group_count = positive_int(feature_group_count, "feature_group_count", self)
        if self.output_channels % self.feature_group_count:
            raise ValueError(
                f"{self.name}: output_channels={self.output_channels} is not divisible by "
                f"feature_group_count={self.feature_group_count}; each group needs the same "
                "number of output channels."
            )

    def __call__(self, params: Params, x: jax.Array) -> tuple[jax.Array, Params]:
        x, batch, n = self._fold_batch(jnp.asarray(x))
        in_features, groups = x.shape[-1], self.feature_group_count
        if in_features % groups:
            raise ValueError(
                f"{self.name}: {in_features} input channels are not divisible by "
                f"feature_group_count={groups}."
            )
        shape = (
            *_tuple(self.kernel_size, n, "kernel_size", self),
            in_features // groups,
            self.output_channels,
        )
        kernel, bias, params = kernel_and_bias(self, params, shape)
        x, kernel, bias = promote(self.dtype, x, kernel, bias)
        y = jax.lax.conv_general_dilated(
            x,
            kernel,
            window_strides=_tuple(self.strides, n, "strides", self),
            padding=_padding(self.padding, n, self),
            lhs_dilation=_tuple(self.input_dilation, n, "input_dilation", self),
            rhs_dilation=_tuple(self.kernel_dilation, n, "kernel_dilation", self),
            dimension_numbers=_dimension_numbers(n),
            feature_group_count=groups,
        )
        y = y + bias if bias is not None else y
        return y.reshape(*batch, *y.shape[1:]), params


class ConvTranspose(_ConvBase):
    """An N-d transposed convolution (upsampling) over channels-last inputs.

    With ``padding='SAME'`` and ``strides=s`` each spatial size is multiplied by ``s``. Batch
    axes as in ``Conv``. The kernel has shape ``(*kernel_size, in, output_channels)``, the
    layout of ``Conv`` and Flax's ``ConvTranspose``, so ``lecun_normal`` reads its fan-in from
    the input channels; jax-blox and Haiku store ``(*kernel_size, output_channels, in)``
    (port such a kernel with ``jnp.swapaxes(kernel, -1, -2)``).

    Keyword arguments passed on as in the base layer:

    - ``graph``, ``output_channels``, ``kernel_size``, ``rng``, ``strides``, ``padding``,
      ``kernel_dilation``, ``use_bias``, ``kernel_init``, ``bias_init``, ``kernel_metadata``,
      ``bias_metadata``, ``dtype``, ``param_dtype``: as in ``Conv``.


    Example:
        >>> import jax.numpy as jnp
        >>> import blox as bx
        >>> graph = bx.Graph('net')
        >>> rng = bx.Rng(graph / 'rng')
        >>> up = bx.ConvTranspose(graph / 'up', 4, (3,), rng=rng, strides=2)
        >>> y, params = up(rng.seed(bx.Params(), seed=0), jnp.ones((2, 5, 3)))
        >>> y.shape
        (2, 10, 4)
    """

    def __call__(self, params: Params, x: jax.Array) -> tuple[jax.Array, Params]:
        x, batch, n = self._fold_batch(jnp.asarray(x))
        shape = (
            *_tuple(self.kernel_size, n, "kernel_size", self),
            x.shape[-1],
            self.output_channels,
        )
        kernel, bias, params = kernel_and_bias(self, params, shape)
        x, kernel, bias = promote(self.dtype, x, kernel, bias)
        y = jax.lax.conv_transpose(
            x,
            kernel,
            strides=_tuple(self.strides, n, "strides", self),
            padding=_padding(self.padding, n, self),
            rhs_dilation=_tuple(self.kernel_dilation, n, "kernel_dilation", self),
            dimension_numbers=_dimension_numbers(n),
        )
        y = y + bias if bias is not None else y
        return y.reshape(*batch, *y.shape[1:]), params
