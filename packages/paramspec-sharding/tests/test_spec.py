import jax
import jax.numpy as jnp
import numpy as np
import pytest

from core_primitives import HasLogicalAxes, has_logical_axes
from paramspec import ParamSpec, is_param_spec


def test_fields_are_normalised():
    spec = ParamSpec([3, np.int64(4)], ["embed", None], dtype="bfloat16")
    assert spec.shape == (3, 4)
    assert spec.logical_axes == ("embed", None)
    assert spec.dtype == jnp.bfloat16
    assert (spec.ndim, spec.size, spec.nbytes) == (2, 12, 24)


def test_satisfies_the_core_protocol_and_is_a_leaf():
    spec = ParamSpec((2,), ("embed",))
    assert isinstance(spec, HasLogicalAxes)
    assert has_logical_axes(spec)
    assert is_param_spec(spec)
    assert jax.tree.leaves({"a": spec}) == [spec]


def test_none_logical_axes_replicate_every_dim():
    assert ParamSpec((2, 3), None).logical_axes == (None, None)


def test_a_bare_string_is_one_axis_not_letters():
    assert ParamSpec((4,), "embed").logical_axes == ("embed",)


def test_default_initializer_depends_on_rank():
    key = jax.random.key(0)
    bias = ParamSpec((5,), ("mlp",))
    kernel = ParamSpec((64, 32), ("embed", "mlp"))
    assert float(jnp.abs(bias.initializer(key, bias.shape, bias.dtype)).sum()) == 0.0
    w = kernel.initializer(key, kernel.shape, kernel.dtype)
    assert 0.05 < float(w.std()) < 0.2  # lecun normal: std = 1/sqrt(64)


def test_equal_specs_are_equal_and_hashable():
    a = ParamSpec((3, 4), ("embed", "mlp"))
    b = ParamSpec((3, 4), ("embed", "mlp"))
    assert a == b
    assert hash(a) == hash(b)


def test_rank_mismatch_error_text():
    with pytest.raises(ValueError, match=r"got 1 names \('embed',\) for shape \(3, 4\) of rank 2"):
        ParamSpec((3, 4), ("embed",))


def test_bad_shape_error_text():
    with pytest.raises(TypeError, match=r"shape: got \(3.5, 4\), expected a tuple of ints"):
        ParamSpec((3.5, 4), ("a", "b"))
    with pytest.raises(ValueError, match=r"got \(-1, 4\), expected non-negative"):
        ParamSpec((-1, 4), ("a", "b"))


def test_bad_axes_error_text():
    with pytest.raises(
        TypeError, match=r"logical_axes: got \('a', 1\), expected a tuple of axis names"
    ):
        ParamSpec((3, 4), ("a", 1))


def test_bad_initializer_error_text():
    with pytest.raises(
        TypeError, match=r"initializer: got 0.02 of type float, expected a callable"
    ):
        ParamSpec((3,), ("a",), initializer=0.02)


@pytest.mark.parametrize("dtype", ["floaty", None])
def test_bad_dtype_error_text(dtype):
    with pytest.raises(
        TypeError, match=rf"ParamSpec dtype: got {dtype!r}, expected a dtype such as"
    ):
        ParamSpec((3,), ("a",), dtype=dtype)


def test_bool_dimension_and_non_array_dtype_are_refused():
    with pytest.raises(TypeError, match=r"shape: got \(True, 4\), expected a tuple of ints"):
        ParamSpec((True, 4), ("a", "b"))
    with pytest.raises(TypeError, match=r"dtype: got <class 'object'>, expected a dtype such as"):
        ParamSpec((3,), ("a",), dtype=object)
    with pytest.raises(TypeError, match=r"dtype: got 'U', expected a dtype"):
        ParamSpec((3,), ("a",), dtype="U")
