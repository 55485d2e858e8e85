"""``RopeScaling``: the linear and Llama 3 stretches of RoPE's frequencies, and bad values."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import blox as bx


def test_linear_scaling_rotates_position_p_as_p_over_the_factor():
    x = jax.random.normal(jax.random.key(0), (6, 2, 8))
    scaled = bx.rope(x, jnp.arange(6), 500.0, bx.RopeScaling("linear", 4.0))
    np.testing.assert_allclose(scaled, bx.rope(x, jnp.arange(6) / 4.0, 500.0), atol=1e-6)


def test_llama3_keeps_high_frequencies_divides_low_ones_and_blends_between():
    scaling = bx.RopeScaling("llama3", 8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                             original_max_positions=64)  # fmt: skip
    freqs = 10000.0 ** (-np.arange(32, dtype=np.float32) / 32)
    got = np.asarray(scaling.frequencies(jnp.asarray(freqs)))
    wavelength = 2 * math.pi / freqs.astype(np.float64)
    high, low = wavelength < 64 / 4, wavelength > 64 / 1
    assert high.any() and low.any() and (~high & ~low).any()  # all three regions are tested
    np.testing.assert_allclose(got[high], freqs[high], rtol=1e-6)
    np.testing.assert_allclose(got[low], freqs[low] / 8, rtol=1e-6)
    middle = ~high & ~low
    smooth = (64 / wavelength[middle] - 1) / (4 - 1)
    want = (1 - smooth) * freqs[middle] / 8 + smooth * freqs[middle]
    np.testing.assert_allclose(got[middle], want, rtol=1e-5)
    # The blend is continuous: no jump where a region ends.
    assert np.all(np.diff(got) < 0)


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("yarn", 2.0), "kind='yarn' is not one of ['linear', 'llama3']"),
        (("linear", 0.0), "factor=0.0 must be a finite number > 0"),
        (("llama3", 8.0, 4.0, 1.0), "low_freq_factor=4.0 and high_freq_factor=1.0 must be finite"),
        (("llama3", 8.0, 1.0, 4.0, 0), "original_max_positions=0 must be > 0"),
    ],
)
def test_bad_scalings_are_named_with_an_example_that_works(args, needle):
    with pytest.raises(ValueError, match="Llama 3.2's is RopeScaling") as err:
        bx.RopeScaling(*args)
    assert needle in str(err.value)


def test_the_attention_takes_only_a_rope_scaling():
    graph = bx.Graph("net")
    with pytest.raises(TypeError, match=r"net/attn: rope_scaling must be a bx.RopeScaling .*dict"):
        bx.MultiHeadAttention(graph / "attn", 2, 4, use_rope=True,
                              rope_scaling={"rope_type": "linear", "factor": 2.0})  # fmt: skip
