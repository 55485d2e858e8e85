"""Memory pre-flight of ``gpt sample`` and ``gpt eval``: their own programs, compiled ahead of time.

Before a checkpoint is read, the program the command runs (the sampling loop with its KV cache,
the eval step, or the scorer of ``--text``/``--task``) is compiled for abstract parameters and its
memory analysis compared with what the device has (``preflight.memory_budget``, so
``GPT_MEMORY_BUDGET`` applies here too). A program that cannot fit is refused with both numbers and
the largest value of the command's own knob that fits (``--max-new-tokens`` for ``gpt sample``,
``--batch-size`` for ``gpt eval``), found by compiling it: a line through the smallest and the
asked value picks one candidate, which is compiled to check it (halved towards the smallest until
one fits). The program that passed is the one the command then runs.

These commands run one program once on one device: what it needs is its arguments (the
parameters and inputs), its outputs beyond the donated arguments, and its temporaries.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .._config.schema import Config, MeshConfig
from .._distributed.mesh import batch_sharding, make_mesh
from .._errors import OutOfMemoryError
from .._model.generate import compile_generate
from .._model.gpt import abstract_params
from .preflight import Budget, StepMemory, _resident_bytes, memory_budget, size, step_memory
from .scoring import _compiled as _scorer
from .step import compile_eval_step


@dataclasses.dataclass
class UsePlan:
    """One command's program, compiled ahead of time, against the device's memory.

    ``knob`` is the flag that sizes the program (``--max-new-tokens``, ``--batch-size``) and
    ``value`` its value here; ``compile_at(v)`` compiles the command's knob-sized program for ``v``
    (for ``gpt eval`` without ``--text``, the ``--text @val`` scorer, the way to use fewer rows).
    """

    command: str
    program: str
    compiled: Any
    memory: StepMemory | None
    budget: Budget
    params: int
    param_bytes: int
    compile_s: float
    baseline: int | None
    knob: str
    value: int
    lowest: int
    compile_at: Callable[[int], Any]
    advice_prefix: str = ""

    @property
    def need(self) -> int | None:
        """Bytes the program needs on its device (``None``: the backend gives no analysis)."""
        m = self.memory
        return None if m is None else m.arguments + m.outputs - m.aliased + m.temporaries

    @property
    def fits(self) -> bool:
        need, have = self.need, self.budget.per_device
        return need is None or have is None or need <= have

    def describe(self) -> str:
        """The plan as ``gpt sample --dry-run`` / ``gpt eval --dry-run`` print it."""
        m = self.memory
        memory = (
            "unknown (this backend gives no memory analysis)" if m is None else
            f"{size(self.need)} ({self.need:,} bytes: parameters and inputs {size(m.arguments)}, outputs "
            f"{size(m.outputs - m.aliased)}, temporaries {size(m.temporaries)})"
        )  # fmt: skip
        lines = [
            f"parameters       {self.params / 1e6:.2f}M ({size(self.param_bytes)})",
            f"program          {self.program}",
            f"memory           {memory} on 1 {jax.default_backend()} device",
            f"available        {size(self.budget.per_device)} ({self.budget.source})",
            f"compile          {self.compile_s:.1f} s",
        ]
        if m is not None and m.cpu and self.baseline is not None:
            lines.append(
                f"host peak        {size(self.baseline + self.need)} estimated for this process "  # type: ignore[operator]
                f"(now {size(self.baseline)}, JAX and the compiler included, plus the program)"
            )
        return "\n".join(lines)


def check_use_fits(plan: UsePlan) -> None:
    """Raise :class:`OutOfMemoryError` with the largest knob value that fits, when ``plan`` does not."""
    if plan.fits:
        return
    have = plan.budget.per_device
    raise OutOfMemoryError(
        f"{plan.command} does not fit in memory: its {plan.program} needs {size(plan.need)} and "
        f"the {jax.default_backend()} device it runs on has {size(have)} "
        f"({plan.budget.source}). Nothing was read or written. {_advice(plan, have)}"  # type: ignore[arg-type]
    )


def _advice(plan: UsePlan, budget: int) -> str:
    found = largest_fitting(plan, budget)
    if found is None:
        return (
            f"Even {plan.knob} {plan.lowest} does not fit: the parameters alone take "
            f"{size(plan.param_bytes)}. This model needs a machine with more memory (or set "
            "GPT_MEMORY_BUDGET if the available figure above is wrong)."
        )
    value, need = found
    return (
        f"{plan.advice_prefix}{plan.knob} {value} fits in {size(budget)} (compiled and measured: "
        f"{size(need)})."
    )


def largest_fitting(plan: UsePlan, budget: int) -> tuple[int, int] | None:
    """The largest value of ``plan.knob`` whose program fits ``budget``, and what it needs.

    Memory grows with the knob: a line through ``plan.lowest`` and ``plan.value`` predicts the
    largest value that fits; that one is compiled to check it, then halved towards the lowest
    until a compiled one fits. ``None`` when even the lowest does not.
    """
    known: dict[int, int | None] = {}

    def need(v: int) -> int | None:
        if v not in known:
            known[v] = _need(plan.compile_at(v))
        return known[v]

    low, high = plan.lowest, plan.value
    at_low = need(low)
    if at_low is None or at_low > budget:
        return None
    at_high = need(high) if high != low else at_low
    if at_high is None or high <= low:
        return (low, at_low) if high <= low else None
    per_unit = max((at_high - at_low) / (high - low), 1e-9)
    guess = min(high - 1, low + int((budget - at_low) / per_unit))
    while guess > low:
        found = need(guess)
        if found is not None and found <= budget:
            return guess, found
        guess = low + (guess - low) // 2
    return low, at_low


def _need(compiled: Any) -> int | None:
    mem = step_memory(compiled, _one_device_mesh())
    return None if mem is None else mem.arguments + mem.outputs - mem.aliased + mem.temporaries


def _one_device_mesh() -> Any:
    return make_mesh(MeshConfig(data=1, fsdp=1, tensor=1), jax.devices()[:1])


def _one_device(cfg: Config) -> Config:
    # As load_run restores them: on one device, whatever mesh the run trained on.
    return dataclasses.replace(cfg, mesh=MeshConfig(data=1, fsdp=1, tensor=1))


def _plan(command: str, program: str, cfg: Config, compile_at: Callable[[int], Any], knob: str,
          value: int, lowest: int, first: Callable[[], Any] | None = None,
          advice_prefix: str = "") -> UsePlan:  # fmt: skip
    started = time.perf_counter()
    compiled = (first or (lambda: compile_at(value)))()
    seconds = time.perf_counter() - started
    abstract = abstract_params(cfg, _one_device_mesh())
    leaves = jax.tree.leaves(abstract)
    return UsePlan(
        command=command, program=program, compiled=compiled,
        memory=step_memory(compiled, _one_device_mesh()), budget=memory_budget(jax.devices()[:1]),
        params=sum(int(np.prod(a.shape)) for a in leaves),
        param_bytes=sum(int(np.prod(a.shape)) * a.dtype.itemsize for a in leaves),
        compile_s=seconds, baseline=_resident_bytes(), knob=knob, value=value, lowest=lowest,
        compile_at=compile_at, advice_prefix=advice_prefix,
    )  # fmt: skip


def plan_sample(cfg: Config, prompt_len: int, max_new_tokens: int, *, temperature: float,
                top_k: int | None, top_p: float | None) -> UsePlan:  # fmt: skip
    """``gpt sample``'s program (one prompt, KV cache, ``max_new_tokens`` steps), compiled."""
    cfg = _one_device(cfg)
    params = abstract_params(cfg, _one_device_mesh())

    def compile_at(n: int) -> Any:
        return compile_generate(params, prompt_len, cfg.model, max_new_tokens=n,
                                temperature=temperature, top_k=top_k, top_p=top_p)  # fmt: skip

    program = f"sampling program (prompt of {prompt_len} tokens + {max_new_tokens} new tokens)"
    return _plan("gpt sample", program, cfg, compile_at, "--max-new-tokens", max_new_tokens, 1)


