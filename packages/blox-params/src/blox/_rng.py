"""``Rng``: randomness as explicit state in ``Params`` (a seed and a counter)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from core_primitives import format_path

from ._errors import RngError
from ._graph import Graph
from ._module import Module
from ._params import Params

Seed = Any  # int, numpy integer, integer array (traced too), or a typed PRNG key


class Rng(Module):
    """Counter-based random keys kept in ``Params``: ``key, params = rng(params)``.

    State is two non-trainable params under the Rng's path: ``seed`` (the key's raw data) and
    ``counter``. Each draw returns ``fold_in(seed, counter)`` and increments the counter, so the
    signature ``outputs, params = model(params, x)`` tells the whole truth about randomness.

    Args:
        graph: the node to bind to, e.g. ``graph / 'rng'``.
        fold_in_axes: named axes (of ``jax.vmap(..., axis_name=...)`` or ``shard_map``) whose
            ``lax.axis_index`` is folded into every key drawn while params are **locked**: each
            lane gets its own randomness while replicated params stay identical across lanes. At
            init (unlocked params) nothing is folded, so replicated init gives identical weights.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> import blox as bx
        >>> rng = bx.Rng(bx.Graph('net') / 'rng')
        >>> params = rng.seed(bx.Params(), seed=0)
        >>> key, params = rng(params)
        >>> int(params[('net', 'rng', 'counter')].value)
        1
    """

    def __init__(self, graph: Graph, *, fold_in_axes: Sequence[str] | str = ()) -> None:
        super().__init__(graph)
        if isinstance(fold_in_axes, str):
            fold_in_axes = (fold_in_axes,)
        self.fold_in_axes = tuple(fold_in_axes)

    @property
    def _seed_path(self) -> tuple[str, ...]:
        return (*self.graph.path, "seed")

    @property
    def _counter_path(self) -> tuple[str, ...]:
        return (*self.graph.path, "counter")

    def seed(self, params: Params, seed: Seed) -> Params:
        """Set the seed and reset the counter to 0; returns new params.

        Args:
            params: the state container (locked is fine once the Rng exists in it).
            seed: a Python or numpy integer, a 0-d integer array (traced too: under
                ``jax.vmap(init)(jnp.arange(4))`` each lane gets its own model) or a typed key
                (``jax.random.key(0)``). ``3``, ``np.int64(3)`` and ``jnp.array(3)`` are the same.

        Raises:
            TypeError: for floats, booleans and other non-integer seeds.

        Example:
            >>> import numpy as np, jax.numpy as jnp
            >>> import blox as bx
            >>> rng = bx.Rng(bx.Graph('net') / 'rng')
            >>> a = rng.get_seed(rng.seed(bx.Params(), seed=3))
            >>> b = rng.get_seed(rng.seed(bx.Params(), seed=np.int64(3)))
            >>> bool((jax.random.key_data(a) == jax.random.key_data(b)).all())
            True
        """
        key = self._to_key(seed)
        data = jax.random.key_data(key)
        impl = str(jax.random.key_impl(key))
        meta = {"rng_impl": impl}
        counter = jnp.zeros((), jnp.uint32)
        if self._seed_path in params:
            old = params[self._seed_path]
            if old.metadata.get("rng_impl", impl) != impl:
                raise RngError(
                    f"Rng {format_path(self.path)}.seed: these params hold a "
                    f"{old.metadata['rng_impl']} key, got a {impl} key. Use keys of one "
                    "implementation, or seed fresh params."
                )
            params = self.set_param(params, "seed", data)
            return self.set_param(params, "counter", counter)
        _, params = self.get_param(
            params, "seed", data.shape, data, dtype=data.dtype, trainable=False, metadata=meta
        )
        _, params = self.get_param(
            params, "counter", (), counter, dtype=jnp.uint32, trainable=False
        )
        return params

    def get_seed(self, params: Params) -> jax.Array:
        """The seed as a typed key (without drawing, so the counter is unchanged).

        Example:
            >>> import blox as bx
            >>> rng = bx.Rng(bx.Graph('net') / 'rng')
            >>> rng.get_seed(rng.seed(bx.Params(), seed=0)).shape
            ()
        """
        entry = params.get(self._seed_path)
        if entry is None:
            raise RngError(self._unseeded_message())
        impl = entry.metadata.get("rng_impl", "threefry2x32")
        return jax.random.wrap_key_data(entry.value, impl=impl)

    def __call__(self, params: Params) -> tuple[jax.Array, Params]:
        """Draw a fresh key: ``key, params = rng(params)``.

        While params are locked, the ``lax.axis_index`` of each ``fold_in_axes`` axis is folded
        in (per-lane randomness); at init it is not (identical replicated params).
        """
        seed = self.get_seed(params)
        counter, params = self.get_param(params, "counter", (), dtype=jnp.uint32)
        key = jax.random.fold_in(seed, counter)
        if params.is_locked:
            key = self._fold_axes(key)
        return key, self.set_param(params, "counter", counter + jnp.uint32(1))

    def _fold_axes(self, key: jax.Array) -> jax.Array:
        for axis in self.fold_in_axes:
            try:
                index = jax.lax.axis_index(axis)
            except NameError as err:
                raise RngError(
                    f"Rng {format_path(self.path)} folds the axis {axis!r} into its keys "
                    f"(fold_in_axes={self.fold_in_axes}), but no {axis!r} axis is bound here. "
                    f"Call the model inside jax.vmap(..., axis_name={axis!r}) or a shard_map "
                    "over that mesh axis, or build the Rng without that axis for this use."
                ) from err
            key = jax.random.fold_in(key, index)
        return key

    def _unseeded_message(self) -> str:
        return (
            f"Rng {format_path(self.path)} has no seed in these params, so it cannot draw keys. "
            f"Seed it once before the first forward pass: params = rng.seed(params, seed=0) "
            f"(where rng is the Rng bound to {format_path(self.path)})."
        )

    def _to_key(self, seed: Seed) -> jax.Array:
        where = f"Rng {format_path(self.path)}.seed"
        if isinstance(seed, (bool | np.bool_, float | complex)):
            raise TypeError(
                f"{where}: got a {type(seed).__name__} seed {seed!r}; seeds are integers or keys. "
                "Write rng.seed(params, seed=int(s)) or pass jax.random.key(s)."
            )
        if isinstance(seed, int | np.integer):
            return jax.random.key(int(seed))
        dtype = getattr(seed, "dtype", None)
        if dtype is None:
            raise TypeError(
                f"{where}: got a {type(seed).__name__}; expected an integer, an integer array "
                "or a typed key (jax.random.key(0))."
            )
        if jnp.issubdtype(dtype, jax.dtypes.prng_key):
            return self._check_scalar(seed, where)
        if dtype == jnp.uint32 and jnp.shape(seed) == (2,):  # legacy jax.random.PRNGKey
            return jax.random.wrap_key_data(seed)
        if not jnp.issubdtype(dtype, jnp.integer):
            raise TypeError(
                f"{where}: got an array seed of dtype {dtype}; expected an integer dtype or a "
                "typed key. Cast with seed.astype(jnp.int32), or use jax.random.key(s)."
            )
        return jax.random.key(self._check_scalar(seed, where))

    @staticmethod
    def _check_scalar(seed: Any, where: str) -> Any:
        if jnp.ndim(seed) != 0:
            raise ValueError(
                f"{where}: got a seed of shape {jnp.shape(seed)}; expected a scalar. To build "
                "several models from several seeds, vmap the init: jax.vmap(init)(seeds)."
            )
        return seed
