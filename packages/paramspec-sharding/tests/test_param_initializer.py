"""``ParamInitializer``: the spec-tree layer base, on a layer written in the test (as users do)."""

import jax
import jax.numpy as jnp
import pytest
from jax.sharding import PartitionSpec

import paramspec as ps
from core_primitives import field, pytree_dataclass

RULES = ps.Rules({"embed": None, "mlp": "model", "batch": "data"})


@pytree_dataclass
class Dense(ps.ParamInitializer):
    """``x @ kernel (+ bias)``; the config is ``(in, out, axes)``."""

    kernel: jax.Array | ps.ParamSpec
    bias: jax.Array | ps.ParamSpec | None = None
    scale: float = field(static=True, default=1.0)

    @classmethod
    def param_specs(cls, cfg):
        n_in, n_out, axes = cfg
        bias = ps.ParamSpec((n_out,), axes[1:], initializer=jax.nn.initializers.zeros)
        return cls(kernel=ps.ParamSpec((n_in, n_out), axes), bias=bias, scale=0.5)

    def __call__(self, x):
        return self.scale * (x @ self.kernel + self.bias)


@pytree_dataclass
class MLP(ps.ParamInitializer):
    """A composite layer whose fields are sub-layers."""

    up: Dense
    down: Dense

    @classmethod
    def param_specs(cls, cfg):
        d, h = cfg
        return cls(
            up=Dense.param_specs((d, h, ("embed", "mlp"))),
            down=Dense.param_specs((h, d, ("mlp", "embed"))),
        )

    def __call__(self, x):
        return x + self.down(jax.nn.gelu(self.up(x)))


@pytest.fixture(scope="module")
def mesh(device_grid):
    return ps.make_mesh(device_grid, ("data", "model"))


def test_param_specs_returns_the_same_class_filled_with_specs():
    specs = Dense.param_specs((16, 8, ("embed", "mlp")))
    assert isinstance(specs, Dense)
    assert specs.kernel.shape == (16, 8) and specs.kernel.logical_axes == ("embed", "mlp")
    assert specs.bias.logical_axes == ("mlp",)


def test_composite_layer_init_and_forward(mesh):
    params = MLP.init((16, 32), jax.random.key(0), mesh, RULES)
    assert isinstance(params, MLP) and isinstance(params.up, Dense)
    assert params.up.kernel.sharding.spec == PartitionSpec(None, "model")
    assert params.down.kernel.sharding.spec == PartitionSpec("model", None)
    assert params.up.scale == 0.5  # static fields survive init
    x = jnp.ones((4, 16))
    assert jax.jit(lambda p, x: p(x))(params, x).shape == (4, 16)
    grads = jax.grad(lambda p: p(x).sum())(params)
    assert jax.tree.structure(grads) == jax.tree.structure(params)


def test_layer_classmethod_shortcuts(mesh):
    cfg = (16, 8, ("embed", "mlp"))
    assert Dense.shardings(cfg, mesh, RULES).kernel.spec == PartitionSpec(None, "model")
    assert Dense.abstract(cfg, mesh, RULES).kernel.shape == (16, 8)


def test_missing_param_specs_error_text():
    @pytree_dataclass
    class Empty(ps.ParamInitializer):
        w: jax.Array

    with pytest.raises(NotImplementedError, match=r"Empty.param_specs\(cfg\) is not implemented"):
        Empty.param_specs(None)
