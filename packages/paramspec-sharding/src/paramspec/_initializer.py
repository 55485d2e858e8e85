"""``ParamInitializer``: the base of spec-tree layers (layers themselves live in blox).

A spec-tree layer is a ``core_primitives.pytree_dataclass`` whose array fields hold either
``ParamSpec``s (what ``param_specs(cfg)`` returns) or arrays (what ``paramspec.init`` returns for
that tree). docs/paramspec.md shows one written out; real models use blox modules, whose params
carry logical axes and are sharded by the same rules.
"""

from __future__ import annotations

from typing import Any, Self

from jax.sharding import Mesh

from ._init import abstract, init, shardings


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
    def init(cls, cfg: Any, key: Any, mesh: Mesh, rules: Any) -> Self:
        """``paramspec.init(cls.param_specs(cfg), key, mesh, rules)``."""
        return init(cls.param_specs(cfg), key, mesh, rules)  # type: ignore[no-any-return]

    @classmethod
    def shardings(cls, cfg: Any, mesh: Mesh, rules: Any) -> Self:
        """``paramspec.shardings(cls.param_specs(cfg), mesh, rules)``."""
        return shardings(cls.param_specs(cfg), mesh, rules)  # type: ignore[no-any-return]

    @classmethod
    def abstract(cls, cfg: Any, mesh: Mesh, rules: Any) -> Self:
        """``paramspec.abstract(cls.param_specs(cfg), mesh, rules)``."""
        return abstract(cls.param_specs(cfg), mesh, rules)  # type: ignore[no-any-return]
