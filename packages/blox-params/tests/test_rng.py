"""Rng: seeds of every kind, vmapped seeds, per-lane randomness, errors."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

import blox as bx


def _model(fold_in_axes=()):
    graph = bx.Graph("net")
    rng = bx.Rng(graph / "rng", fold_in_axes=fold_in_axes)
    lin = bx.Linear(graph / "lin", 16, rng=rng)
    drop = bx.Dropout(graph / "drop", 0.5, rng=rng)

    def apply(params, x, is_training=True):
        y, params = lin(params, x)
        return drop(params, y, is_training=is_training)

    def init(seed):
        return apply(rng.seed(bx.Params(), seed=seed), jnp.ones((1, 4)))[1]

    return rng, apply, init


def _kernel(params):
    return params[("net", "lin", "kernel")].value


@pytest.mark.parametrize(
    "seed", [3, np.int64(3), np.int32(3), jnp.array(3), jnp.array(3, jnp.uint32)]
)
def test_integer_seeds_agree(seed):
    _, _, init = _model()
    np.testing.assert_array_equal(_kernel(init(seed)), _kernel(init(3)))


def test_typed_and_legacy_keys():
    _, _, init = _model()
    np.testing.assert_array_equal(_kernel(init(jax.random.key(3))), _kernel(init(3)))
    np.testing.assert_array_equal(_kernel(init(jax.random.PRNGKey(3))), _kernel(init(3)))


def test_traced_seed_and_vmapped_init():
    _, _, init = _model()
    np.testing.assert_array_equal(_kernel(jax.jit(init)(jnp.array(3))), _kernel(init(3)))
    many = jax.vmap(init)(jnp.arange(4))
    kernels = _kernel(many)
    assert kernels.shape == (4, 4, 16)
    for i in range(4):
        np.testing.assert_array_equal(kernels[i], _kernel(init(i)))
    assert len({float(k.sum()) for k in kernels}) == 4


@pytest.mark.parametrize("seed", [3.0, np.float32(3), jnp.array(3.0), True])
def test_non_integer_seed_is_a_type_error(seed):
    rng, _, _ = _model()
    with pytest.raises(TypeError, match=r"Rng net/rng.seed: got a"):
        rng.seed(bx.Params(), seed=seed)


def test_array_seed_must_be_scalar():
    rng, _, _ = _model()
    with pytest.raises(ValueError, match=r"shape \(3,\); expected a scalar.*jax.vmap\(init\)"):
        rng.seed(bx.Params(), seed=jnp.arange(3))


def test_keys_are_fold_in_of_seed_and_counter():
    rng, _, _ = _model()
    params = rng.seed(bx.Params(), seed=5)
    k0, params = rng(params)
    k1, params = rng(params)
    expected = jax.random.fold_in(jax.random.key(5), 1)
    assert bool((jax.random.key_data(k1) == jax.random.key_data(expected)).all())
    assert not bool((jax.random.key_data(k0) == jax.random.key_data(k1)).all())
    reseeded = rng.seed(params, seed=5)
    assert int(reseeded[("net", "rng", "counter")].value) == 0
    assert rng.get_seed(params).shape == ()


def test_seeding_locked_params_updates_in_place_of_creating():
    rng, _, init = _model()
    params = init(0).locked()
    assert rng.seed(params, seed=1).is_locked
    with pytest.raises(bx.LockedParamsError, match=r"net/rng/seed.*locked"):
        rng.seed(bx.Params().locked(), seed=1)


def test_vmap_init_with_replicated_outputs_is_identical():
    _, _, init = _model(fold_in_axes=("batch",))
    replicated = jax.vmap(lambda _: init(0), axis_name="batch", out_axes=None)(jnp.arange(4))
    np.testing.assert_array_equal(_kernel(replicated), _kernel(init(0)))


def test_per_lane_masks_with_replicated_params():
    _, apply, init = _model(fold_in_axes=("batch",))
    params = init(0).locked()
    x = jnp.ones((4, 1, 4))
    ys, new = jax.vmap(apply, in_axes=(None, 0), out_axes=(0, None), axis_name="batch")(params, x)
    masks = [tuple(np.asarray(y != 0).ravel()) for y in ys]
    assert len(set(masks)) > 1
    assert (
        int(new[("net", "rng", "counter")].value)
        == int(params[("net", "rng", "counter")].value) + 1
    )


def test_without_fold_in_axes_lanes_share_masks():
    _, apply, init = _model()
    params = init(0).locked()
    ys, _ = jax.vmap(apply, in_axes=(None, 0), out_axes=(0, None))(params, jnp.ones((4, 1, 4)))
    assert len({tuple(np.asarray(y != 0).ravel()) for y in ys}) == 1


def test_nested_vmaps_give_distinct_masks_per_lane():
    _, apply, init = _model(fold_in_axes=("outer", "inner"))
    params = init(0).locked()
    inner = jax.vmap(apply, in_axes=(None, 0), out_axes=(0, None), axis_name="inner")
    outer = jax.vmap(inner, in_axes=(None, 0), out_axes=(0, None), axis_name="outer")
    ys, _ = outer(params, jnp.ones((3, 3, 1, 4)))
    masks = {tuple(np.asarray(ys[i, j] != 0).ravel()) for i in range(3) for j in range(3)}
    assert len(masks) == 9


@pytest.mark.min_devices(2, why="masks of different devices to compare")
def test_shard_map_per_device_masks():
    mesh = jax.sharding.Mesh(np.array(jax.devices()[:4]), ("batch",))  # up to 4 devices
    _, apply, init = _model(fold_in_axes=("batch",))
    params = init(0).locked()
    shard_map = getattr(jax, "shard_map", None)
    if shard_map is None:  # JAX < 0.7 kept it in experimental; our floor has jax.shard_map
        pytest.skip("jax.shard_map unavailable")
    f = shard_map(apply, mesh=mesh, in_specs=(P(), P("batch")), out_specs=(P("batch"), P()))
    ys, _ = jax.jit(f)(params, jnp.ones((4, 4)))
    assert ys.shape == (4, 16)
    assert len({tuple(np.asarray(y != 0)) for y in ys}) > 1


def test_unbound_fold_axis_is_explained():
    _, apply, init = _model(fold_in_axes=("batch",))
    with pytest.raises(bx.RngError, match=r"folds the axis 'batch'.*axis_name='batch'"):
        apply(init(0).locked(), jnp.ones((1, 4)))


def test_dropout_without_rng_says_how_to_fix():
    with pytest.raises(bx.RngError, match=r"Dropout net/drop needs an Rng.*rng=rng"):
        bx.Dropout(bx.Graph("net") / "drop", 0.1)
