"""``Module``: the base class of layers; creates params lazily and checks them on every use."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import jax
import jax.numpy as jnp
import numpy as np

from core_primitives import did_you_mean, format_path

from ._errors import LockedParamsError, MissingParamError, ParamDtypeError, ParamShapeError
from ._graph import Graph
from ._params import Metadata, Param, Params

Initializer = Callable[..., Any]


class KeySource(Protocol):
    """What ``get_param`` draws init keys from: ``key, params = rng(params)``.

    ``blox.Rng`` is the one blox has. It is a ``Module`` defined in ``_rng`` on top of this file,
    so it is named here by what it does rather than imported (a lower module never imports a
    higher one).
    """

    def __call__(self, params: Params, /) -> tuple[jax.Array, Params]: ...


def _describe(value: Any) -> str:
    if isinstance(value, (jax.Array, np.ndarray)):
        return f"an array of shape {tuple(value.shape)}"
    return type(value).__name__


def _params_first(call: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap a subclass's ``__call__`` so that a call without ``Params`` first fails by name.

    Without it, ``module(x, params)`` or ``module(x)`` fails deep inside the layer with an error
    about array conversion that names neither the module nor the mistake. The check runs at
    trace time only (once per ``jit`` trace), so it costs nothing in compiled code.
    """

    @functools.wraps(call)
    def checked(self: Module, *args: Any, **kwargs: Any) -> Any:
        if args and not isinstance(args[0], Params):
            self._require_params(args[0], "__call__")
        return call(self, *args, **kwargs)

    checked._checks_params = True  # type: ignore[attr-defined]
    return checked


