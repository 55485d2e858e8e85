"""Spec trees -> shardings, abstract arrays (restore targets) and arrays created in place."""

from __future__ import annotations

import ctypes
import functools
import hashlib
import sys
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding

from core_primitives import (
    compat,
    format_path,
    format_problems,
    has_child_logical_axes,
    has_logical_axes,
    keypath_to_path,
)

from ._rules import as_rules, check_mesh, raise_if_problems, resolve
from ._spec import ParamSpec


class _Flat:
    """A tree cut at its logical-axis carriers: their paths, the carriers, and how to rebuild.

    A carrier is a leaf with ``.logical_axes`` (``ParamSpec``, or a node like a standalone blox
    ``Param``), or a child of a container that reports its children's axes (blox ``Params``).
    ``rebuild`` puts one value per carrier back in its place, with the tree's exact structure.
    """

    def __init__(self, tree: Any) -> None:
        pairs, treedef = jax.tree_util.tree_flatten_with_path(tree, is_leaf=_stops)
        self._treedef: Any = treedef
        self.paths: list[str] = []
        self.carriers: list[Any] = []
        # Per top-level leaf: None, or (treedef, number of children) for a container.
        self._groups: list[tuple[Any, int] | None] = []
        for keypath, leaf in pairs:
            if has_child_logical_axes(leaf) and not has_logical_axes(leaf):
                self._add_container(keypath, leaf)
            else:
                self.paths.append(_path_name(keypath))
                self.carriers.append(leaf)
                self._groups.append(None)

    def _add_container(self, keypath: Any, container: Any) -> None:
        children, child_def = jax.tree_util.tree_flatten_with_path(
            container, is_leaf=lambda x: x is not container
        )
        axes = list(container.child_logical_axes())
        if len(axes) != len(children):
            raise TypeError(
                f"{type(container).__name__} at {_path_name(keypath)} reports logical axes for "
                f"{len(axes)} children but has {len(children)} pytree children; "
                "child_logical_axes() must give one entry per child, in flatten order."
            )
        prefix = format_path(_path_parts(keypath))
        for (child_path, _), carrier in zip(children, axes):
            # The container's own keys name its children as they are ('net/l1/kernel' for
            # Params), so they are shown unquoted, after the container's place in the tree.
            name = "/".join(keypath_to_path(child_path))
            self.paths.append(f"{prefix}/{name}" if prefix else name)
            self.carriers.append(carrier)
        self._groups.append((child_def, len(axes)))

    def rebuild(self, values: list[Any], per_carrier: bool = True) -> Any:
        out, i = [], 0
        for group in self._groups:
            if group is None:  # a carrier leaf or node: keep its own structure
                carrier = self.carriers[i]
                out.append(_per_carrier(carrier, values[i]) if per_carrier else values[i])
                i += 1
            else:  # a container: one value per child, in its own structure
                child_def, n = group
                out.append(child_def.unflatten(values[i : i + n]))
                i += n
        return self._treedef.unflatten(out)


def _stops(x: Any) -> bool:
    return has_logical_axes(x) or has_child_logical_axes(x)


def _path_name(keypath: Any) -> str:
    return format_path(_path_parts(keypath)) or "<root>"


def _path_parts(keypath: Any) -> tuple[str, ...]:
    # A flat mapping keyed by tuple paths (blox ``Params``: {('net', 'l1', 'kernel'): ...}) reads
    # as net/l1/kernel, like a nested tree, rather than "('net', 'l1', 'kernel')".
    parts: list[str] = []
    for entry in keypath:
        key = getattr(entry, "key", None)
        if isinstance(key, tuple):
            parts += [str(k) for k in key]
        else:
            parts += keypath_to_path((entry,))
    return tuple(parts)


def _check_carriers(fn: str, paths: list[str], leaves: list[Any], need_spec: bool) -> None:
    wanted = ParamSpec if need_spec else has_logical_axes
    bad = [(p, x) for p, x in zip(paths, leaves) if not _matches(x, wanted)]
    if not bad:
        return
    what = (
        "a ParamSpec"
        if need_spec
        else "a ParamSpec or an object with .logical_axes, .shape, .dtype"
    )
    problems = [f"{p}: got {_describe(x)}, expected {what}." for p, x in bad]
    hint = (
        " Pass the spec tree (e.g. Model.param_specs(cfg)), not arrays that were already created."
        if need_spec
        else " Pass a spec tree (Model.param_specs(cfg)) or params whose leaves carry logical axes."
    )
    raise TypeError(format_problems(f"{fn}: some leaves cannot be sharded", problems) + "\n" + hint)


