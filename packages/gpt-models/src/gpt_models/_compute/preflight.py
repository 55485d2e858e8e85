"""Memory pre-flight: a command's program compiled ahead of time and measured against the devices.

``gpt train``, ``gpt sample`` and ``gpt eval`` compile the program they are about to run for
abstract inputs (``plans.py``) before anything is read or written, and read XLA's memory analysis
of it: per device, the bytes of its arguments, its outputs (those written over a donated argument
are counted once) and its temporaries (every intermediate value). Their sum is what the program
needs on each device. It is compared with what each device has: the free part of
``memory_stats()["bytes_limit"]`` on GPU/TPU, and ``MemAvailable`` of ``/proc/meminfo`` shared by
the local CPU devices on CPU, 90% of either (the memory the process already holds, JAX's runtime
included, is not available, so it is not counted twice). ``GPT_MEMORY_BUDGET`` (e.g. ``2GiB``)
replaces the measured amount per device, all of it counted.

On CPU the train step's estimate adds one more temporary buffer and one more copy of the state: the
host allocator keeps the freed scratch block of a step for the next one (``host_memory.py``), which
in measurement settles at about two blocks, and each checkpoint takes a private copy of the state
(``loop._safe_copy``).

A program that does not fit is refused (:func:`check_fits`) with both numbers and the value of its
:class:`Knob` (the setting that sizes it: ``train.grad_accum``, ``--max-new-tokens``,
``--batch-size``) that fits, found by :func:`first_fitting`. The compiled program that passed is
the one the command runs, so the pre-flight costs no extra compile.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import re
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TextIO

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh

from .._config.schema import Config
from .._data.store import is_store, read_manifest
from .._distributed.mesh import MICRO_BATCH_AXES, batch_sharding
from .._errors import ConfigError, OutOfMemoryError
from .._runs.diskfull import error_chain

BUDGET_ENV = "GPT_MEMORY_BUDGET"
_UNITS = {
    "": 1,
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
}
_SIZE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*$")
# Of the memory the devices report free, the share a plan may take: the rest is room for what the
# estimate leaves out (the evaluation step, the host's other processes growing meanwhile). A plan
# measured exactly at the available memory would otherwise be suggested as fitting.
_HEADROOM = 0.9
_OOM = re.compile(r"out of memory|RESOURCE_EXHAUSTED: .*allocat", re.IGNORECASE)


@dataclasses.dataclass(frozen=True)
class StepMemory:
    """Bytes per device of one compiled program, from XLA's memory analysis.

    ``training``: a train step, which on CPU also keeps a scratch block and a checkpoint copy.
    """

    arguments: int
    outputs: int
    aliased: int
    temporaries: int
    cpu: bool
    training: bool = True

    @property
    def per_device(self) -> int:
        """What the program needs on each device (a CPU train step with its kept extras)."""
        state = self.arguments + self.outputs - self.aliased
        extra = self.temporaries + self.arguments if self.cpu and self.training else 0
        return state + self.temporaries + extra


@dataclasses.dataclass(frozen=True)
class Budget:
    """Bytes each device can still take (``None``: unknown) and where the figure comes from."""

    per_device: int | None
    source: str


@dataclasses.dataclass(frozen=True)
class Knob:
    """The setting that sizes a program's memory, and what its candidate values need.

    ``values``: the candidates, the value asked for first, then ever less memory. Memory grows
    along a line with ``size(v)`` (micro-batch rows, new tokens, windows). ``need(v)``: bytes per
    device, by compiling ``v`` (``compiles``) or derived from the compiled program; ``how`` says
    which in the advice. ``setting(v)``: ``v`` as the user sets it. ``none_fits(budget)``: the
    advice when even the last value does not fit.
    """

    name: str
    values: Sequence[int]
    size: Callable[[int], float]
    need: Callable[[int], int | None]
    compiles: bool
    how: str
    setting: Callable[[int], str]
    none_fits: Callable[[int], str]
    prefix: str = ""
    suffix: str = ""


@dataclasses.dataclass
class Plan:
    """The pre-flight's answer: a command's compiled program, its memory and the devices' budget.

    ``gpt train --dry-run`` (:func:`gpt_models.plan_training`), ``gpt sample --dry-run`` and
    ``gpt eval --dry-run`` print :meth:`describe`; :func:`check_fits` refuses a plan that does not
    fit. ``cfg`` is the resolved config the program was compiled for.
    """

    command: str
    program: str
    compiled: Any
    memory: StepMemory | None
    budget: Budget
    devices: int
    params: int
    param_bytes: int
    compile_s: float
    knob: Knob
    cfg: Config
    lines: list[str]  # the command's own lines of describe(), before the compile time
    baseline: int | None = None  # this process's resident memory when the plan was made
    untouched: str = "Nothing was written."
    stream: TextIO | None = None  # where the pre-flight says what it is doing
    local_devices: int | None = None  # this process's share of ``devices`` (None: all of them)

    @property
    def fits(self) -> bool:
        if self.memory is None or self.budget.per_device is None:
            return True  # nothing to compare: no measurement, or no known budget
        return self.memory.per_device <= self.budget.per_device

    def describe(self) -> str:
        """The plan as the commands' ``--dry-run`` prints it."""
        lines = [*self.lines, f"compile          {self.compile_s:.1f} s"]
        if self.memory is not None and self.memory.cpu and self.baseline is not None:
            mine = self.devices if self.local_devices is None else self.local_devices
            peak = self.baseline + mine * self.memory.per_device
            lines.append(
                f"host peak        {size(peak)} estimated for this process (now "
                f"{size(self.baseline)}, JAX and the compiler included, plus the program on each "
                f"of its {mine} device(s))"
            )
        return "\n".join(lines)


