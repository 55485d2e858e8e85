import jax
import pytest
from jax.sharding import AxisType

from paramspec import make_mesh


def test_axes_default_to_auto():
    mesh = make_mesh((2, 4), ("data", "model"))
    assert dict(mesh.shape) == {"data": 2, "model": 4}
    assert tuple(mesh.axis_types) == (AxisType.Auto, AxisType.Auto)


def test_minus_one_is_inferred():
    assert dict(make_mesh((-1, 2), ("data", "model")).shape) == {"data": 4, "model": 2}


def test_axis_types_one_for_all_or_one_per_axis():
    mesh = make_mesh((2, 4), ("a", "b"), AxisType.Explicit)
    assert tuple(mesh.axis_types) == (AxisType.Explicit,) * 2
    mesh = make_mesh((2, 4), ("a", "b"), (AxisType.Explicit, AxisType.Auto))
    assert tuple(mesh.axis_types) == (AxisType.Explicit, AxisType.Auto)


def test_subset_of_devices():
    mesh = make_mesh((2,), ("data",), devices=jax.devices()[:2])
    assert mesh.devices.size == 2


def test_shard_map_accepts_unsharded_inputs():
    # From JAX 0.9 jax.make_mesh defaults to Explicit axes and this call would be rejected.
    import jax.numpy as jnp
    from jax.sharding import PartitionSpec as P

    mesh = make_mesh((8,), ("data",))
    f = jax.jit(jax.shard_map(lambda x: x * 2, mesh=mesh, in_specs=P("data"), out_specs=P("data")))
    assert f(jnp.arange(8.0)).tolist() == [2.0 * i for i in range(8)]


def test_wrong_device_count_error_text():
    with pytest.raises(
        ValueError, match=r"shape \(2, 2\) holds 4 devices, expected 8 .*-1 on one axis"
    ):
        make_mesh((2, 2), ("a", "b"))


def test_length_mismatch_error_text():
    with pytest.raises(
        ValueError, match=r"shape \(8,\) has 1 axes but axis_names \('a', 'b'\) has 2"
    ):
        make_mesh((8,), ("a", "b"))


def test_repeated_name_error_text():
    with pytest.raises(ValueError, match=r"axis_names \('a', 'a'\) repeat a name"):
        make_mesh((2, 4), ("a", "a"))


def test_cannot_infer_error_text():
    with pytest.raises(ValueError, match=r"cannot infer the -1 in shape \(3, -1\): 8 devices"):
        make_mesh((3, -1), ("a", "b"))


def test_bad_sizes_error_text():
    with pytest.raises(ValueError, match=r"positive sizes and at most one -1"):
        make_mesh((-1, -1), ("a", "b"))
    with pytest.raises(TypeError, match=r"shape must be ints, got \(2.0, 4\)"):
        make_mesh((2.0, 4), ("a", "b"))


def test_bad_axis_types_error_text():
    with pytest.raises(
        ValueError, match=r"axis_types .* must be one jax.sharding.AxisType, or one per axis"
    ):
        make_mesh((2, 4), ("a", "b"), (AxisType.Auto,))


def test_numpy_sizes_and_device_arrays():
    import numpy as np

    mesh = make_mesh((np.int64(2), 4), ("a", "b"))
    assert dict(mesh.shape) == {"a": 2, "b": 4}
    grid = np.array(jax.devices()).reshape(2, 4)  # as from mesh_utils.create_device_mesh
    assert make_mesh((2, 4), ("a", "b"), devices=grid).devices.size == 8
    with pytest.raises(TypeError, match=r"shape must be ints, got \(True, 8\)"):
        make_mesh((True, 8), ("a", "b"))


def test_axis_types_as_a_string_error_text():
    with pytest.raises(TypeError, match=r"axis_types: got the string 'explicit', expected a"):
        make_mesh((8,), ("a",), "explicit")  # type: ignore[arg-type]