class Module:
    """Base class of everything that owns a graph node: layers, ``Rng``, your own models.

    A module holds configuration only. State lives in ``Params`` and flows through calls:
    ``y, params = module(params, x)``. Subclasses implement ``__call__`` and read their weights
    with ``get_param``, which creates them on the first (unlocked) call.

    Args:
        graph: the node to bind to; not the root, and not a node another module holds.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> import blox as bx
        >>> class Scale(bx.Module):
        ...     def __call__(self, params, x):
        ...         s, params = self.get_param(params, 'scale', (), jax.nn.initializers.ones)
        ...         return x * s, params
        >>> scale = Scale(bx.Graph('net') / 'scale')
        >>> y, params = scale(bx.Params(), jnp.ones(2))
        >>> params[('net', 'scale', 'scale')]
        Param(float32[], trainable=True)
    """

    graph: Graph

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        call = cls.__dict__.get("__call__")
        if call is not None and not getattr(call, "_checks_params", False):
            cls.__call__ = _params_first(call)  # type: ignore[method-assign]

    def __init__(self, graph: Graph) -> None:
        if not isinstance(graph, Graph):
            raise TypeError(
                f"{type(self).__name__} takes a Graph node as its first argument, got "
                f"{type(graph).__name__}. Write {type(self).__name__}(graph / 'name', ...)."
            )
        graph._bind(self)
        self.graph = graph

    @property
    def path(self) -> tuple[str, ...]:
        """This module's graph path, the prefix of all its parameter paths."""
        return self.graph.path

    @property
    def name(self) -> str:
        """``'Linear net/l1'``: the class and path, as used in error messages."""
        return f"{type(self).__name__} {format_path(self.graph.path)}"

    def __call__(self, params: Params, *args: Any, **kwargs: Any) -> tuple[Any, Params]:
        raise NotImplementedError(
            f"{type(self).__name__} does not define __call__(self, params, ...). Subclasses of "
            "blox.Module implement it and return (outputs, params)."
        )

    def get_param(
        self,
        params: Params,
        name: str,
        shape: tuple[int, ...] | None = None,
        init: Initializer | Any = None,
        dtype: Any = jnp.float32,
        trainable: bool = True,
        metadata: Mapping[str, Any] | None = None,
        rng: KeySource | None = None,
    ) -> tuple[Any, Params]:
        """Read the parameter ``name`` under this module, creating it on first use.

        On reuse the stored value must have ``shape`` and ``dtype`` (when given): a mismatch is
        an error naming the path and both shapes, never a silent broadcast.

        Args:
            params: the state container.
            name: the last element of the path (``path = module.path + (name,)``).
            shape: the expected shape; required to create from a callable ``init``.
            init: ``init(key, shape, dtype)`` (any ``jax.nn.initializers`` function) or a
                concrete array. Without it, a missing parameter is an error.
            dtype: the expected dtype (``None``: accept any).
            trainable: stored on creation; ``Params.split`` uses it.
            metadata: stored on creation, e.g. ``{'logical_axes': ('embed', 'mlp')}``.
            rng: the ``Rng`` that draws the init key; default ``self.rng`` when the module has
                one, otherwise ``init`` gets ``key=None``.

        Returns:
            ``(value, params)``; ``params`` is new when the parameter was created.

        Raises:
            ParamShapeError: stored shape differs from ``shape`` (a ``ValueError``).
            ParamDtypeError: stored dtype differs from ``dtype`` (a ``ValueError``).
            LockedParamsError: the parameter is missing and ``params`` is locked.
            MissingParamError: the parameter is missing and there is no ``init``.

        Example:
            >>> import jax, jax.numpy as jnp
            >>> import blox as bx
            >>> class Bias(bx.Module):
            ...     def __call__(self, params, x):
            ...         n = x.shape[-1:]
            ...         b, params = self.get_param(params, 'b', n, jnp.zeros(n))
            ...         return x + b, params
            >>> bias = Bias(bx.Graph('net') / 'bias')
            >>> _, params = bias(bx.Params(), jnp.ones(3))
            >>> bias(params.locked(), jnp.ones(4))
            Traceback (most recent call last):
            ...
            blox._errors.ParamShapeError: Parameter net/bias/b has shape (3,), but ... (4,). ...
        """
        self._require_params(params, "get_param")
        path = (*self.graph.path, name)
        entry = params.get(path)
        if entry is not None:
            value = entry.value
            self._check(path, value, shape, dtype)
            return value, params
        return self._create(params, path, shape, init, dtype, trainable, metadata, rng)

    def _require_params(self, params: Any, method: str) -> None:
        if not isinstance(params, Params):
            raise TypeError(
                f"{self.name}.{method}: expected Params, got {_describe(params)}. Modules are "
                "called as `out, params = module(params, x)`, params first; start from "
                "bx.Params() (seeded with rng.seed(...) when a module draws random init)."
            )

    def set_param(self, params: Params, name: str, value: Any) -> Params:
        """Store a new value for an existing parameter (same shape and dtype); returns new params.

        For state updated in the forward pass: RNG counters, batch statistics, caches. The
        ``trainable`` flag and metadata are kept. The value must be an array (or a number):
        ``None``, a ``Param``, a list or any other object is refused here, where it would
        otherwise be stored and fail later in an unrelated operation.

        Example:
            >>> import jax.numpy as jnp
            >>> import blox as bx
            >>> class Counter(bx.Module):
            ...     def __call__(self, params):
            ...         n, params = self.get_param(params, 'n', (), jnp.zeros((), jnp.int32),
            ...                                    dtype=jnp.int32, trainable=False)
            ...         return n, self.set_param(params, 'n', n + 1)
            >>> counter = Counter(bx.Graph('net') / 'count')
            >>> _, params = counter(bx.Params())
            >>> n, params = counter(params)
            >>> int(n), int(params[('net', 'count', 'n')].value)
            (1, 2)
        """
        self._require_params(params, "set_param")
        path = (*self.graph.path, name)
        entry = params.get(path)
        if entry is None:
            raise MissingParamError(
                f"{self.name}.set_param: parameter {format_path(path)} does not exist yet. "
                "set_param only updates; create it first with get_param(params, name, shape, "
                f"init).{did_you_mean(name, self._own_names(params))}"
            )
        _require_array(self, path, value)
        old = entry.value
        self._check(path, value, _shape(old), _dtype(old), verb="set_param got")
        return params._with(path, entry.replace(value=value))

    # -- helpers ---------------------------------------------------------------------------------

    def _own_names(self, params: Params) -> list[str]:
        n = len(self.graph.path)
        return [p[n] for p in params if len(p) == n + 1 and p[:n] == self.graph.path]

    def _check(
        self, path: tuple[str, ...], value: Any, shape: Any, dtype: Any, verb: str = ""
    ) -> None:
        got_shape = _shape(value)
        if shape is not None and got_shape is not None and tuple(got_shape) != tuple(shape):
            got, want = tuple(got_shape), tuple(shape)
            if verb:
                raise ParamShapeError(
                    f"{self.name}.{verb} a value of shape {_fmt_shape(got)} for "
                    f"{format_path(path)}, which has shape {_fmt_shape(want)}. Stored state keeps "
                    "its shape; reshape the value or re-initialise the params."
                )
            raise ParamShapeError(
                f"Parameter {format_path(path)} has shape {_fmt_shape(got)}, but {self.name} asked "
                f"for {_fmt_shape(want)}. The params were probably created with a different input "
                "size or layer configuration; re-initialise them, or check the inputs (e.g. the "
                "number of input features) and the layer's arguments."
            )
        got_dtype = _dtype(value)
        if dtype is not None and got_dtype is not None and not _same_dtype(got_dtype, dtype):
            what = (
                f"{self.name}.{verb} a value of" if verb else f"Parameter {format_path(path)} has"
            )
            raise ParamDtypeError(
                f"{what} dtype {_dtype_name(got_dtype)}, but {self.name} expects "
                f"{_dtype_name(dtype)} for {format_path(path)}. Cast with "
                f"jax.tree.map(lambda x: x.astype(...), params), or set the layer's param_dtype "
                "to match the stored params."
            )

    def _create(
        self,
        params: Params,
        path: tuple[str, ...],
        shape: Any,
        init: Any,
        dtype: Any,
        trainable: bool,
        metadata: Mapping[str, Any] | None,
        rng: KeySource | None,
    ) -> tuple[Any, Params]:
        if params.is_locked:
            raise LockedParamsError(
                f"{self.name} tried to create parameter {format_path(path)}, but the params are "
                "locked (locking stops a changed input shape or a renamed layer from silently "
                "adding fresh, untrained weights). If this parameter is new on purpose, create it "
                "on unlocked params: params = params.unlocked(); ...; params = params.locked()."
                f"{did_you_mean(format_path(path), [format_path(p) for p in params])}"
            )
        if init is None:
            raise MissingParamError(
                f"{self.name}: parameter {format_path(path)} is missing and no init was given to "
                "create it. Pass init= to get_param, or load params that contain it."
                f"{did_you_mean(format_path(path), [format_path(p) for p in params])}"
            )
        value, params = self._initial_value(params, path, shape, init, dtype, rng)
        meta = Metadata(metadata or {}, _where=f"of {format_path(path)}")
        _check_logical_axes(path, meta, value)
        return value, params._with(path, Param(value, trainable, meta))

    def _initial_value(
        self, params: Params, path: Any, shape: Any, init: Any, dtype: Any, rng: Any
    ) -> tuple[Any, Params]:
        if not callable(init):
            value = jnp.asarray(init, dtype=dtype)
            self._check(path, value, shape, None)
            return value, params
        if shape is None:
            raise TypeError(
                f"{self.name}: creating {format_path(path)} from an initializer needs a shape; "
                "pass shape= to get_param."
            )
        rng = rng if rng is not None else getattr(self, "rng", None)
        key = None
        if rng is not None and init not in _KEYLESS:
            key, params = rng(params)
        try:
            value = init(key, tuple(shape), dtype if dtype is not None else jnp.float32)
        except Exception as err:
            if key is not None:
                raise
            raise TypeError(
                f"{self.name}: the initializer of {format_path(path)} failed with key=None "
                f"({type(err).__name__}: {err}). It probably needs randomness: give the module "
                "an Rng (rng=rng) or pass rng= to get_param."
            ) from err
        self._check(path, value, shape, dtype)
        return value, params


