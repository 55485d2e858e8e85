"""Memory pre-flight: compile the train step ahead of time and refuse, in seconds, a step that cannot fit.

XLA's memory analysis of the compiled step gives, per device, the bytes of its arguments (the state
and the batch), its outputs (the new state, written over the donated old one: the aliased bytes
are counted once) and its temporaries (every intermediate value of the step). Their sum is what the
step needs on each device. It is compared with what each device has: the free part of
``memory_stats()["bytes_limit"]`` on GPU/TPU, and ``MemAvailable`` of ``/proc/meminfo`` shared by
the local CPU devices on CPU, 90% of either (the memory the process already holds, JAX's runtime
included, is not available, so it is not counted twice). ``GPT_MEMORY_BUDGET`` (e.g. ``2GiB``)
replaces the measured amount per device, all of it counted.

On CPU the estimate adds one more temporary buffer and one more copy of the state: the host
allocator keeps the freed scratch block of a step for the next one (``host_memory.py``), which in
measurement settles at about two blocks, and each checkpoint takes a private copy of the state
(``loop._safe_copy``).

When the step does not fit, candidates are compiled (not guessed): more micro-batches
(``train.grad_accum``, same ``train.batch_size``), then recomputed activations (``model.remat``);
a line through the smallest and largest micro-batch picks the one candidate to compile and check.
The compiled step that passed is handed to the loop, so the pre-flight costs no extra compile.
"""

from __future__ import annotations

import dataclasses
import os
import re
import time
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import Mesh

from .._config.schema import Config
from .._distributed.mesh import MICRO_BATCH_AXES, batch_sharding
from .._errors import ConfigError, OutOfMemoryError
from .._model.gpt import flops_per_token
from .._runs.diskfull import error_chain
from .step import TrainState, abstract_state, compile_train_step

BUDGET_ENV = "GPT_MEMORY_BUDGET"
_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}  # fmt: skip
_SIZE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*$")
# Of the memory the devices report free, the share a plan may take: the rest is room for what the
# estimate leaves out (the evaluation step, the host's other processes growing meanwhile). A plan
# measured exactly at the available memory would otherwise be suggested as fitting.
_HEADROOM = 0.9
_OOM = re.compile(r"out of memory|RESOURCE_EXHAUSTED: .*allocat", re.IGNORECASE)


@dataclasses.dataclass(frozen=True)
class StepMemory:
    """Bytes per device of one compiled step, from XLA's memory analysis."""

    arguments: int
    outputs: int
    aliased: int
    temporaries: int
    cpu: bool

    @property
    def per_device(self) -> int:
        """What the step needs on each device (on CPU with the kept scratch block and state copy)."""
        state = self.arguments + self.outputs - self.aliased
        extra = self.temporaries + self.arguments if self.cpu else 0
        return state + self.temporaries + extra


@dataclasses.dataclass(frozen=True)
class Budget:
    """Bytes each device can still take (``None``: unknown) and where the figure comes from."""

    per_device: int | None
    source: str


@dataclasses.dataclass
class Plan:
    """The pre-flight's answer: the compiled step, its memory and the run's sizes."""

    cfg: Config
    optimizer: optax.GradientTransformation
    mesh: Mesh
    compiled: Any
    memory: StepMemory | None
    budget: Budget
    devices: int
    params: int
    param_bytes: int
    opt_bytes: int
    compile_s: float
    baseline: int | None = None  # this process's resident memory when the plan was made

    @property
    def fits(self) -> bool:
        known = self.memory is not None and self.budget.per_device is not None
        return not known or self.memory.per_device <= self.budget.per_device  # type: ignore[union-attr,operator]

    def describe(self) -> str:
        """The plan as ``gpt train --dry-run`` prints it."""
        t, m = self.cfg.train, self.cfg.model
        tokens = t.batch_size * m.seq_len
        lines = [
            f"parameters       {self.params / 1e6:.2f}M ({size(self.param_bytes)})",
            f"optimizer state  {size(self.opt_bytes)} ({t.optimizer})",
            f"step memory      {_memory_line(self.memory)} on each of {self.devices} "
            f"{jax.default_backend()} device(s)",
            f"available        {size(self.budget.per_device)} per device ({self.budget.source})",
            f"tokens per step  {tokens:,} (batch {t.batch_size} x seq_len {m.seq_len}; "
            f"{t.grad_accum} micro-batch(es) of {t.batch_size // t.grad_accum})",
            f"FLOPs per token  {flops_per_token(m):.3g} (training, forward and backward)",
            f"compile          {self.compile_s:.1f} s",
        ]
        if self.memory is not None and self.memory.cpu and self.baseline is not None:
            peak = self.baseline + self.devices * self.memory.per_device
            lines.append(
                f"host peak        {size(peak)} estimated for this process (now {size(self.baseline)}, "
                "JAX and the compiler included, plus the step on every device)"
            )
        return "\n".join(lines)


