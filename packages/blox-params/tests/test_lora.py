"""bx.LoRA: adapters next to kernels, equal to the base at init, trained alone, merged back."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import blox as bx

X = jax.random.normal(jax.random.key(1), (4, 6))


def linear(lora=None, **kw):
    graph = bx.Graph("net")
    rng = bx.Rng(graph / "rng")
    return bx.Linear(graph / "lin", 5, rng=rng, lora=lora, **kw), rng.seed(bx.Params(), seed=0)


def mlp(lora=None):
    graph = bx.Graph("net")
    rng = bx.Rng(graph / "rng")
    model = bx.MLP(graph / "mlp", [16, 6], rng=rng, gated=True, activation=jax.nn.silu, lora=lora)
    return model, rng.seed(bx.Params(), seed=0)


def attention(lora=None):
    graph = bx.Graph("net")
    rng = bx.Rng(graph / "rng")
    mha = bx.MultiHeadAttention(
        graph / "attn", num_heads=4, head_dim=4, rng=rng, num_kv_heads=2, use_rope=True, lora=lora
    )
    return mha, rng.seed(bx.Params(), seed=0)


def without_adapters(params):
    return params.split(lambda path, _: "lora_" not in path[-1])[0]


def randomise_adapters(params, seed=3):
    """Adapters as after some training: lora_b no longer zero."""
    keys = iter(jax.random.split(jax.random.key(seed), len(params)))
    return bx.Params(
        {
            path: p.replace(value=0.3 * jax.random.normal(next(keys), p.shape))
            if "lora_" in path[-1]
            else p
            for path, p in params.items()
        }
    )


def test_adapters_sit_next_to_the_kernel_with_their_shapes():
    lin, params = linear(bx.LoRA(rank=2, alpha=4))
    _, params = lin(params, X)
    assert params[("net", "lin", "lora_a")].shape == (6, 2)
    assert params[("net", "lin", "lora_b")].shape == (2, 5)
    assert not np.any(params[("net", "lin", "lora_b")].value)  # zero: the base at init
    assert np.any(params[("net", "lin", "lora_a")].value)


@pytest.mark.parametrize("build", [linear, mlp, attention], ids=["Linear", "MLP", "attention"])
def test_fresh_adapters_leave_the_layer_equal_to_its_base(build):
    x = X if build is not attention else X.reshape(1, 4, 6)[..., :4].repeat(4, -1)
    adapted, params = build(bx.LoRA(rank=2, alpha=8))
    y, params = adapted(params, x)
    plain, _ = build()
    y_base, _ = plain(without_adapters(params).locked(), x)
    assert any("lora_" in path[-1] for path in params)
    np.testing.assert_array_equal(y, y_base)


def test_targets_pick_kernels_by_parameter_path():
    lora = bx.LoRA(rank=2, targets=lambda path: path[-1] in ("query", "value"))
    mha, params = attention(lora)
    _, params = mha(params, jnp.ones((1, 3, 8)))
    adapters = sorted(path[-1] for path in params if "lora_" in path[-1])
    assert adapters == ["query_lora_a", "query_lora_b", "value_lora_a", "value_lora_b"]
    assert params[("net", "attn", "query_lora_a")].shape == (8, 2)
    assert params[("net", "attn", "query_lora_b")].shape == (2, 4, 4)
    assert set(lora.adapters(params)) == {("net", "attn", "query"), ("net", "attn", "value")}


def test_adapters_inherit_the_kernels_logical_axes_with_the_rank_replicated():
    lin, params = linear(bx.LoRA(rank=2), kernel_metadata={"logical_axes": ("embed", "mlp")})
    _, params = lin(params, X)
    assert params[("net", "lin", "lora_a")].logical_axes == ("embed", None)
    assert params[("net", "lin", "lora_b")].logical_axes == (None, "mlp")


def test_frozen_base_gets_no_update_and_the_adapters_learn():
    lora = bx.LoRA(rank=2, alpha=4)
    model, params = mlp(lora)
    _, params = model(params, X)
    params = lora.freeze_base(params.locked())
    trainable, rest = params.split()
    assert sorted(p[-2:] for p in trainable) == sorted(
        (layer, name)
        for layer in ("gate_0", "linear_0", "linear_1")
        for name in ("lora_a", "lora_b")
    )
    target = jnp.sin(X)
    optimizer = optax.adam(1e-2)

    def loss(trainable, rest):
        y, _ = model(trainable.merge(rest), X)
        return jnp.mean((y - target) ** 2)

    @jax.jit
    def step(trainable, opt_state, rest):
        value, grads = jax.value_and_grad(loss)(trainable, rest)
        updates, opt_state = optimizer.update(grads, opt_state, trainable)
        return optax.apply_updates(trainable, updates), opt_state, value

    opt_state = optimizer.init(trainable)
    first = None
    new = trainable
    for _ in range(20):
        new, opt_state, value = step(new, opt_state, rest)
        first = value if first is None else first
    assert float(loss(new, rest)) < 0.9 * float(first)
    after = new.merge(rest)
    for path, param in params.items():
        changed = not np.array_equal(after[path].value, param.value)
        assert changed == (path in trainable), path  # only adapters moved (lora_b from zero)


@pytest.mark.parametrize("build", [linear, mlp, attention], ids=["Linear", "MLP", "attention"])
def test_merged_kernels_give_the_adapted_output(build):
    x = X if build is not attention else X.reshape(1, 4, 6)[..., :4].repeat(4, -1)
    lora = bx.LoRA(rank=2, alpha=6)
    adapted, params = build(lora)
    _, params = adapted(params, x)
    params = randomise_adapters(params)
    y, _ = adapted(params.locked(), x)
    merged = lora.merge(params)
    assert not any("lora_" in path[-1] for path in merged)
    plain, _ = build()
    y_merged, _ = plain(merged.locked(), x)
    y_base, _ = plain(without_adapters(params).locked(), x)
    assert float(jnp.max(jnp.abs(y - y_base))) > 1e-2  # the adapters do change the output
    np.testing.assert_allclose(y_merged, y, atol=1e-5, rtol=1e-5)


def test_lora_dropout_drops_on_the_lora_path_only_while_training():
    lora = bx.LoRA(rank=2, dropout=0.5)
    lin, params = linear(lora)
    _, params = lin(params, X, is_training=False)
    params = randomise_adapters(params)
    plain, _ = linear()
    y_base, _ = plain(without_adapters(params).locked(), X)
    y_eval, _ = lin(params, X, is_training=False)
    y_train, after = lin(params, X, is_training=True)
    y_again, _ = lin(after, X, is_training=True)  # a new key: other masks
    no_dropout, _ = linear(bx.LoRA(rank=2))
    y_full, _ = no_dropout(params, X)
    np.testing.assert_array_equal(y_eval, y_full)
    assert not np.allclose(y_train, y_eval)
    assert not np.allclose(y_train, y_again)
    assert not np.allclose(y_train, y_base)


@pytest.mark.parametrize("build", [mlp, attention], ids=["MLP", "attention"])
def test_composite_layers_pass_is_training_to_lora_dropout(build):
    x = X if build is not attention else X.reshape(1, 4, 6)[..., :4].repeat(4, -1)
    layer, params = build(bx.LoRA(rank=2, dropout=0.5))
    _, params = layer(params, x, is_training=False)
    params = randomise_adapters(params)
    same, _ = build(bx.LoRA(rank=2))
    y_eval, _ = layer(params, x, is_training=False)
    np.testing.assert_array_equal(y_eval, same(params, x)[0])
    assert not np.allclose(layer(params, x, is_training=True)[0], y_eval)
    with pytest.raises(TypeError, match=r"has a LoRA with dropout=0.5, so its call needs"):
        layer(params, x)


def test_lora_dropout_needs_is_training():
    lin, params = linear(bx.LoRA(rank=2, dropout=0.1))
    with pytest.raises(TypeError, match=r"Linear net/lin has a LoRA with dropout=0.1") as e:
        lin(params, X)
    assert "is_training=True (training: drops) or False" in str(e.value)


def test_lora_without_any_rng_is_refused_at_construction():
    graph = bx.Graph("net")
    with pytest.raises(bx.RngError, match=r"Linear net/lin: its LoRA needs an Rng") as e:
        bx.Linear(graph / "lin", 3, kernel_init=jax.nn.initializers.zeros, lora=bx.LoRA(2))
    assert "bx.LoRA(rank, ..., rng=rng)" in str(e.value)


@pytest.mark.parametrize("rank", [0, -1, 2.5, True, "8"])
def test_rank_must_be_a_positive_int(rank):
    with pytest.raises(ValueError, match=rf"LoRA: rank must be a positive int, got {rank!r}\."):
        bx.LoRA(rank)


def test_rank_above_the_kernel_size_names_the_kernel_and_the_limit():
    lin, params = linear(bx.LoRA(rank=6))  # the kernel maps 6 to 5 features
    with pytest.raises(ValueError, match=r"Linear net/lin: LoRA rank 6 is larger than") as e:
        lin(params, X)
    message = str(e.value)
    assert "kernel net/lin/kernel" in message
    assert "maps 6 input to 5 output features" in message
    assert "at most min(6, 5) = 5" in message


@pytest.mark.parametrize("alpha", [0, -2.0, float("nan"), float("inf"), "16", True])
def test_alpha_must_be_a_positive_number(alpha):
    with pytest.raises(ValueError, match=r"LoRA: alpha must be a finite number > 0, got") as e:
        bx.LoRA(4, alpha=alpha)
    assert "scaled by alpha / rank" in str(e.value)


@pytest.mark.parametrize("dropout", [-0.1, 1.0, 1.5, "0.1", None])
def test_dropout_must_be_in_zero_one(dropout):
    with pytest.raises(ValueError, match=rf"LoRA: dropout must be in \[0, 1\), got {dropout!r}"):
        bx.LoRA(4, dropout=dropout)


def test_targets_must_be_a_predicate():
    with pytest.raises(TypeError, match=r"LoRA: targets must be a predicate") as e:
        bx.LoRA(4, targets=["query", "value"])
    assert "targets=lambda path: path[-1] in ('query', 'value')" in str(e.value)


def test_lora_option_takes_a_lora():
    graph = bx.Graph("net")
    rng = bx.Rng(graph / "rng")
    with pytest.raises(TypeError, match=r"Linear net/lin: lora= takes a bx.LoRA") as e:
        bx.Linear(graph / "lin", 3, rng=rng, lora={"rank": 8})
    assert "lora=bx.LoRA(rank=8, alpha=16)" in str(e.value)


def test_scale_is_alpha_over_rank_and_alpha_defaults_to_rank():
    assert bx.LoRA(8, alpha=16).scale == 2.0
    assert bx.LoRA(8).scale == 1.0


def stack(lora=None, is_static=False):
    graph = bx.Graph("net")
    rng = bx.Rng(graph / "rng")
    node = graph / "blocks"
    layer = bx.Linear(
        node / "layer", 6, rng=rng, lora=lora, kernel_metadata={"logical_axes": ("embed", "mlp")}
    )
    repeat = bx.Repeat(node, layer, 3, rng=rng, logical_axis="layers", is_static=is_static)
    return repeat, rng


@pytest.mark.parametrize("is_static", [False, True], ids=["scan", "unrolled"])
def test_adapters_join_a_stack_that_was_created_without_them(is_static):
    base, rng = stack(is_static=is_static)
    y_base, pretrained = base(rng.seed(bx.Params(), seed=0), X)
    lora = bx.LoRA(rank=2)
    adapted, _ = stack(lora, is_static=is_static)
    y, params = adapted(pretrained.unlocked(), X)
    a, b = (
        params[("net", "blocks", "layer", "lora_a")],
        params[("net", "blocks", "layer", "lora_b")],
    )
    assert (a.shape, b.shape) == ((3, 6, 2), (3, 2, 6))
    assert (a.logical_axes, b.logical_axes) == (("layers", "embed", None), ("layers", None, "mlp"))
    assert not np.allclose(a.value[0], a.value[1])  # each copy drew its own key
    # B = 0: the output is the base's, to float rounding (JAX 0.7's XLA fuses the zero update into
    # the scanned layer's dot and differs in the last bit).
    np.testing.assert_allclose(y, y_base, atol=1e-6, rtol=0)
    kernel = ("net", "blocks", "layer", "kernel")
    np.testing.assert_array_equal(params[kernel].value, pretrained[kernel].value)
    merged = lora.merge(randomise_adapters(params))
    y_adapted, _ = adapted(randomise_adapters(params).locked(), X)
    np.testing.assert_allclose(base(merged.locked(), X)[0], y_adapted, atol=1e-5, rtol=1e-5)


def test_a_fresh_stack_with_lora_gets_stacked_adapters():
    adapted, rng = stack(bx.LoRA(rank=2))
    _, params = adapted(rng.seed(bx.Params(), seed=0), X)
    a = params[("net", "blocks", "layer", "lora_a")]
    assert a.shape == (3, 6, 2) and a.logical_axes == ("layers", "embed", None)
