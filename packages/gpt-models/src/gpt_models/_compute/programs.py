"""The pieces every command's memory pre-flight is made of: compiling a program ahead of time with a
progress line, its sizes, the batch a step takes without its values, and the plan of a program that
runs on one device and is sized by one knob (``gpt sample``'s ``--max-new-tokens``, ``gpt eval``'s
``--batch-size``), each knob value compiled and measured, a line through the two ends picking the
one to compile. The programs themselves are the training's (``_training/plans.py``) and the
inference's (``_inference/plans.py``).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh

from .._config.schema import Config, MeshConfig
from .._data.store import is_store, read_manifest
from .._distributed.mesh import MICRO_BATCH_AXES, batch_sharding, make_mesh
from .._model.gpt import abstract_params
from .preflight import (
    Knob,
    Plan,
    memory_budget,
    memory_text,
    resident_bytes,
    say,
    size,
    step_memory,
)


def tree_bytes(tree: Any) -> int:
    """The bytes of a tree's arrays (or shape structs)."""
    return sum(int(np.prod(a.shape)) * a.dtype.itemsize for a in jax.tree.leaves(tree))


def tree_count(tree: Any) -> int:
    """The number of values in a tree's arrays (or shape structs)."""
    return sum(int(np.prod(a.shape)) for a in jax.tree.leaves(tree))


def compiled_with_note(
    stream: TextIO | None, what: str, compile: Callable[[], Any]
) -> tuple[Any, float]:
    """``compile()``'s result and its seconds, after a progress line on ``stream``."""
    say(stream, f"compiling {what} ahead of time to measure its memory")
    started = time.perf_counter()
    compiled = compile()
    return compiled, time.perf_counter() - started


def packed_data(cfg: Config) -> bool:
    """Whether the run's batches are packed examples: ``data.path`` is a store whose manifest
    says ``"loss_mask": true`` (``gpt prepare`` of chat or prompt/completion JSONL)."""
    path = Path(cfg.data.path) if cfg.data.path and not cfg.data.sources else None
    return path is not None and is_store(path) and bool(read_manifest(path).get("loss_mask"))


def abstract_batch(cfg: Config, mesh: Mesh, shape: tuple[int, ...] | None = None,
                   axes: tuple[str | None, ...] = MICRO_BATCH_AXES) -> Any:  # fmt: skip
    """The train step's batch ``(grad_accum, micro_batch, seq_len + 1)`` without its values.

    ``shape`` and ``axes`` another batch's (the eval step's ``(rows, seq_len + 1)``). For packed
    data (:func:`packed_data`) a dict of ``tokens``, ``mask`` and ``segments`` of that shape.
    """
    t = cfg.train
    if shape is None:
        shape = (t.grad_accum, t.batch_size // t.grad_accum, cfg.model.seq_len + 1)
    sharding = batch_sharding(mesh, axes)
    if not packed_data(cfg):
        return jax.ShapeDtypeStruct(shape, jnp.int32, sharding=sharding)
    dtypes = {"tokens": jnp.int32, "mask": jnp.uint8, "segments": jnp.int32}
    return {k: jax.ShapeDtypeStruct(shape, d, sharding=sharding) for k, d in dtypes.items()}


def one_device_mesh() -> Mesh:
    """A mesh of this process's first device (where ``gpt sample`` and ``gpt eval`` run)."""
    return make_mesh(MeshConfig(data=1, fsdp=1, tensor=1), jax.devices()[:1])


def one_device(cfg: Config) -> Config:
    """``cfg`` as ``load_run`` restores it: on one device, whatever mesh the run trained on."""
    return dataclasses.replace(cfg, mesh=MeshConfig(data=1, fsdp=1, tensor=1))


@dataclasses.dataclass(frozen=True)
class Sized:
    """A one-device program sized by one knob: what :func:`plan_one_device` compiles.

    ``compile_at(v)`` compiles it for the knob's value ``v`` (``value`` is the one asked, and the
    knob goes down to 1); ``first`` compiles the program itself when it is not the knob's (the eval
    step, whose fitting advice is the scorer's); ``prefix`` starts that advice.
    """

    command: str
    program: str
    knob: str
    value: int
    compile_at: Callable[[int], Any]
    first: Callable[[], Any] | None = None
    prefix: str = ""


def plan_one_device(sized: Sized, cfg: Config, stream: TextIO | None) -> Plan:
    """The plan of a one-device program sized by a knob.

    Its progress lines go to ``stream`` only on a terminal: these programs compile in seconds, and
    in a log or a pipe the lines would only come between the command and its own output.
    """
    stream = stream if stream is not None and stream.isatty() else None
    device = jax.devices()[:1]
    compiled, seconds = compiled_with_note(
        stream,
        f"{sized.command}'s {sized.program.split(' (')[0]}",
        sized.first or (lambda: sized.compile_at(sized.value)),
    )
    mem = step_memory(compiled, device, training=False)
    leaves = jax.tree.leaves(abstract_params(cfg, one_device_mesh()))
    params, param_bytes = tree_count(leaves), tree_bytes(leaves)
    budget = memory_budget(device)
    knob = sized.knob

    # The program compiled above is the knob's at `value`, unless it is another (the eval step).
    known = {} if sized.first else {sized.value: mem.per_device if mem else None}

    def need(v: int) -> int | None:
        if v not in known:
            found = step_memory(sized.compile_at(v), device, training=False)
            known[v] = None if found is None else found.per_device
        return known[v]

    def none_fits(budget: int) -> str:
        return (
            f"Even {knob} 1 does not fit: the parameters alone take {size(param_bytes)}. This "
            "model needs a machine with more memory (or set GPT_MEMORY_BUDGET if the available "
            "figure above is wrong)."
        )

    lines = [
        f"parameters       {params / 1e6:.2f}M ({size(param_bytes)})",
        f"program          {sized.program}",
        f"memory           {memory_text(mem)} on 1 {jax.default_backend()} device",
        f"available        {size(budget.per_device)} ({budget.source})",
    ]
    return Plan(
        command=sized.command,
        program=sized.program,
        compiled=compiled,
        memory=mem,
        budget=budget,
        devices=1,
        params=params,
        param_bytes=param_bytes,
        compile_s=seconds,
        cfg=cfg,
        lines=lines,
        knob=Knob(
            name=knob,
            values=range(sized.value, 0, -1),
            size=float,
            need=need,
            compiles=True,
            how="compiled and measured",
            setting=lambda v: f"{knob} {v}",
            none_fits=none_fits,
            prefix=sized.prefix,
        ),
        baseline=resident_bytes(),
        untouched="Nothing was read or written.",
        stream=stream,
    )