def size(n: float | None) -> str:
    """``n`` bytes for people: ``1.5 GiB``; ``unknown`` for ``None``."""
    if n is None:
        return "unknown"
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def _memory_line(mem: StepMemory | None) -> str:
    if mem is None:
        return "unknown (this backend gives no memory analysis)"
    parts = (
        f"{size(mem.per_device)} (state and batch {size(mem.arguments)}, new state "
        f"{size(mem.outputs - mem.aliased)} beyond the donated one, temporaries {size(mem.temporaries)}"
    )
    if mem.cpu:
        parts += ", plus a kept scratch block and a checkpoint copy of the state"
    return parts + ")"


def parse_size(text: str) -> int:
    """``"2GiB"``, ``"500MB"`` or ``"4096"`` (bytes) as a number of bytes.

    Example:
        >>> parse_size("2GiB"), parse_size("500 MB"), parse_size("4096")
        (2147483648, 500000000, 4096)
    """
    found = _SIZE.match(text)
    unit = found.group(2).lower() if found else ""
    if found is None or unit not in _UNITS:
        raise ConfigError(
            f"{BUDGET_ENV}={text!r} is not a memory size. Expected a number of bytes with an "
            f"optional unit (B, KB, MB, GB, KiB, MiB, GiB), e.g. {BUDGET_ENV}=8GiB; or unset it "
            "to use what the devices report."
        )
    return int(float(found.group(1)) * _UNITS[unit])


def memory_budget(devices: list[Any]) -> Budget:
    """What each device can still take: ``GPT_MEMORY_BUDGET``, else the devices' own figures."""
    if (env := os.environ.get(BUDGET_ENV)) is not None:
        return Budget(parse_size(env), f"{BUDGET_ENV}={env}")
    if all(d.platform == "cpu" for d in devices):
        free = _mem_available()
        if free is None:
            return Budget(None, "host RAM unknown: no /proc/meminfo")
        mine = [d for d in devices if d.process_index == jax.process_index()]
        return Budget(int(free * _HEADROOM) // max(len(mine), 1), f"{_HEADROOM:.0%} of the "
                      f"{size(free)} host RAM available, shared by {len(mine)} CPU device(s)")  # fmt: skip
    spare: list[int] = []
    for d in devices:
        stats = d.memory_stats() if d.process_index == jax.process_index() else None
        if stats and "bytes_limit" in stats:
            spare.append(stats["bytes_limit"] - stats.get("bytes_in_use", 0))
    if not spare:
        return Budget(None, "the devices report no memory_stats()")
    return Budget(int(min(spare) * _HEADROOM), f"{_HEADROOM:.0%} of the device memory free "
                  "(memory_stats)")  # fmt: skip


def _mem_available() -> int | None:
    try:
        text = Path("/proc/meminfo").read_text()
    except OSError:
        return None
    found = re.search(r"^MemAvailable:\s+(\d+) kB", text, re.MULTILINE)
    return int(found.group(1)) * 1024 if found else None


def step_memory(compiled: Any, mesh: Mesh) -> StepMemory | None:
    """The per-device memory of a compiled step; ``None`` where the backend gives no analysis."""
    try:
        stats = compiled.memory_analysis()
    except Exception:  # some backends raise "unimplemented"
        return None
    if stats is None:
        return None
    cpu = all(d.platform == "cpu" for d in mesh.devices.flat)
    return StepMemory(
        arguments=int(stats.argument_size_in_bytes),
        outputs=int(stats.output_size_in_bytes),
        aliased=int(stats.alias_size_in_bytes),
        temporaries=int(stats.temp_size_in_bytes),
        cpu=cpu,
    )


