"""The cluster environments ``jax.distributed.initialize()`` detects on its own.

JAX 0.7.2 .. 0.12 keep them as ``ClusterEnv`` subclasses in ``jax._src.clusters`` (class methods
``is_env_present``, ``get_coordinator_address(timeout_secs, override_coordinator_port)``,
``get_process_count``, ``get_process_id``). Public JAX only offers
``jax.distributed.initialize(cluster_detection_method=NAME)``, which neither says what it found
before it waits for peers nor names the Kubernetes class (it has no ``name``). This shim can go
when JAX publishes the detection.
"""

from __future__ import annotations

import inspect
from typing import Any

from jax._src import clusters as _clusters

# Our names for the schedulers -> JAX's classes, in the order JAX itself tries them.
_CLASSES = {
    "mpi": ("OmpiCluster",),
    "slurm": ("SlurmCluster",),
    "tpu": ("GkeTpuCluster", "GceTpuCluster"),
    "k8s": ("K8sCluster",),
}


def cluster_environments() -> dict[str, tuple[Any, ...]]:
    """``{"mpi" | "slurm" | "tpu" | "k8s": JAX's ClusterEnv classes for it}``, in JAX's order."""
    return {
        kind: tuple(getattr(_clusters, name) for name in names if hasattr(_clusters, name))
        for kind, names in _CLASSES.items()
    }


def coordinator_address(env: Any, timeout_secs: int | None, port: str | None) -> str:
    """``env``'s coordinator address (``host:port``), with ``port`` for JAX's own when given.

    JAX 0.8+ takes the port as ``override_coordinator_port``; 0.7 has no such parameter, so the
    port of the address it returns is replaced here (the same address JAX 0.8 would give).

    Example:
        >>> class Env:
        ...     @classmethod
        ...     def get_coordinator_address(cls, timeout_secs):
        ...         return "node001:61234"
        >>> coordinator_address(Env, 10, "7000"), coordinator_address(Env, 10, None)
        ('node001:7000', 'node001:61234')
    """
    params = inspect.signature(env.get_coordinator_address).parameters
    if "override_coordinator_port" in params:
        return str(env.get_coordinator_address(timeout_secs, override_coordinator_port=port))
    address = str(env.get_coordinator_address(timeout_secs))
    return address if port is None else f"{address.rsplit(':', 1)[0]}:{port}"
