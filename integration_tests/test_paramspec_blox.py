"""paramspec shards blox ``Params`` whose params carry ``logical_axes`` metadata.

paramspec never imports blox: they meet through ``core_primitives.HasLogicalAxes``. The mesh spans
every device the session has (8 fake CPU devices by the root conftest's default, whatever a real
machine has otherwise), so the expected shard shapes are computed from the device count.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec

import blox as bx
import paramspec as ps

RULES = ps.Rules({"embed": None, "mlp": "model", "batch": None})
HIDDEN = 64  # divisible by any device count up to 64


def _model_and_params():
    graph = bx.Graph("net")
    rng = bx.Rng(graph / "rng")
    up = bx.Linear(
        graph / "up",
        HIDDEN,
        rng=rng,
        kernel_metadata={"logical_axes": ("embed", "mlp")},
        bias_metadata={"logical_axes": ("mlp",)},
    )
    down = bx.Linear(graph / "down", 4, rng=rng, kernel_metadata={"logical_axes": ("mlp", None)})

    def forward(params, x):
        h, params = up(params, x)
        return down(params, jax.nn.relu(h))

    x = jnp.ones((8, 4))
    params = forward(rng.seed(bx.Params(), seed=0), x)[1].locked()
    return forward, params, x


@pytest.fixture(scope="module")
def mesh():
    return ps.make_mesh((-1,), ("model",))


def test_shardings_match_the_params_structure(mesh):
    _, params, _ = _model_and_params()
    shardings = ps.shardings(params, mesh, RULES)
    assert jax.tree.structure(shardings) == jax.tree.structure(params)
    kernel = shardings[("net", "up", "kernel")].value
    assert kernel.spec == PartitionSpec(None, "model")
    assert shardings[("net", "down", "kernel")].value.spec == PartitionSpec("model", None)
    assert shardings[("net", "down", "bias")].value.spec == PartitionSpec()  # no metadata


def test_device_put_then_jit_keeps_values_and_layout(mesh):
    forward, params, x = _model_and_params()
    placed = jax.device_put(params, ps.shardings(params, mesh, RULES))
    kernel = placed[("net", "up", "kernel")].value
    n = jax.device_count()
    assert {s.data.shape for s in kernel.addressable_shards} == {(4, HIDDEN // n)}
    expected, _ = jax.jit(forward)(params, x)
    got, _ = jax.jit(forward)(placed, x)
    np.testing.assert_allclose(got, expected, rtol=1e-6)


def test_abstract_restores_blox_params_onto_a_mesh(mesh, tmp_path):
    ocp = pytest.importorskip("orbax.checkpoint")
    _, params, _ = _model_and_params()
    with ocp.StandardCheckpointer() as ckptr:
        ckptr.save(tmp_path / "ckpt", params)
        ckptr.wait_until_finished()
    target = ps.abstract(params, mesh, RULES)
    with ocp.StandardCheckpointer() as ckptr:
        restored = ckptr.restore(tmp_path / "ckpt", target)
    assert isinstance(restored, bx.Params)
    assert restored[("net", "up", "kernel")].value.sharding.spec == PartitionSpec(None, "model")
    for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(restored)):
        np.testing.assert_array_equal(a, b)


def test_errors_name_blox_paths(mesh):
    _, params, _ = _model_and_params()
    with pytest.raises(
        ps.ShardingError, match=r"net/up/kernel.*logical axis 'mlp' \(dim 1\) has no rule"
    ):
        ps.shardings(params, mesh, {"embed": None})