def say(stream: TextIO | None, text: str) -> None:
    """A progress line of the pre-flight (process 0 only), so that a long compile is not silent."""
    if stream is not None and jax.process_index() == 0:
        print(f"pre-flight: {text}", file=stream, flush=True)


def size(n: float | None) -> str:
    """``n`` bytes for people: ``1.5 GiB``; ``unknown`` for ``None``."""
    if n is None:
        return "unknown"
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


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
        return Budget(
            int(free * _HEADROOM) // max(len(mine), 1),
            f"{_HEADROOM:.0%} of the "
            f"{size(free)} host RAM available, shared by {len(mine)} CPU device(s)",
        )
    spare: list[int] = []
    for d in devices:
        stats = d.memory_stats() if d.process_index == jax.process_index() else None
        if stats and "bytes_limit" in stats:
            spare.append(stats["bytes_limit"] - stats.get("bytes_in_use", 0))
    if not spare:
        return Budget(None, "the devices report no memory_stats()")
    return Budget(
        int(min(spare) * _HEADROOM), f"{_HEADROOM:.0%} of the device memory free (memory_stats)"
    )


def _mem_available() -> int | None:
    try:
        text = Path("/proc/meminfo").read_text()
    except OSError:
        return None
    found = re.search(r"^MemAvailable:\s+(\d+) kB", text, re.MULTILINE)
    return int(found.group(1)) * 1024 if found else None


def resident_bytes() -> int | None:
    """This process's resident memory (``VmRSS``), or ``None`` where there is no ``/proc``."""
    try:
        text = Path("/proc/self/status").read_text()
    except OSError:
        return None
    found = re.search(r"^VmRSS:\s+(\d+) kB", text, re.MULTILINE)
    return int(found.group(1)) * 1024 if found else None


def step_memory(compiled: Any, devices: Sequence[Any], training: bool = True) -> StepMemory | None:
    """The per-device memory of a compiled program; ``None`` where the backend gives no analysis."""
    try:
        stats = compiled.memory_analysis()
    except Exception:  # some backends raise "unimplemented"
        return None
    if stats is None:
        return None
    return StepMemory(
        arguments=int(stats.argument_size_in_bytes),
        outputs=int(stats.output_size_in_bytes),
        aliased=int(stats.alias_size_in_bytes),
        temporaries=int(stats.temp_size_in_bytes),
        cpu=all(d.platform == "cpu" for d in devices),
        training=training,
    )


def memory_text(mem: StepMemory | None) -> str:
    """A program's memory as the plans print it: the total, then its parts."""
    if mem is None:
        return "unknown (this backend gives no memory analysis)"
    text = (
        f"{size(mem.per_device)} ({mem.per_device:,} bytes: arguments {size(mem.arguments)}, "
        f"outputs {size(mem.outputs - mem.aliased)} beyond the donated arguments, temporaries "
        f"{size(mem.temporaries)}"
    )
    if mem.cpu and mem.training:
        text += ", plus a kept scratch block and a checkpoint copy of the state"
    return text + ")"


def check_fits(plan: Plan) -> None:
    """Raise :class:`OutOfMemoryError` with the knob's value that fits, when ``plan`` does not
    fit."""
    if plan.fits:
        return
    raise OutOfMemoryError(refusal(plan))


