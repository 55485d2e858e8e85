"""``Rules``: logical axis name -> mesh axes; turning logical axes into ``NamedSharding``s."""

from __future__ import annotations

import functools
import math
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import jax
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from core_primitives import did_you_mean, format_problems, list_alternatives

from ._errors import ShardingError, describe_repeats, repeated_devices

MeshAxes = tuple[str, ...] | None


class Rules(Mapping[str, MeshAxes]):
    """An immutable mapping from logical axis names to mesh axes.

    A value is a mesh axis name, a tuple of mesh axis names (the dimension is split over all of
    them, major to minor) or ``None`` (replicated). There is no global default: pass the rules to
    every call, so what a function does never depends on hidden state. Values read back as tuples.

    Args:
        rules: a mapping such as ``{"embed": "model", "batch": ("data", "fsdp"), "vocab": None}``.

    Raises:
        TypeError: a name is not a string, or a value is not a str, tuple of str or None.
        ValueError: one value repeats a mesh axis. Every bad entry is listed at once.

    Example:
        >>> rules = Rules({"embed": "model", "batch": ("data", "fsdp"), "vocab": None})
        >>> rules["embed"], rules["batch"], rules["vocab"]
        (('model',), ('data', 'fsdp'), None)
        >>> rules
        Rules({'embed': 'model', 'batch': ('data', 'fsdp'), 'vocab': None})
    """

    def __init__(self, rules: Mapping[str, str | Sequence[str] | None]) -> None:
        if not isinstance(rules, Mapping):
            raise TypeError(
                f"Rules: got {type(rules).__name__}, expected a mapping from logical axis to mesh "
                'axes, e.g. Rules({"embed": "model", "batch": "data", "vocab": None}).'
            )
        self._rules: dict[str, MeshAxes] = {}
        errors: list[Exception] = []
        for name, value in rules.items():
            try:
                self._rules[_check_name(name)] = _normalise_value(name, value)
            except (TypeError, ValueError) as err:
                errors.append(err)
        _raise_rule_errors(errors)

    def __getitem__(self, name: str) -> MeshAxes:
        return self._rules[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._rules)

    def __len__(self) -> int:
        return len(self._rules)

    def __hash__(self) -> int:
        return hash(tuple(self._rules.items()))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Rules):
            return self._rules == other._rules
        return NotImplemented

    def __repr__(self) -> str:
        shown = {k: (v[0] if v is not None and len(v) == 1 else v) for k, v in self._rules.items()}
        return f"Rules({shown!r})"


def check_mesh(fn: str, mesh: Any) -> None:
    """Fail early, with the fix, when something else was passed where the mesh goes.

    ``mesh`` is whatever the caller passed (typed ``Any`` for that reason): the public functions
    take a ``jax.sharding.Mesh``, and this is where anything else is refused.
    """
    if not (hasattr(mesh, "axis_names") and hasattr(mesh, "shape")):
        raise TypeError(
            f"{fn}: mesh: got {type(mesh).__name__}, expected a jax.sharding.Mesh, e.g. "
            'paramspec.make_mesh((2, 4), ("data", "model")). Check the argument order.'
        )
    repeats = _mesh_repeats(mesh)
    if repeats:
        raise ShardingError(
            f"{fn}: the mesh {dict(mesh.shape)} lists {describe_repeats(repeats)}; a mesh needs "
            "each device once, or two shards would share one device (JAX accepts such a Mesh "
            "and fails later, or places the arrays wrongly). Build it with "
            'paramspec.make_mesh(shape, names) or jax.make_mesh, e.g. make_mesh((2, 4), ("data", '
            '"model")); to use fewer devices pass devices=jax.devices()[:n].'
        )


def _mesh_repeats(mesh: object) -> list[tuple[Any, int]]:
    try:
        return _cached_repeats(mesh)
    except TypeError:  # an unhashable mesh-like object: check it uncached
        return _repeats(mesh)


def _repeats(mesh: object) -> list[tuple[Any, int]]:
    devices = getattr(mesh, "devices", None)  # an AbstractMesh has none to repeat
    return [] if devices is None else repeated_devices(devices)


# Cached per mesh: constrain() checks at every trace, and a pod's mesh has thousands of devices.
_cached_repeats = functools.lru_cache(maxsize=64)(_repeats)


def as_rules(rules: Any) -> Rules:
    """``rules`` as a ``Rules``; a plain mapping is accepted and converted."""
    return rules if isinstance(rules, Rules) else Rules(rules)


