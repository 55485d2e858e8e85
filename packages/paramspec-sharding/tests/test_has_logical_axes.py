"""Sharding params that are not ParamSpecs but carry logical axes (blox-style), via the protocol.

The fakes mimic blox without importing it: a flat mapping keyed by tuple paths whose values are
pytree nodes holding an array and static metadata with ``logical_axes``.
"""

from collections.abc import Mapping

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec

import paramspec as ps
from core_primitives import field, has_logical_axes, pytree_dataclass


@pytree_dataclass
class FakeParam:
    value: jax.Array
    metadata: tuple = field(static=True, default=())

    @property
    def logical_axes(self):
        return dict(self.metadata).get("logical_axes")

    @property
    def shape(self):
        return tuple(self.value.shape)

    @property
    def dtype(self):
        return self.value.dtype


class FakeParams(Mapping):
    def __init__(self, items):
        self._items = dict(items)

    def __getitem__(self, path):
        return self._items[path]

    def __iter__(self):
        return iter(self._items)

    def __len__(self):
        return len(self._items)


jax.tree_util.register_pytree_with_keys(
    FakeParams,
    lambda p: ([(jax.tree_util.DictKey(k), v) for k, v in sorted(p.items())], tuple(sorted(p))),
    lambda keys, values: FakeParams(zip(keys, values)),
)

RULES = ps.Rules({"embed": "model", "mlp": "data"})


def _param(shape, axes):
    return FakeParam(jnp.ones(shape), (("logical_axes", axes),))


@pytest.fixture(scope="module")
def mesh():
    return ps.make_mesh((2, 4), ("data", "model"))


@pytest.fixture
def params():
    return FakeParams(
        {
            ("net", "l1", "kernel"): _param((8, 16), ("embed", "mlp")),
            ("net", "l1", "bias"): _param((16,), ("mlp",)),
            ("net", "scale"): FakeParam(jnp.ones(4)),  # no logical axes: replicated
        }
    )


def test_fake_param_satisfies_the_protocol(params):
    assert has_logical_axes(params[("net", "l1", "kernel")])


def test_shardings_keep_the_params_structure(params, mesh):
    out = ps.shardings(params, mesh, RULES)
    assert jax.tree.structure(out) == jax.tree.structure(params)
    assert out[("net", "l1", "kernel")].value.spec == PartitionSpec("model", "data")
    assert out[("net", "scale")].value.spec == PartitionSpec()


def test_device_put_with_shardings_places_every_param(params, mesh):
    placed = jax.device_put(params, ps.shardings(params, mesh, RULES))
    kernel = placed[("net", "l1", "kernel")].value
    assert {s.data.shape for s in kernel.addressable_shards} == {(2, 8)}
    np.testing.assert_array_equal(kernel, np.ones((8, 16)))


def test_abstract_gives_restore_targets_with_the_params_structure(params, mesh):
    out = ps.abstract(params, mesh, RULES)
    assert jax.tree.structure(out) == jax.tree.structure(params)
    bias = out[("net", "l1", "bias")].value
    assert isinstance(bias, jax.ShapeDtypeStruct)
    assert bias.shape == (16,)
    assert bias.sharding.spec == PartitionSpec("data")


def test_errors_name_tuple_paths_like_nested_ones(mesh):
    bad = FakeParams(
        {
            ("net", "l1", "kernel"): _param((8, 15), ("embed", "mlp")),
            ("net", "l2", "kernel"): _param((8,), ("embed", "mlp")),
        }
    )
    with pytest.raises(ps.ShardingError) as info:
        ps.shardings(bad, mesh, RULES)
    text = str(info.value)
    assert "net/l1/kernel: dim 1 (logical axis 'mlp') has size 15, not divisible by 2" in text
    assert "net/l2/kernel: 2 logical axes ('embed', 'mlp') for shape (8,) of rank 1" in text


def test_init_needs_param_specs(params, mesh):
    with pytest.raises(
        TypeError, match=r"net/l1/kernel: got FakeParam of shape \(8, 16\), expected a ParamSpec"
    ):
        ps.init(params, 0, mesh, RULES)