def _matches(x: Any, wanted: Any) -> bool:
    return isinstance(x, wanted) if isinstance(wanted, type) else wanted(x)


def _describe(x: Any) -> str:
    shape = getattr(x, "shape", None)
    return f"{type(x).__name__}" + (f" of shape {tuple(shape)}" if shape is not None else f" {x!r}")


def _leaf_shardings(
    fn: str, paths: list[str], leaves: list[Any], mesh: Mesh, rules: Any
) -> list[Any]:
    check_mesh(fn, mesh)
    rules = as_rules(rules)
    problems: list[str] = []
    out = []
    for path, leaf in zip(paths, leaves):
        spec, found = resolve(path, leaf.logical_axes, tuple(leaf.shape), mesh, rules)
        problems += found
        # A spec with problems may be invalid for NamedSharding (a mesh axis used twice).
        out.append(None if found else NamedSharding(mesh, spec))
    raise_if_problems(fn, mesh, problems)
    return out


def _per_carrier(carrier: Any, value: Any) -> Any:
    """``value`` in place of ``carrier``, keeping the carrier's own pytree structure.

    A ``ParamSpec`` is a leaf, so it becomes ``value``; a carrier that is a pytree node (a blox
    ``Param`` holding its array) keeps its node with ``value`` at each of its leaves, so the result
    has exactly the structure of the real params, as orbax and ``jit(out_shardings=...)`` need.
    """
    return jax.tree.map(lambda _: value, carrier)


def shardings(specs: Any, mesh: Mesh, rules: Any) -> Any:
    """The ``NamedSharding`` of every parameter, as a tree shaped like ``specs``.

    Every leaf must carry logical axes: a :class:`paramspec.ParamSpec`, or any object with
    ``.logical_axes``, ``.shape`` and ``.dtype`` (``core_primitives.HasLogicalAxes``, e.g. a blox
    ``Param``). All problems of the whole tree are reported at once, each with its path.

    Args:
        specs: a spec tree, e.g. ``Model.param_specs(cfg)``.
        mesh: the mesh.
        rules: a :class:`paramspec.Rules` (or a plain mapping).

    Returns:
        A tree with a ``NamedSharding`` in place of each spec.

    Raises:
        TypeError: some leaves carry no logical axes (each path listed).
        ShardingError: unknown logical axes, missing mesh axes, a mesh axis used twice in one spec,
            or a dimension not divisible by its shard count (each path listed); a mesh that lists
            a device twice.

    Example:
        >>> import paramspec as ps
        >>> mesh = ps.make_mesh((2, 4), ("data", "model"))
        >>> specs = {"w": ps.ParamSpec((16, 8), ("embed", "mlp"))}
        >>> tuple(ps.shardings(specs, mesh, ps.Rules({"embed": None, "mlp": "model"}))["w"].spec)
        (None, 'model')
    """
    flat = _Flat(specs)
    _check_carriers("shardings()", flat.paths, flat.carriers, need_spec=False)
    return flat.rebuild(_leaf_shardings("shardings()", flat.paths, flat.carriers, mesh, rules))


def abstract(specs: Any, mesh: Mesh, rules: Any) -> Any:
    """``jax.ShapeDtypeStruct``s with shardings, shaped like ``specs``: targets for orbax restore.

    Restoring a checkpoint onto these places every array straight into this mesh's layout, even
    when the checkpoint was written from a different mesh.

    Args:
        specs: a spec tree (or params whose leaves carry logical axes).
        mesh: the mesh to restore onto.
        rules: a :class:`paramspec.Rules` (or a plain mapping).

    Returns:
        A tree with ``ShapeDtypeStruct(shape, dtype, sharding=...)`` in place of each spec.

    Raises:
        TypeError: some leaves carry no logical axes.
        ShardingError: the specs do not fit the rules and mesh (every problem listed).

    Example:
        >>> import paramspec as ps
        >>> mesh = ps.make_mesh((8,), ("model",))
        >>> spec = ps.ParamSpec((16, 8), ("embed", "mlp"))
        >>> out = ps.abstract({"w": spec}, mesh, {"embed": "model", "mlp": None})["w"]
        >>> out.shape, out.dtype, tuple(out.sharding.spec)
        ((16, 8), dtype('float32'), ('model', None))
    """
    flat = _Flat(specs)
    _check_carriers("abstract()", flat.paths, flat.carriers, need_spec=False)
    out = _leaf_shardings("abstract()", flat.paths, flat.carriers, mesh, rules)
    structs = [
        jax.ShapeDtypeStruct(tuple(c.shape), c.dtype, sharding=s)
        for c, s in zip(flat.carriers, out)
    ]
    return flat.rebuild(structs)