_ARRAY_TYPES = (jax.Array, np.ndarray, np.generic, bool, int, float, complex)


def _require_array(module: Module, path: tuple[str, ...], value: Any) -> None:
    """Refuse a non-array ``set_param`` value (``None`` above all) before it is stored."""
    if isinstance(value, _ARRAY_TYPES):
        return
    if isinstance(value, Param):
        hint = (
            "set_param takes the new value only; pass param.value. To change the trainable "
            "flag or metadata, replace the entry: params.merge(bx.Params({path: param}))."
        )
    elif isinstance(value, list | tuple):
        hint = "Convert it first: jnp.asarray(value)."
    else:
        hint = "Parameters hold arrays; to drop a parameter, build Params without it (split)."
    raise TypeError(
        f"{module.name}.set_param: the new value of {format_path(path)} is "
        f"{'None' if value is None else f'a {type(value).__name__} ({value!r:.60})'}, but a "
        f"parameter value must be a JAX or NumPy array (or a number). {hint}"
    )


# Initializers that ignore their key: drawing one for them would only cost trace time (a fold_in
# and a counter update per bias and norm scale).
_KEYLESS = (jax.nn.initializers.zeros, jax.nn.initializers.ones)


def _fmt_shape(shape: tuple[int, ...]) -> str:
    return str(tuple(int(d) for d in shape))


def _same_dtype(a: Any, b: Any) -> bool:
    try:
        return bool(np.dtype(a) == np.dtype(b))
    except TypeError:  # extended dtypes (typed PRNG keys) are not numpy dtypes
        return bool(a == b)


def _dtype_name(dtype: Any) -> str:
    try:
        return np.dtype(dtype).name
    except TypeError:
        return str(dtype)


def _shape(value: Any) -> tuple[int, ...] | None:
    shape = getattr(value, "shape", None)
    if shape is None:
        return None if value is None else tuple(np.shape(value))
    return tuple(shape)


def _dtype(value: Any) -> Any:
    dtype = getattr(value, "dtype", None)
    if dtype is None and value is not None and not isinstance(value, jax.ShapeDtypeStruct):
        return np.result_type(value) if isinstance(value, (int, float, bool, np.ndarray)) else None
    return dtype


def _check_logical_axes(path: tuple[str, ...], meta: Metadata, value: Any) -> None:
    axes = meta.get("logical_axes")
    shape = _shape(value)
    if axes is None or shape is None:
        return
    if not isinstance(axes, tuple) or len(axes) != len(shape):
        raise ValueError(
            f"Parameter {format_path(path)}: logical_axes {axes!r} must be a tuple with one name "
            f"(or None) per dimension, but the value has shape {tuple(shape)} "
            f"({len(shape)} dimensions). Fix the metadata passed for this parameter."
        )
