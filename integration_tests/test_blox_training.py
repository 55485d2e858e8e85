"""blox with optax and orbax: a run resumed from a checkpoint continues bit-for-bit."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import blox as bx

optax = pytest.importorskip("optax")
ocp = pytest.importorskip("orbax.checkpoint")


def _setup():
    graph = bx.Graph("net")
    rng = bx.Rng(graph / "rng")
    model = bx.MLP(graph / "mlp", [16, 1], rng=rng, dropout_rate=0.1)
    x = jax.random.normal(jax.random.key(0), (32, 4))
    y = jnp.sin(x).sum(-1, keepdims=True)
    params = model(rng.seed(bx.Params(), seed=0), x, is_training=False)[1].locked()
    tx = optax.adamw(1e-2)

    @jax.jit
    def step(params, opt_state):
        trainable, rest = params.split()

        def loss_fn(t):
            pred, new = model(t.merge(rest), x, is_training=True)
            return jnp.mean((pred - y) ** 2), new.split()[1]

        (loss, rest), grads = jax.value_and_grad(loss_fn, has_aux=True)(trainable)
        updates, opt_state = tx.update(grads, opt_state, trainable)
        return optax.apply_updates(trainable, updates).merge(rest), opt_state, loss

    return params, tx.init(params.split()[0]), step


def test_resume_equals_uninterrupted(tmp_path):
    params, opt_state, step = _setup()
    for _ in range(3):
        params, opt_state, _ = step(params, opt_state)
    with ocp.StandardCheckpointer() as ckptr:
        ckptr.save(tmp_path / "ckpt", {"params": params, "opt": opt_state})
    uninterrupted = (params, opt_state)
    for _ in range(3):
        uninterrupted = step(*uninterrupted)[:2]

    target = jax.eval_shape(lambda: {"params": params, "opt": opt_state})
    with ocp.StandardCheckpointer() as ckptr:
        restored = ckptr.restore(tmp_path / "ckpt", target)
    resumed = (restored["params"], restored["opt"])
    assert isinstance(resumed[0], bx.Params) and resumed[0].is_locked
    for _ in range(3):
        resumed = step(*resumed)[:2]
    for a, b in zip(jax.tree.leaves(uninterrupted), jax.tree.leaves(resumed)):
        np.testing.assert_array_equal(a, b)