def plan_score(cfg: Config, batch_size: int) -> UsePlan:
    """``gpt eval --text/--task``'s scorer for ``batch_size`` windows per call, compiled."""
    cfg = _one_device(cfg)
    compile_at = _scorer_at(cfg, abstract_params(cfg, _one_device_mesh()))
    program = f"scorer ({batch_size} windows of {cfg.model.seq_len} tokens per call)"
    return _plan("gpt eval", program, cfg, compile_at, "--batch-size", batch_size, 1)


def _scorer_at(cfg: Config, params: Any) -> Callable[[int], Any]:
    fn = _scorer(cfg.model)

    def compile_at(rows: int) -> Any:
        windows = jax.ShapeDtypeStruct((rows, cfg.model.seq_len + 1), jnp.int32)
        return fn.lower(params, windows).compile()

    return compile_at


def plan_eval(cfg: Config, run: str) -> UsePlan:
    """``gpt eval``'s validation step (the run's micro-batch of windows), compiled.

    Its rows are fixed by the run (``train.batch_size / train.grad_accum``), so the advice when it
    does not fit is the scorer of ``gpt eval --text @val`` with a ``--batch-size`` that fits.
    """
    cfg = _one_device(cfg)
    mesh = _one_device_mesh()
    params = abstract_params(cfg, mesh)
    rows = cfg.train.batch_size // cfg.train.grad_accum

    def first() -> Any:
        batch = jax.ShapeDtypeStruct(
            (rows, cfg.model.seq_len + 1), jnp.int32, sharding=batch_sharding(mesh)
        )
        return compile_eval_step(cfg, mesh, params).lower(params, batch).compile()

    program = f"eval step ({rows} windows of {cfg.model.seq_len} tokens, the run's micro-batch)"
    prefix = (
        f"The eval step's {rows} rows are the run's micro-batch; to score the validation text "
        f"with fewer rows at a time: gpt eval --run {run} --text @val --batch-size N, where "
    )
    return _plan("gpt eval", program, cfg, _scorer_at(cfg, params), "--batch-size", rows, 1, first,
                 prefix)  # fmt: skip
