"""``Dropout``: randomness from an ``Rng`` in params, switched by ``is_training``."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ._checks import static_flag
from ._errors import RngError
from ._graph import Graph
from ._module import Module
from ._params import Params
from ._rng import Rng


class Dropout(Module):
    """Zero each element with probability ``rate`` and scale the rest by ``1 / (1 - rate)``.

    Args:
        graph: the node to bind to.
        rate: drop probability in ``[0, 1)``.
        rng: the ``Rng`` that draws the masks (required). For distinct masks per ``vmap`` lane
            or device with replicated params, build it with ``fold_in_axes``.

    Example:
        >>> import jax.numpy as jnp
        >>> import blox as bx
        >>> graph = bx.Graph('net')
        >>> rng = bx.Rng(graph / 'rng')
        >>> drop = bx.Dropout(graph / 'drop', 0.5, rng=rng)
        >>> params = rng.seed(bx.Params(), seed=0)
        >>> y, params = drop(params, jnp.ones(6), is_training=True)
        >>> sorted(set(y.tolist())) in ([0.0, 2.0], [2.0], [0.0])
        True
        >>> y, params = drop(params, jnp.ones(2), is_training=False)
        >>> y.tolist()
        [1.0, 1.0]
    """

    def __init__(self, graph: Graph, rate: float, *, rng: Rng | None = None) -> None:
        super().__init__(graph)
        if not _is_rate(rate):
            raise ValueError(
                f"{self.name}: rate must be in [0, 1), got {rate!r}. rate is the probability "
                "of dropping an element; 1.0 would drop everything."
            )
        if rng is None:
            raise RngError(
                f"{self.name} needs an Rng to draw its masks. Build one and pass it: "
                "rng = bx.Rng(graph / 'rng'); bx.Dropout(graph / 'drop', rate, rng=rng)."
            )
        self.rate = float(rate)
        self.rng = rng

    def __call__(
        self, params: Params, x: jax.Array, *, is_training: bool
    ) -> tuple[jax.Array, Params]:
        """Apply dropout when ``is_training`` (draws one key), otherwise return ``x`` unchanged."""
        if not static_flag(is_training, "is_training", self) or self.rate == 0.0:
            return x, params
        key, params = self.rng(params)
        keep = jax.random.bernoulli(key, 1.0 - self.rate, jnp.shape(x))
        scaled = x / jnp.asarray(1.0 - self.rate, dtype=jnp.result_type(x))
        return jnp.where(keep, scaled, jnp.zeros_like(scaled)), params


def _is_rate(rate: object) -> bool:
    try:
        return 0.0 <= float(rate) < 1.0  # type: ignore[arg-type]
    except (TypeError, ValueError):  # a string or None: report it as a bad rate
        return False
