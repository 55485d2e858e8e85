"""Normalisation layers: ``LayerNorm``, ``RMSNorm``, ``BatchNorm``, ``GroupNorm``.

Statistics are computed in float32 whatever the input dtype, then cast back, so bfloat16
activations do not lose the variance to rounding.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp

from core_primitives import format_path

from ._checks import non_negative_float, positive_int, static_flag
from ._dtypes import promote
from ._graph import Graph
from ._module import Initializer, Module
from ._params import Params

Meta = Mapping[str, Any] | None
_ones = jax.nn.initializers.ones
_zeros = jax.nn.initializers.zeros


def _axes(axis: int | Sequence[int], ndim: int, module: Module) -> tuple[int, ...]:
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    if any(not -ndim <= a < ndim for a in axes):
        raise ValueError(
            f"{module.name}: axis {axis} is out of range for inputs with {ndim} dimensions."
        )
    normalised = tuple(sorted(a % ndim for a in axes))
    if len(set(normalised)) != len(normalised):
        raise ValueError(
            f"{module.name}: axis {axis} names the same dimension twice for inputs with {ndim} "
            "dimensions. List each axis once."
        )
    return normalised


def axis_is_bound(axis_name: str) -> bool:
    """Whether ``axis_name`` is a named axis here (inside ``vmap``/``shard_map`` naming it)."""
    try:
        jax.lax.axis_index(axis_name)
    except NameError:
        return False
    return True


class _AffineNorm(Module):
    """Shared scale/bias handling."""

    def __init__(
        self,
        graph: Graph,
        *,
        eps: float,
        use_scale: bool = True,
        use_bias: bool = True,
        scale_init: Initializer = _ones,
        bias_init: Initializer = _zeros,
        scale_metadata: Meta = None,
        bias_metadata: Meta = None,
        dtype: Any = None,
        param_dtype: Any = jnp.float32,
    ) -> None:
        super().__init__(graph)
        self.eps = non_negative_float(eps, "eps", self)
        self.use_scale = use_scale
        self.use_bias = use_bias
        self.scale_init = scale_init
        self.bias_init = bias_init
        self.scale_metadata = scale_metadata
        self.bias_metadata = bias_metadata
        self.dtype = dtype
        self.param_dtype = param_dtype

    def _pmean(self, params: Params, values: Any) -> Any:
        """``values`` averaged over ``axis_name`` (unchanged without one).

        At init (unlocked params) outside the named axis there is nothing to average over, so
        the same module initialises on one shard's data; with locked params an unbound axis is
        an error, since silently skipping it would give each replica different statistics.
        """
        if self.axis_name is None:
            return values
        if axis_is_bound(self.axis_name):
            return jax.lax.pmean(values, self.axis_name)
        if not params.is_locked:
            return values
        raise NameError(
            f"{self.name} averages its statistics over the axis {self.axis_name!r} "
            f"(axis_name={self.axis_name!r}), but no such axis is bound here. Call it inside "
            f"jax.vmap(..., axis_name={self.axis_name!r}) or a shard_map over that mesh axis"
            f"{self._unbound_hint}, or build the {type(self).__name__} without axis_name."
        )

    axis_name: str | None = None  # set by the norms that can average over devices
    scale_offset = 0.0  # RMSNorm's Gemma form multiplies by 1 + scale
    _unbound_hint = ""

    def _affine(
        self, params: Params, x: jax.Array, y: jax.Array, shape: tuple[int, ...], bshape: Any
    ) -> tuple[jax.Array, Params]:
        """Scale and shift ``y`` (float32) by params of ``shape``, broadcast as ``bshape``."""
        scale = bias = None
        if self.use_scale:
            scale, params = self.get_param(
                params,
                "scale",
                shape,
                self.scale_init,
                self.param_dtype,
                metadata=self.scale_metadata,
            )
        if self.use_bias:
            bias, params = self.get_param(
                params,
                "bias",
                shape,
                self.bias_init,
                self.param_dtype,
                metadata=self.bias_metadata,
            )
        x, scale, bias = promote(self.dtype, x, scale, bias)
        y = y.astype(x.dtype)
        if scale is not None:
            scale = scale.reshape(bshape)
            y = y * (scale + self.scale_offset if self.scale_offset else scale)
        if bias is not None:
            y = y + bias.reshape(bshape)
        return y, params


class LayerNorm(_AffineNorm):
    """Normalise over ``axis`` (default the last) to zero mean and unit variance, then scale/shift.

    With ``axis_name`` the statistics are averaged over that named axis (``vmap`` or
    ``shard_map``), for features split across devices (tensor parallelism): each shard then
    normalises with the mean and variance of the whole feature vector. Shards must hold equal
    numbers of features. At init (unlocked params) outside such an axis the averaging is skipped,
    as in ``BatchNorm``.

    Keyword arguments passed on as in the base layer:

    - ``use_scale``, ``use_bias``, ``scale_init``, ``bias_init``, ``scale_metadata``,
      ``bias_metadata``, ``dtype``, ``param_dtype``: the learnt affine part and mixed
      precision.

    Args:
        graph: the node to bind to.
        axis: int or tuple of ints to normalise over; scale and bias have those axes' shape.
        eps: added to the variance.
        axis_name: named axis to average the statistics over.

    Example:
        >>> import jax.numpy as jnp
        >>> import blox as bx
        >>> ln = bx.LayerNorm(bx.Graph('net') / 'ln')
        >>> y, params = ln(bx.Params(), jnp.array([[1.0, 2.0, 3.0]]))
        >>> [round(v, 3) for v in y[0].tolist()]
        [-1.225, 0.0, 1.225]
    """

    def __init__(
        self,
        graph: Graph,
        *,
        axis: int | Sequence[int] = -1,
        eps: float = 1e-5,
        axis_name: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(graph, eps=eps, **kwargs)
        self.axis = axis
        self.axis_name = axis_name

    def __call__(self, params: Params, x: jax.Array) -> tuple[jax.Array, Params]:
        x = jnp.asarray(x)
        axes = _axes(self.axis, x.ndim, self)
        x32 = x.astype(jnp.float32)
        # Two passes (mean, then the mean squared deviation) as without axis_name: one
        # E[x^2] - E[x]^2 pass loses the variance to cancellation when the mean is large.
        mean = self._pmean(params, x32.mean(axes, keepdims=True))
        var = self._pmean(params, jnp.square(x32 - mean).mean(axes, keepdims=True))
        y = (x32 - mean) * jax.lax.rsqrt(var + self.eps)
        shape = tuple(x.shape[a] for a in axes)
        bshape = tuple(x.shape[a] if a in axes else 1 for a in range(x.ndim))
        return self._affine(params, x, y, shape, bshape)


class RMSNorm(_AffineNorm):
    """Divide by the root mean square over ``axis`` (no centring), then scale.

    Keyword arguments passed on as in the base layer:

    - ``use_scale``, ``scale_init``, ``scale_metadata``, ``dtype``, ``param_dtype``: as in
      ``LayerNorm`` (no bias by default; ``use_bias=True`` adds one).

    Args:
        graph: the node to bind to.
        axis: int or tuple of ints.
        eps: added to the mean square.
        axis_name: named axis to average the mean square over, as in ``LayerNorm``.
        scale_offset: the normalised values are multiplied by ``scale_offset + scale``: Gemma's
            ``1 + w`` form is ``scale_offset=1.0`` with ``scale_init`` zeros (so a fresh norm
            still multiplies by one). Default 0: the plain learnt scale.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> import blox as bx
        >>> norm = bx.RMSNorm(bx.Graph('net') / 'norm')
        >>> y, params = norm(bx.Params(), jnp.array([3.0, 4.0]))
        >>> [round(v, 3) for v in y.tolist()]
        [0.849, 1.131]
        >>> gemma = bx.RMSNorm(bx.Graph('net') / 'gemma', scale_offset=1.0,
        ...                    scale_init=jax.nn.initializers.zeros)
        >>> [round(v, 3) for v in gemma(bx.Params(), jnp.array([3.0, 4.0]))[0].tolist()]
        [0.849, 1.131]
    """

    def __init__(
        self,
        graph: Graph,
        *,
        axis: int | Sequence[int] = -1,
        eps: float = 1e-6,
        use_bias: bool = False,
        axis_name: str | None = None,
        scale_offset: float = 0.0,
        **kwargs: Any,
    ) -> None:
        super().__init__(graph, eps=eps, use_bias=use_bias, **kwargs)
        self.axis = axis
        self.axis_name = axis_name
        self.scale_offset = float(scale_offset)

    def __call__(self, params: Params, x: jax.Array) -> tuple[jax.Array, Params]:
        x = jnp.asarray(x)
        axes = _axes(self.axis, x.ndim, self)
        x32 = x.astype(jnp.float32)
        mean_square = self._pmean(params, jnp.square(x32).mean(axes, keepdims=True))
        y = x32 * jax.lax.rsqrt(mean_square + self.eps)
        shape = tuple(x.shape[a] for a in axes)
        bshape = tuple(x.shape[a] if a in axes else 1 for a in range(x.ndim))
        return self._affine(params, x, y, shape, bshape)


class BatchNorm(_AffineNorm):
    """Normalise with batch statistics in training and running averages in evaluation.

    Statistics reduce over every axis but the last (features). ``mean`` and ``var`` are
    non-trainable params updated by ``momentum`` on every training call. With ``axis_name``
    the batch statistics are averaged over that named axis (``vmap``/``shard_map``), so
    data-parallel replicas agree; at init (unlocked params) outside such an axis the averaging is
    skipped, so the same module initialises on a single example.

    Keyword arguments passed on as in the base layer:

    - ``use_scale``, ``use_bias``, ``scale_init``, ``bias_init``, ``scale_metadata``,
      ``bias_metadata``, ``dtype``, ``param_dtype``: the affine part and mixed precision.

    Args:
        graph: the node to bind to.
        momentum: running-average decay.
        eps: added to the variance.
        axis_name: named axis to average batch statistics over.

    Example:
        >>> import jax.numpy as jnp
        >>> import blox as bx
        >>> bn = bx.BatchNorm(bx.Graph('net') / 'bn')
        >>> x = jnp.array([[1.0], [3.0]])
        >>> y, params = bn(bx.Params(), x, is_training=True)
        >>> [round(v, 3) for v in y[:, 0].tolist()], params[('net', 'bn', 'mean')].shape
        ([-1.0, 1.0], (1,))
    """

    def __init__(
        self,
        graph: Graph,
        *,
        momentum: float = 0.99,
        eps: float = 1e-5,
        axis_name: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(graph, eps=eps, **kwargs)
        self.axis_name = axis_name
        if not 0.0 <= momentum <= 1.0:
            raise ValueError(
                f"{self.name}: momentum must be in [0, 1], got {momentum!r}. The running "
                "statistics keep momentum * old + (1 - momentum) * batch, so 0.9-0.999 is usual."
            )
        self.momentum = momentum

    _unbound_hint = ", use is_training=False for evaluation"

    def __call__(
        self, params: Params, x: jax.Array, *, is_training: bool
    ) -> tuple[jax.Array, Params]:
        x = jnp.asarray(x)
        features = x.shape[-1:]
        mean, params = self.get_param(
            params, "mean", features, _zeros, jnp.float32, trainable=False
        )
        var, params = self.get_param(params, "var", features, _ones, jnp.float32, trainable=False)
        x32 = x.astype(jnp.float32)
        if static_flag(is_training, "is_training", self):
            batch_mean, batch_var = self._batch_stats(params, x32)
            m = self.momentum
            params = self.set_param(params, "mean", m * mean + (1 - m) * batch_mean)
            params = self.set_param(params, "var", m * var + (1 - m) * batch_var)
            mean, var = batch_mean, batch_var
        y = (x32 - mean) * jax.lax.rsqrt(var + self.eps)
        return self._affine(params, x, y, features, (1,) * (x.ndim - 1) + features)

    def _batch_stats(self, params: Params, x32: jax.Array) -> tuple[jax.Array, jax.Array]:
        axes = tuple(range(x32.ndim - 1))
        mean, mean_sq = self._pmean(params, (x32.mean(axes), jnp.square(x32).mean(axes)))
        return mean, jnp.maximum(mean_sq - jnp.square(mean), 0.0)


class GroupNorm(_AffineNorm):
    """Normalise channel groups of ``(batch, ..., channels)``, per example and group.

    Statistics reduce over every axis except the first (batch) and over the channels of each
    group; for a single unbatched example add a leading axis (``x[None]``).

    Keyword arguments passed on as in the base layer:

    - ``use_scale``, ``use_bias``, ``scale_init``, ``bias_init``, ``scale_metadata``,
      ``bias_metadata``, ``dtype``, ``param_dtype``: the per-channel affine part and mixed
      precision.

    Args:
        graph: the node to bind to.
        num_groups: the channel count must be divisible by it.
        eps: added to the variance.

    Example:
        >>> import jax.numpy as jnp
        >>> import blox as bx
        >>> gn = bx.GroupNorm(bx.Graph('net') / 'gn', num_groups=2)
        >>> y, params = gn(bx.Params(), jnp.arange(8.0).reshape(1, 2, 4))
        >>> y.shape, params[('net', 'gn', 'scale')].shape
        ((1, 2, 4), (4,))
    """

    def __init__(self, graph: Graph, num_groups: int, *, eps: float = 1e-5, **kwargs: Any) -> None:
        super().__init__(graph, eps=eps, **kwargs)
        self.num_groups = positive_int(num_groups, "num_groups", self)

    def __call__(self, params: Params, x: jax.Array) -> tuple[jax.Array, Params]:
        x = jnp.asarray(x)
        channels, groups = x.shape[-1], self.num_groups
        if x.ndim < 2 or channels % groups:
            raise ValueError(
                f"{self.name} expects inputs (batch, ..., channels) with channels divisible by "
                f"num_groups={groups}; got shape {x.shape} at {format_path(self.path)}."
            )
        grouped = x.astype(jnp.float32).reshape(*x.shape[:-1], groups, channels // groups)
        axes = (*tuple(range(1, grouped.ndim - 2)), grouped.ndim - 1)
        mean = grouped.mean(axes, keepdims=True)
        var = jnp.square(grouped - mean).mean(axes, keepdims=True)
        y = ((grouped - mean) * jax.lax.rsqrt(var + self.eps)).reshape(x.shape)
        return self._affine(params, x, y, (channels,), (1,) * (x.ndim - 1) + (channels,))
