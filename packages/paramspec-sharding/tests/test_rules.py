import jax
import jax.numpy as jnp
import pytest
from jax.sharding import NamedSharding, PartitionSpec

from paramspec import Rules, ShardingError, constrain, logical_to_sharding, make_mesh


@pytest.fixture(scope="module")
def mesh(device_grid):
    return make_mesh(device_grid, ("data", "model"))


RULES = Rules(
    {"batch": "data", "embed": "model", "mlp": "model", "vocab": None, "both": ("data", "model")}
)


def test_values_normalise_to_tuples_or_none():
    assert RULES["embed"] == ("model",)
    assert RULES["both"] == ("data", "model")
    assert RULES["vocab"] is None
    assert Rules({"x": ()})["x"] is None
    assert set(RULES) == {"batch", "embed", "mlp", "vocab", "both"}
    assert len(RULES) == 5


def test_rules_are_immutable_hashable_and_comparable():
    same = Rules(
        {
            "batch": "data",
            "embed": "model",
            "mlp": "model",
            "vocab": None,
            "both": ["data", "model"],
        }
    )
    assert same == RULES
    assert hash(same) == hash(RULES)
    with pytest.raises(TypeError):
        RULES["new"] = "data"  # type: ignore[index]


def test_repr_reads_like_the_constructor():
    assert (
        repr(Rules({"a": "x", "b": ("x", "y"), "c": None}))
        == "Rules({'a': 'x', 'b': ('x', 'y'), 'c': None})"
    )


def test_logical_to_sharding(mesh):
    s = logical_to_sharding(("batch", None, "embed"), mesh, RULES)
    assert isinstance(s, NamedSharding)
    assert s.spec == PartitionSpec("data", None, "model")
    assert logical_to_sharding(("both",), mesh, RULES).spec == PartitionSpec(("data", "model"))
    assert logical_to_sharding(None, mesh, RULES).spec == PartitionSpec()


def test_plain_mapping_is_accepted(mesh):
    assert logical_to_sharding(("embed",), mesh, {"embed": "data"}).spec == PartitionSpec("data")


def test_every_problem_is_reported_at_once(mesh):
    rules = Rules({"embed": "model", "mlp": "model", "heads": "modle"})
    with pytest.raises(ShardingError) as info:
        logical_to_sharding(("embd", "embed", "mlp", "heads"), mesh, rules)
    text = str(info.value)
    assert "(3 problems)" in text
    assert (
        "logical axis 'embd' (dim 0) has no rule. Known logical axes: 'embed', 'heads', 'mlp'."
        in text
    )
    assert "Did you mean 'embed'?" in text
    assert (
        "mesh axis 'model' is used twice, by logical axes 'embed' (dim 1) and 'mlp' (dim 2)" in text
    )
    assert (
        "maps to mesh axis 'modle', which the mesh does not have. Mesh axes: 'data', 'model'."
        in text
    )
    assert "Did you mean 'model'?" in text


def test_rules_type_errors():
    with pytest.raises(TypeError, match=r"Rules: got list, expected a mapping"):
        Rules([("a", "b")])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"Rules\['embed'\]: got 3, expected a mesh axis name"):
        Rules({"embed": 3})  # type: ignore[dict-item]
    with pytest.raises(TypeError, match=r"logical axis names must be strings, got 1"):
        Rules({1: "data"})  # type: ignore[dict-item]


def test_rules_repeated_mesh_axis_error():
    with pytest.raises(
        ValueError, match=r"Rules\['embed'\]: got \('data', 'data'\), which repeats"
    ):
        Rules({"embed": ("data", "data")})


def test_constrain_inside_jit(mesh, device_grid):
    @jax.jit
    def f(x):
        return constrain(x * 2, ("batch", "embed"), mesh, RULES)

    y = f(jnp.ones((4, 8)))
    # Compared as shardings: on a mesh axis of size 1 JAX may drop that axis from the spec.
    assert y.sharding.is_equivalent_to(NamedSharding(mesh, PartitionSpec("data", "model")), 2)
    d, m = device_grid
    assert y.addressable_shards[0].data.shape == (4 // d, 8 // m)
    assert "sharding" in str(jax.jit(f).lower(jnp.ones((4, 8))).as_text())


@pytest.mark.min_devices(2, why="a size that a data axis of 2 does not divide")
def test_constrain_error_names_shape_and_problems(mesh):
    with pytest.raises(ShardingError) as info:
        constrain(jnp.ones((3, 8)), ("batch", "embed"), mesh, RULES)
    assert (
        "array of shape (3, 8): dim 0 (logical axis 'batch') has size 3, not divisible by 2"
        in str(info.value)
    )
    with pytest.raises(
        ShardingError, match=r"1 logical axes \('batch',\) for shape \(3, 8\) of rank 2"
    ):
        constrain(jnp.ones((3, 8)), ("batch",), mesh, RULES)


def test_every_bad_rule_is_reported_at_once():
    with pytest.raises(TypeError) as info:
        Rules({1: "data", "embed": 3, "mlp": ("model", "model"), "ok": "data"})  # type: ignore[dict-item]
    text = str(info.value)
    assert "Rules: invalid entries (3 problems):" in text
    assert "got 1 of type int. Use the names that ParamSpec logical_axes use" in text
    assert "Rules['embed']: got 3, expected a mesh axis name" in text
    assert "Rules['mlp']: got ('model', 'model'), which repeats a mesh axis" in text
    with pytest.raises(ValueError, match=r"Rules: invalid entries \(2 problems\)"):
        Rules({"a": ("x", "x"), "b": ("y", "y")})
