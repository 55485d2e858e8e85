"""The (data, fsdp, tensor) mesh, the logical-axis rules of the model, and multi-host set-up."""

from __future__ import annotations

import math
import os
from typing import Any

import jax
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

import paramspec as ps
from core_primitives import compat

from .._config.schema import Config, MeshConfig
from .._errors import ConfigError

MESH_AXES = ("data", "fsdp", "tensor")

# Logical axes of the parameters and activations -> mesh axes. The batch is split over data and
# fsdp;
# fsdp also shards the weights' embed dimension (ZeRO-3 style: gathered per layer inside the step);
# tensor shards heads, MLP hidden units and the vocabulary (Megatron style).
RULES = ps.Rules(
    {
        "batch": ("data", "fsdp"),
        "embed": "fsdp",
        "heads": "tensor",
        "kv_heads": "tensor",
        "mlp": "tensor",
        "vocab": "tensor",
        "head_dim": None,
        "layers": None,
        "seq": None,
        "act_embed": None,
        "expert": None,  # MoE experts: replicated (map it to a mesh axis for expert parallelism)
    }
)


def make_mesh(cfg: MeshConfig, devices: Any = None) -> Mesh:
    """The training mesh; an impossible shape raises ConfigError listing shapes that fit.

    Example:
        >>> from gpt_models import MeshConfig
        >>> dict(make_mesh(MeshConfig(data=-1), jax.devices()[:1]).shape)
        {'data': 1, 'fsdp': 1, 'tensor': 1}
    """
    devices = list(devices) if devices is not None else jax.devices()
    sizes = (cfg.data, cfg.fsdp, cfg.tensor)
    n = len(devices)
    known = math.prod(s for s in sizes if s != -1)
    bad = sizes.count(-1) > 1 or any(s == 0 or s < -1 for s in sizes)
    if bad or (-1 in sizes and n % known) or (-1 not in sizes and known != n):
        raise ConfigError(
            f"Impossible mesh: mesh.data={cfg.data}, mesh.fsdp={cfg.fsdp}, "
            f"mesh.tensor={cfg.tensor} "
            f"needs {known if -1 not in sizes else f'a multiple of {known}'} devices, but {n} are "
            f"available ({_where(devices)}). The sizes must multiply to {n}; -1 on one axis "
            f"means 'the rest'. Shapes that fit: {_suggestions(n)}."
        )
    return ps.make_mesh(sizes, MESH_AXES, devices=devices)


def _where(devices: list[Any]) -> str:
    """``cpu``, or ``2 processes x 2 cpu devices`` for the devices of a multi-process job."""
    processes = len({d.process_index for d in devices})
    if processes == 1:
        return devices[0].platform
    return f"{processes} processes x {len(devices) // processes} {devices[0].platform} devices"


def check_mesh(cfg: MeshConfig) -> None:
    """Refuse mesh sizes whose product is not the job's device count (every process's devices),
    before a launch reads data or compiles anything (:func:`make_mesh`'s ConfigError)."""
    make_mesh(cfg)


def _suggestions(n: int) -> str:
    divisors = [d for d in range(1, n + 1) if n % d == 0]
    fits = [f"data={n // d},fsdp={d}" for d in divisors][:3] + [
        f"data={n // d},tensor={d}" for d in divisors[1:]
    ][:2]
    return "; ".join(f"--set mesh.{s.replace(',', ' --set mesh.')}" for s in fits)


# Logical axes of a batch of token windows: ``(batch, seq)``, and ``(micro_batches, batch, seq)``
# for
# the train step's gradient-accumulation layout (the micro-batch axis stays whole on every device).
BATCH_AXES = ("batch", "seq")
MICRO_BATCH_AXES = (None, "batch", "seq")


