"""The plan of a program that runs on one device and is sized by one knob (``gpt sample``'s
``--max-new-tokens``, ``gpt eval``'s
``--batch-size``), each knob value compiled and measured, a line through the two ends picking the
one to compile. The programs themselves are the training's (``_training/plans.py``) and the
inference's (``_inference/plans.py``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, TextIO

import jax
from jax.sharding import Mesh

from .._config.schema import Config, MeshConfig
from .._distributed.mesh import make_mesh
from .._model.gpt import abstract_params
from .preflight import (
    Knob,
    Plan,
    compiled_with_note,
    memory_budget,
    memory_text,
    resident_bytes,
    size,
    step_memory,
    tree_bytes,
    tree_count,
)


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
