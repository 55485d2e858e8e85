import dataclasses
import importlib.util
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

# Load this folder's conftest by path: a bare `import conftest` can pick up another package's.
_spec = importlib.util.spec_from_file_location(
    "_gpt_tests_conftest", pathlib.Path(__file__).with_name("conftest.py")
)
_conftest = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_conftest)
small_config = _conftest.small_config

from gpt_models import (  # noqa: E402
    abstract_state,
    compile_train_step,
    init_state,
    make_mesh,
    make_optimizer,
    make_schedule,
)

ATTN = ("gpt", "model", "blocks", "block", "attn")


def _batch(cfg, seed=0):
    t = cfg.train
    shape = (t.grad_accum, t.batch_size // t.grad_accum, cfg.model.seq_len + 1)
    return jax.random.randint(jax.random.key(seed), shape, 0, 256)


def _setup(cfg, devices=None):
    mesh = make_mesh(cfg.mesh, devices if devices is not None else jax.devices()[:1])
    opt = make_optimizer(cfg.train)
    abstract = abstract_state(cfg, opt, mesh)
    return init_state(cfg, opt, mesh), compile_train_step(cfg, opt, mesh, abstract)


def test_step_logs_with_lox_and_learns():
    cfg = small_config(train={"grad_accum": 2, "steps": 20})
    state, step = _setup(cfg)
    batch = _batch(cfg)
    losses = []
    for _ in range(8):
        state, logs = step(state, batch)
        losses.append(float(logs["loss"][0]))
    assert set(logs) == {"loss", "grad_norm", "lr", "micro_loss"}
    assert logs["micro_loss"].shape == (2,) and logs["loss"].shape == (1,)
    np.testing.assert_allclose(logs["loss"][0], logs["micro_loss"].mean(), rtol=1e-6)
    assert int(logs.steps["loss"]["step"][0]) == 7 and int(state.step) == 8
    assert float(logs["lr"][0]) == pytest.approx(float(make_schedule(cfg.train)(7)))
    assert losses[-1] < losses[0] - 0.5  # memorising one batch


def test_grad_accumulation_matches_one_big_batch():
    one = small_config(train={"grad_accum": 1})
    two = small_config(train={"grad_accum": 2})
    batch = _batch(one)
    s1, f1 = _setup(one)
    s2, f2 = _setup(two)
    s1, _ = f1(s1, batch)
    s2, _ = f2(s2, batch.reshape(2, 4, -1))
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=2e-6), s1.params, s2.params)


@pytest.mark.min_devices(2, why="a sharded step to compare with one device")
def test_sharded_step_matches_one_device(sharded_mesh):
    sizes, devices = sharded_mesh  # data = fsdp = tensor = 2 on the 8 fake CPU devices
    cfg1 = small_config()
    cfg8 = small_config(mesh=sizes)
    batch = _batch(cfg1)
    s1, f1 = _setup(cfg1)
    s8, f8 = _setup(cfg8, devices)
    wq = s8.params[(*ATTN, "query")].value
    assert tuple(wq.sharding.spec) == (None, "fsdp", "tensor", None)
    mu = s8.opt_state[1][0].mu[(*ATTN, "query")].value  # Adam's moments: sharded like the params
    assert mu.sharding == wq.sharding
    for _ in range(2):
        s1, l1 = f1(s1, batch)
        s8, l8 = f8(s8, batch)
        np.testing.assert_allclose(l1["loss"], l8["loss"], rtol=1e-5)
    assert s8.params[(*ATTN, "query")].value.sharding == wq.sharding  # donation keeps the layout


def test_weight_decay_skips_vectors():
    cfg = small_config(train={"lr": 1e-2, "weight_decay": 0.5})
    state, step = _setup(cfg)
    zero = jax.tree.map(jnp.zeros_like, state.params)
    opt = make_optimizer(cfg.train)
    updates, _ = opt.update(zero, state.opt_state, state.params)
    for path, update in updates.items():  # lr is 0 at step 0 (warmup): only decay could move
        assert float(jnp.abs(update.value).max()) == 0.0, path
    # Decay is chosen by logical axes: matrices only, and a stacked norm scale
    # (layers, d_model) is not a matrix.
    opt = make_optimizer(dataclasses.replace(cfg.train, warmup_steps=0))
    updates, _ = opt.update(zero, opt.init(state.params), state.params)
    moved = {path[2:] for path, u in updates.items() if float(jnp.abs(u.value).max()) > 0}
    assert ("final_norm", "scale") not in moved
    assert ("blocks", "block", "attn_norm", "scale") not in moved
    assert ("blocks", "block", "attn", "query") in moved and ("embed", "embedding") in moved
    del step
    sched = make_schedule(dataclasses.replace(cfg.train, steps=10, warmup_steps=2))
    assert float(sched(0)) == 0.0 and float(sched(2)) == pytest.approx(1e-2)
