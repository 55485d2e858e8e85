"""``Repeat``: one layer applied ``num_layers`` times with stacked params and ``lax.scan``.

Compile time then stays flat in depth: the layer is traced once, not ``num_layers`` times.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp

from ._checks import positive_int
from ._errors import GraphError, LockedParamsError, RngError
from ._graph import Graph
from ._module import Module
from ._params import Param, Params
from ._rng import Rng


class Repeat(Module):
    """Stack ``num_layers`` copies of ``layer``'s params and run them with ``lax.scan``.

    ``layer`` is a module bound below this node; its output must have the input's shape and
    dtype (it is the scan carry). Every parameter under ``layer``'s path gets a leading axis of
    size ``num_layers``; its ``logical_axes`` metadata gains ``logical_axis`` in front. At init
    each copy is created with its own key: ``rng`` draws one key and is re-seeded with
    ``fold_in(key, i)`` for copy ``i``, so the layer should draw from that same ``rng``. State
    outside the layer (the Rng counter, say) is threaded through the scan as usual.

    Args:
        graph: the node to bind to.
        layer: the module to repeat, bound under ``graph``.
        num_layers: how many copies.
        rng: the ``Rng`` the layer initialises from.
        remat: wrap each step in ``jax.checkpoint`` (recompute activations in the backward pass).
        remat_policy: with ``remat``, what to save anyway, e.g.
            ``jax.checkpoint_policies.dots_with_no_batch_dims_saveable`` (default: nothing).
        logical_axis: the logical name of the new leading axis (``None``: replicated).
        is_static: run the copies in a Python loop (unrolled: compile time grows with depth,
            but XLA sees every layer) instead of ``lax.scan``; same params, same results.
        per_layer: keyword arguments that differ between copies: name -> one number per copy
            (copy ``i`` is called with ``name=values[i]``), e.g. a sliding window on some layers
            and none on others. Under ``lax.scan`` each copy gets its value as a traced scalar;
            with ``is_static`` as the Python number.
        collect: the layer returns ``(h, out)``: ``h`` feeds the next copy and ``out`` (any
            pytree of arrays, e.g. a layer's statistics) is stacked over the copies (a leading
            axis of ``num_layers``); the stack then returns ``(y, outs)``.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> import blox as bx
        >>> graph = bx.Graph('net')
        >>> rng = bx.Rng(graph / 'rng')
        >>> blocks = graph / 'blocks'
        >>> stack = bx.Repeat(blocks, bx.Linear(blocks / 'layer', 4, rng=rng), 6, rng=rng)
        >>> y, params = stack(rng.seed(bx.Params(), seed=0), jnp.ones((2, 4)))
        >>> params[('net', 'blocks', 'layer', 'kernel')].shape
        (6, 4, 4)
        >>> class Scaled(bx.Module):
        ...     def __call__(self, params, x, factor):
        ...         return x * factor, params
        >>> node = graph / 'scaled'
        >>> twice = bx.Repeat(node, Scaled(node / 'layer'), 2, rng=rng,
        ...                   per_layer={'factor': [2.0, 3.0]})
        >>> twice(params, jnp.ones(2))[0].tolist()
        [6.0, 6.0]
        >>> class Norms(bx.Module):
        ...     def __call__(self, params, x):
        ...         return (x / 2, jnp.abs(x).max()), params
        >>> node = graph / 'norms'
        >>> halves = bx.Repeat(node, Norms(node / 'layer'), 3, rng=rng, collect=True)
        >>> (y, outs), _ = halves(params, jnp.ones(2))
        >>> outs.tolist()
        [1.0, 0.5, 0.25]
    """

    def __init__(
        self,
        graph: Graph,
        layer: Module,
        num_layers: int,
        *,
        rng: Rng | None = None,
        remat: bool = False,
        remat_policy: Any = None,
        logical_axis: str | None = None,
        is_static: bool = False,
        per_layer: Mapping[str, Sequence[Any]] | None = None,
        collect: bool = False,
    ) -> None:
        super().__init__(graph)
        n = len(graph.path)
        if not isinstance(layer, Module) or layer.path[:n] != graph.path or layer.graph is graph:
            raise GraphError(
                f"{self.name}: the repeated layer must be a module bound below this node, got "
                f"{getattr(layer, 'name', type(layer).__name__)}. Build it on a child: "
                "bx.Repeat(node, Block(node / 'block', ...), num_layers, rng=rng)."
            )
        self.layer, self.rng = layer, rng
        self.num_layers = positive_int(num_layers, "num_layers", self)
        self.remat, self.remat_policy, self.logical_axis = remat, remat_policy, logical_axis
        self.is_static, self.collect = bool(is_static), bool(collect)
        self.per_layer = {k: tuple(v) for k, v in (per_layer or {}).items()}
        for key, values in self.per_layer.items():
            if len(values) != self.num_layers:
                raise ValueError(
                    f"{self.name}: per_layer[{key!r}] has {len(values)} values, but the layer "
                    f"repeats {self.num_layers} times; give one value per copy."
                )

    def _is_mine(self, path: tuple[str, ...], _: Any = None) -> bool:
        prefix = self.layer.path
        return path[: len(prefix)] == prefix

    def __call__(self, params: Params, x: Any, **kwargs: Any) -> tuple[Any, Params]:
        if not any(self._is_mine(p) for p in params):
            params = self._init(params, x, kwargs)
        stacked, rest = params.split(self._is_mine)

        def step(carry: tuple[Any, Params], inputs: tuple[Params, dict[str, Any]]) -> Any:
            h, outer = carry
            layer_params, own = inputs
            out, merged = self.layer(outer.merge(layer_params), h, **kwargs, **own)
            out, extra = self._split_output(out)
            h = self._check_carry(h, out)
            new_layer, outer = merged.split(self._is_mine)
            return (h, outer), (new_layer, extra)

        body = jax.checkpoint(step, policy=self.remat_policy) if self.remat else step
        if not self.is_static:
            own = {k: jnp.asarray(v) for k, v in self.per_layer.items()}
            xs = (stacked, own)  # a layer without params has nothing to scan: the length says
            (y, rest), (new, extras) = jax.lax.scan(body, (x, rest), xs, length=self.num_layers)
        else:
            carry, outs = (x, rest), []
            for i in range(self.num_layers):
                own = {k: v[i] for k, v in self.per_layer.items()}
                carry, out = body(carry, (jax.tree.map(lambda a, i=i: a[i], stacked), own))
                outs.append(out)
            (y, rest) = carry
            new, extras = jax.tree.map(lambda *a: jnp.stack(a), *outs)
        params = params.merge(rest).merge(self._created_inside(new, stacked))
        return ((y, extras) if self.collect else y), params

    def _split_output(self, out: Any) -> tuple[Any, Any]:
        """``(h, extra)`` of one copy's output: with ``collect`` the layer returns that pair,
        without it ``out`` is ``h`` and there is nothing to stack."""
        if not self.collect:
            return out, None
        if not (isinstance(out, tuple) and len(out) == 2):
            got = (
                f"an array of shape {tuple(out.shape)}"
                if hasattr(out, "shape")
                else type(out).__name__
            )
            raise ValueError(
                f"{self.name}: collect=True stacks a second output of each copy, so the layer "
                f"{self.layer.name} must return ((h, out), params), got {got} instead of a "
                "pair. Return the pair, or build the Repeat without collect."
            )
        return out

    def _created_inside(self, new: Params, before: Params) -> Params:
        """``new`` with the layer axis added to the metadata of params the copies created.

        A layer can create parameters on a later call, inside the loop: LoRA adapters added to
        a stack loaded without them, say. Each copy creates its own (with its own key from the
        carried ``Rng``) and the loop stacks them; here they get the leading logical axis that
        ``_init`` gives the others.
        """
        created = {
            path: self._stacked_param(entry)
            for path, entry in new.items()
            if path not in before and entry.logical_axes is not None
        }
        return new.merge(Params(created)) if created else new

    def _check_carry(self, before: Any, after: Any) -> Any:
        """``after`` if it has ``before``'s structure, shapes and dtypes (the scan carry).

        Otherwise ``lax.scan`` fails with a carry-type error naming neither module.
        """
        types = [jax.tree.map(lambda a: (tuple(a.shape), str(a.dtype)), t) for t in (before, after)]
        if types[0] != types[1]:
            raise ValueError(
                f"{self.name}: the repeated layer {self.layer.name} must return outputs shaped "
                f"like its inputs (they feed the next copy), got {types[0]} in and {types[1]} "
                "out (shape, dtype). Make the block map features to the same size and dtype, "
                "e.g. end it with a Linear back to the input width."
            )
        return after

    def _init(self, params: Params, x: Any, kwargs: dict[str, Any]) -> Params:
        if params.is_locked:
            raise LockedParamsError(
                f"{self.name}: no parameters under {'/'.join(self.layer.path)} and the params "
                "are locked, so the stacked layer cannot be created. Initialise on unlocked "
                "params first (params.unlocked()), then lock."
            )
        if self.rng is None:
            raise RngError(
                f"{self.name} initialises {self.num_layers} copies with distinct keys and needs "
                "an Rng: bx.Repeat(node, layer, num_layers, rng=rng)."
            )
        rng = self.rng
        key, params = rng(params)

        own = {k: jnp.asarray(v) for k, v in self.per_layer.items()}

        def one(i: jax.Array) -> Params:
            p = rng.seed(params, seed=jax.random.fold_in(key, i))
            _, p = self.layer(p, x, **kwargs, **{k: v[i] for k, v in own.items()})
            return p.split(self._is_mine)[0]

        stacked = jax.vmap(one)(jnp.arange(self.num_layers))
        for path, entry in stacked.items():
            params = params._with(path, self._stacked_param(entry))
        return params

    def _stacked_param(self, entry: Param) -> Param:
        axes = entry.logical_axes
        if axes is None:
            return entry
        return entry.replace(
            metadata={**entry.metadata, "logical_axes": (self.logical_axis, *axes)}
        )
