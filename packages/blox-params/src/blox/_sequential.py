"""``Sequential`` (a chain of modules and plain functions) and ``MLP`` (optionally gated)."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp

from core_primitives import did_you_mean

from ._dropout import Dropout
from ._graph import Graph
from ._linear import Linear
from ._lora import LoRA
from ._module import Initializer, Module
from ._params import Params
from ._rng import Rng


def _accepted_kwargs(fn: Callable[..., Any]) -> frozenset[str] | None:
    """Keyword names ``fn`` accepts; ``None`` when it takes ``**kwargs`` (accepts all)."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return frozenset()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in sig.parameters.values()):
        return None
    return frozenset(sig.parameters)


class Sequential(Module):
    """Run layers in order: modules as ``x, params = layer(params, x)``, functions as ``x = f(x)``.

    Keyword arguments of the call go to each module that accepts them (``is_training=`` reaches
    ``Dropout``, ``BatchNorm`` and ``Linear``, whose LoRA dropout reads it).

    Args:
        graph: the node to bind to (the layers bind to their own nodes, usually children).
        layers: modules and plain ``x -> x`` functions such as ``jax.nn.relu``.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> import blox as bx
        >>> graph = bx.Graph('net')
        >>> rng = bx.Rng(graph / 'rng')
        >>> seq = graph / 'seq'
        >>> model = bx.Sequential(seq, [
        ...     bx.Linear(seq / 'l1', 8, rng=rng), jax.nn.relu,
        ...     bx.Dropout(seq / 'drop', 0.1, rng=rng), bx.Linear(seq / 'l2', 2, rng=rng)])
        >>> y, params = model(rng.seed(bx.Params(), seed=0), jnp.ones((4, 3)), is_training=True)
        >>> y.shape
        (4, 2)
    """

    def __init__(self, graph: Graph, layers: Sequence[Module | Callable[[Any], Any]]) -> None:
        super().__init__(graph)
        self.layers = list(layers)
        for i, layer in enumerate(self.layers):
            if not callable(layer):
                raise TypeError(
                    f"{self.name}: layer {i} is a {type(layer).__name__}, which is not callable. "
                    "Layers are blox modules or functions x -> x."
                )
        self._kwargs = [
            _accepted_kwargs(layer.__call__) if isinstance(layer, Module) else frozenset()
            for layer in self.layers
        ]

    def __call__(self, params: Params, x: Any, **kwargs: Any) -> tuple[Any, Params]:
        self._check_kwargs(kwargs)
        for layer, accepted in zip(self.layers, self._kwargs):
            if isinstance(layer, Module):
                mine = {k: v for k, v in kwargs.items() if accepted is None or k in accepted}
                x, params = layer(params, x, **mine)
            else:
                x = layer(x)
        return x, params

    def _check_kwargs(self, kwargs: dict[str, Any]) -> None:
        # Before running any layer: a misspelt `is_trainig=` would otherwise surface first as a
        # layer's "missing argument is_training" that names neither the typo nor the path.
        known: set[str] = set()
        for accepted in self._kwargs:
            if accepted is None:  # a layer taking **kwargs accepts anything
                return
            known |= accepted
        unused = sorted(set(kwargs) - known)
        if unused:
            raise TypeError(
                f"{self.name} got keyword arguments {unused} that none of its layers "
                f"accepts. Check the spelling, or drop them.{did_you_mean(unused[0], known)}"
            )


