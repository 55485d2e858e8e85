"""Our ``gpt_models`` train step in the peer trainers' harness (``../shared/peer_bench``).

The same command line, data, timing and RESULT line as ``torch_gpt.py`` / ``jax_gpt.py`` (their
``common.py`` is imported from ``--peer-dir``'s location, passed as ``PEER_BENCH_DIR``), and the same
architecture: pre-LayerNorm blocks, GELU MLP (4x), learned positions, tied embeddings, AdamW with
warm-up + cosine and clipping at 1.0. ``peer.py`` runs it alternately with the PyTorch peer.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time

sys.path.insert(0, os.environ["PEER_BENCH_DIR"])
import common

ARGS = common.parse_args("ours")
_cores = sorted(os.sched_getaffinity(0))
if ARGS.threads < len(_cores):  # as jax_gpt.py: narrow XLA's CPU pool before it starts
    os.sched_setaffinity(0, _cores[: ARGS.threads])

import gpt_models  # noqa: E402

gpt_models.tune_host_allocator()  # as `gpt train` does on CPU: before JAX starts, ...

import jax  # noqa: E402
import numpy as np  # noqa: E402

from gpt_models import (  # noqa: E402
    PRESETS,
    MeshConfig,
    abstract_state,
    compile_eval_step,
    compile_train_step,
    init_state,
    make_mesh,
    make_optimizer,
    param_count,
)


def config(args):
    base = PRESETS["tiny"]
    model = dataclasses.replace(
        base.model,
        vocab_size=common.VOCAB,
        d_model=args.d_model,
        n_layers=args.n_layer,
        n_heads=args.n_head,
        seq_len=args.ctx,
        d_ff=4 * args.d_model,
        mlp="gelu",
        norm="layernorm",
        pos="learned",
        qk_norm=False,
        tie_embeddings=True,
        dtype="float32",
    )
    train = dataclasses.replace(
        base.train,
        batch_size=args.batch,
        grad_accum=1,
        lr=args.lr,
        warmup_steps=args.warmup,
        weight_decay=args.weight_decay,
        grad_clip=1.0,
        beta1=0.9,
        beta2=0.99,
        optimizer="adamw",
    )
    return dataclasses.replace(base, model=model, train=train, mesh=MeshConfig(1, 1, 1))


def main(args):
    cfg = config(args)
    train, val = common.split(common.load_corpus())
    rng = np.random.default_rng(args.seed)
    mesh = make_mesh(cfg.mesh, jax.devices()[:1])
    opt = make_optimizer(cfg.train)
    step_fn = compile_train_step(cfg, opt, mesh, abstract_state(cfg, opt, mesh))
    state = init_state(cfg, opt, mesh)
    eval_fn = compile_eval_step(cfg, mesh, state.params)
    # Compile outside the timed budget (torch has no compile step; the peers' tokens/s skip the
    # first 5 steps anyway): one step on a batch of its own, its time reported as first_step_s.
    t0 = time.perf_counter()
    state, logs = step_fn(state, common.sample_windows(train, rng, args.batch, args.ctx)[None])
    float(logs["loss"][0])
    first_step_s = time.perf_counter() - t0
    gpt_models.keep_host_memory()  # ... and once the step is compiled
    clock, losses, durations, foreign = common.Clock(), [], [], []
    probe = common.LoadProbe()
    clock.start()
    steps = 0
    while steps < args.steps:
        t_start = clock.now()
        if args.seconds and t_start >= args.seconds:
            break
        probe.foreign_cores()
        batch = common.sample_windows(train, rng, args.batch, args.ctx)[None]
        state, logs = step_fn(state, batch)
        losses.append(float(logs["loss"][0]))  # blocks: one step at a time, as the peers do
        durations.append(clock.now() - t_start)
        foreign.append(probe.foreign_cores())
        steps += 1
    clock.pause()
    mean_loss = lambda data: float(
        np.mean(
            [
                float(eval_fn(state.params, b))
                for b in common.eval_batches(data, args.batch, args.ctx, args.eval_batches)
            ]
        )
    )
    common.finish(args, "ours", dict(
        version=f"gpt_models on jax {jax.__version__}", n_params=param_count(cfg.model), steps=steps,
        tokens=steps * args.batch * args.ctx, first_step_s=first_step_s,
        **common.step_stats(durations, foreign, args.batch * args.ctx), train_s=clock.total,
        last20_train_loss=float(np.mean(losses[-20:])), train_loss=mean_loss(train), val_loss=mean_loss(val),
        xla_flags=os.environ.get("XLA_FLAGS", "<unset>"),
    ))  # fmt: skip


if __name__ == "__main__":
    main(ARGS)
