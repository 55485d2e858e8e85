"""N-d ``Conv`` and ``ConvTranspose`` on channels-last inputs ``(batch, *spatial, channels)``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp

from ._dtypes import promote
from ._graph import Graph
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


def _padding(padding: Padding, n: int) -> str | list[tuple[int, int]]:
    if isinstance(padding, str):
        return padding.upper()
    if isinstance(padding, int):
        return [(padding, padding)] * n
    return [tuple(p) for p in padding]  # type: ignore[misc]


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
        self.output_channels = output_channels
        self.kernel_size = kernel_size
        self.rng = rng
        self.strides = strides
        self.padding = padding
        self.kernel_dilation = kernel_dilation
        self.use_bias = use_bias
        self.kernel_init = kernel_init or jax.nn.initializers.lecun_normal()
        self.bias_init = bias_init
        self.kernel_metadata = kernel_metadata
        self.bias_metadata = bias_metadata
        self.dtype = dtype
        self.param_dtype = param_dtype

    def _spatial_dims(self, x: jax.Array) -> tuple[int, bool]:
        """``(n, batched)``: the number of spatial dims, and whether ``x`` has a batch axis."""
        if isinstance(self.kernel_size, int):
            n = x.ndim - 2
            if n < 1:
                raise ValueError(
                    f"{self.name} expects inputs (batch, *spatial, channels), got shape "
                    f"{x.shape}. With an int kernel_size the spatial rank is ndim - 2; pass a "
                    "tuple kernel_size (e.g. (3, 3)) to also accept unbatched inputs."
                )
            return n, True
        n = len(self.kernel_size)
        if x.ndim not in (n + 1, n + 2):
            raise ValueError(
                f"{self.name} has a {n}-d kernel {tuple(self.kernel_size)}, so it expects inputs "
                f"of shape (batch, {n} spatial dims, channels) or without the batch axis; got "
                f"shape {x.shape}."
            )
        return n, x.ndim == n + 2

    def _params(self, params: Params, shape: tuple[int, ...]) -> tuple[Any, Any, Params]:
        kernel, params = self.get_param(
            params,
            "kernel",
            shape,
            self.kernel_init,
            self.param_dtype,
            metadata=self.kernel_metadata,
        )
        bias = None
        if self.use_bias:
            bias, params = self.get_param(
                params,
                "bias",
                (self.output_channels,),
                self.bias_init,
                self.param_dtype,
                metadata=self.bias_metadata,
            )
        return kernel, bias, params


class Conv(_ConvBase):
    """An N-d convolution over channels-last inputs ``(batch, *spatial, in)`` (batch optional).

    The spatial rank comes from ``kernel_size`` (a tuple) or, for an int, from ``x.ndim - 2``.
    The kernel has shape ``(*kernel_size, in // feature_group_count, output_channels)``.

    Args:
        graph: the node to bind to.
        output_channels: output features.
        kernel_size: an int (same in every spatial dim) or one int per spatial dim.
        rng: draws the init key.
        strides: int or per-dim.
        padding: ``'SAME'``, ``'VALID'``, an int, or ``[(lo, hi), ...]`` per dim.
        input_dilation: int or per-dim (``lhs_dilation``).
        kernel_dilation: int or per-dim (``rhs_dilation``, atrous convolution).
        feature_group_count: grouped / depthwise convolutions.
        use_bias, kernel_init, bias_init, kernel_metadata, bias_metadata, dtype, param_dtype:
            as in ``Linear``.

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
        self.input_dilation = input_dilation
        self.feature_group_count = feature_group_count

    def __call__(self, params: Params, x: jax.Array) -> tuple[jax.Array, Params]:
        x = jnp.asarray(x)
        n, batched = self._spatial_dims(x)
        if not batched:
            y, params = self(params, x[None])
            return y[0], params
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
        kernel, bias, params = self._params(params, shape)
        x, kernel, bias = promote(self.dtype, x, kernel, bias)
        y = jax.lax.conv_general_dilated(
            x,
            kernel,
            window_strides=_tuple(self.strides, n, "strides", self),
            padding=_padding(self.padding, n),
            lhs_dilation=_tuple(self.input_dilation, n, "input_dilation", self),
            rhs_dilation=_tuple(self.kernel_dilation, n, "kernel_dilation", self),
            dimension_numbers=_dimension_numbers(n),
            feature_group_count=groups,
        )
        return (y + bias if bias is not None else y), params


class ConvTranspose(_ConvBase):
    """An N-d transposed convolution (upsampling) over channels-last inputs.

    With ``padding='SAME'`` and ``strides=s`` each spatial size is multiplied by ``s``. The
    kernel has shape ``(*kernel_size, in, output_channels)``.

    Args:
        graph, output_channels, kernel_size, rng, strides, padding, kernel_dilation, use_bias,
            kernel_init, bias_init, kernel_metadata, bias_metadata, dtype, param_dtype: as in
            ``Conv``.

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
        x = jnp.asarray(x)
        n, batched = self._spatial_dims(x)
        if not batched:
            y, params = self(params, x[None])
            return y[0], params
        shape = (
            *_tuple(self.kernel_size, n, "kernel_size", self),
            x.shape[-1],
            self.output_channels,
        )
        kernel, bias, params = self._params(params, shape)
        x, kernel, bias = promote(self.dtype, x, kernel, bias)
        y = jax.lax.conv_transpose(
            x,
            kernel,
            strides=_tuple(self.strides, n, "strides", self),
            padding=_padding(self.padding, n),
            rhs_dilation=_tuple(self.kernel_dilation, n, "kernel_dilation", self),
            dimension_numbers=_dimension_numbers(n),
        )
        return (y + bias if bias is not None else y), params