class MLP(Module):
    """A stack of ``Linear`` layers with an activation between them (and optional dropout).

    Layers are named ``linear_0``, ``linear_1``, ...; with ``dropout_rate`` the call needs
    ``is_training=``. With ``gated=True`` every activated layer ``i`` gets a companion
    ``gate_i`` of the same size and computes ``activation(gate_i(x)) * linear_i(x)`` (a GLU;
    ``activation=jax.nn.silu`` is SwiGLU).

    The backward pass recomputes each activation (and a gate's product) from the layer's outputs
    instead of keeping its intermediates: ``jax.checkpoint`` around the elementwise part only, so
    no matmul runs twice. A tanh GELU keeps one hidden-sized array per layer instead of three
    or four; ``remat_activation=False`` keeps them all (a little less compute in the backward pass).

    Keyword arguments passed on as in the base layer:

    - ``use_bias``, ``bias_init``, ``dtype``, ``param_dtype``: passed to every ``Linear``.

    Args:
        graph: the node to bind to.
        output_sizes: features of each layer, e.g. ``[128, 128, 10]``.
        rng: draws init keys (and dropout masks).
        activation: applied after every layer but the last (and the last too when
            ``activate_final``).
        activate_final: see above.
        dropout_rate: dropout after each hidden activation (``None``: none).
        gated: gated linear units (see above).
        kernel_init: one initializer for every layer, or a sequence with one per layer (a
            gate uses its layer's).
        kernel_metadata: one metadata mapping for every kernel, or a sequence with one per
            layer, e.g. ``[{'logical_axes': ('embed', 'mlp')}, {'logical_axes': ('mlp',
            'embed')}]`` for paramspec (a gate uses its layer's).
        bias_metadata: the same for the biases (with ``use_bias``), e.g. ``[{'logical_axes':
            ('mlp',)}, {'logical_axes': ('embed',)}]``.
        lora: a ``bx.LoRA`` given to every ``Linear`` (its ``targets`` pick kernels by path,
            e.g. ``('net', 'mlp', 'gate_0', 'kernel')``); ``is_training=`` reaches them.
        remat_activation: recompute the activations in the backward pass (see above).

    Example:
        >>> import jax, jax.numpy as jnp
        >>> import blox as bx
        >>> graph = bx.Graph('net')
        >>> rng = bx.Rng(graph / 'rng')
        >>> mlp = bx.MLP(graph / 'mlp', [16, 16, 3], rng=rng)
        >>> y, params = mlp(rng.seed(bx.Params(), seed=0), jnp.ones((5, 4)))
        >>> y.shape, len(params)
        ((5, 3), 8)
        >>> swiglu = bx.MLP(graph / 'swiglu', [32, 4], rng=rng, activation=jax.nn.silu,
        ...                 gated=True, use_bias=False)
        >>> y, params = swiglu(params, jnp.ones((5, 4)))
        >>> y.shape, params[('net', 'swiglu', 'gate_0', 'kernel')].shape
        ((5, 4), (4, 32))
    """

    def __init__(
        self,
        graph: Graph,
        output_sizes: Sequence[int],
        *,
        rng: Rng | None = None,
        activation: Callable[[jax.Array], jax.Array] = jax.nn.gelu,
        activate_final: bool = False,
        dropout_rate: float | None = None,
        gated: bool = False,
        use_bias: bool = True,
        kernel_init: Initializer | Sequence[Initializer | None] | None = None,
        bias_init: Initializer = jax.nn.initializers.zeros,
        kernel_metadata: Mapping[str, Any] | Sequence[Mapping[str, Any] | None] | None = None,
        bias_metadata: Mapping[str, Any] | Sequence[Mapping[str, Any] | None] | None = None,
        dtype: Any = None,
        param_dtype: Any = jnp.float32,
        lora: LoRA | None = None,
        remat_activation: bool = True,
    ) -> None:
        super().__init__(graph)
        sizes = [] if isinstance(output_sizes, (int, str)) else list(output_sizes)
        if not sizes:
            raise ValueError(
                f"{self.name}: output_sizes must list one size per layer, e.g. [128, 128, 10], "
                f"got {output_sizes!r}."
            )
        self.activation = activation
        self.remat_activation = remat_activation
        self.activate_final = activate_final
        inits = self._per_layer(kernel_init, len(sizes), "kernel_init", callable)
        metas = self._per_layer(kernel_metadata, len(sizes), "kernel_metadata", _is_mapping)
        bias_metas = self._per_layer(bias_metadata, len(sizes), "bias_metadata", _is_mapping)

        def linear(name: str, i: int) -> Linear:
            return Linear(
                graph / f"{name}_{i}",
                sizes[i],
                rng=rng,
                use_bias=use_bias,
                kernel_init=inits[i],
                bias_init=bias_init,
                kernel_metadata=metas[i],
                bias_metadata=bias_metas[i],
                dtype=dtype,
                param_dtype=param_dtype,
                lora=lora,
            )

        self.layers = [linear("linear", i) for i in range(len(sizes))]
        last = len(sizes) - 1
        self.gates = [
            linear("gate", i) if gated and (i < last or activate_final) else None
            for i in range(len(sizes))
        ]
        self.dropouts = [
            Dropout(graph / f"dropout_{i}", dropout_rate, rng=rng) if dropout_rate else None
            for i in range(len(self.layers))
        ]

    def _remat(self, fn: Callable[..., jax.Array]) -> Callable[..., jax.Array]:
        # Only the inputs are saved; the elementwise ops run again in the backward pass, where
        # XLA fuses them into the gradient's own elementwise pass.
        return jax.checkpoint(fn) if self.remat_activation else fn

    def _per_layer(self, value: Any, n: int, name: str, is_one: Callable[[Any], bool]) -> list:
        """``value`` for each of ``n`` layers: one value repeated, or a sequence of ``n``."""
        if value is None or is_one(value):
            return [value] * n
        values = list(value) if isinstance(value, Sequence) else None
        if values is None or len(values) != n:
            raise ValueError(
                f"{self.name}: {name} must be one value for every layer or a sequence with one "
                f"per layer ({n}), got {value!r:.80}."
            )
        return values

    def __call__(
        self, params: Params, x: jax.Array, *, is_training: bool | None = None
    ) -> tuple[jax.Array, Params]:
        last = len(self.layers) - 1
        for i, (layer, gate, drop) in enumerate(zip(self.layers, self.gates, self.dropouts)):
            h, params = layer(params, x, is_training=is_training)
            if gate is not None:
                g, params = gate(params, x, is_training=is_training)
                h = self._remat(lambda g, h: self.activation(g) * h)(g, h)
            elif i < last or self.activate_final:
                h = self._remat(self.activation)(h)
            x = h
            if drop is not None and i < last:
                if is_training is None:
                    raise TypeError(
                        f"{self.name} has dropout, so its call needs is_training=True "
                        "(training) or False (evaluation)."
                    )
                x, params = drop(params, x, is_training=is_training)
        return x, params


def _is_mapping(value: Any) -> bool:
    return isinstance(value, Mapping)