def _raise_rule_errors(errors: list[Exception]) -> None:
    """Raise the one problem as it is, or all of them at once (a TypeError if any is one)."""
    if len(errors) == 1:
        raise errors[0]
    if errors:
        kind = TypeError if any(isinstance(e, TypeError) for e in errors) else ValueError
        raise kind(format_problems("Rules: invalid entries", [str(e) for e in errors]))


def _check_name(name: Any) -> str:
    if not isinstance(name, str):
        raise TypeError(
            f"Rules: logical axis names must be strings, got {name!r} of type "
            f"{type(name).__name__}. Use the names that ParamSpec logical_axes use, e.g. "
            '{"embed": "model"}.'
        )
    return name


def _normalise_value(name: str, value: Any) -> MeshAxes:
    if value is None:
        return None
    axes = (value,) if isinstance(value, str) else value
    if not isinstance(axes, Sequence) or not all(isinstance(a, str) for a in axes):
        raise TypeError(
            f"Rules[{name!r}]: got {value!r}, expected a mesh axis name, a tuple of mesh axis "
            "names, or None to replicate."
        )
    axes = tuple(axes)
    if len(set(axes)) != len(axes):
        raise ValueError(
            f"Rules[{name!r}]: got {axes}, which repeats a mesh axis; list each mesh axis once."
        )
    return axes or None


def resolve(
    where: str, logical_axes: Any, shape: tuple[int, ...] | None, mesh: Mesh, rules: Rules
) -> tuple[PartitionSpec, list[str]]:
    """The ``PartitionSpec`` for one array and every problem found, each line starting ``where``.

    ``shape=None`` skips the rank and divisibility checks (``logical_to_sharding`` has no shape).
    """
    if logical_axes is None:
        return PartitionSpec(), []
    axes = _axes_tuple(logical_axes)
    if axes is None:
        return PartitionSpec(), [
            f"{where}: logical_axes {logical_axes!r} is not a tuple of names (str or None)."
        ]
    if shape is not None and len(axes) != len(shape):
        return PartitionSpec(), [
            f"{where}: {len(axes)} logical axes {axes} for shape {tuple(shape)} of rank "
            f"{len(shape)}; give exactly one logical axis name (or None) per dimension."
        ]
    problems: list[str] = []
    used: dict[str, tuple[str, int]] = {}
    entries = [
        _resolve_dim(where, d, axes, shape, mesh, rules, used, problems) for d in range(len(axes))
    ]
    return PartitionSpec(*entries), problems


def _resolve_dim(
    where: str,
    dim: int,
    axes: tuple[str | None, ...],
    shape: tuple[int, ...] | None,
    mesh: Mesh,
    rules: Rules,
    used: dict[str, tuple[str, int]],
    problems: list[str],
) -> Any:
    name = axes[dim]
    if name is None:
        return None
    if name not in rules:
        problems.append(_unknown_axis(where, name, dim, rules))
        return None
    mesh_axes = rules[name]
    if mesh_axes is None:
        return None
    bad = [a for a in mesh_axes if a not in mesh.shape]
    for axis in bad:
        problems.append(_missing_mesh_axis(where, name, axis, mesh))
    for axis in mesh_axes:
        if axis in used and axis not in bad:
            problems.append(_axis_twice(where, axis, used[axis], (name, dim)))
        used.setdefault(axis, (name, dim))
    if bad:
        return None
    size = math.prod(mesh.shape[a] for a in mesh_axes)
    if shape is not None and shape[dim] % size:
        problems.append(_not_divisible(where, name, dim, shape[dim], mesh_axes, size))
    return mesh_axes[0] if len(mesh_axes) == 1 else mesh_axes


def _axes_tuple(logical_axes: Any) -> tuple[str | None, ...] | None:
    if isinstance(logical_axes, str):
        return (logical_axes,)
    if not isinstance(logical_axes, Sequence):
        return None
    if not all(a is None or isinstance(a, str) for a in logical_axes):
        return None
    return tuple(logical_axes)


def _unknown_axis(where: str, name: str, dim: int, rules: Rules) -> str:
    return (
        f"{where}: logical axis {name!r} (dim {dim}) has no rule. Known logical axes: "
        f"{list_alternatives(rules)}.{did_you_mean(name, rules)} Fix the name, or add "
        f"{name!r}: None to the Rules to replicate it."
    )


