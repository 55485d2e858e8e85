"""model.dropout: embedding, attention-probability and residual dropout, in training only,
keyed by the run's rng and the step."""

import dataclasses
import json
import shutil
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gpt_models import (
    ConfigError,
    abstract_state,
    compile_eval_step,
    compile_train_step,
    export_hf,
    generate,
    import_hf,
    init_params,
    init_state,
    loss_fn,
    main,
    make_mesh,
    make_optimizer,
    param_specs,
)

# loss_fn compiled (on a 2-core CPU eager op-by-op dispatch of the model costs more than a compile).
loss = jax.jit(loss_fn, static_argnames=("config",))


@pytest.fixture
def configs(make_config):
    """The small config without and with dropout, its params and a batch."""
    plain, dropping = make_config(), make_config(model={"dropout": 0.3})
    params = init_params(plain, jax.random.key(0))
    batch = jax.random.randint(jax.random.key(1), (4, plain.model.seq_len + 1), 0, 256)
    return plain, dropping, params, batch


def test_dropout_adds_no_parameters_and_leaves_the_evaluation_loss_alone(configs):
    plain, dropping, params, batch = configs
    specs = [
        [(path, p.shape, p.dtype, p.metadata) for path, p in param_specs(c).items()]
        for c in (plain, dropping)
    ]
    assert specs[0] == specs[1]  # checkpoints of either load into the other
    evaluated = loss(params, batch, config=plain)
    np.testing.assert_array_equal(loss(params, batch, config=dropping), evaluated)  # no key: eval
    # dropout = 0 ignores a key: the training loss is the one without dropout.
    np.testing.assert_array_equal(
        loss(params, batch, config=plain, dropout_key=jax.random.key(5)), evaluated
    )


def test_a_training_loss_drops_and_the_same_key_gives_the_same_masks(configs):
    _, dropping, params, batch = configs
    evaluated = float(loss(params, batch, config=dropping))
    first = loss(params, batch, config=dropping, dropout_key=jax.random.key(5))
    again = loss(params, batch, config=dropping, dropout_key=jax.random.key(5))
    other = loss(params, batch, config=dropping, dropout_key=jax.random.key(6))
    np.testing.assert_array_equal(first, again)
    assert float(first) != evaluated and float(other) != float(first)


@pytest.mark.parametrize(("rate", "draws"), [(0.0, False), (0.3, True)])
def test_only_a_step_with_dropout_draws_random_bits(make_config, rate, draws):
    # At 0 the program is the one before dropout existed: no key is made, no mask drawn.
    cfg = make_config(model={"dropout": rate})
    mesh = make_mesh(cfg.mesh, jax.devices()[:1])
    opt = make_optimizer(cfg.train)
    abstract = abstract_state(cfg, opt, mesh)
    batch = jax.ShapeDtypeStruct((1, cfg.train.batch_size, cfg.model.seq_len + 1), jnp.int32)
    text = compile_train_step(cfg, opt, mesh, abstract).lower(abstract, batch).as_text()
    assert ("threefry" in text) is draws


def test_the_train_step_keys_its_masks_by_step_and_micro_batch(make_config):
    cfg = make_config(model={"dropout": 0.3}, train={"grad_accum": 2})
    mesh = make_mesh(cfg.mesh, jax.devices()[:1])
    opt = make_optimizer(cfg.train)
    step = compile_train_step(cfg, opt, mesh, abstract_state(cfg, opt, mesh))
    state = init_state(cfg, opt, mesh)
    micro = jax.random.randint(jax.random.key(1), (4, cfg.model.seq_len + 1), 0, 256)
    batch = jnp.stack([micro, micro])  # the same data in both micro-batches

    def losses_at(step_number):
        start = dataclasses.replace(jax.tree.map(jnp.copy, state), step=jnp.int32(step_number))
        return np.asarray(step(start, batch)[1]["micro_loss"])  # the step donates its input

    at_3, again, at_4 = losses_at(3), losses_at(3), losses_at(4)
    np.testing.assert_array_equal(at_3, again)  # the same step draws the same masks
    assert not np.array_equal(at_3, at_4)  # the next step other masks
    assert at_3[0] != at_3[1]  # and each micro-batch its own


def test_evaluation_and_sampling_never_drop(configs):
    plain, dropping, params, batch = configs
    mesh = make_mesh(plain.mesh, jax.devices()[:1])
    lowered = [
        compile_eval_step(c, mesh, params).lower(params, batch).as_text() for c in (plain, dropping)
    ]
    assert lowered[0] == lowered[1]  # the eval step of gpt train and gpt eval: the same program
    prompt = jnp.array([[72, 101, 108]], jnp.int32)
    kw = {"max_new_tokens": 4, "temperature": 1.0, "key": jax.random.key(2)}
    tokens = [generate(params, prompt, c, **kw) for c in (plain, dropping)]
    np.testing.assert_array_equal(tokens[0], tokens[1])


@pytest.mark.parametrize("rate", [1.0, -0.1, float("nan")])
def test_a_rate_outside_0_1_is_refused(make_config, rate):
    with pytest.raises(ConfigError) as e:
        make_config(model={"dropout": rate})
    assert (
        f"model.dropout = {rate} must be in [0, 1): the probability of zeroing an activation in "
        "training, e.g. 0.1 (0 = off; 1 would zero everything)"
    ) in str(e.value)


def test_a_core_without_dropout_is_refused_with_the_fixes(capsys):
    assert (
        main(["config", "show", "--set", "model.dropout=0.1", "--set", "model.attention=xla"]) == 2
    )
    err = capsys.readouterr().err
    assert (
        "model.dropout = 0.1 needs the blocked attention core, but model.attention = 'xla' runs "
        "jax.nn.dot_product_attention, which has no dropout. Fix: --set model.attention=auto"
    ) in err
    assert "or --set model.attention=blocked, or --set model.dropout=0" in err
    assert "Traceback" not in err


def test_config_show_lists_the_key_with_its_meaning(capsys):
    assert main(["config", "show", "--set", "model.dropout=0.1"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("dropout = "))
    assert line.startswith("dropout = 0.1  # probability of zeroing the embedding output, the")
    assert "in training only (eval and sampling never drop)" in line


def test_hugging_face_dropout_is_neither_imported_nor_exported(tmp_path):
    # Documented choice: a training option of the run, not of the weights (docs/gpt_models.md).
    folder = shutil.copytree(Path(__file__).parent / "data" / "hf_gpt2", tmp_path / "gpt2")
    pdrops = ("resid_pdrop", "embd_pdrop", "attn_pdrop")
    raw = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**raw, **dict.fromkeys(pdrops, 0.1)}))
    cfg, params = import_hf(folder)
    assert cfg.model.dropout == 0.0
    out = export_hf(dataclasses.replace(cfg.model, dropout=0.1), params, tmp_path / "out")
    written = json.loads((out / "config.json").read_text())
    assert [written[k] for k in pdrops] == [0.0, 0.0, 0.0]