def init(specs: Any, key: Any, mesh: Mesh, rules: Any) -> Any:
    """Create every parameter in one jitted computation, directly in its sharded layout.

    Each device computes only its own shards (``out_shardings``), so no full copy of the
    parameters ever exists on the host or on one device. Each leaf draws from its own key,
    ``fold_in(key, hash(path))``: adding, removing or reordering other parameters does not change
    its values, and neither does the mesh.

    Args:
        specs: a tree of :class:`paramspec.ParamSpec` (e.g. ``Model.param_specs(cfg)``).
        key: a ``jax.random.key`` (raw ``PRNGKey`` data and Python ints are accepted too).
        mesh: the mesh.
        rules: a :class:`paramspec.Rules` (or a plain mapping).

    Returns:
        The same tree with arrays in place of specs.

    Raises:
        TypeError: a leaf is not a ``ParamSpec`` (each path listed).
        ShardingError: the specs do not fit the rules and mesh (every problem listed), or the
            mesh lists a device twice.
        ValueError: an initializer returned the wrong shape or dtype (path named).

    Example:
        >>> import jax, paramspec as ps
        >>> mesh = ps.make_mesh((8,), ("model",))
        >>> specs = {"w": ps.ParamSpec((16, 8), ("embed", "mlp"))}
        >>> rules = ps.Rules({"embed": "model", "mlp": None})
        >>> params = ps.init(specs, jax.random.key(0), mesh, rules)
        >>> w = params["w"]
        >>> w.shape, tuple(w.sharding.spec), w.addressable_shards[0].data.shape
        ((16, 8), ('model', None), (2, 8))
    """
    key = _as_key(key)
    flat = _Flat(specs)
    paths, leaves = flat.paths, flat.carriers
    _check_carriers("init()", paths, leaves, need_spec=True)
    out = _leaf_shardings("init()", paths, leaves, mesh, rules)
    program = _init_program(tuple(paths), tuple(leaves), tuple(out))
    return flat.rebuild(program(key), per_carrier=False)


def init_sharded(fn: Any, key: Any, mesh: Mesh, rules: Any) -> Any:
    """Run an init function ``fn(key) -> params`` in one ``jit``, each output in its sharded layout.

    For params built by code rather than described by specs, e.g. a blox model's first call: the
    outputs' logical axes (blox ``Param`` metadata, or any ``core_primitives.HasLogicalAxes``
    carrier; leaves without axes are replicated) are read from ``jax.eval_shape(fn, key)``, turned
    into shardings by ``rules``, and ``fn`` is compiled with them as ``out_shardings``. Each device
    computes only its own shards (JAX's partitionable threefry), so no full copy of the params
    exists on the host or on one device; the same memory care as :func:`init` applies.

    Args:
        fn: ``fn(key) -> tree`` whose leaves (or ``Params`` children) carry logical axes.
        key: a ``jax.random.key`` (raw ``PRNGKey`` data and Python ints are accepted too).
        mesh: the mesh.
        rules: a :class:`paramspec.Rules` (or a plain mapping).

    Returns:
        ``fn(key)``, every array placed by its logical axes.

    Raises:
        TypeError: ``fn`` is not callable, or ``mesh`` is not a mesh.
        ShardingError: the logical axes do not fit the rules and mesh (every problem listed), or
            the mesh lists a device twice.

    Example:
        >>> import jax, paramspec as ps
        >>> from core_primitives import field, pytree_dataclass
        >>> @pytree_dataclass
        ... class W:  # any carrier of logical axes; blox Params is the usual one
        ...     value: jax.Array
        ...     logical_axes: tuple = field(static=True, default=("embed", "mlp"))
        ...     shape = property(lambda self: self.value.shape)
        ...     dtype = property(lambda self: self.value.dtype)
        >>> mesh = ps.make_mesh((8,), ("model",))
        >>> w = ps.init_sharded(lambda k: W(jax.random.normal(k, (16, 8))), jax.random.key(0),
        ...                     mesh, {"embed": "model", "mlp": None}).value
        >>> tuple(w.sharding.spec), w.addressable_shards[0].data.shape
        (('model', None), (2, 8))
    """
    if not callable(fn):
        raise TypeError(
            f"init_sharded(): fn must be a function key -> params, got {type(fn).__name__}. For a "
            "tree of ParamSpec use paramspec.init(specs, key, mesh, rules)."
        )
    check_mesh("init_sharded()", mesh)  # before tracing fn: a bad mesh is the cheaper news
    key = _as_key(key)
    out = shardings(jax.eval_shape(fn, key), mesh, rules)
    return _InitProgram(jax.jit(fn, out_shardings=out))(key)


