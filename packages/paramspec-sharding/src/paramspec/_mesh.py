"""``make_mesh``: one device mesh that behaves the same on every supported JAX version."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np
from jax.sharding import AxisType, Mesh

from ._errors import ShardingError, describe_repeats, repeated_devices


def make_mesh(
    shape: Sequence[int],
    axis_names: Sequence[str],
    axis_types: AxisType | Sequence[AxisType] | None = None,
    *,
    devices: Sequence[Any] | None = None,
) -> Mesh:
    """A device mesh with named axes; every axis is ``AxisType.Auto`` unless told otherwise.

    ``jax.make_mesh`` switched its default to ``Explicit`` axes in JAX 0.9, under which
    ``shard_map`` rejects unsharded inputs and sharding propagation changes. Passing the axis types
    every time keeps one behaviour from JAX 0.7.2 to the newest release.

    Args:
        shape: the size of each mesh axis; one entry may be ``-1``, meaning "all remaining devices".
        axis_names: one unique name per axis, e.g. ``("data", "model")``.
        axis_types: one ``jax.sharding.AxisType`` for all axes or one per axis; default ``Auto``.
        devices: the devices to lay out (default: every device of every process).

    Returns:
        A ``jax.sharding.Mesh``.

    Raises:
        ValueError: the sizes do not multiply to the device count, names repeat, or the lengths
            differ.
        ShardingError: ``devices`` lists a device twice (a ``ValueError`` too).
        TypeError: a size is not an int, a name is not a string, a device is not a
            ``jax.Device``, or ``axis_types`` is a string.

    Example:
        >>> import paramspec as ps
        >>> mesh = ps.make_mesh((2, -1), ("data", "model"))
        >>> dict(mesh.shape), mesh.axis_types
        ({'data': 2, 'model': 4}, (Auto, Auto))
    """
    names = _check_names(axis_names)
    if devices is not None:
        devices = _check_devices(devices)
    n_devices = len(devices) if devices is not None else jax.device_count()
    sizes = _resolve_sizes(shape, names, n_devices)
    types = _axis_types(axis_types, names)
    return jax.make_mesh(sizes, names, axis_types=types, devices=devices)


def _check_devices(devices: Any) -> list[Any]:
    # An array of devices (mesh_utils.create_device_mesh, mesh.devices) counts all its entries,
    # not its first dimension.
    flat = list(np.ravel(np.asarray(devices, dtype=object)))
    bad = [d for d in flat if not isinstance(d, jax.Device)]
    if bad:
        raise TypeError(
            f"make_mesh: devices must be jax devices, got {bad[0]!r:.60} "
            f"({type(bad[0]).__name__}) among them. Pass devices from jax.devices(), e.g. "
            "devices=jax.devices()[:4], not device ids."
        )
    repeats = repeated_devices(flat)
    if repeats:
        raise ShardingError(
            f"make_mesh: devices lists {describe_repeats(repeats)}; a mesh needs each device "
            "once, or two shards would share one device. Pass distinct devices, e.g. "
            f"devices=jax.devices()[:{len(flat)}] (jax.devices() lists each device once)."
        )
    return flat


def _check_names(axis_names: Sequence[str]) -> tuple[str, ...]:
    names = (axis_names,) if isinstance(axis_names, str) else tuple(axis_names)
    if not all(isinstance(n, str) for n in names):
        raise TypeError(f"make_mesh: axis_names must be strings, got {names!r}.")
    if len(set(names)) != len(names):
        raise ValueError(f"make_mesh: axis_names {names} repeat a name; give each axis its own.")
    return names


def _resolve_sizes(shape: Sequence[int], names: tuple[str, ...], n_devices: int) -> tuple[int, ...]:
    sizes = (shape,) if isinstance(shape, int | np.integer) else tuple(shape)
    if not all(isinstance(s, int | np.integer) and not isinstance(s, bool) for s in sizes):
        raise TypeError(
            f"make_mesh: shape must be ints, got {sizes!r}; pass one int size per axis, "
            "e.g. make_mesh((2, 4), ('data', 'model'))."
        )
    sizes = tuple(int(s) for s in sizes)
    if len(sizes) != len(names):
        raise ValueError(
            f"make_mesh: shape {sizes} has {len(sizes)} axes but axis_names {names} has "
            f"{len(names)}; give one name per axis."
        )
    if sizes.count(-1) > 1 or any(s == 0 or s < -1 for s in sizes):
        raise ValueError(
            f"make_mesh: shape {sizes} must hold positive sizes and at most one -1 (inferred)."
        )
    if -1 in sizes:
        known = math.prod(s for s in sizes if s != -1)
        if n_devices % known:
            raise ValueError(
                f"make_mesh: cannot infer the -1 in shape {sizes}: {n_devices} devices are not "
                f"divisible by {known}."
            )
        sizes = tuple(n_devices // known if s == -1 else s for s in sizes)
    if math.prod(sizes) != n_devices:
        raise ValueError(
            f"make_mesh: shape {sizes} holds {math.prod(sizes)} devices, expected {n_devices} (the "
            "devices available). Use sizes that multiply to that count, put -1 on one axis to "
            "infer it, or pass devices=jax.devices()[:n] for a smaller mesh."
        )
    return sizes


def _axis_types(axis_types: Any, names: tuple[str, ...]) -> tuple[AxisType, ...]:
    if axis_types is None:
        return (AxisType.Auto,) * len(names)
    if isinstance(axis_types, AxisType):
        return (axis_types,) * len(names)
    if isinstance(axis_types, str):
        raise TypeError(
            f"make_mesh: axis_types: got the string {axis_types!r}, expected a "
            "jax.sharding.AxisType such as AxisType.Explicit (or one per axis)."
        )
    types = tuple(axis_types)
    if len(types) != len(names) or not all(isinstance(t, AxisType) for t in types):
        raise ValueError(
            f"make_mesh: axis_types {types!r} must be one jax.sharding.AxisType, or one per axis "
            f"of {names}."
        )
    return types
