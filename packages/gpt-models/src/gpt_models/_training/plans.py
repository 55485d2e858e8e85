"""The program ``gpt train``'s memory pre-flight compiles, and the knob that sizes it.

The train step, compiled once; its knob is ``train.grad_accum`` (the same
``train.batch_size`` in more, smaller micro-batches). What another micro-batch size needs is derived
from the compiled step's memory analysis, not compiled: per device the arguments and outputs do not
depend on it (the whole batch is an argument either way), and the temporaries are a part that does
not (gradients, their running sum, the optimizer's update) plus activations that grow with the
micro-batch's rows. One compile gives their sum; the fixed part is taken as ``FIXED_TEMPORARIES``
times the trained parameters' bytes (all of them; with LoRA the adapters, since the frozen
weights get no gradient) (at most the temporaries), above what was measured on the presets
(``benchmarks/gpt/preflight_refusal.py``), and the estimate is raised by ``ESTIMATE_MARGIN`` for
XLA's own variations, so that a smaller micro-batch is estimated to need at least what it does.
"""

from __future__ import annotations

import dataclasses
from typing import TextIO

import jax
import optax
from jax.sharding import Mesh

from core_primitives import compat

from .._compute.preflight import (
    Knob,
    Plan,
    StepMemory,
    abstract_batch,
    compiled_with_note,
    memory_budget,
    memory_text,
    resident_bytes,
    size,
    step_memory,
    tree_bytes,
    tree_count,
)
from .._config.schema import Config
from .._distributed.mesh import check_batch_fits, make_mesh
from .._errors import UsageError
from .._model.attention import check_attention
from .._model.flops import flops_per_token, idle_expert_params
from .._model.lora import lora_summary
from .._runs.preference_run import needs_reference_weights, reference_lines
from .._runs.run import Run
from .logging import check_tensorboard, check_wandb
from .step import TrainState, compile_train_step, make_optimizer, sharded_state

# The train step's temporaries that do not shrink with the micro-batch, at most: x the parameters'
# bytes (measured: 2.4 x for gpt2-small, up to 3.3 x for llama-tiny from one micro-batch to two).
FIXED_TEMPORARIES = 4
# XLA fuses and schedules each micro-batch size a little differently, so the temporaries stray
# from the line by a few percent (measured up to 9% above it on the tiny preset): the estimate of
# a size not compiled is raised by this much.
ESTIMATE_MARGIN = 1.1


@dataclasses.dataclass(frozen=True)
class TrainPlan:
    """How a resolved run trains: its mesh, optimizer, the layout of its state and its step,
    compiled ahead of time and measured against the devices (``preflight``, the ``Plan``
    ``gpt train --dry-run`` prints); ``profile`` the steps to trace (``--profile``)."""

    mesh: Mesh
    optimizer: optax.GradientTransformation
    abstract: TrainState
    preflight: Plan
    profile: tuple[int, int] | None = None


def plan_run(
    run: Run, *, profile: tuple[int, int] | None = None, stream: TextIO | None = None
) -> TrainPlan:
    """The plan of ``run``: every check of its logging, attention, mesh and batch, then the step
    compiled and measured. Nothing is written; :func:`check_fits` of ``.preflight`` says whether it
    fits.

    Raises:
        ConfigError: a missing logging extra, an attention core this backend lacks, a mesh or
            batch that does not divide, a mesh that cannot shard this model.
        UsageError: ``profile`` is not among the steps this launch trains.
    """
    cfg = run.config
    check_profile_range(profile, cfg.train.steps, start=run.launch.start)
    check_wandb(cfg)
    check_tensorboard(cfg)
    check_attention(cfg.model)
    mesh = make_mesh(cfg.mesh)
    check_batch_fits(cfg, mesh)
    optimizer = make_optimizer(cfg.train)
    abstract = sharded_state(cfg, optimizer, mesh)
    preflight = plan_step(cfg, optimizer, mesh, abstract, stream=stream)
    return TrainPlan(mesh, optimizer, abstract, preflight, profile)


def check_profile_range(profile: tuple[int, int] | None, steps: int, *, start: int = 0) -> None:
    """Refuse a ``--profile START:STOP`` that cannot be traced in a run of ``steps`` steps that
    trains from step ``start`` (a resumed run's newest checkpoint; 0 for a new run)."""
    if profile is None:
        return
    first, stop = profile
    if not (isinstance(first, int) and isinstance(stop, int) and 0 <= first < stop <= steps):
        raise UsageError(
            f"--profile {first}:{stop} is not a range of this run's steps: expected "
            f"START:STOP with 0 <= START < STOP <= train.steps ({steps}); it traces the steps "
            f"after START have finished up to STOP. Example: --profile {min(2, steps - 1)}:"
            f"{min(5, steps)} (three steps, after the first has compiled)."
        )
    if first < start:
        room = start + 1 < steps
        example = f"--profile {start + 1}:{min(start + 4, steps) if room else start + 4}"
        raise UsageError(
            f"--profile {first}:{stop}: this run resumes at step {start} (its newest checkpoint), "
            f"so steps before it are not trained again and cannot be traced. Pick a range from "
            f"step {start} on, e.g. {example}"
            + ("." if room else f" with --set train.steps={start + 4}.")
        )


