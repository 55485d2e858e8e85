"""Recurrent layers: ``LSTM`` and ``GRU``, one step via ``__call__``, sequences via ``apply``.

``apply`` creates the cell's params from shapes before running the sequence, so initialisation
never unrolls it: with ``is_static=False`` the init jaxpr is one ``scan`` whatever the length.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ._checks import positive_int
from ._dtypes import promote
from ._graph import Graph
from ._module import Initializer, Module
from ._params import Params
from ._rng import Rng


class LSTMState(NamedTuple):
    """The LSTM carry: ``hidden`` (the output) and ``cell``, each ``(..., hidden_size)``."""

    hidden: jax.Array
    cell: jax.Array


class GRUState(NamedTuple):
    """The GRU carry: ``hidden`` (the output), ``(..., hidden_size)``."""

    hidden: jax.Array


class _Recurrent(Module):
    """A cell with a step (``__call__``) and a sequence runner (``apply``)."""

    gates: int  # 4 for LSTM, 3 for GRU

    def __init__(
        self,
        graph: Graph,
        hidden_size: int,
        *,
        rng: Rng | None = None,
        is_static: bool = False,
        kernel_init: Initializer | None = None,
        recurrent_init: Initializer | None = None,
        bias_init: Initializer = jax.nn.initializers.zeros,
        dtype: Any = None,
        param_dtype: Any = jnp.float32,
    ) -> None:
        super().__init__(graph)
        self.hidden_size = positive_int(hidden_size, "hidden_size", self)
        self.rng = rng
        self.is_static = is_static
        self.kernel_init = kernel_init or jax.nn.initializers.lecun_normal()
        self.recurrent_init = recurrent_init or jax.nn.initializers.orthogonal()
        self.bias_init = bias_init
        self.dtype, self.param_dtype = dtype, param_dtype

    def _weights(self, params: Params, in_features: int) -> tuple[dict[str, Any], Params]:
        h, g = self.hidden_size, self.gates
        w_i, params = self.get_param(
            params, "w_i", (in_features, g * h), self.kernel_init, self.param_dtype
        )
        w_h, params = self.get_param(
            params, "w_h", (h, g * h), self.recurrent_init, self.param_dtype
        )
        b, params = self.get_param(params, "bias", (g * h,), self.bias_init, self.param_dtype)
        return {"w_i": w_i, "w_h": w_h, "bias": b}, params

    def initial_state(self, batch_shape: tuple[int, ...] = (), dtype: Any = jnp.float32) -> Any:
        """Zeros of the carry for inputs with leading ``batch_shape``."""
        raise NotImplementedError(
            f"{type(self).__name__} must define initial_state(batch_shape, dtype): the recurrent "
            "base class does not know the shape of its carry."
        )

    def _step(self, w: dict[str, Any], state: Any, x: jax.Array) -> tuple[jax.Array, Any]:
        raise NotImplementedError(
            f"{type(self).__name__} must define _step(w, state, x) -> (output, new_state)."
        )

    def __call__(
        self, params: Params, x: jax.Array, state: Any = None, is_reset: Any = None
    ) -> tuple[tuple[jax.Array, Any], Params]:
        """One step: ``(output, new_state), params = cell(params, x_t, state)``; ``x_t`` is
        ``(..., features)``; ``state=None`` starts from zeros; where ``is_reset`` (``(...)``,
        or broadcastable to it) is true the state is re-initialised before the step."""
        x = jnp.asarray(x)
        w, params = self._weights(params, x.shape[-1])
        state = self._start(state, x.shape[:-1], self._compute_dtype(x, w), "state")
        if is_reset is not None:
            reset = self._resets(is_reset, x.shape[:-1], "__call__", "x")
            state = self._reset(state, reset)
        return self._step(w, state, x), params

    def _resets(self, is_reset: Any, shape: tuple[int, ...], method: str, what: str) -> Any:
        """``is_reset`` as a bool array of ``shape`` (one flag per batch entry and step)."""
        dtype = getattr(is_reset, "dtype", None)
        dtype = np.asarray(is_reset).dtype if dtype is None else dtype
        if not (jnp.issubdtype(dtype, jnp.bool_) or jnp.issubdtype(dtype, jnp.number)):
            raise TypeError(
                f"{self.name}.{method}: is_reset must hold booleans (or 0/1 numbers), got dtype "
                f"{dtype}."
            )
        reset = jnp.asarray(is_reset)
        try:
            fits = jnp.broadcast_shapes(reset.shape, shape) == tuple(shape)
        except ValueError:
            fits = False
        if not fits:
            raise ValueError(
                f"{self.name}.{method}: is_reset has shape {reset.shape}, but {what} needs one "
                f"flag per batch entry{' and step' if method == 'apply' else ''}: shape "
                f"{tuple(shape)} (the {what} shape without its features), or a shape that "
                "broadcasts to it. A true flag re-initialises the state before its step."
            )
        return jnp.broadcast_to(reset if reset.dtype == jnp.bool_ else reset != 0, shape)

    def _reset(self, state: Any, reset: jax.Array) -> Any:
        """``state`` with the entries where ``reset`` is true replaced by the initial state."""
        fresh = self.initial_state(reset.shape, jax.tree.leaves(state)[0].dtype)
        return jax.tree.map(lambda z, s: jnp.where(reset[..., None], z, s), fresh, state)

    def _start(self, state: Any, batch_shape: tuple[int, ...], dtype: Any, what: str) -> Any:
        """The carry to start from: zeros for ``None``, else ``state`` checked and cast.

        Casting to the computation dtype keeps ``lax.scan``'s carry type fixed (a bfloat16
        state with float32 params would otherwise fail in scan but pass the static loop), and a
        plain ``(hidden, cell)`` tuple becomes an ``LSTMState``. A wrong shape would otherwise
        surface as a bare ``dot_general`` or scan carry error.
        """
        zeros = self.initial_state(batch_shape, dtype)
        if state is None:
            return zeros
        want, treedef = jax.tree.flatten(zeros)
        got = jax.tree.leaves(state)
        got_shapes = [tuple(jnp.shape(s)) for s in got]
        if got_shapes != [w.shape for w in want]:
            raise ValueError(
                f"{self.name}: {what} has array shapes {got_shapes}, but inputs with batch shape "
                f"{tuple(batch_shape)} need {[w.shape for w in want]} (each (*batch, "
                f"hidden_size={self.hidden_size})). Pass the state a previous call returned, or "
                "layer.initial_state(batch_shape)."
            )
        return jax.tree.unflatten(treedef, [jnp.asarray(s, w.dtype) for s, w in zip(got, want)])

    def _compute_dtype(self, x: jax.Array, w: dict[str, Any]) -> Any:
        return self.dtype or jnp.result_type(x, *w.values())

    def apply(
        self, params: Params, inputs: jax.Array, prev_state: Any = None, is_reset: Any = None
    ) -> tuple[tuple[jax.Array, Any], Params]:
        """Run over a sequence: ``(outputs, state), params = cell.apply(params, inputs)``.

        Args:
            params: the state container; the cell's params are created here on first use.
            inputs: ``(..., T, features)``: time is the second-to-last axis; leading axes are
                batch axes.
            prev_state: the carry to start from (``None``: zeros).
            is_reset: optional flags ``(..., T)`` (or broadcastable to it, e.g. ``(T,)`` for
                the whole batch): where ``is_reset[..., t]`` is true the state is
                re-initialised before step ``t`` (episode boundaries in RL). Bool, or numbers
                where nonzero means reset.

        Returns:
            ``((outputs (..., T, hidden_size), final state), params)``.
        """
        inputs = jnp.asarray(inputs)
        if inputs.ndim < 2:
            raise ValueError(
                f"{self.name}.apply expects inputs (..., T, features), got shape "
                f"{inputs.shape}. For a single step call the layer directly: "
                "(y, state), params = layer(params, x_t, state)."
            )
        # Create params from shapes only: running a step here would trace the cell twice.
        w, params = self._weights(params, inputs.shape[-1])
        dtype = self._compute_dtype(inputs, w)
        state = self._start(prev_state, inputs.shape[:-2], dtype, "prev_state")
        xs = jnp.moveaxis(inputs, -2, 0)
        resets = None
        if is_reset is not None:
            flags = self._resets(is_reset, inputs.shape[:-1], "apply", "inputs")
            resets = jnp.moveaxis(flags, -1, 0)

        def step(state: Any, x: jax.Array, reset: Any) -> tuple[jax.Array, Any]:
            state = state if reset is None else self._reset(state, reset)
            return self._step(w, state, x)

        if self.is_static:
            outputs = []
            for t in range(xs.shape[0]):
                y, state = step(state, xs[t], None if resets is None else resets[t])
                outputs.append(y)
            ys = jnp.stack(outputs)
        else:
            state, ys = jax.lax.scan(lambda s, xr: step(s, *xr)[::-1], state, (xs, resets))
        return (jnp.moveaxis(ys, 0, -2), state), params


class LSTM(_Recurrent):
    """Long short-term memory: gates ``i, f, g, o`` from one fused ``(in, 4h)`` kernel.

    ``(outputs, state), params = lstm.apply(params, inputs, prev_state=None)`` runs a sequence
    ``(..., T, features)``; ``is_static=True`` unrolls a Python loop (debuggable, same result),
    ``False`` uses ``lax.scan``. One step: ``(h, state), params = lstm(params, x_t, state)``.
    A given state is cast to the computation dtype; a ``(hidden, cell)`` tuple is accepted.
    ``is_reset=`` flags re-initialise the state before the steps where they are true.

    As in Haiku, 1 is added to the forget gate's pre-activation (on top of ``bias``), so a
    fresh cell starts out remembering; keep that in mind when porting weights from PyTorch.

    Keyword arguments passed on as in the base layer:

    - ``dtype``, ``param_dtype``: mixed precision.

    Args:
        graph: the node to bind to.
        hidden_size: features of the hidden and cell states.
        rng: draws init keys.
        is_static: Python loop (``True``) or ``lax.scan`` (``False``).
        kernel_init: input kernel init (LeCun normal); recurrent_init: orthogonal;
            bias_init: zeros.

    Example:
        >>> import jax.numpy as jnp
        >>> import blox as bx
        >>> graph = bx.Graph('net')
        >>> rng = bx.Rng(graph / 'rng')
        >>> lstm = bx.LSTM(graph / 'lstm', hidden_size=8, rng=rng)
        >>> (ys, state), params = lstm.apply(rng.seed(bx.Params(), seed=0), jnp.ones((2, 5, 3)))
        >>> ys.shape, state.cell.shape
        ((2, 5, 8), (2, 8))
    """

    gates = 4

    def initial_state(self, batch_shape: tuple[int, ...] = (), dtype: Any = jnp.float32) -> Any:
        zeros = jnp.zeros((*batch_shape, self.hidden_size), dtype)
        return LSTMState(zeros, zeros)

    def _step(self, w: dict[str, Any], state: Any, x: jax.Array) -> tuple[jax.Array, Any]:
        h, c = state
        x, h, w_i, w_h, b = promote(self.dtype, x, h, w["w_i"], w["w_h"], w["bias"])
        i, f, g, o = jnp.split(x @ w_i + h @ w_h + b, 4, axis=-1)
        c = jax.nn.sigmoid(f + 1.0) * c.astype(x.dtype) + jax.nn.sigmoid(i) * jnp.tanh(g)
        h = jax.nn.sigmoid(o) * jnp.tanh(c)
        return h, LSTMState(h, c)


class GRU(_Recurrent):
    """Gated recurrent unit (reset gate applied after the recurrent matmul, as in cuDNN/PyTorch).

    Same calling convention as ``LSTM`` (``is_reset`` included); the state is a
    ``GRUState(hidden)`` with ``hidden`` of shape ``(..., hidden_size)``. A bare array is
    accepted as ``prev_state``.

    Example:
        >>> import jax.numpy as jnp
        >>> import blox as bx
        >>> graph = bx.Graph('net')
        >>> rng = bx.Rng(graph / 'rng')
        >>> gru = bx.GRU(graph / 'gru', hidden_size=8, rng=rng, is_static=True)
        >>> (ys, state), params = gru.apply(rng.seed(bx.Params(), seed=0), jnp.ones((5, 3)))
        >>> ys.shape, state.hidden.shape
        ((5, 8), (8,))
    """

    gates = 3

    def _weights(self, params: Params, in_features: int) -> tuple[dict[str, Any], Params]:
        w, params = super()._weights(params, in_features)
        b_h, params = self.get_param(
            params, "bias_h", (3 * self.hidden_size,), self.bias_init, self.param_dtype
        )
        return {**w, "bias_h": b_h}, params

    def initial_state(self, batch_shape: tuple[int, ...] = (), dtype: Any = jnp.float32) -> Any:
        return GRUState(jnp.zeros((*batch_shape, self.hidden_size), dtype))

    def _step(self, w: dict[str, Any], state: Any, x: jax.Array) -> tuple[jax.Array, Any]:
        x, h, w_i, w_h, b, b_h = promote(
            self.dtype, x, state.hidden, w["w_i"], w["w_h"], w["bias"], w["bias_h"]
        )
        xr, xz, xn = jnp.split(x @ w_i + b, 3, axis=-1)
        hr, hz, hn = jnp.split(h @ w_h + b_h, 3, axis=-1)
        r, z = jax.nn.sigmoid(xr + hr), jax.nn.sigmoid(xz + hz)
        n = jnp.tanh(xn + r * hn)
        h = (1.0 - z) * n + z * h
        return h, GRUState(h)
