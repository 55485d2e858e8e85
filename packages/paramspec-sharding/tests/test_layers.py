import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec

import paramspec as ps
from core_primitives import pytree_dataclass

RULES = ps.Rules({"embed": None, "mlp": "model", "vocab": "model", "batch": "data"})


@pytest.fixture(scope="module")
def mesh(device_grid):
    return ps.make_mesh(device_grid, ("data", "model"))


@pytree_dataclass
class MLP(ps.ParamInitializer):
    """The pattern users copy: a composite layer whose fields are sub-layers."""

    norm: ps.RMSNorm
    up: ps.Linear
    down: ps.Linear

    @classmethod
    def param_specs(cls, cfg):
        d, h = cfg
        return cls(
            norm=ps.RMSNorm.param_specs(ps.RMSNormConfig(d)),
            up=ps.Linear.param_specs(ps.LinearConfig(d, h, use_bias=True)),
            down=ps.Linear.param_specs(ps.LinearConfig(h, d, kernel_axes=("mlp", "embed"))),
        )

    def __call__(self, x):
        return x + self.down(jax.nn.gelu(self.up(self.norm(x))))


def test_param_specs_returns_the_same_class_filled_with_specs():
    specs = ps.Linear.param_specs(ps.LinearConfig(16, 8, use_bias=True))
    assert isinstance(specs, ps.Linear)
    assert specs.kernel == ps.ParamSpec((16, 8), ("embed", "mlp"))
    assert specs.bias.shape == (8,)
    assert specs.bias.logical_axes == ("mlp",)
    assert ps.Linear.param_specs(ps.LinearConfig(16, 8)).bias is None


def test_composite_layer_init_and_forward(mesh):
    params = MLP.init((16, 32), jax.random.key(0), mesh, RULES)
    assert isinstance(params, MLP)
    assert isinstance(params.up, ps.Linear)
    assert params.up.kernel.sharding.spec == PartitionSpec(None, "model")
    assert params.down.kernel.sharding.spec == PartitionSpec("model", None)
    assert params.norm.eps == 1e-6
    x = jnp.ones((4, 16))
    y = jax.jit(lambda p, x: p(x))(params, x)
    assert y.shape == (4, 16)
    grads = jax.grad(lambda p: p(x).sum())(params)
    assert jax.tree.structure(grads) == jax.tree.structure(params)


def test_layer_classmethod_shortcuts(mesh):
    cfg = ps.LinearConfig(16, 8)
    assert ps.Linear.shardings(cfg, mesh, RULES).kernel.spec == PartitionSpec(None, "model")
    assert ps.Linear.abstract(cfg, mesh, RULES).kernel.shape == (16, 8)


def test_linear_matches_a_matmul(mesh):
    layer = ps.Linear.init(ps.LinearConfig(16, 8, use_bias=True), 0, mesh, RULES)
    x = jax.random.normal(jax.random.key(1), (3, 16))
    np.testing.assert_allclose(
        layer(x), x @ np.asarray(layer.kernel) + np.asarray(layer.bias), rtol=1e-5
    )
    assert layer(x.astype(jnp.bfloat16)).dtype == jnp.bfloat16


def test_embedding_lookup_and_attend(mesh):
    emb = ps.Embedding.init(ps.EmbeddingConfig(64, 16), 0, mesh, RULES)
    assert emb.table.sharding.spec == PartitionSpec("model", None)
    assert 0.015 < float(jnp.std(emb.table)) < 0.025
    ids = jnp.array([[0, 5]])
    np.testing.assert_array_equal(emb(ids)[0, 1], emb.table[5])
    np.testing.assert_allclose(emb.attend(emb(ids)), emb(ids) @ emb.table.T, rtol=1e-5)


def test_rmsnorm_normalises_in_float32():
    norm = ps.RMSNorm(scale=jnp.full(4, 2.0), eps=0.0)
    x = jnp.array([1.0, -1.0, 1.0, -1.0], jnp.bfloat16) * 100
    y = norm(x)
    assert y.dtype == jnp.bfloat16
    assert y.astype(jnp.float32).tolist() == [2.0, -2.0, 2.0, -2.0]


def test_rmsnorm_eps_survives_init(mesh):
    norm = ps.RMSNorm.init(ps.RMSNormConfig(8, eps=1e-3), 0, mesh, RULES)
    assert norm.eps == 1e-3
    assert norm.scale.tolist() == [1.0] * 8


def test_missing_param_specs_error_text():
    @pytree_dataclass
    class Empty(ps.ParamInitializer):
        w: jax.Array

    with pytest.raises(NotImplementedError, match=r"Empty.param_specs\(cfg\) is not implemented"):
        Empty.param_specs(None)
