"""LayerNorm, RMSNorm, BatchNorm (incl. axis_name), GroupNorm."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import blox as bx

X = jnp.arange(24.0).reshape(2, 3, 4) ** 1.5


def _ref_norm(x, axes, eps, center=True):
    mean = x.mean(axes, keepdims=True) if center else 0.0
    var = ((x - mean) ** 2).mean(axes, keepdims=True)
    return (x - mean) / np.sqrt(var + eps)


def test_layer_norm_values_and_axes():
    graph = bx.Graph("net")
    ln = bx.LayerNorm(graph / "ln")
    y, params = ln(bx.Params(), X)
    np.testing.assert_allclose(y, _ref_norm(np.asarray(X), -1, 1e-5), rtol=1e-4, atol=1e-5)
    assert params[("net", "ln", "scale")].shape == (4,)
    ln2 = bx.LayerNorm(graph / "ln2", axis=(1, 2), use_bias=False)
    y2, params = ln2(params, X)
    np.testing.assert_allclose(y2, _ref_norm(np.asarray(X), (1, 2), 1e-5), rtol=1e-4, atol=1e-5)
    assert params[("net", "ln2", "scale")].shape == (3, 4)
    assert ("net", "ln2", "bias") not in params


def test_rms_norm_and_bf16():
    norm = bx.RMSNorm(bx.Graph("net") / "rms")
    y, params = norm(bx.Params(), X.astype(jnp.bfloat16))
    assert y.dtype == jnp.float32  # float32 scale promotes; use dtype= for bf16 outputs
    ref = np.asarray(X) / np.sqrt((np.asarray(X) ** 2).mean(-1, keepdims=True) + 1e-6)
    np.testing.assert_allclose(y, ref, rtol=2e-2)
    norm16 = bx.RMSNorm(bx.Graph("net") / "rms", dtype=jnp.bfloat16)
    assert norm16(params, X.astype(jnp.bfloat16))[0].dtype == jnp.bfloat16
    assert list(params) == [("net", "rms", "scale")]


def test_norm_axis_out_of_range():
    with pytest.raises(ValueError, match="axis 3 is out of range for inputs with 3 dimensions"):
        bx.LayerNorm(bx.Graph("net") / "ln", axis=3)(bx.Params(), X)


def test_norm_axis_named_twice():
    rms = bx.RMSNorm(bx.Graph("net") / "rms", axis=(2, -1))
    with pytest.raises(ValueError, match=r"RMSNorm net/rms: axis \(2, -1\) names the same dim"):
        rms(bx.Params(), X)


def test_norm_constructor_errors():
    with pytest.raises(ValueError, match=r"GroupNorm net/gn: num_groups must be a positive int"):
        bx.GroupNorm(bx.Graph("net") / "gn", num_groups=0)
    with pytest.raises(
        ValueError, match=r"BatchNorm net/bn: momentum must be in \[0, 1\], got 1.5"
    ):
        bx.BatchNorm(bx.Graph("net") / "bn", momentum=1.5)


@pytest.mark.parametrize("eps", [-1e-5, float("nan"), float("inf"), "1e-5", None])
@pytest.mark.parametrize("cls", [bx.LayerNorm, bx.RMSNorm, bx.BatchNorm])
def test_norm_eps_must_be_finite_and_non_negative(cls, eps):
    with pytest.raises(
        ValueError, match=rf"{cls.__name__} net/n: eps must be a finite number >= 0, got "
    ):
        cls(bx.Graph("net") / "n", eps=eps)


def test_norm_eps_zero_and_numpy_scalars_are_accepted():
    assert bx.LayerNorm(bx.Graph("net") / "n", eps=0).eps == 0.0
    assert bx.GroupNorm(bx.Graph("net") / "n", 2, eps=np.float32(1e-3)).eps == pytest.approx(1e-3)


def test_batch_norm_train_and_eval():
    bn = bx.BatchNorm(bx.Graph("net") / "bn", momentum=0.5)
    y, params = bn(bx.Params(), X, is_training=True)
    np.testing.assert_allclose(y, _ref_norm(np.asarray(X), (0, 1), 1e-5), rtol=1e-4, atol=1e-4)
    mean = params[("net", "bn", "mean")]
    assert mean.trainable is False
    np.testing.assert_allclose(mean.value, 0.5 * np.asarray(X).mean((0, 1)), rtol=1e-5)
    y_eval, same = bn(params, X, is_training=False)
    assert same is params
    var = params[("net", "bn", "var")].value
    np.testing.assert_allclose(y_eval, (X - mean.value) / np.sqrt(var + 1e-5), rtol=1e-4)


def test_batch_norm_axis_name_init_outside_and_sync_inside():
    bn = bx.BatchNorm(bx.Graph("net") / "bn", axis_name="batch")
    x = jnp.arange(8.0).reshape(4, 2) ** 2
    _, params = bn(bx.Params(), x, is_training=True)  # init outside any named axis
    params = params.locked()
    f = jax.vmap(
        lambda p, xi: bn(p, xi, is_training=True),
        in_axes=(None, 0),
        out_axes=(0, None),
        axis_name="batch",
    )
    ys, synced = f(params, x[:, None, :])
    full, ref = bn(params.unlocked(), x, is_training=True)
    np.testing.assert_allclose(ys[:, 0], full, rtol=1e-5)
    path = ("net", "bn", "mean")
    np.testing.assert_allclose(synced[path].value, ref[path].value, rtol=1e-5)
    with pytest.raises(NameError, match=r"over the axis 'batch'.*no such axis is bound"):
        bn(params, x, is_training=True)


def test_group_norm_matches_reference():
    gn = bx.GroupNorm(bx.Graph("net") / "gn", num_groups=2)
    y, params = gn(bx.Params(), X)
    g = np.asarray(X).reshape(2, 3, 2, 2)
    ref = _ref_norm(g, (1, 3), 1e-5).reshape(X.shape)
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-4)
    assert params[("net", "gn", "bias")].shape == (4,)
    with pytest.raises(ValueError, match=r"channels divisible by num_groups=3; got shape"):
        bx.GroupNorm(bx.Graph("net") / "gn", num_groups=3)(bx.Params(), X)


def test_batchnorm_explains_a_traced_is_training():
    bn = bx.BatchNorm(bx.Graph("net") / "bn")
    step = jax.jit(lambda p, x, training: bn(p, x, is_training=training))
    with pytest.raises(TypeError, match=r"BatchNorm net/bn: .*static_argnames='is_training'"):
        step(bx.Params(), jnp.ones((2, 3)), True)


@pytest.mark.parametrize("cls", [bx.LayerNorm, bx.RMSNorm])
def test_norm_axis_name_uses_statistics_of_the_whole_feature_vector(cls):
    sharded = cls(bx.Graph("net") / "norm", axis_name="model")
    plain = cls(bx.Graph("ref") / "norm")
    x = jax.random.normal(jax.random.key(0), (3, 8)) * 3.0 + 2.0
    shards = x.reshape(3, 4, 2).transpose(1, 0, 2)  # 4 devices, 2 features each
    _, params = sharded(bx.Params(), shards[0])  # init outside the named axis
    params = params.locked()
    run = jax.vmap(
        lambda p, xs: sharded(p, xs), in_axes=(None, 0), out_axes=(0, None), axis_name="model"
    )
    ys, _ = run(params, shards)
    full, _ = plain(bx.Params(), x)
    np.testing.assert_allclose(ys.transpose(1, 0, 2).reshape(3, 8), full, rtol=1e-5, atol=1e-5)
    unsynced, _ = cls(bx.Graph("local") / "norm")(bx.Params(), shards[0])
    assert not np.allclose(ys[0], unsynced, atol=1e-3)


def test_layer_norm_axis_name_under_shard_map():
    from jax.sharding import PartitionSpec as P

    shard_map = getattr(jax, "shard_map", None)
    if shard_map is None:  # JAX < 0.7 kept it in experimental; our floor has jax.shard_map
        pytest.skip("jax.shard_map unavailable")
    mesh = jax.sharding.Mesh(np.array(jax.devices()[:4]), ("model",))
    norm = bx.LayerNorm(bx.Graph("net") / "ln", axis_name="model", use_scale=False, use_bias=False)
    x = jax.random.normal(jax.random.key(1), (2, 8))
    params = norm(bx.Params(), x[:, :2])[1].locked()
    f = shard_map(
        lambda p, xs: norm(p, xs)[0],
        mesh=mesh,
        in_specs=(P(), P(None, "model")),
        out_specs=P(None, "model"),
    )
    np.testing.assert_allclose(
        f(params, x), _ref_norm(np.asarray(x), (-1,), 1e-5), rtol=1e-5, atol=1e-5
    )


@pytest.mark.parametrize("cls", [bx.LayerNorm, bx.RMSNorm])
def test_norm_axis_name_unbound_with_locked_params_says_how_to_fix(cls):
    norm = cls(bx.Graph("net") / "norm", axis_name="model")
    _, params = norm(bx.Params(), jnp.ones((2, 4)))
    with pytest.raises(
        NameError,
        match=rf"{cls.__name__} net/norm averages its statistics over the axis 'model' "
        r"\(axis_name='model'\), but no such axis is bound here.*jax.vmap\(\.\.\., "
        rf"axis_name='model'\).*without axis_name",
    ):
        norm(params.locked(), jnp.ones((2, 4)))


def test_group_norm_has_no_axis_name():
    with pytest.raises(TypeError, match="axis_name"):
        bx.GroupNorm(bx.Graph("net") / "gn", 2, axis_name="model")
