"""The bad-input catalogue of paramspec: specs, rules and meshes that cannot work.

Each case asserts the exception type and that the message says what was given, what was expected
and how to fix it: impossible meshes (one device listed twice), rules and specs that do not fit
the mesh, keys and arguments of the wrong kind, a multi-process setup that cannot start.
"""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh

import paramspec as ps
from core_primitives import field, pytree_dataclass


@pytree_dataclass
class W:
    value: jax.Array
    logical_axes: tuple = field(static=True, default=("embed", "mlp"))
    shape = property(lambda self: self.value.shape)
    dtype = property(lambda self: self.value.dtype)


RULES = {"embed": "model", "mlp": None}
SPECS = {"w": ps.ParamSpec((16, 8), ("embed", "mlp"))}


def twice_mesh():
    """A mesh of two slots that both hold device 0: jax.sharding.Mesh accepts it."""
    device = jax.devices()[0]
    return Mesh(np.array([device, device]), ("model",))


# --- a mesh that lists one device twice (was accepted) -----------------------------------------

TWICE = r"the mesh \{'model': 2\} lists CpuDevice\(id=0\) 2 times; a mesh needs each device once"
FIX = r".*Build it with paramspec.make_mesh\(shape, names\)"

MESH_USERS = {
    "init_sharded": lambda mesh: ps.init_sharded(
        lambda k: W(jax.random.normal(k, (16, 8))), 0, mesh, RULES
    ),
    "init": lambda mesh: ps.init(SPECS, 0, mesh, RULES),
    "shardings": lambda mesh: ps.shardings(SPECS, mesh, RULES),
    "abstract": lambda mesh: ps.abstract(SPECS, mesh, RULES),
    "logical_to_sharding": lambda mesh: ps.logical_to_sharding(("embed",), mesh, RULES),
    "constrain": lambda mesh: ps.constrain(jnp.ones((4, 8)), ("embed", "mlp"), mesh, RULES),
}


@pytest.mark.parametrize("fn", list(MESH_USERS))
def test_mesh_listing_a_device_twice(fn):
    if jax.devices()[0].platform != "cpu":
        pytest.skip("the message pins the CPU device's repr")
    with pytest.raises(ps.ShardingError, match=rf"^{fn}\(\): {TWICE}{FIX}"):
        MESH_USERS[fn](twice_mesh())


def test_init_sharded_checks_the_mesh_before_tracing():
    traced = []
    with pytest.raises(ps.ShardingError, match=r"lists .* 2 times"):
        ps.init_sharded(lambda k: traced.append(k) or W(jnp.ones((16, 8))), 0, twice_mesh(), RULES)
    assert traced == []


def test_make_mesh_of_a_device_twice():
    device = jax.devices()[0]
    twice = rf"devices lists {re.escape(repr(device))} 2 times.*devices="
    with pytest.raises(ps.ShardingError, match=twice):
        ps.make_mesh((2,), ("model",), devices=[device, device])
    with pytest.raises(ps.ShardingError, match=r"Pass distinct devices, e.g. devices=jax.devices"):
        ps.make_mesh((2, 1), ("data", "model"), devices=np.array([[device], [device]]))


# --- everything else ----------------------------------------------------------------------------


def mesh():
    n = jax.device_count()
    return ps.make_mesh((n,), ("model",))


