"""Training a mixture of experts: the load-balancing loss in the objective, the experts' token
shares in the metrics, and a dense model's step left exactly as it was."""

from __future__ import annotations

import csv
import dataclasses
import io

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gpt_models import (
    PRESETS,
    ConfigError,
    MeshConfig,
    abstract_state,
    compile_train_step,
    flops_per_token,
    init_params,
    loss_fn,
    make_mesh,
    make_optimizer,
    param_count,
    plan_training,
    train,
    train_loss,
)

ROUTER = ("gpt", "model", "blocks", "block", "moe", "router")
MOE = {"n_experts": 4, "experts_per_token": 2, "moe_d_ff": 24}


def _model(**changes):
    base = PRESETS["llama-tiny"].model
    shape = {"seq_len": 16, "d_model": 32, "n_layers": 2, "n_heads": 2, "n_kv_heads": 1}
    return dataclasses.replace(base, d_ff=48, **shape, **changes)


BATCH = jax.random.randint(jax.random.key(1), (2, 17), 0, 256)


def test_the_loss_differs_by_exactly_coef_times_aux_and_its_gradient_reaches_the_router():
    off, on = _model(**MOE, router_aux_loss_coef=0.0), _model(**MOE, router_aux_loss_coef=0.5)
    params = init_params(off, jax.random.key(0))
    weights, rest = params.split()

    def loss_and_grad(cfg):
        objective = lambda w: train_loss(w.merge(rest), BATCH, cfg)
        return jax.jit(jax.value_and_grad(objective, has_aux=True))(weights)

    (loss_off, stats), g_off = loss_and_grad(off)
    (loss_on, stats_on), g_on = loss_and_grad(on)
    assert float(loss_off) == float(stats["cross_entropy"])
    plain = jax.jit(loss_fn, static_argnums=2)(params, BATCH, off)
    assert float(loss_off) == pytest.approx(float(plain), 1e-6)
    assert float(stats_on["aux_loss"]) == float(stats["aux_loss"]) >= 2.0  # top_k when balanced
    assert float(loss_on) == pytest.approx(float(loss_off) + 0.5 * float(stats["aux_loss"]), 1e-7)
    np.testing.assert_allclose(float(stats["expert_fraction"].sum()), 1.0, rtol=1e-6)
    router = np.asarray(g_on[ROUTER].value - g_off[ROUTER].value)
    assert np.isfinite(router).all() and np.abs(router).max() > 1e-6


def _traced_step(model):
    """The train step of ``model`` as XLA's input and the names it logs: lowered, not compiled."""
    tiny = PRESETS["tiny"]
    train_cfg = dataclasses.replace(tiny.train, batch_size=4, grad_accum=2)
    cfg = dataclasses.replace(tiny, model=model, train=train_cfg)
    mesh = make_mesh(MeshConfig(data=-1), jax.devices()[:1])
    opt = make_optimizer(cfg.train)
    state = abstract_state(cfg, opt, mesh)
    step = compile_train_step(cfg, opt, mesh, state)
    batch = jax.ShapeDtypeStruct((2, 2, 17), jnp.int32)
    _, logs = jax.eval_shape(step, state, batch)
    return step.lower(state, batch).as_text(), set(logs)


def test_a_dense_step_is_untouched_by_the_coefficient():
    jaxpr, logged = _traced_step(_model(router_aux_loss_coef=0.0))
    assert (jaxpr, logged) == _traced_step(_model(router_aux_loss_coef=0.5))
    assert logged == {"micro_loss", "loss", "grad_norm", "lr"}


def test_more_than_64_experts_log_their_spread_not_a_column_each():
    _, logged = _traced_step(_model(n_experts=65, experts_per_token=2, moe_d_ff=8))
    assert {k for k in logged if k.startswith("moe/")} == {
        "moe/aux_loss", "moe/expert_fraction/min", "moe/expert_fraction/max",
        "moe/expert_fraction/std"}  # fmt: skip


def test_metrics_csv_has_the_aux_loss_and_each_experts_share(make_config, tmp_path):
    cfg = make_config(train={"steps": 2, "eval_every": 2, "checkpoint_every": 2, "grad_accum": 2,
                             "batch_size": 16}, mesh={"data": -1}, log={"every": 1})  # fmt: skip
    model = dataclasses.replace(cfg.model, mlp="swiglu", norm="rmsnorm", pos="rope", **MOE)
    train(dataclasses.replace(cfg, model=model), tmp_path / "run", stream=io.StringIO(),
          write_sample=False)  # fmt: skip
    with open(tmp_path / "run" / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    moe = [k for k in rows[0] if k.startswith("moe/")]
    assert moe == ["moe/aux_loss"] + [f"moe/expert_fraction/{i}" for i in range(4)]
    trained = [r for r in rows if r["moe/aux_loss"]]
    assert len(trained) == 2
    for row in trained:
        assert sum(float(row[k]) for k in moe[1:]) == pytest.approx(1.0, 1e-5)
        assert 2.0 <= float(row["moe/aux_loss"]) <= 4.0  # top_k .. n_experts


def test_a_negative_coefficient_is_refused():
    with pytest.raises(ConfigError, match=r"model.router_aux_loss_coef = -0.1 must be a finite"):
        dataclasses.replace(PRESETS["tiny"], model=_model(**MOE, router_aux_loss_coef=-0.1))


def test_flops_count_the_active_experts_and_the_pre_flight_holds_every_one(make_config):
    model = _model(**MOE)
    d, L, V, f, E, k = 32, 2, model.vocab_size, 24, 4, 2
    attention = 2 * d * 32 + 2 * d * 16  # q and o (2 heads of 16), k and v (1 head)
    every = L * (attention + d * E + E * 3 * d * f + 2 * d) + 2 * V * d + d  # + norms, embeddings
    assert param_count(model) == every
    active = L * (attention + d * E + k * 3 * d * f) + d * V  # the matmuls a token runs
    assert flops_per_token(model) == 6 * active + 12 * L * d * model.seq_len

    cfg = make_config(mesh={"data": -1})
    plan = plan_training(dataclasses.replace(cfg, model=model), stream=io.StringIO())
    assert plan.params == every and plan.param_bytes == 4 * every
    # Parameters, Adam's two moments and the batch: every expert's, on the one device.
    assert plan.memory.arguments >= 3 * 4 * every
    idle = L * (E - k) * 3 * d * f
    assert f"{(every - idle) / 1e6:.2f}M active per token (2 of 4 experts per layer" in "\n".join(
        plan.lines
    )
