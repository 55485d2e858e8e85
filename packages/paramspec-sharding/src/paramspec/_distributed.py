"""Multi-host helpers: start ``jax.distributed`` and assemble global batches from local ones."""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from typing import Any, NamedTuple

import jax
import numpy as np
from jax.sharding import Mesh

from core_primitives import format_path, keypath_to_path

from ._cluster import detect_cluster
from ._rules import as_rules, check_mesh, raise_if_problems, resolve

logger = logging.getLogger(__name__)

# jax.distributed.initialize reads JAX_COORDINATOR_ADDRESS itself but not the other two; reading
# all three here lets one launcher script configure every process through the environment.
_ENV = {
    "coordinator_address": "JAX_COORDINATOR_ADDRESS",
    "num_processes": "JAX_NUM_PROCESSES",
    "process_id": "JAX_PROCESS_ID",
}


class ProcessInfo(NamedTuple):
    """Where this process sits: returned by :func:`initialize_distributed`."""

    process_index: int
    process_count: int
    local_device_count: int
    device_count: int


def process_info() -> ProcessInfo:
    """This process's index, the process count and the local and global device counts.

    Example:
        >>> import paramspec as ps
        >>> ps.process_info()
        ProcessInfo(process_index=0, process_count=1, local_device_count=8, device_count=8)
    """
    return ProcessInfo(
        jax.process_index(), jax.process_count(), jax.local_device_count(), jax.device_count()
    )


def initialize_distributed(
    coordinator_address: str | None = None,
    num_processes: int | None = None,
    process_id: int | None = None,
    local_device_ids: int | Sequence[int] | None = None,
    *,
    cluster: str = "auto",
    **kwargs: Any,
) -> ProcessInfo:
    """Start ``jax.distributed`` from arguments, the environment, or cluster auto-detection.

    Each argument left ``None`` is read from ``JAX_COORDINATOR_ADDRESS``, ``JAX_NUM_PROCESSES``
    and ``JAX_PROCESS_ID``. When none is set anywhere, the cluster is detected as
    ``jax.distributed.initialize()`` detects it (:func:`detect_cluster`: SLURM, Open MPI, TPU pods,
    Kubernetes); if there is none, the program runs as a single process, so one script works on a
    laptop and on a pod. A second call is a no-op. Call it first thing, before any other JAX call.

    Args:
        coordinator_address: ``host:port`` of process 0.
        num_processes: the number of processes.
        process_id: this process's index, ``0 <= process_id < num_processes``.
        local_device_ids: the devices this process drives (default: all it sees).
        cluster: which cluster to detect when no argument or variable configures the processes:
            ``"auto"``, ``"none"`` (one process), ``"slurm"``, ``"mpi"``, ``"k8s"`` or ``"tpu"``.
        **kwargs: passed to ``jax.distributed.initialize`` (e.g. ``initialization_timeout``).

    Returns:
        This process's :class:`ProcessInfo`.

    Raises:
        ValueError: an environment variable holds no integer, the configuration is incomplete,
            ``process_id`` is not in ``[0, num_processes)``, or ``coordinator_address`` is not
            ``host:port`` (all checked before anything waits for a peer); the SLURM variables
            are incomplete, or the cluster named by ``cluster`` is not there
            (:func:`detect_cluster`).
        RuntimeError: JAX already ran a computation in this process.

    Example:
        On each of two hosts, first thing in the program (process 1 passes ``process_id=1``):

        >>> import paramspec as ps
        >>> info = ps.initialize_distributed("10.0.0.1:1234", 2, 0)  # doctest: +SKIP
        >>> info.process_count  # doctest: +SKIP
        2
    """
    if jax.distributed.is_initialized():
        return process_info()
    args = _from_env(coordinator_address, num_processes, process_id)
    if all(v is None for v in args.values()) and local_device_ids is None:
        found = detect_cluster(cluster, timeout_s=kwargs.get("initialization_timeout", 300))
        if found is None:
            logger.info("initialize_distributed: no cluster detected; running one process.")
            return process_info()
        args = dict(zip(_ENV, found[1:4]))
    _check_args(args)
    _initialize(dict(args, local_device_ids=local_device_ids, **kwargs))
    return process_info()