def refusal(plan: Plan) -> str:
    """The message for a plan that does not fit: both numbers and the setting that fits."""
    mem, have = plan.memory, plan.budget.per_device
    assert mem is not None and have is not None, "refusal() of a plan that was not measured"
    backend = jax.default_backend()
    if mem.training:
        subject, per, where = (
            "This run",
            " per device",
            f"each of the {plan.devices} {backend} device(s)",
        )
    else:
        subject, per, where = plan.command, "", f"the {backend} device it runs on"
    return (
        f"{subject} does not fit in memory: its {plan.program} needs "
        f"{size(mem.per_device)}{per} and {where} has {size(have)} ({plan.budget.source}). "
        f"{plan.untouched} {advice(plan, have)}"
    )


def advice(plan: Plan, budget: int) -> str:
    """The value of ``plan``'s knob that fits in ``budget`` bytes per device, as advice."""
    knob = plan.knob
    how = "by compiling candidates" if knob.compiles else "from the compiled program's analysis"
    say(plan.stream, f"looking for the {knob.name} that fits in {size(budget)}, {how}")
    found = first_fitting(knob, budget)
    if found is None:
        return knob.none_fits(budget)
    value, need = found
    per = " per device" if plan.memory is None or plan.memory.training else ""
    return (
        f"{knob.prefix}{knob.setting(value)} fits in {size(budget)}{per} ({knob.how}: "
        f"{size(need)}).{knob.suffix}"
    )


def first_fitting(knob: Knob, budget: int) -> tuple[int, int] | None:
    """The first of ``knob.values`` that fits ``budget``, and what it needs; ``None``: not even
    the last.

    The line through what the first and the last value need predicts the first that fits; a miss
    moves to the next value (halfway towards the last when each one is a compile, the last fits).
    """
    values, need = list(knob.values), functools.cache(knob.need)
    last = need(values[-1])
    if last is None or last > budget:
        return None
    first = need(values[0]) if len(values) > 1 else last
    if first is None:
        return None
    if first <= budget:
        return values[0], first
    s0, s1 = knob.size(values[0]), knob.size(values[-1])
    per_size = (first - last) / max(s0 - s1, 1e-9)
    end = len(values) - 1
    i = next(i for i, v in enumerate(values) if last + per_size * (knob.size(v) - s1) <= budget)
    while i < end:
        found = need(values[i])
        if found is not None and found <= budget:
            return values[i], found
        i = end - (end - i) // 2 if knob.compiles else i + 1
    return values[-1], last


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


def is_out_of_memory(err: BaseException) -> bool:
    """Whether ``err`` (or an error it was raised from) is XLA running out of memory."""
    return any(isinstance(e, MemoryError) or _OOM.search(str(e)) for e in error_chain(err))


# --- the pieces a plan is made of ---------------------------------------------------------------


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
    says ``"loss_mask": true`` (``gpt prepare`` of chat or prompt/completion JSONL), or every
    source of ``data.sources`` is (preference stores: the only such mixtures that load)."""
    paths = [Path(s.path) for s in cfg.data.sources] or [Path(cfg.data.path)] * bool(cfg.data.path)
    return bool(paths) and all(
        is_store(p) and bool(read_manifest(p).get("loss_mask")) for p in paths
    )


def abstract_batch(
    cfg: Config,
    mesh: Mesh,
    shape: tuple[int, ...] | None = None,
    axes: tuple[str | None, ...] = MICRO_BATCH_AXES,
) -> Any:
    """The train step's batch ``(grad_accum, micro_batch, seq_len + 1)`` without its values.

    ``shape`` and ``axes`` another batch's (the eval step's ``(rows, seq_len + 1)``). For packed
    data (:func:`packed_data`) a dict of ``tokens``, ``mask`` and ``segments`` of that shape.
    """
    t = cfg.train
    if shape is None:
        shape = (t.grad_accum, t.batch_size // t.grad_accum, cfg.window + 1)
    sharding = batch_sharding(mesh, axes)
    if not packed_data(cfg):
        return jax.ShapeDtypeStruct(shape, jnp.int32, sharding=sharding)
    dtypes = {"tokens": jnp.int32, "mask": jnp.uint8, "segments": jnp.int32}
    p = cfg.preference
    if p.enabled:  # pairs: a chosen and a rejected sub-row side by side (packing.py)
        shape = (*shape[:-1], 2 * shape[-1])
        if p.uses_reference and p.precompute_ref:  # each answer's reference log-prob
            dtypes["ref"] = jnp.float32
    return {k: jax.ShapeDtypeStruct(shape, d, sharding=sharding) for k, d in dtypes.items()}