def abstract_batch(cfg: Config, mesh: Mesh) -> jax.ShapeDtypeStruct:
    """The train step's batch ``(grad_accum, micro_batch, seq_len + 1)`` without its values."""
    t = cfg.train
    shape = (t.grad_accum, t.batch_size // t.grad_accum, cfg.model.seq_len + 1)
    return jax.ShapeDtypeStruct(shape, jnp.int32, sharding=batch_sharding(mesh, MICRO_BATCH_AXES))


def _compile(cfg: Config, optimizer: optax.GradientTransformation, mesh: Mesh,
             abstract: TrainState) -> tuple[Any, float]:  # fmt: skip
    started = time.perf_counter()
    jitted = compile_train_step(cfg, optimizer, mesh, abstract)
    compiled = jitted.lower(abstract, abstract_batch(cfg, mesh)).compile()
    return compiled, time.perf_counter() - started


def _bytes(tree: Any) -> int:
    return sum(int(np.prod(a.shape)) * a.dtype.itemsize for a in jax.tree.leaves(tree))


def plan_step(
    cfg: Config, optimizer: optax.GradientTransformation, mesh: Mesh, abstract: TrainState
) -> Plan:
    """Compile the train step of ``cfg`` ahead of time and measure it against the devices."""
    compiled, seconds = _compile(cfg, optimizer, mesh, abstract)
    devices = list(mesh.devices.flat)
    return Plan(
        cfg=cfg,
        optimizer=optimizer,
        mesh=mesh,
        compiled=compiled,
        memory=step_memory(compiled, mesh),
        budget=memory_budget(devices),
        devices=len(devices),
        params=sum(int(np.prod(a.shape)) for a in jax.tree.leaves(abstract.params)),
        param_bytes=_bytes(abstract.params),
        opt_bytes=_bytes(abstract.opt_state),
        compile_s=seconds,
        baseline=_resident_bytes(),
    )


def _resident_bytes() -> int | None:
    try:
        text = Path("/proc/self/status").read_text()
    except OSError:
        return None
    found = re.search(r"^VmRSS:\s+(\d+) kB", text, re.MULTILINE)
    return int(found.group(1)) * 1024 if found else None


def check_fits(plan: Plan) -> None:
    """Raise :class:`OutOfMemoryError` with computed advice when ``plan`` does not fit."""
    if plan.fits:
        return
    raise OutOfMemoryError(refusal(plan))


def refusal(plan: Plan) -> str:
    """The message for a plan that does not fit: both numbers and settings that do."""
    need, have = plan.memory.per_device, plan.budget.per_device  # type: ignore[union-attr]
    t = plan.cfg.train
    return (
        f"This run does not fit in memory: its train step needs {size(need)} per device "
        f"(micro-batch {t.batch_size // t.grad_accum} of {plan.cfg.model.seq_len} tokens, "
        f"model.remat={plan.cfg.model.remat}) and each of the {plan.devices} "
        f"{jax.default_backend()} device(s) has {size(have)} ({plan.budget.source}). Nothing was "
        f"written. {advice(plan, have)}"  # type: ignore[arg-type]
    )


def out_of_memory_message(err: BaseException, plan: Plan) -> str:
    """The message for XLA running out of memory although the pre-flight let the run start."""
    first = next((line for line in str(err).splitlines() if line.strip()), type(err).__name__)
    mem, have = plan.memory, plan.budget.per_device
    said = (
        f"The pre-flight estimated {size(mem.per_device)} per device against {size(have)} "
        f"({plan.budget.source}); something else took memory meanwhile, or the estimate was short."
        if mem is not None
        else "This backend gives no memory analysis, so the pre-flight could not check it."
    )
    target = min(x for x in (mem and mem.per_device, have) if x) // 2 if (mem or have) else None
    more = advice(plan, target) if target else ""
    return (
        f"Out of memory while running the train step: {first[:300]} {said} Training stopped; no "
        f"checkpoint was damaged. {more} To check settings before a run: gpt train --dry-run."
    )


def _with(cfg: Config, grad_accum: int, remat: str) -> Config:
    return dataclasses.replace(
        cfg,
        train=dataclasses.replace(cfg.train, grad_accum=grad_accum),
        model=dataclasses.replace(cfg.model, remat=remat),
    )


def _needs(cfg: Config, optimizer: optax.GradientTransformation, mesh: Mesh) -> int | None:
    compiled, _ = _compile(cfg, optimizer, mesh, abstract_state(cfg, optimizer, mesh))
    mem = step_memory(compiled, mesh)
    return mem.per_device if mem else None


def advice(plan: Plan, budget: int) -> str:
    """Settings of ``plan`` 's run that fit in ``budget`` bytes per device, found by compiling them.

    The fewest micro-batches (``train.grad_accum``; ``train.batch_size`` kept) that fit, first
    without changing ``model.remat``, then with ``model.remat=full``: two or three compiles for each
    (``_fewest_accum``). When the state alone (parameters and optimizer state) exceeds ``budget``,
    nothing is compiled.
    """
    cfg, t, mem = plan.cfg, plan.cfg.train, plan.memory
    shards = plan.mesh.shape["data"] * plan.mesh.shape["fsdp"] * jax.process_count()
    accums = [g for g in range(t.grad_accum, t.batch_size + 1)
              if t.batch_size % g == 0 and (t.batch_size // g) % shards == 0]  # fmt: skip
    floor = mem.per_device - 2 * mem.temporaries if mem and mem.cpu else None
    if mem is not None and not mem.cpu:
        floor = mem.per_device - mem.temporaries
    if floor is not None and floor > budget:
        return (
            f"The state alone (parameters, optimizer state, batch) takes {size(floor)} per device, "
            f"more than {size(budget)}: no micro-batch size or recomputation fits. Choose a smaller "
            "model (model.d_model, model.n_layers) or shard the state over more devices "
            "(mesh.fsdp)."
        )
    known: dict[tuple[int, str], int | None] = (
        {(t.grad_accum, cfg.model.remat): mem.per_device} if mem else {}
    )
    remats = [cfg.model.remat] + (["full"] if cfg.model.remat != "full" else [])
    for remat in remats:
        found = _fewest_accum(plan, budget, accums, remat, known)
        if found is not None:
            g, need = found
            sets = f"--set train.grad_accum={g}"
            if remat != cfg.model.remat:
                sets += f" --set model.remat={remat}"
            return (
                f"These settings fit in {size(budget)} per device (compiled and measured: "
                f"{size(need)}): {sets} "
                f"(micro-batch {t.batch_size // g}, the same train.batch_size = {t.batch_size}). "
                "Or use more devices (mesh.fsdp shards the state)."
            )
    return (
        f"Even one micro-batch of {t.batch_size // accums[-1] if accums else '?'} sequences with "
        "model.remat=full does not fit: choose a smaller model (model.d_model, model.n_layers), a "
        "shorter model.seq_len, or more devices with mesh.fsdp to shard the state."
    )


def _fewest_accum(plan: Plan, budget: int, accums: list[int], remat: str,
                  known: dict[tuple[int, str], int | None]) -> tuple[int, int] | None:  # fmt: skip
    """The fewest micro-batches (first of ``accums``, ascending) that fit, in two or three compiles.

    The step's memory is what every micro-batch size needs (state, gradients) plus activations that
    grow with the micro-batch. Measured at the largest and the smallest micro-batch, the line
    through the two predicts the others; the predicted candidate is compiled to check it and, where
    the line fell short, the next smaller micro-batch is, until one fits (the smallest one does).
    Every suggestion is a compiled measurement, never the line's prediction.
    """

    def need(g: int) -> int | None:
        if (g, remat) not in known:
            known[(g, remat)] = _needs(_with(plan.cfg, g, remat), plan.optimizer, plan.mesh)
        return known[(g, remat)]

    smallest = need(accums[-1])
    if smallest is None or smallest > budget:
        return None
    largest = need(accums[0])
    if largest is None:
        return None
    if largest <= budget:
        return accums[0], largest
    batch = plan.cfg.train.batch_size
    low, high = batch // accums[-1], batch // accums[0]
    per_row = (largest - smallest) / max(high - low, 1)
    first = next(
        i for i, g in enumerate(accums) if smallest + per_row * (batch // g - low) <= budget
    )
    for g in accums[first:]:
        found = need(g)
        if found is None:
            return None
        if found <= budget:
            return g, found
    return None


def is_out_of_memory(err: BaseException) -> bool:
    """Whether ``err`` (or an error it was raised from) is XLA running out of memory."""
    return any(isinstance(e, MemoryError) or _OOM.search(str(e)) for e in error_chain(err))