def batch_sharding(mesh: Mesh, axes: tuple[str | None, ...] = BATCH_AXES) -> NamedSharding:
    """Where a batch of token windows lives on ``mesh``: laid out by :data:`RULES`
    (``paramspec``)."""
    return ps.logical_to_sharding(axes, mesh, RULES)


def place_batch(local: Any, mesh: Mesh, axes: tuple[str | None, ...] = BATCH_AXES) -> Any:
    """This process's rows of a batch as one global array on ``mesh``
    (``paramspec.make_global_batch``).

    ``local`` is a numpy array of token ids or a dict of them (a packed batch: ``tokens``,
    ``mask``, ``segments``), each leaf laid out by ``axes``.
    """
    return ps.make_global_batch(local, axes, mesh, RULES)  # type: ignore[no-any-return]


def single_device_mesh() -> Mesh:
    """A 1x1x1 mesh on the first device: library calls given no mesh, and sampling and evaluating
    a run (whatever mesh it trained on: orbax reshards on restore)."""
    return ps.make_mesh((1, 1, 1), MESH_AXES, devices=jax.devices()[:1])


def activation_constraint(mesh: Mesh) -> Any:
    """``(x, logical_axes) -> x`` placed on ``mesh`` by the model's rules
    (``paramspec.constrain``)."""

    def constrain(x: jax.Array, logical_axes: tuple) -> jax.Array:
        return ps.constrain(x, logical_axes, mesh, RULES)

    return constrain


def replicated(mesh: Mesh) -> NamedSharding:
    """A value held whole on every device of ``mesh`` (scalars, a step counter, a loss)."""
    return NamedSharding(mesh, P())


# XLA:CPU only: XNNPACK graph fusion, greedy, runs the matmuls and their neighbouring elementwise
# ops
# through XNNPACK; measured +25% tokens/s on the tiny shape (median of interleaved rounds, see
# benchmarks/gpt/PROFILE.md). A user's XLA_FLAGS naming the option wins.
_CPU_XNN_OPTION = "xla_cpu_experimental_xnn_graph_fusion_mode"


def compiler_options(mesh: Mesh) -> dict[str, Any] | None:
    """The XLA options every compiled program of a run on ``mesh`` takes (None: the defaults)."""
    if any(d.platform != "cpu" for d in mesh.devices.flat):
        return None
    if _CPU_XNN_OPTION in os.environ.get("XLA_FLAGS", ""):
        return None
    if not compat.xla_cpu_xnn_fusion_supported():  # jaxlib < 0.10 fails at run time
        return None
    return {_CPU_XNN_OPTION: "XNN_GRAPH_FUSION_MODE_GREEDY"}


def on_one_device(tree: Any) -> Any:
    """``tree``'s arrays gathered whole onto this process's first device (sampling and scoring
    run there); arrays sharded across processes are all-gathered first."""
    return jax.tree.map(_gathered, tree)


def _gathered(x: jax.Array) -> jax.Array:
    if x.is_fully_addressable:
        return jax.device_put(x, jax.devices()[0])
    from jax.experimental import multihost_utils

    return jax.numpy.asarray(multihost_utils.process_allgather(x, tiled=True))


def check_batch_fits(cfg: Config, mesh: Mesh) -> None:
    """Refuse a batch that does not split evenly over the mesh's batch shards and the processes."""
    shards = mesh.shape["data"] * mesh.shape["fsdp"]
    micro = cfg.train.batch_size // cfg.train.grad_accum
    processes = jax.process_count()
    if micro % shards or micro % processes:
        multiple = math.lcm(shards, processes) * cfg.train.grad_accum
        raise ConfigError(
            f"The micro-batch (train.batch_size / train.grad_accum = {micro}) must split evenly "
            f"over the {shards} batch shards (mesh.data * mesh.fsdp) and {processes} processes. "
            f"Use a batch size that is a multiple of {multiple}."
        )
    if cfg.train.batch_size % processes:
        raise ConfigError(f"train.batch_size must be a multiple of the process count {processes}.")