BAD_ARGUMENTS = {
    "make_mesh of device ids": (
        lambda: ps.make_mesh((2,), ("x",), devices=[0, 1]),
        TypeError,
        r"devices must be jax devices, got 0 \(int\).*Pass devices from jax.devices\(\)",
    ),
    "make_mesh with the wrong device count": (
        lambda: ps.make_mesh((jax.device_count() + 1,), ("x",)),
        ValueError,
        r"holds \d+ devices, expected \d+ .*put -1 on one axis to infer it",
    ),
    "make_mesh with a repeated axis name": (
        lambda: ps.make_mesh((1, -1), ("data", "data")),
        ValueError,
        r"repeat a name; give each axis its own",
    ),
    "make_mesh with axis types as a string": (
        lambda: ps.make_mesh((-1,), ("x",), axis_types="auto"),
        TypeError,
        r"got the string 'auto', expected a jax.sharding.AxisType such as AxisType.Explicit",
    ),
    "a rule naming a mesh axis that does not exist": (
        lambda: ps.init(SPECS, 0, mesh(), {"embed": "modle", "mlp": None}),
        ps.ShardingError,
        r"maps to mesh axis 'modle', which the mesh does not have.*Did you mean 'model'\? Fix",
    ),
    "a logical axis without a rule": (
        lambda: ps.shardings({"w": ps.ParamSpec((16, 8), ("embd", "mlp"))}, mesh(), RULES),
        ps.ShardingError,
        r"w: logical axis 'embd' \(dim 0\) has no rule.*Did you mean 'embed'\?.*add 'embd': None",
    ),
    "one mesh axis for two dimensions": (
        lambda: ps.shardings({"w": ps.ParamSpec((16, 16), ("embed", "embed"))}, mesh(), RULES),
        ps.ShardingError,
        r"mesh axis 'model' is used twice.*Map one of them to another mesh axis or to None",
    ),
    "a dimension the mesh does not divide": (
        lambda: (
            ps.shardings(
                {"w": ps.ParamSpec((jax.device_count() + 1, 8), ("embed", "mlp"))},
                ps.make_mesh((-1,), ("model",)),
                RULES,
            )
            if jax.device_count() > 1
            else pytest.skip("every size divides into one device")
        ),
        ps.ShardingError,
        r"not divisible by \d+.*Pad the dimension to a multiple of",
    ),
    "constrain with too few logical axes": (
        lambda: ps.constrain(jnp.ones((4, 8)), ("embed",), mesh(), RULES),
        ps.ShardingError,
        r"1 logical axes \('embed',\) for shape \(4, 8\) of rank 2; give exactly one",
    ),
    "rules as a list of pairs": (
        lambda: ps.Rules([("embed", "model")]),
        TypeError,
        r"got list, expected a mapping from logical axis to mesh axes, e.g. Rules\(",
    ),
    "a ParamSpec with one axis name too few": (
        lambda: ps.ParamSpec((16, 8), ("embed",)),
        ValueError,
        r"got 1 names \('embed',\) for shape \(16, 8\) of rank 2, expected exactly one name",
    ),
    "a ParamSpec with a misspelt dtype": (
        lambda: ps.ParamSpec((16, 8), ("embed", "mlp"), dtype="flot32"),
        TypeError,
        r"dtype: got 'flot32', expected a dtype such as jnp.float32",
    ),
    "init with the key in the mesh's place": (
        lambda: ps.init(SPECS, mesh(), jax.random.key(0), RULES),
        TypeError,
        r"key: got Mesh .* Check the argument order: init\(specs, key, mesh, rules\)",
    ),
    "init of arrays instead of specs": (
        lambda: ps.init({"w": jnp.ones((16, 8))}, 0, mesh(), RULES),
        TypeError,
        r"w: got ArrayImpl of shape \(16, 8\), expected a ParamSpec.*Pass the spec tree",
    ),
    "init_sharded of params instead of a function": (
        lambda: ps.init_sharded({"w": jnp.ones(2)}, 0, mesh(), RULES),
        TypeError,
        r"fn must be a function key -> params, got dict. For a tree of ParamSpec use",
    ),
    "an initializer that ignores the shape": (
        lambda: ps.init(
            {"w": ps.ParamSpec((16, 8), ("embed", "mlp"), initializer=lambda k, s, d: jnp.ones(3))},
            0,
            mesh(),
            RULES,
        ),
        ValueError,
        r"the initializer of w returned shape \(3,\) .* must honour its arguments",
    ),
    "a process id out of range": (
        lambda: ps.initialize_distributed("localhost:1234", num_processes=2, process_id=5),
        ValueError,
        r"process_id 5 is out of range for num_processes=2: process ids run from 0 to 1.*Fix",
    ),
    "a coordinator without a port": (
        lambda: ps.initialize_distributed("localhost", num_processes=2, process_id=0),
        ValueError,
        r"coordinator_address must be 'host:port' of process 0, got 'localhost'.*Fix the",
    ),
    "no processes": (
        lambda: ps.initialize_distributed("localhost:1234", num_processes=0, process_id=0),
        ValueError,
        r"num_processes must be a positive int, got 0\..*Fix the arguments",
    ),
}


@pytest.mark.parametrize("case", list(BAD_ARGUMENTS))
def test_bad_argument(case):
    call, error, message = BAD_ARGUMENTS[case]
    with pytest.raises(error, match="(?s)" + message):  # problem lists span lines
        call()
