import importlib.util
import pathlib

import jax
import numpy as np
import optax
import pytest

# Load this folder's conftest by path: a bare `import conftest` can pick up another package's.
_spec = importlib.util.spec_from_file_location(
    "_gpt_tests_conftest", pathlib.Path(__file__).with_name("conftest.py")
)
_conftest = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_conftest)
small_config = _conftest.small_config

from gpt_models import (  # noqa: E402
    Checkpointer,
    ConfigError,
    abstract_state,
    compile_train_step,
    from_items,
    init_params,
    init_state,
    main,
    make_mesh,
    make_optimizer,
    muon_dimension_numbers,
    to_items,
)

BLOCK = ("gpt", "model", "blocks", "block")

MUON = {"optimizer": "muon", "lr": 1e-2}


def _batch(cfg, seed=0):
    t = cfg.train
    return jax.random.randint(
        jax.random.key(seed), (1, t.batch_size, cfg.model.seq_len + 1), 0, 256
    )


def _setup(cfg, devices=None):
    mesh = make_mesh(cfg.mesh, devices if devices is not None else jax.devices()[:1])
    opt = make_optimizer(cfg.train)
    abstract = abstract_state(cfg, opt, mesh)
    return init_state(cfg, opt, mesh), compile_train_step(cfg, opt, mesh, abstract), abstract


def test_a_few_muon_steps_reduce_the_loss():
    cfg = small_config(train={**MUON, "steps": 20})
    state, step, _ = _setup(cfg)
    batch = _batch(cfg)
    losses = []
    for _ in range(8):
        state, logs = step(state, batch)
        losses.append(float(logs["loss"][0]))
    assert all(np.isfinite(losses))
    assert losses[-1] < losses[0] - 0.5  # memorising one batch


def test_hidden_matrices_get_orthogonalised_updates_and_the_rest_adamw():
    cfg = small_config(train={**MUON, "warmup_steps": 0, "grad_clip": 0.0})
    params = init_params(cfg.model, jax.random.key(0))
    grads = jax.tree.map(lambda p: jax.random.normal(jax.random.key(1), p.shape), params)
    opt = make_optimizer(cfg.train)
    updates, _ = opt.update(grads, opt.init(params), params)
    # Muon: the updates of layer 0's square projections (32 -> 2 heads x 16) have near-equal singular
    # values (measured p90/p10: 1.6); AdamW's first step, lr * sign(g), spreads them (8.4).
    for update in (
        updates[(*BLOCK, "attn", "query")].value[0].reshape(32, -1),
        updates[(*BLOCK, "attn", "out")].value[0].reshape(-1, 32),
    ):
        sv = np.linalg.svd(np.asarray(update), compute_uv=False)
        assert np.percentile(sv, 90) / np.percentile(sv, 10) < 2.0
    # AdamW on the embedding table: the first step moves every entry by the same amount.
    embed = np.abs(np.asarray(updates[("gpt", "model", "embed", "embedding")].value))
    np.testing.assert_allclose(embed, embed.max(), rtol=1e-3)


def test_dimension_numbers_cover_exactly_the_hidden_matrices():
    cfg = small_config(model={"mlp": "swiglu", "tie_embeddings": False, "pos": "learned"})
    dims = muon_dimension_numbers(init_params(cfg.model, jax.random.key(0)))
    paths = {path[len(BLOCK) :] for path, d in dims.items() if d.value is not None}
    assert paths == {
        ("attn", "query"),
        ("attn", "key"),
        ("attn", "value"),
        ("attn", "out"),
        ("mlp", "linear_0", "kernel"),
        ("mlp", "gate_0", "kernel"),
        ("mlp", "linear_1", "kernel"),
    }  # embed, unembed, pos_embed and the norm scales are left to AdamW
    out = dims[(*BLOCK, "attn", "out")].value
    assert (out.reduction_axis, out.output_axis) == ((-3, -2), (-1,))


def test_dimension_numbers_need_the_models_params():
    with pytest.raises(TypeError, match="expected the model's blox.Params"):
        muon_dimension_numbers({"w": np.ones((2, 2))})


@pytest.mark.min_devices(2, why="Muon state sharded over a mesh")
def test_muon_state_is_sharded_and_round_trips_through_a_checkpoint(tmp_path, sharded_mesh):
    sizes, devices = sharded_mesh  # data = fsdp = tensor = 2 on the 8 fake CPU devices
    cfg = small_config(train=MUON, mesh=sizes)
    state, step, abstract = _setup(cfg, devices)
    state, _ = step(state, _batch(cfg))
    w_in = state.params[(*BLOCK, "mlp", "linear_0", "kernel")].value
    momentum = [x for x in jax.tree.leaves(state.opt_state) if x.shape == w_in.shape]
    assert momentum and all(m.sharding == w_in.sharding for m in momentum)
    ckpt = Checkpointer(tmp_path, keep=1)
    ckpt.save(1, to_items(state), {"step": 1})
    ckpt.wait()
    items, _, _ = ckpt.restore(to_items(abstract))
    ckpt.close()
    jax.tree.map(np.testing.assert_array_equal, from_items(items), state)


def _old_muon(learning_rate, ns_coeffs=(3.4445, -4.775, 2.0315), ns_steps=5, beta=0.95):
    raise AssertionError("must not be called")  # the signature of optax 0.2.5's muon


@pytest.mark.parametrize("old", [_old_muon, None])
def test_an_optax_without_a_suitable_muon_is_a_clear_error(monkeypatch, capsys, tmp_path, old):
    if old is None:
        monkeypatch.delattr(optax.contrib, "muon")
    else:
        monkeypatch.setattr(optax.contrib, "muon", old)
    monkeypatch.setattr(optax, "__version__", "0.2.5")
    with pytest.raises(ConfigError) as err:
        make_optimizer(small_config(train=MUON).train)
    assert "train.optimizer = 'muon' needs optax >= 0.2." in str(err.value)
    assert "the installed optax is 0.2.5" in str(err.value)
    assert "--set train.optimizer=adamw" in str(err.value)
    args = ["train", "--out", str(tmp_path), "--set", "train.optimizer=muon"]
    assert main(args) == 2
    assert "needs optax >= " in capsys.readouterr().err
    assert not any(tmp_path.iterdir())  # stopped before creating a run folder