def _check_args(args: dict[str, Any]) -> None:
    """Refuse what jax.distributed would only notice later: it would wait for a peer instead."""
    shown = ", ".join(f"{k}={args[k]!r}" for k in _ENV)
    count, index, address = args["num_processes"], args["process_id"], args["coordinator_address"]
    problems = []
    if count is not None and (not _is_int(count) or count < 1):
        problems.append(f"num_processes must be a positive int, got {count!r}.")
    if index is not None and (not _is_int(index) or index < 0):
        problems.append(f"process_id must be an int >= 0, got {index!r}.")
    elif _is_int(index) and _is_int(count) and count >= 1 and index >= count:
        problems.append(
            f"process_id {index} is out of range for num_processes={count}: process ids run "
            f"from 0 to {count - 1}, one per process."
        )
    if address is not None and not _is_host_port(address):
        problems.append(
            f"coordinator_address must be 'host:port' of process 0, got {address!r} (e.g. "
            "'10.0.0.1:1234'; any free port, the same in every process)."
        )
    if problems:
        raise ValueError(
            f"initialize_distributed({shown}): " + " ".join(problems) + " Fix the arguments (or "
            "JAX_COORDINATOR_ADDRESS, JAX_NUM_PROCESSES, JAX_PROCESS_ID) and start again."
        )


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _is_host_port(address: Any) -> bool:
    if not isinstance(address, str):
        return False
    host, _, port = address.rpartition(":")
    return bool(host) and port.isdigit() and 0 < int(port) < 65536


def _from_env(address: str | None, count: int | None, index: int | None) -> dict[str, Any]:
    args: dict[str, Any] = {
        "coordinator_address": address,
        "num_processes": count,
        "process_id": index,
    }
    for name, var in _ENV.items():
        if args[name] is None and os.environ.get(var):
            args[name] = os.environ[var] if name == "coordinator_address" else _env_int(var)
    return args


def _env_int(var: str) -> int:
    value = os.environ[var]
    try:
        return int(value)
    except ValueError:
        raise ValueError(
            f"initialize_distributed(): environment variable {var}={value!r} is not an integer. "
            f"Set it to a number, e.g. {var}=0, or pass the argument explicitly."
        ) from None


def _initialize(args: dict[str, Any]) -> None:
    try:
        jax.distributed.initialize(**args)
    except ValueError as err:
        shown = ", ".join(f"{k}={args[k]!r}" for k in _ENV)
        raise ValueError(
            f"initialize_distributed({shown}) failed: {err} Pass coordinator_address ('host:port' "
            "of process 0), num_processes and process_id, or set JAX_COORDINATOR_ADDRESS, "
            "JAX_NUM_PROCESSES and JAX_PROCESS_ID in every process."
        ) from err
    except RuntimeError as err:
        raise RuntimeError(
            f"initialize_distributed() failed: {err} Call it at the very start of the program, "
            "before creating arrays, meshes or asking for jax.devices()."
        ) from err


