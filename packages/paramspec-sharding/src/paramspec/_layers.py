"""The spec-tree layer pattern and three layers to copy: ``Linear``, ``Embedding``, ``RMSNorm``.

A layer is a ``core_primitives.pytree_dataclass`` whose array fields hold either ``ParamSpec``s
(what ``param_specs(cfg)`` returns) or arrays (what ``paramspec.init`` returns for that tree).
Hyper-parameters the forward pass needs (``eps``) are static fields, so they survive ``init``.
The forward pass is a plain method over the arrays: pure, and fine under ``jit``/``grad``/``vmap``.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Self

import jax
import jax.numpy as jnp

from core_primitives import field, pytree_dataclass

from ._init import abstract, init, shardings
from ._spec import Initializer, LogicalAxes, ParamSpec

_NORMAL_002 = jax.nn.initializers.normal(stddev=0.02)
_ONES = jax.nn.initializers.ones


class ParamInitializer:
    """Base class for spec-tree layers: implement the classmethod ``param_specs(cfg)``.

    The other classmethods are shortcuts: ``Layer.init(cfg, key, mesh, rules)`` is
    ``paramspec.init(Layer.param_specs(cfg), key, mesh, rules)``, and likewise for
    ``shardings`` and ``abstract``.

    Example:
        >>> import jax, jax.numpy as jnp, paramspec as ps
        >>> from core_primitives import pytree_dataclass
        >>> @pytree_dataclass
        ... class Scale(ps.ParamInitializer):
        ...     w: jax.Array | ps.ParamSpec
        ...     @classmethod
        ...     def param_specs(cls, cfg):
        ...         ones = jax.nn.initializers.ones
        ...         return cls(w=ps.ParamSpec((cfg,), ("embed",), initializer=ones))
        ...     def __call__(self, x):
        ...         return x * self.w
        >>> mesh = ps.make_mesh((8,), ("model",))
        >>> layer = Scale.init(8, jax.random.key(0), mesh, ps.Rules({"embed": "model"}))
        >>> layer(jnp.full(8, 2.0)).tolist()
        [2.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0]
    """

    @classmethod
    def param_specs(cls, cfg: Any) -> Self:
        """The layer with a ``ParamSpec`` in every array field."""
        raise NotImplementedError(
            f"{cls.__name__}.param_specs(cfg) is not implemented. A spec-tree layer defines a "
            "classmethod param_specs(cfg) returning cls(...) with a ParamSpec per parameter."
        )

    @classmethod
    def init(cls, cfg: Any, key: Any, mesh: Any, rules: Any) -> Self:
        """``paramspec.init(cls.param_specs(cfg), key, mesh, rules)``."""
        return init(cls.param_specs(cfg), key, mesh, rules)  # type: ignore[no-any-return]

    @classmethod
    def shardings(cls, cfg: Any, mesh: Any, rules: Any) -> Self:
        """``paramspec.shardings(cls.param_specs(cfg), mesh, rules)``."""
        return shardings(cls.param_specs(cfg), mesh, rules)  # type: ignore[no-any-return]

    @classmethod
    def abstract(cls, cfg: Any, mesh: Any, rules: Any) -> Self:
        """``paramspec.abstract(cls.param_specs(cfg), mesh, rules)``."""
        return abstract(cls.param_specs(cfg), mesh, rules)  # type: ignore[no-any-return]


@dataclasses.dataclass(frozen=True)
class LinearConfig:
    """Configuration of :class:`Linear`: ``y = x @ kernel (+ bias)``.

    ``kernel_init=None`` means LeCun normal, ``bias_init=None`` zeros.
    """

    in_features: int
    out_features: int
    use_bias: bool = False
    dtype: Any = jnp.float32
    kernel_axes: LogicalAxes = ("embed", "mlp")
    bias_axes: LogicalAxes = ("mlp",)
    kernel_init: Initializer | None = None
    bias_init: Initializer | None = None


@pytree_dataclass
class Linear(ParamInitializer):
    """A dense layer: ``kernel`` of shape ``(in_features, out_features)``, optional ``bias``.

    The forward pass computes in the input's dtype (parameters are cast to it), so float32
    parameters with bfloat16 activations give a bfloat16 matmul.

    Example:
        >>> import jax, jax.numpy as jnp, paramspec as ps
        >>> cfg = ps.LinearConfig(in_features=16, out_features=8, use_bias=True)
        >>> mesh = ps.make_mesh((2, 4), ("data", "model"))
        >>> rules = ps.Rules({"embed": None, "mlp": "model"})
        >>> layer = ps.Linear.init(cfg, jax.random.key(0), mesh, rules)
        >>> tuple(layer.kernel.sharding.spec), layer(jnp.ones((3, 16))).shape
        ((None, 'model'), (3, 8))
    """

    kernel: jax.Array | ParamSpec
    bias: jax.Array | ParamSpec | None = None

    @classmethod
    def param_specs(cls, cfg: LinearConfig) -> Linear:
        """``Linear`` filled with specs for ``cfg``."""
        kernel = ParamSpec(
            (cfg.in_features, cfg.out_features), cfg.kernel_axes, cfg.dtype, cfg.kernel_init
        )
        bias = None
        if cfg.use_bias:
            bias = ParamSpec((cfg.out_features,), cfg.bias_axes, cfg.dtype, cfg.bias_init)
        return cls(kernel=kernel, bias=bias)

    def __call__(self, x: jax.Array) -> jax.Array:
        """``x @ kernel + bias`` over the last axis of ``x``."""
        y = jnp.einsum("...i,io->...o", x, jnp.asarray(self.kernel).astype(x.dtype))
        if self.bias is not None:
            y = y + jnp.asarray(self.bias).astype(x.dtype)
        return y


@dataclasses.dataclass(frozen=True)
class EmbeddingConfig:
    """Configuration of :class:`Embedding`: a ``(num_embeddings, features)`` table.

    ``init=None`` means a normal with standard deviation 0.02 (GPT-2's choice).
    """

    num_embeddings: int
    features: int
    dtype: Any = jnp.float32
    axes: LogicalAxes = ("vocab", "embed")
    init: Initializer | None = None


@pytree_dataclass
class Embedding(ParamInitializer):
    """A lookup table; ``attend`` reuses it as an output projection (tied embeddings).

    Example:
        >>> import jax, jax.numpy as jnp, paramspec as ps
        >>> cfg = ps.EmbeddingConfig(num_embeddings=256, features=16)
        >>> mesh = ps.make_mesh((8,), ("model",))
        >>> emb = ps.Embedding.init(cfg, 0, mesh, ps.Rules({"vocab": "model", "embed": None}))
        >>> ids = jnp.array([[1, 2, 3]])
        >>> emb(ids).shape, emb.attend(emb(ids)).shape
        ((1, 3, 16), (1, 3, 256))
    """

    table: jax.Array | ParamSpec

    @classmethod
    def param_specs(cls, cfg: EmbeddingConfig) -> Embedding:
        """``Embedding`` filled with a spec for ``cfg``."""
        initializer = cfg.init or _NORMAL_002
        return cls(
            table=ParamSpec((cfg.num_embeddings, cfg.features), cfg.axes, cfg.dtype, initializer)
        )

    def __call__(self, ids: jax.Array) -> jax.Array:
        """Rows of the table for integer ``ids`` of any shape: ``ids.shape + (features,)``."""
        return jnp.take(jnp.asarray(self.table), ids, axis=0)

    def attend(self, x: jax.Array) -> jax.Array:
        """Logits ``x @ table.T``, in ``x``'s dtype."""
        return jnp.einsum("...d,vd->...v", x, jnp.asarray(self.table).astype(x.dtype))


@dataclasses.dataclass(frozen=True)
class RMSNormConfig:
    """Configuration of :class:`RMSNorm`. ``init=None`` means ones."""

    features: int
    eps: float = 1e-6
    dtype: Any = jnp.float32
    axes: LogicalAxes = ("embed",)
    init: Initializer | None = None


@pytree_dataclass
class RMSNorm(ParamInitializer):
    """Root-mean-square normalisation over the last axis, with a learned ``scale``.

    It normalises in float32 whatever the input dtype (bfloat16 squares lose too much precision)
    and returns the input's dtype. ``eps`` is a static field, so it survives ``init``.

    Example:
        >>> import jax.numpy as jnp, paramspec as ps
        >>> mesh = ps.make_mesh((8,), ("model",))
        >>> norm = ps.RMSNorm.init(ps.RMSNormConfig(features=4), 0, mesh, ps.Rules({"embed": None}))
        >>> norm(jnp.array([3.0, -3.0, 3.0, -3.0])).round(3).tolist()
        [1.0, -1.0, 1.0, -1.0]
    """

    scale: jax.Array | ParamSpec
    eps: float = field(static=True, default=1e-6)

    @classmethod
    def param_specs(cls, cfg: RMSNormConfig) -> RMSNorm:
        """``RMSNorm`` filled with a spec for ``cfg``."""
        spec = ParamSpec((cfg.features,), cfg.axes, cfg.dtype, cfg.init or _ONES)
        return cls(scale=spec, eps=cfg.eps)

    def __call__(self, x: jax.Array) -> jax.Array:
        """``x / rms(x) * scale`` over the last axis."""
        x32 = x.astype(jnp.float32)
        normed = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + self.eps)
        return (normed * jnp.asarray(self.scale).astype(jnp.float32)).astype(x.dtype)
