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
def mesh(device_grid):
    return ps.make_mesh(device_grid, ("data", "model"))


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


def test_device_put_with_shardings_places_every_param(params, mesh, device_grid):
    placed = jax.device_put(params, ps.shardings(params, mesh, RULES))
    kernel = placed[("net", "l1", "kernel")].value
    d, m = device_grid
    assert {s.data.shape for s in kernel.addressable_shards} == {(8 // m, 16 // d)}
    np.testing.assert_array_equal(kernel, np.ones((8, 16)))


def test_abstract_gives_restore_targets_with_the_params_structure(params, mesh):
    out = ps.abstract(params, mesh, RULES)
    assert jax.tree.structure(out) == jax.tree.structure(params)
    bias = out[("net", "l1", "bias")].value
    assert isinstance(bias, jax.ShapeDtypeStruct)
    assert bias.shape == (16,)
    assert bias.sharding.spec == PartitionSpec("data")


@pytest.mark.min_devices(2, why="a size that a data axis of 2 does not divide")
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


# A container in the style of blox ``Params``: its pytree children are the arrays themselves, and
# it reports each child's logical axes (core_primitives.HasChildLogicalAxes).
class FlatParams:
    def __init__(self, values, axes):
        self.values, self.axes = dict(values), dict(axes)

    def child_logical_axes(self):
        return [FakeParam(self.values[k], (("logical_axes", self.axes[k]),)) for k in self.values]


jax.tree_util.register_pytree_with_keys(
    FlatParams,
    lambda p: (
        [(jax.tree_util.DictKey("/".join(k)), v) for k, v in p.values.items()],
        tuple((k, p.axes[k]) for k in p.values),
    ),
    lambda aux, values: FlatParams(zip([k for k, _ in aux], values), dict(aux)),
)


@pytest.fixture
def flat():
    return FlatParams(
        {("net", "kernel"): jnp.ones((8, 16)), ("net", "bias"): jnp.ones(16)},
        {("net", "kernel"): ("embed", "mlp"), ("net", "bias"): ("mlp",)},
    )


def test_container_reporting_child_axes_is_sharded_per_child(flat, mesh, device_grid):
    from core_primitives import has_child_logical_axes

    assert has_child_logical_axes(flat) and not has_logical_axes(flat)
    out = ps.shardings({"model": flat}, mesh, RULES)
    assert jax.tree.structure(out) == jax.tree.structure({"model": flat})
    assert out["model"].values[("net", "kernel")].spec == PartitionSpec("model", "data")
    placed = jax.device_put(flat, ps.shardings(flat, mesh, RULES))
    kernel = placed.values[("net", "kernel")]
    d, m = device_grid
    assert {s.data.shape for s in kernel.addressable_shards} == {(8 // m, 16 // d)}


@pytest.mark.min_devices(2, why="a size that a data axis of 2 does not divide")
def test_container_abstract_and_errors_use_child_paths(flat, mesh):
    target = ps.abstract(flat, mesh, RULES)
    assert target.values[("net", "bias")].sharding.spec == PartitionSpec("data")
    bad = FlatParams({("net", "w"): jnp.ones((8, 15))}, {("net", "w"): ("embed", "mlp")})
    with pytest.raises(ps.ShardingError, match=r"net/w: dim 1 \(logical axis 'mlp'\) has size 15"):
        ps.shardings(bad, mesh, RULES)


def test_container_with_wrong_number_of_child_axes_says_so(flat, mesh):
    class Short(FlatParams):
        def child_logical_axes(self):
            return super().child_logical_axes()[:1]

    jax.tree_util.register_pytree_node(
        Short,
        lambda p: (list(p.values.values()), tuple((k, p.axes[k]) for k in p.values)),
        lambda aux, values: Short(zip([k for k, _ in aux], values), dict(aux)),
    )
    short = Short(flat.values, flat.axes)
    with pytest.raises(TypeError) as info:
        ps.shardings(short, mesh, RULES)
    text = str(info.value)
    assert "Short at <root> reports logical axes for 1 children but has 2 pytree children" in text
    assert "child_logical_axes() must give one entry per child, in flatten order" in text
