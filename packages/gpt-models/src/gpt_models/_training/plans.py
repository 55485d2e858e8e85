"""The programs the memory pre-flight compiles, one per command, and the knob that sizes each.

``gpt train``: the train step, compiled once; its knob is ``train.grad_accum`` (the same
``train.batch_size`` in more, smaller micro-batches). What another micro-batch size needs is derived
from the compiled step's memory analysis, not compiled: per device the arguments and outputs do not
depend on it (the whole batch is an argument either way), and the temporaries are a part that does
not (gradients, their running sum, the optimizer's update) plus activations that grow with the
micro-batch's rows. One compile gives their sum; the fixed part is taken as ``FIXED_TEMPORARIES``
times the trained parameters' bytes (all of them; with LoRA the adapters, since the frozen
weights get no gradient) (at most the temporaries), above what was measured on the presets
(``benchmarks/gpt/preflight_refusal.py``), and the estimate is raised by ``ESTIMATE_MARGIN`` for
XLA's own variations, so that a smaller micro-batch is estimated to need at least what it does.

``gpt sample`` (the sampling loop: its knob ``--max-new-tokens``) and ``gpt eval`` (the eval step
or the ``--text``/``--task`` scorer: ``--batch-size``) run one small program on one device; their
knob's values are compiled and measured, a line through the two ends picking the one to compile.
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
import optax
from jax.sharding import Mesh

from core_primitives import compat

from .._config.schema import Config, MeshConfig
from .._data.store import is_store, read_manifest
from .._distributed.mesh import BATCH_AXES, MICRO_BATCH_AXES, batch_sharding, make_mesh
from .._model.flops import flops_per_token
from .._model.generate import compile_generate
from .._model.gpt import abstract_params
from .._model.lora import lora_summary, model_of
from .preflight import (
    Knob,
    Plan,
    StepMemory,
    memory_budget,
    memory_text,
    resident_bytes,
    say,
    size,
    step_memory,
)
from .scoring import compiled_scorer
from .step import TrainState, compile_eval_step, compile_train_step

# The train step's temporaries that do not shrink with the micro-batch, at most: x the parameters'
# bytes (measured: 2.4 x for gpt2-small, up to 3.3 x for llama-tiny from one micro-batch to two).
FIXED_TEMPORARIES = 4
# XLA fuses and schedules each micro-batch size a little differently, so the temporaries stray
# from the line by a few percent (measured up to 9% above it on the tiny preset): the estimate of
# a size not compiled is raised by this much.
ESTIMATE_MARGIN = 1.1


def _bytes(tree: Any) -> int:
    return sum(int(np.prod(a.shape)) * a.dtype.itemsize for a in jax.tree.leaves(tree))


def _compiled(stream: TextIO | None, what: str, compile: Callable[[], Any]) -> tuple[Any, float]:
    say(stream, f"compiling {what} ahead of time to measure its memory")
    started = time.perf_counter()
    compiled = compile()
    return compiled, time.perf_counter() - started


# --- gpt train ------------------------------------------------------------------------------------


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


def plan_step(cfg: Config, optimizer: optax.GradientTransformation, mesh: Mesh,
              abstract: TrainState, stream: TextIO | None = None) -> Plan:  # fmt: skip
    """Compile the train step of ``cfg`` ahead of time and measure it against the devices."""
    devices = list(mesh.devices.flat)
    what = f"the train step ({len(devices)} {jax.default_backend()} device(s))"
    jitted = compile_train_step(cfg, optimizer, mesh, abstract)
    compiled, seconds = _compiled(
        stream, what, lambda: jitted.lower(abstract, abstract_batch(cfg, mesh)).compile()
    )
    mem = step_memory(compiled, devices)
    t, m = cfg.train, cfg.model
    param_bytes = _bytes(abstract.params)
    trainable = abstract.params.split()[0]
    budget = memory_budget(devices)
    lines = [
        f"parameters       {_count(abstract.params) / 1e6:.2f}M ({size(param_bytes)})",
        *(
            []
            if len(trainable) == len(abstract.params)
            else [
                f"trainable        {_count(trainable):,} ({size(_bytes(trainable))}): the "
                f"LoRA adapters, {lora_summary(model_of(cfg))}; the rest is frozen"
            ]
        ),
        f"optimizer state  {size(_bytes(abstract.opt_state))} ({t.optimizer})",
        f"step memory      {memory_text(mem)} on each of {len(devices)} "
        f"{jax.default_backend()} device(s)",
        f"available        {size(budget.per_device)} per device ({budget.source})",
        f"tokens per step  {t.batch_size * m.seq_len:,} (batch {t.batch_size} x seq_len "
        f"{m.seq_len}; {t.grad_accum} micro-batch(es) of {t.batch_size // t.grad_accum})",
        f"FLOPs per token  {flops_per_token(cfg):.3g} (training, forward and backward"
        + ("; LoRA: frozen weights get no weight gradient)" if cfg.lora.enabled else ")"),
    ]
    micro = t.batch_size // t.grad_accum
    return Plan(
        command="gpt train", compiled=compiled, memory=mem, budget=budget, devices=len(devices),
        program=f"train step (micro-batch {micro} of {m.seq_len} tokens, model.remat={m.remat})",
        params=_count(abstract.params), param_bytes=param_bytes, compile_s=seconds, cfg=cfg,
        knob=_micro_batches(cfg, mesh, mem, _bytes(trainable)), lines=lines,
        baseline=resident_bytes(),
        stream=stream,
    )  # fmt: skip


def _count(tree: Any) -> int:
    return sum(int(np.prod(a.shape)) for a in jax.tree.leaves(tree))


def _micro_batches(cfg: Config, mesh: Mesh, mem: StepMemory | None, trained_bytes: int) -> Knob:
    """``train.grad_accum`` from the compiled one up, each value's memory derived, not compiled.

    ``trained_bytes``: the trainable parameters' bytes, which the gradients, their sum and the
    update are as large as (all parameters, or with LoRA the adapters alone).
    """
    t = cfg.train
    shards = mesh.shape["data"] * mesh.shape["fsdp"] * jax.process_count()
    accums = [g for g in range(t.grad_accum, t.batch_size + 1)
              if t.batch_size % g == 0 and (t.batch_size // g) % shards == 0]  # fmt: skip
    rows = lambda g: t.batch_size / g

    def need(g: int) -> int | None:
        if mem is None:
            return None
        # Temporaries: a fixed part (bounded above) plus a part proportional to the rows.
        if g == t.grad_accum:
            return mem.per_device
        fixed = min(mem.temporaries, FIXED_TEMPORARIES * trained_bytes)
        temps = fixed + (mem.temporaries - fixed) * rows(g) / rows(t.grad_accum)
        return dataclasses.replace(mem, temporaries=int(temps * ESTIMATE_MARGIN)).per_device

    def none_fits(budget: int) -> str:
        state = mem.per_device - mem.temporaries * (2 if mem.cpu else 1) if mem else None
        if state is not None and state > budget:
            return (
                f"The state alone (parameters, optimizer state, batch) takes {size(state)} per "
                f"device, more than {size(budget)}: no micro-batch size or recomputation fits. "
                "Choose a smaller model (model.d_model, model.n_layers) or shard the state over "
                "more devices (mesh.fsdp)."
            )
        most = accums[-1] if accums else t.grad_accum
        remat = "" if cfg.model.remat == "full" else (
            "model.remat=full (activations recomputed in the backward pass), "
        )  # fmt: skip
        if (
            remat
            and mem
            and mem.cpu
            and not cfg.model.scan_layers
            and (not compat.xla_cpu_remats_unrolled_layers())
        ):
            remat = (
                "model.remat=full with model.scan_layers=true (activations recomputed in the "
                "backward pass: XLA:CPU before JAX 0.11 keeps those of unrolled layers), "
            )
        return (
            f"Even a micro-batch of {t.batch_size // most} sequence(s) is estimated not to fit "
            f"(the estimate errs high: gpt train --dry-run --set train.grad_accum={most} measures "
            f"it). Try {remat}a smaller model (model.d_model, model.n_layers), a shorter "
            "model.seq_len, or more devices with mesh.fsdp to shard the state; --dry-run checks each."
        )

    return Knob(
        name="train.grad_accum", values=accums or [t.grad_accum], size=rows, need=need,
        compiles=False, how="estimated from the compiled step's memory analysis",
        setting=lambda g: f"--set train.grad_accum={g} (micro-batch {t.batch_size // g}, the same "
        f"train.batch_size = {t.batch_size})",
        none_fits=none_fits, suffix=" Or use more devices (mesh.fsdp shards the state).",
    )  # fmt: skip


# --- gpt sample, gpt eval ---------------------------------------------------------------------------


def _one_device_mesh() -> Mesh:
    return make_mesh(MeshConfig(data=1, fsdp=1, tensor=1), jax.devices()[:1])


def _one_device(cfg: Config) -> Config:
    # As load_run restores them: on one device, whatever mesh the run trained on.
    return dataclasses.replace(cfg, mesh=MeshConfig(data=1, fsdp=1, tensor=1))


def _use_plan(command: str, program: str, cfg: Config, compile_at: Callable[[int], Any],
              knob: str, value: int, stream: TextIO | None, first: Callable[[], Any] | None = None,
              prefix: str = "") -> Plan:  # fmt: skip
    """The plan of a one-device program sized by ``knob`` (``value`` asked, down to 1).

    Its progress lines go to ``stream`` only on a terminal: these programs compile in seconds, and
    in a log or a pipe the lines would only come between the command and its own output.
    """
    stream = stream if stream is not None and stream.isatty() else None
    device = jax.devices()[:1]
    compiled, seconds = _compiled(stream, f"{command}'s {program.split(' (')[0]}",
                                  first or (lambda: compile_at(value)))  # fmt: skip
    mem = step_memory(compiled, device, training=False)
    leaves = jax.tree.leaves(abstract_params(cfg, _one_device_mesh()))
    params, param_bytes = _count(leaves), _bytes(leaves)
    budget = memory_budget(device)

    # The program compiled above is the knob's at `value`, unless it is another (the eval step).
    known = {} if first else {value: mem.per_device if mem else None}

    def need(v: int) -> int | None:
        if v not in known:
            found = step_memory(compile_at(v), device, training=False)
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
        f"program          {program}",
        f"memory           {memory_text(mem)} on 1 {jax.default_backend()} device",
        f"available        {size(budget.per_device)} ({budget.source})",
    ]
    return Plan(
        command=command, program=program, compiled=compiled, memory=mem, budget=budget, devices=1,
        params=params, param_bytes=param_bytes, compile_s=seconds, cfg=cfg, lines=lines,
        knob=Knob(name=knob, values=range(value, 0, -1), size=float, need=need, compiles=True,
                  how="compiled and measured", setting=lambda v: f"{knob} {v}",
                  none_fits=none_fits, prefix=prefix),
        baseline=resident_bytes(), untouched="Nothing was read or written.", stream=stream,
    )  # fmt: skip


def plan_sample(cfg: Config, prompt_len: int, max_new_tokens: int, *, temperature: float,
                top_k: int | None, top_p: float | None, stream: TextIO | None = None,
                stop_token: int | None = None) -> Plan:  # fmt: skip
    """``gpt sample``'s program (one prompt, KV cache, ``max_new_tokens`` steps), compiled."""
    cfg = _one_device(cfg)
    params = abstract_params(cfg, _one_device_mesh())

    def compile_at(n: int) -> Any:
        return compile_generate(params, prompt_len, model_of(cfg), max_new_tokens=n,
                                temperature=temperature, top_k=top_k, top_p=top_p,
                                stop_token=stop_token)  # fmt: skip

    program = f"sampling program (prompt of {prompt_len} tokens + {max_new_tokens} new tokens)"
    return _use_plan("gpt sample", program, cfg, compile_at, "--max-new-tokens", max_new_tokens,
                     stream)  # fmt: skip