def plan_step(
    cfg: Config,
    optimizer: optax.GradientTransformation,
    mesh: Mesh,
    abstract: TrainState,
    stream: TextIO | None = None,
) -> Plan:
    """Compile the train step of ``cfg`` ahead of time and measure it against the devices."""
    devices = list(mesh.devices.flat)
    t, m = cfg.train, cfg.model
    flops = flops_per_token(cfg)
    jitted = compile_train_step(cfg, optimizer, mesh, abstract)
    batch = abstract_batch(cfg, mesh)
    what = f"the train step ({len(devices)} {jax.default_backend()} device(s))"
    # A preference step with its reference in a copy of the init weights takes them too, so the
    # pre-flight counts them; a precomputed reference is counted as its part of the batch.
    ref = (abstract.params,) if needs_reference_weights(cfg) else ()
    compiled, seconds = compiled_with_note(
        stream, what, lambda: jitted.lower(abstract, batch, *ref).compile()
    )
    mem, budget, baseline = step_memory(compiled, devices), memory_budget(devices), resident_bytes()
    trainable = abstract.params.split()[0]
    params, param_bytes = tree_count(abstract.params), tree_bytes(abstract.params)
    lora = (
        []
        if len(trainable) == len(abstract.params)
        else [
            f"trainable        {tree_count(trainable):,} ({size(tree_bytes(trainable))}): the "
            f"LoRA adapters, {lora_summary(cfg.model)}; the rest is frozen"
        ]
    )
    idle = idle_expert_params(cfg)
    experts = (
        f"; {(params - idle) / 1e6:.2f}M active per token ({m.experts_per_token} of "
        f"{m.n_experts} experts per layer; every expert is held in memory)"
        if idle
        else ""
    )
    lines = [
        f"parameters       {params / 1e6:.2f}M ({size(param_bytes)}){experts}",
        *lora,
        f"optimizer state  {size(tree_bytes(abstract.opt_state))} ({t.optimizer})",
        f"step memory      {memory_text(mem)} on each of {len(devices)} "
        f"{jax.default_backend()} device(s)",
        f"available        {size(budget.per_device)} per device ({budget.source})",
        f"tokens per step  {t.batch_size * cfg.window:,} (batch {t.batch_size} x seq_len "
        f"{cfg.window}{_positions(cfg)}; {t.grad_accum} micro-batch(es) of "
        f"{t.batch_size // t.grad_accum})",
        f"FLOPs per token  {flops:.3g} (training, forward and backward"
        + ("; LoRA: frozen weights get no weight gradient)" if cfg.lora.enabled else ")"),
        *reference_lines(cfg, param_bytes),
    ]
    micro = t.batch_size // t.grad_accum
    return Plan(
        command="gpt train",
        compiled=compiled,
        memory=mem,
        budget=budget,
        devices=len(devices),
        local_devices=sum(d.process_index == jax.process_index() for d in devices),
        program=f"train step (micro-batch {micro} of {cfg.window} tokens, model.remat={m.remat})",
        params=params,
        param_bytes=param_bytes,
        compile_s=seconds,
        cfg=cfg,
        knob=_micro_batches(cfg, mesh, mem, tree_bytes(trainable)),
        lines=lines,
        baseline=baseline,
        stream=stream,
    )


def _positions(cfg: Config) -> str:
    """How a window shorter than the model's positions is shown: ``" of 256 positions"``."""
    positions = cfg.model.seq_len
    return "" if cfg.window == positions else f" of the model's {positions} positions"


def _micro_batches(cfg: Config, mesh: Mesh, mem: StepMemory | None, trained_bytes: int) -> Knob:
    """``train.grad_accum`` from the compiled one up, each value's memory derived, not compiled.

    ``trained_bytes``: the trainable parameters' bytes, which the gradients, their sum and the
    update are as large as (all parameters, or with LoRA the adapters alone).
    """
    t = cfg.train
    shards = mesh.shape["data"] * mesh.shape["fsdp"] * jax.process_count()
    accums = [
        g
        for g in range(t.grad_accum, t.batch_size + 1)
        if t.batch_size % g == 0 and (t.batch_size // g) % shards == 0
    ]
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
            # What fits where: the state is split over the mesh's fsdp and tensor axes; the
            # devices of this size that would hold it all (before any step's temporaries).
            held = mesh.shape["fsdp"] * mesh.shape["tensor"]
            least = -(-state * held // budget)
            return (
                f"The state alone (parameters, optimizer state, batch) takes {size(state)} per "
                f"device, more than {size(budget)}: no micro-batch size or recomputation fits. "
                "Choose a smaller model (model.d_model, model.n_layers) or shard the state over "
                f"more devices (mesh.fsdp): it needs at least {least:,} devices with "
                f"{size(budget)} each (mesh.fsdp={least}), before the step's temporaries."
            )
        most = accums[-1] if accums else t.grad_accum
        remat = (
            ""
            if cfg.model.remat == "full"
            else ("model.remat=full (activations recomputed in the backward pass), ")
        )
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
            "training window (data.seq_len), or more devices with mesh.fsdp to shard the state; "
            "--dry-run checks each."
        )

    return Knob(
        name="train.grad_accum",
        values=accums or [t.grad_accum],
        size=rows,
        need=need,
        compiles=False,
        how="estimated from the compiled step's memory analysis",
        setting=lambda g: (
            f"--set train.grad_accum={g} (micro-batch {t.batch_size // g}, the same "
            f"train.batch_size = {t.batch_size})"
        ),
        none_fits=none_fits,
        suffix=" Or use more devices (mesh.fsdp shards the state).",
    )
