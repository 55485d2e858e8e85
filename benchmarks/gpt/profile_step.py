"""Where one CPU train step's time goes: jitted sub-computations timed in one process, interleaved.

    python benchmarks/gpt/profile_step.py tiny   # or ~10M; --rounds, --steps

Rows (each its own jitted function, on the peer architecture: LayerNorm, GELU, learned positions):
full step (ours), loss value_and_grad, forward loss only, optimizer update alone, one layer's
attention core (QK^T, mask, softmax, AV) forward+backward times n_layers (``jax.nn.dot_product_attention``
``implementation='xla'`` and a hand einsum), the dense matmuls forward+backward (QKV, out, MLP in/out,
tied head: 3 matmuls each), and dispatch of an empty jitted function (host overhead per call).
Results are written into ``PROFILE.md`` by hand, with the load at the time.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np

from gpt_models import (
    PRESETS,
    Config,
    MeshConfig,
    abstract_state,
    compile_train_step,
    init_state,
    loss_fn,
    make_mesh,
    make_optimizer,
)

SHAPES = {"tiny": (128, 4, 4, 128, 32), "~10M": (384, 6, 6, 256, 16)}


def peer_config(shape: str) -> Config:
    """Our config of the peer architecture at one of ``SHAPES`` (pre-LayerNorm, GELU MLP, learned
    positions, tied embeddings, float32, one device)."""
    d, L, H, T, B = SHAPES[shape]
    base = PRESETS["tiny"]
    model = dataclasses.replace(base.model, vocab_size=256, d_model=d, n_layers=L, n_heads=H,
                                seq_len=T, d_ff=4 * d, mlp="gelu", norm="layernorm", pos="learned",
                                qk_norm=False, tie_embeddings=True, dtype="float32")  # fmt: skip
    train = dataclasses.replace(base.train, batch_size=B, grad_accum=1)
    return dataclasses.replace(base, model=model, mesh=MeshConfig(1, 1, 1), train=train)


def _timed(fn, *args):
    out = fn(*args)
    jax.block_until_ready(out)
    return out


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("shape", choices=list(SHAPES))
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--steps", type=int, default=5)
    args = p.parse_args()
    d, L, H, T, B = SHAPES[args.shape]
    cfg = peer_config(args.shape)
    model = cfg.model
    mesh = make_mesh(cfg.mesh, jax.devices()[:1])
    opt = make_optimizer(cfg.train)
    step = compile_train_step(cfg, opt, mesh, abstract_state(cfg, opt, mesh))
    state = init_state(cfg, opt, mesh)
    rng = np.random.default_rng(0)
    batch = jnp.asarray(rng.integers(0, 256, (1, B, T + 1)), jnp.int32)
    params = jax.tree.map(jnp.copy, state.params)
    opt_state = jax.tree.map(jnp.copy, state.opt_state)

    grad = jax.jit(jax.value_and_grad(lambda p, b: loss_fn(p, b, model)))
    fwd = jax.jit(lambda p, b: loss_fn(p, b, model))
    grads = grad(params, batch[0])[1]
    upd = jax.jit(lambda g, s, p: opt.update(g, s, p))
    hd = d // H
    k = jax.random.split(jax.random.key(1), 8)
    q = jax.random.normal(k[0], (B, T, H, hd))

    def attn_xla(q, k_, v):
        return jax.nn.dot_product_attention(q, k_, v, is_causal=True, implementation="xla").sum()

    def attn_einsum(q, k_, v):
        s = jnp.einsum("bthd,bshd->bhts", q, k_) / np.sqrt(hd)
        s = jnp.where(jnp.tril(jnp.ones((T, T), bool)), s, -1e30)
        return jnp.einsum("bhts,bshd->bthd", jax.nn.softmax(s, -1), v).sum()

    def layers(f):
        g = jax.grad(f, argnums=(0, 1, 2))
        return jax.jit(lambda q, k_, v: [g(q + i, k_, v) for i in range(L)])

    x = jax.random.normal(k[1], (B * T, d))
    ws = [jax.random.normal(k[2], (d, 3 * d)), jax.random.normal(k[3], (d, d)),
          jax.random.normal(k[4], (d, 4 * d)), jax.random.normal(k[5], (4 * d, d))]  # fmt: skip
    head = jax.random.normal(k[6], (256, d))

    def dense(x, ws, head):
        def f(x, ws, head):
            tot = 0.0
            for i in range(L):
                h = x + i
                tot += (h @ ws[0]).sum() + (h @ ws[1]).sum() + ((h @ ws[2]) @ ws[3]).sum()
            return tot + (x @ head.T).sum()

        return jax.grad(f, argnums=(0, 1, 2))(x, ws, head)

    att_xla, att_ein, dense_j = layers(attn_xla), layers(attn_einsum), jax.jit(dense)
    empty = jax.jit(lambda a: a + 1)
    rows = {
        "full train step (ours)": lambda: _timed(step, jax.tree.map(jnp.copy, state), batch),
        "loss value_and_grad": lambda: _timed(grad, params, batch[0]),
        "forward loss only": lambda: _timed(fwd, params, batch[0]),
        "optimizer update (clip+AdamW)": lambda: _timed(upd, grads, opt_state, params),
        "attention core fwd+bwd x L (dot_product_attention xla)": lambda: _timed(att_xla, q, q, q),
        "attention core fwd+bwd x L (hand einsum)": lambda: _timed(att_ein, q, q, q),
        "dense matmuls fwd+bwd (QKV, out, MLP, head)": lambda: _timed(dense_j, x, ws, head),
        "empty jitted call (dispatch)": lambda: _timed(empty, jnp.ones(())),
    }  # fmt: skip
    fns = rows
    for fn in fns.values():  # compile outside the timed loop
        fn()
    times: dict[str, list[float]] = {n: [] for n in rows}
    for _ in range(args.rounds):
        for name, fn in fns.items():
            t = time.perf_counter()
            for _ in range(args.steps):
                fn()
            times[name].append(1e3 * (time.perf_counter() - t) / args.steps)
    print(f"shape {args.shape}: d {d} L {L} H {H} T {T} B {B}; load {os.getloadavg()}")
    for name, v in times.items():
        print(f"| {name} | {statistics.median(v):.1f} | {min(v):.1f}-{max(v):.1f} |")


if __name__ == "__main__":
    main()
