import jax
import pytest
from jax.sharding import AxisType

from paramspec import make_mesh


def test_axes_default_to_auto(device_grid):
    mesh = make_mesh(device_grid, ("data", "model"))
    assert dict(mesh.shape) == dict(zip(("data", "model"), device_grid))
    assert tuple(mesh.axis_types) == (AxisType.Auto, AxisType.Auto)


def test_minus_one_is_inferred(device_grid):
    data, model = device_grid
    assert dict(make_mesh((-1, model), ("data", "model")).shape) == {"data": data, "model": model}


def test_axis_types_one_for_all_or_one_per_axis(device_grid):
    mesh = make_mesh(device_grid, ("a", "b"), AxisType.Explicit)
    assert tuple(mesh.axis_types) == (AxisType.Explicit,) * 2
    mesh = make_mesh(device_grid, ("a", "b"), (AxisType.Explicit, AxisType.Auto))
    assert tuple(mesh.axis_types) == (AxisType.Explicit, AxisType.Auto)


@pytest.mark.min_devices(2, why="a strict subset of the devices")
def test_subset_of_devices():
    mesh = make_mesh((2,), ("data",), devices=jax.devices()[:2])
    assert mesh.devices.size == 2


def test_shard_map_accepts_unsharded_inputs():
    # From JAX 0.9 jax.make_mesh defaults to Explicit axes and this call would be rejected.
    import jax.numpy as jnp
    from jax.sharding import PartitionSpec as P

    n = jax.device_count()
    mesh = make_mesh((n,), ("data",))
    f = jax.jit(jax.shard_map(lambda x: x * 2, mesh=mesh, in_specs=P("data"), out_specs=P("data")))
    assert f(jnp.arange(float(n))).tolist() == [2.0 * i for i in range(n)]


def test_wrong_device_count_error_text():
    n = jax.device_count()
    with pytest.raises(
        ValueError, match=rf"shape \(2, {n}\) holds {2 * n} devices, expected {n} .*-1 on one axis"
    ):
        make_mesh((2, n), ("a", "b"))


def test_length_mismatch_error_text():
    with pytest.raises(
        ValueError, match=r"shape \(8,\) has 1 axes but axis_names \('a', 'b'\) has 2"
    ):
        make_mesh((8,), ("a", "b"))


def test_repeated_name_error_text():
    with pytest.raises(ValueError, match=r"axis_names \('a', 'a'\) repeat a name"):
        make_mesh((2, 4), ("a", "a"))


def test_cannot_infer_error_text():
    n = jax.device_count()
    with pytest.raises(
        ValueError, match=rf"cannot infer the -1 in shape \({n + 1}, -1\): {n} devices"
    ):
        make_mesh((n + 1, -1), ("a", "b"))


def test_bad_sizes_error_text():
    with pytest.raises(ValueError, match=r"positive sizes and at most one -1"):
        make_mesh((-1, -1), ("a", "b"))
    with pytest.raises(TypeError, match=r"shape must be ints, got \(2.0, 4\)"):
        make_mesh((2.0, 4), ("a", "b"))


def test_bad_axis_types_error_text(device_grid):
    with pytest.raises(
        ValueError, match=r"axis_types .* must be one jax.sharding.AxisType, or one per axis"
    ):
        make_mesh(device_grid, ("a", "b"), (AxisType.Auto,))


def test_numpy_sizes_and_device_arrays(device_grid):
    import numpy as np

    data, model = device_grid
    mesh = make_mesh((np.int64(data), model), ("a", "b"))
    assert dict(mesh.shape) == {"a": data, "b": model}
    grid = np.array(jax.devices()).reshape(device_grid)  # as from mesh_utils.create_device_mesh
    assert make_mesh(device_grid, ("a", "b"), devices=grid).devices.size == jax.device_count()
    with pytest.raises(TypeError, match=r"shape must be ints, got \(True, 8\)"):
        make_mesh((True, 8), ("a", "b"))


def test_axis_types_as_a_string_error_text():
    with pytest.raises(TypeError, match=r"axis_types: got the string 'explicit', expected a"):
        make_mesh((jax.device_count(),), ("a",), "explicit")  # type: ignore[arg-type]