def _as_key(key: Any) -> Any:
    if isinstance(key, int | np.integer) and not isinstance(key, bool):
        return _seed_key(int(key))
    dtype = getattr(key, "dtype", None)
    if dtype is not None and jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key):
        if np.shape(key) != ():
            raise TypeError(
                f"init(): key: got a key array of shape {np.shape(key)}, expected a single key "
                "(shape ()). Pass one key, e.g. keys[0] or jax.random.split(key)[0]."
            )
        return key
    if dtype == np.uint32 and np.shape(key) == (2,):  # raw jax.random.PRNGKey data
        return key
    raise TypeError(
        f"init(): key: got {type(key).__name__} {_describe_key(key)}, expected a PRNG key such as "
        "jax.random.key(0) (or an int seed). Check the argument order: init(specs, key, mesh, "
        "rules)."
    )


def _seed_key(seed: int) -> Any:
    try:
        return jax.random.key(seed)
    except OverflowError as err:
        raise ValueError(
            f"init(): key: the int seed {seed} does not fit in 64 bits. Use a smaller seed, or "
            "pass a jax.random.key."
        ) from err


def _describe_key(key: Any) -> str:
    dtype = getattr(key, "dtype", None)
    return f"with dtype {dtype} and shape {np.shape(key)}" if dtype is not None else repr(key)[:60]


def path_seed(path: str) -> tuple[int, int]:
    """Two 31-bit ints from a stable hash of the path (Python's ``hash`` is salted per process)."""
    digest = hashlib.sha256(path.encode()).digest()
    first, second = (int.from_bytes(digest[i : i + 4], "little") & 0x7FFFFFFF for i in (0, 4))
    return first, second


def _fold_in_seed(key: Any, seed: Any) -> Any:
    """The key ``init`` gives the parameter whose ``path_seed`` is ``seed``."""
    return jax.random.fold_in(jax.random.fold_in(key, seed[0]), seed[1])


def _init_program(
    paths: tuple[str, ...], specs: tuple[ParamSpec, ...], out: tuple[Any, ...]
) -> Any:
    # Cached so that calling init twice with equal specs reuses one compiled program; specs with an
    # unhashable initializer still work, only uncached.
    try:
        return _cached_program(paths, specs, out)
    except TypeError:
        return _build_program(paths, specs, out)


@functools.lru_cache(maxsize=32)
def _cached_program(
    paths: tuple[str, ...], specs: tuple[ParamSpec, ...], out: tuple[Any, ...]
) -> Any:
    return _build_program(paths, specs, out)


def _build_program(paths: Sequence[str], specs: Sequence[ParamSpec], out: Sequence[Any]) -> Any:
    seeds = np.array([path_seed(p) for p in paths], dtype=np.uint32).reshape(len(paths), 2)

    def create(key: Any) -> list[jax.Array]:
        # All leaf keys in one vectorised op, kept out of the leaves' kernels by the barrier.
        # Otherwise XLA fuses (copies) the two fold_ins into every leaf's kernel, doubling its
        # code, and on CPU each kernel's code stays in host memory while the program is cached.
        keys = jax.lax.optimization_barrier(jax.vmap(lambda s: _fold_in_seed(key, s))(seeds))
        return [_create_leaf(p, s, keys[i]) for i, (p, s) in enumerate(zip(paths, specs))]

    return _InitProgram(jax.jit(create, out_shardings=list(out)))