def plan_score(cfg: Config, batch_size: int, stream: TextIO | None = None) -> Plan:
    """``gpt eval --text/--task``'s scorer for ``batch_size`` windows per call, compiled."""
    cfg = _one_device(cfg)
    compile_at = _scorer_at(cfg, abstract_params(cfg, _one_device_mesh()))
    program = f"scorer ({batch_size} windows of {cfg.model.seq_len} tokens per call)"
    return _use_plan("gpt eval", program, cfg, compile_at, "--batch-size", batch_size, stream)


def _scorer_at(cfg: Config, params: Any) -> Callable[[int], Any]:
    fn = compiled_scorer(model_of(cfg))

    def compile_at(rows: int) -> Any:
        windows = jax.ShapeDtypeStruct((rows, cfg.model.seq_len + 1), jnp.int32)
        return fn.lower(params, windows).compile()

    return compile_at


def plan_eval(cfg: Config, run: str, stream: TextIO | None = None) -> Plan:
    """``gpt eval``'s validation step (the run's micro-batch of windows), compiled.

    Its rows are fixed by the run (``train.batch_size / train.grad_accum``), so the advice when it
    does not fit is the scorer of ``gpt eval --text @val`` with a ``--batch-size`` that fits.
    """
    cfg = _one_device(cfg)
    mesh = _one_device_mesh()
    params = abstract_params(cfg, mesh)
    rows = cfg.train.batch_size // cfg.train.grad_accum

    def first() -> Any:
        batch = abstract_batch(cfg, mesh, (rows, cfg.model.seq_len + 1), BATCH_AXES)
        return compile_eval_step(cfg, mesh, params).lower(params, batch).compile()

    program = f"eval step ({rows} windows of {cfg.model.seq_len} tokens, the run's micro-batch)"
    prefix = (
        f"The eval step's {rows} rows are the run's micro-batch; to score the validation text "
        f"with fewer rows at a time: gpt eval --run {run} --text @val --batch-size N, where "
    )
    return _use_plan("gpt eval", program, cfg, _scorer_at(cfg, params), "--batch-size", rows,
                     stream, first, prefix)  # fmt: skip