def _missing_mesh_axis(where: str, name: str, axis: str, mesh: Mesh) -> str:
    return (
        f"{where}: logical axis {name!r} maps to mesh axis {axis!r}, which the mesh does not "
        f"have. Mesh axes: {list_alternatives(mesh.shape)}.{did_you_mean(axis, mesh.shape)} Fix "
        "the rule or build the mesh with that axis."
    )


def _axis_twice(where: str, axis: str, first: tuple[str, int], second: tuple[str, int]) -> str:
    return (
        f"{where}: mesh axis {axis!r} is used twice, by logical axes {first[0]!r} (dim {first[1]}) "
        f"and {second[0]!r} (dim {second[1]}); a mesh axis can shard only one dimension of an "
        "array. Map one of them to another mesh axis or to None."
    )


def _not_divisible(
    where: str, name: str, dim: int, size: int, mesh_axes: tuple[str, ...], parts: int
) -> str:
    return (
        f"{where}: dim {dim} (logical axis {name!r}) has size {size}, not divisible by {parts}, "
        f"the number of shards over mesh axes {mesh_axes}. Pad the dimension to a multiple of "
        f"{parts}, or map {name!r} to fewer mesh axes or None."
    )


def raise_if_problems(fn: str, mesh: Mesh, problems: list[str]) -> None:
    """Raise one ``ShardingError`` listing every problem, or do nothing."""
    if problems:
        mesh_desc = dict(mesh.shape)
        raise ShardingError(
            format_problems(
                f"{fn}: the logical axes do not fit the rules and mesh {mesh_desc}", problems
            )
        )


def logical_to_sharding(logical_axes: Any, mesh: Mesh, rules: Any) -> NamedSharding:
    """The ``NamedSharding`` that ``rules`` give to an array with these logical axes on ``mesh``.

    Args:
        logical_axes: one logical axis name (or ``None``) per dimension; ``None`` replicates.
        mesh: a ``jax.sharding.Mesh`` (see :func:`paramspec.make_mesh`).
        rules: a :class:`paramspec.Rules` (or a plain mapping).

    Returns:
        ``NamedSharding(mesh, PartitionSpec(...))``.

    Raises:
        ShardingError: an unknown logical axis, a mesh axis that the mesh lacks, or a mesh axis
            used twice; all of them at once.

    Example:
        >>> import paramspec as ps
        >>> mesh = ps.make_mesh((2, 4), ("data", "model"))
        >>> rules = ps.Rules({"batch": "data", "embed": "model", "vocab": None})
        >>> tuple(ps.logical_to_sharding(("vocab", "embed"), mesh, rules).spec)
        (None, 'model')
    """
    check_mesh("logical_to_sharding()", mesh)
    rules = as_rules(rules)
    spec, problems = resolve(f"logical axes {logical_axes!r}", logical_axes, None, mesh, rules)
    raise_if_problems("logical_to_sharding()", mesh, problems)
    return NamedSharding(mesh, spec)


def constrain(x: jax.Array, logical_axes: Any, mesh: Mesh, rules: Any) -> jax.Array:
    """Constrain an activation to the sharding its logical axes get under ``rules``.

    Inside ``jax.jit`` this is ``jax.lax.with_sharding_constraint``: it tells XLA where the
    intermediate should live (for example batch-sharded after an all-gathered matmul).

    Args:
        x: the array (traced or concrete).
        logical_axes: one logical axis name (or ``None``) per dimension of ``x``.
        mesh: the mesh.
        rules: a :class:`paramspec.Rules` (or a plain mapping).

    Returns:
        ``x`` with the sharding constraint applied.

    Raises:
        ShardingError: wrong number of logical axes for ``x``'s rank, unknown names, or a dimension
            not divisible by its shard count; all of them at once.

    Example:
        >>> import jax, paramspec as ps
        >>> mesh = ps.make_mesh((2, 4), ("data", "model"))
        >>> rules = ps.Rules({"batch": "data", "embed": "model"})
        >>> f = jax.jit(lambda x: ps.constrain(x * 2, ("batch", "embed"), mesh, rules))
        >>> tuple(f(jax.numpy.ones((4, 8))).sharding.spec)
        ('data', 'model')
    """
    check_mesh("constrain()", mesh)
    rules = as_rules(rules)
    where = f"array of shape {tuple(x.shape)}"
    spec, problems = resolve(where, logical_axes, tuple(x.shape), mesh, rules)
    raise_if_problems("constrain()", mesh, problems)
    return jax.lax.with_sharding_constraint(x, NamedSharding(mesh, spec))