def make_global_batch(local_batch: Any, logical_axes: Any, mesh: Mesh, rules: Any) -> Any:
    """Assemble each process's share of a batch into global arrays sharded over ``mesh``.

    Every process calls it with its own rows (e.g. ``global_batch // jax.process_count()`` of
    them); the result is one global ``jax.Array`` per leaf, built with
    ``jax.make_array_from_process_local_data``, without copying other processes' data. With one
    process it just places the batch.

    Args:
        local_batch: a pytree of host arrays (numpy), all with the same leading batch dimension.
        logical_axes: logical axes of the leading dimensions, e.g. ``("batch",)`` or
            ``("batch", "seq")``; the remaining dimensions of each leaf are replicated.
        mesh: the (global) mesh.
        rules: a :class:`paramspec.Rules` (or a plain mapping).

    Returns:
        The same pytree with global arrays.

    Raises:
        ShardingError: unknown logical axes, more logical axes than a leaf has dimensions, or a
            process-local dimension not divisible by the shards this process holds (each path
            listed).
        TypeError: ``logical_axes`` is not a tuple of names (``None`` replicates every leaf).

    Example:
        >>> import numpy as np, paramspec as ps
        >>> mesh = ps.make_mesh((8,), ("data",))
        >>> local = {"x": np.ones((16, 3))}
        >>> batch = ps.make_global_batch(local, ("batch",), mesh, {"batch": "data"})
        >>> batch["x"].shape, batch["x"].addressable_shards[0].data.shape
        ((16, 3), (2, 3))
    """
    check_mesh("make_global_batch()", mesh)
    rules = as_rules(rules)
    axes = _batch_axes(logical_axes)
    pairs, treedef = jax.tree_util.tree_flatten_with_path(local_batch)
    problems: list[str] = []
    shardings = []
    for keypath, leaf in pairs:
        where = f"batch leaf {format_path(keypath_to_path(keypath)) or '<root>'}"
        spec, found = _leaf_spec(where, axes, np.shape(leaf), mesh, rules)
        problems += found
        shardings.append(None if found else jax.sharding.NamedSharding(mesh, spec))
    raise_if_problems("make_global_batch()", mesh, problems)
    arrays = [
        jax.make_array_from_process_local_data(s, np.asarray(leaf))
        for s, (_, leaf) in zip(shardings, pairs)
    ]
    return jax.tree.unflatten(treedef, arrays)


def _batch_axes(logical_axes: Any) -> tuple[Any, ...]:
    if logical_axes is None:  # as for ParamSpec: every dimension replicated
        return ()
    if isinstance(logical_axes, str):
        return (logical_axes,)
    if not isinstance(logical_axes, Sequence):
        raise TypeError(
            f"make_global_batch(): logical_axes: got {logical_axes!r}, expected a tuple of logical "
            'axis names for the leading dimensions, e.g. ("batch",) or ("batch", "seq").'
        )
    return tuple(logical_axes)


def _leaf_spec(
    where: str, axes: tuple[Any, ...], shape: tuple[int, ...], mesh: Mesh, rules: Any
) -> Any:
    ndim = len(shape)
    if len(axes) > ndim:
        return None, [
            f"{where}: {len(axes)} logical axes {axes} for an array of rank {ndim}; give at most "
            "one logical axis per dimension."
        ]
    full = axes + (None,) * (ndim - len(axes))
    spec, problems = resolve(where, full, None, mesh, rules)
    if not problems:
        # Only this process's rows are known here: they must split evenly over the shards that
        # this process's devices hold (all shards, with one process).
        for dim, entry in enumerate(spec):
            problems += _local_divisibility(where, dim, full[dim], shape[dim], entry, mesh)
    return spec, problems


def _local_divisibility(
    where: str, dim: int, name: Any, size: int, entry: Any, mesh: Mesh
) -> list[str]:
    if entry is None:
        return []
    mesh_axes = (entry,) if isinstance(entry, str) else tuple(entry)
    parts = _local_shard_count(mesh, mesh_axes)
    if size % parts == 0:
        return []
    return [
        f"{where}: dim {dim} (logical axis {name!r}) has size {size} in this process, not "
        f"divisible by {parts}, the number of shards over mesh axes {mesh_axes} on this "
        f"process's devices. Give each process a multiple of {parts} along it (drop or pad "
        f"the remainder), or map {name!r} to fewer mesh axes."
    ]


def _local_shard_count(mesh: Mesh, mesh_axes: tuple[str, ...]) -> int:
    """How many distinct shards along ``mesh_axes`` this process's devices hold."""
    local = np.vectorize(lambda d: d.process_index == jax.process_index())(mesh.devices)
    columns = [list(mesh.axis_names).index(a) for a in mesh_axes]
    coords = np.argwhere(local)[:, columns]
    return len({tuple(c) for c in coords})