class _InitProgram:
    """The jitted init, compiled ahead of its first run so host memory can be tidied in between.

    On CPU the parameters live in host memory, so what the compiler leaves behind counts against
    them (benchmarks/paramspec):
    - JAX's default CPU lowering of threefry is a rolled loop whose carry needs about 3x each
      array's bytes of temporaries; the unrolled lowering gives the same bits with none.
    - The compiler frees hundreds of MB of scratch that glibc keeps mapped; handing it back to the
      OS before the parameters are allocated keeps the peak at the parameters plus the program.
    """

    def __init__(self, jitted: Any) -> None:
        self._jitted = jitted
        self._compiled: dict[Any, Any] = {}

    def __call__(self, key: Any) -> Any:
        if isinstance(key, jax.core.Tracer):  # inside jit/eval_shape: nest like any jitted call
            return self._jitted(key)
        key = _uncommitted(key)
        aval = (getattr(key, "dtype", None), np.shape(key))
        compiled = self._compiled.get(aval)
        if compiled is None:
            with compat.unrolled_threefry_on_cpu():
                compiled = self._jitted.lower(key).compile()
            _release_free_heap()
            self._compiled[aval] = compiled
        return compiled(key)


def _uncommitted(key: Any) -> Any:
    """``key`` as host data, so that a key committed to one device (``device_put``, a restored
    checkpoint) does not clash with the mesh-wide ``out_shardings`` ("incompatible devices").
    A key spread over other processes' devices cannot be read here; it stays as it is."""
    if not getattr(key, "committed", False) or not getattr(key, "is_fully_addressable", True):
        return key
    if jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key):
        data = jnp.asarray(np.asarray(jax.random.key_data(key)))  # uncommitted copy
        return jax.random.wrap_key_data(data, impl=jax.random.key_impl(key))
    return np.asarray(key)


def _release_free_heap() -> None:
    """Return freed heap memory to the OS (glibc keeps it mapped); a no-op elsewhere."""
    if not sys.platform.startswith("linux"):
        return
    try:
        trim = ctypes.CDLL(None).malloc_trim  # glibc only: musl and others lack it
    except (OSError, AttributeError):
        return
    trim(0)


def _create_leaf(path: str, spec: ParamSpec, key: Any) -> jax.Array:
    assert spec.initializer is not None  # ParamSpec fills in a default.
    value = _call_initializer(path, spec, key)
    if not (hasattr(value, "shape") and hasattr(value, "dtype")):
        raise TypeError(
            f"init(): the initializer of {path} returned {type(value).__name__}, expected an array "
            f"of shape {spec.shape} and dtype {spec.dtype}. Pass an initializer, not a factory: "
            "jax.nn.initializers.lecun_normal(), not jax.nn.initializers.lecun_normal."
        )
    if tuple(value.shape) != spec.shape or value.dtype != spec.dtype:
        raise ValueError(
            f"init(): the initializer of {path} returned shape {tuple(value.shape)} and dtype "
            f"{value.dtype}, expected {spec.shape} and {spec.dtype}. "
            + _dtype_hint(spec.dtype, value.dtype)
        )
    return value


def _call_initializer(path: str, spec: ParamSpec, key: Any) -> Any:
    assert spec.initializer is not None
    try:
        return spec.initializer(key, spec.shape, spec.dtype)
    except TypeError as err:
        # Usually the signature: a factory (jax.nn.initializers.normal) or a two-argument lambda.
        raise TypeError(
            f"init(): the initializer of {path} (shape {spec.shape}, dtype {spec.dtype}) failed: "
            f"{err}. An initializer is called as init(key, shape, dtype) -> array, e.g. "
            "jax.nn.initializers.normal(0.02) (note the call: normal itself is a factory)."
        ) from err
    except Exception as err:
        err.add_note(
            f"init(): raised by the initializer of {path} (shape {spec.shape}, dtype {spec.dtype})."
        )
        raise


def _dtype_hint(wanted: Any, got: Any) -> str:
    if jax.dtypes.canonicalize_dtype(wanted) != wanted:
        # Without x64, JAX creates float32/int32 wherever float64/int64 is asked for.
        return (
            f"JAX is running without 64-bit types, so {wanted} arrays come out as {got}: enable "
            "them with jax.config.update('jax_enable_x64', True), or use a 32-bit dtype."
        )
    return (
        "An initializer must honour its arguments: init(key, shape, dtype), "
        "e.g. jnp.ones(shape, dtype)."
    )
