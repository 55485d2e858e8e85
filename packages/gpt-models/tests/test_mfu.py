"""MFU peaks: an exact device-kind table, none on CPU, an override per device."""

import types

import jax.numpy as jnp
import pytest

import gpt_models


def _device(kind, platform="gpu"):
    return types.SimpleNamespace(device_kind=kind, platform=platform)


def test_peak_is_looked_up_by_the_exact_device_kind():
    assert (
        gpt_models.peak_flops([_device("NVIDIA H100 80GB HBM3")] * 2, jnp.bfloat16) == 2 * 989.4e12
    )
    # Substring matching gave a PCIe H100 the SXM figure and an L40 the L4's.
    assert gpt_models.peak_flops([_device("NVIDIA H100 PCIe")], jnp.bfloat16) == 756.5e12
    assert gpt_models.peak_flops([_device("NVIDIA L40")], jnp.bfloat16) == 181.05e12
    assert gpt_models.peak_flops([_device("NVIDIA H100")], jnp.bfloat16) is None
    assert gpt_models.PEAK_FLOPS["TPU v5 lite"] == 197e12


def test_float32_halves_a_gpu_peak_but_not_a_tpu_peak():
    assert gpt_models.peak_flops([_device("NVIDIA A100-SXM4-40GB")], jnp.float32) == 156e12
    assert gpt_models.peak_flops([_device("TPU v4", "tpu")], jnp.float32) == 275e12


def test_cpu_and_unknown_kinds_have_no_peak_unless_given_one():
    cpu = _device("cpu", "cpu")
    assert gpt_models.peak_flops([cpu], jnp.float32) is None
    assert gpt_models.peak_flops([cpu] * 4, jnp.float32, override=1e11) == 4e11  # per device
    assert gpt_models.peak_flops([_device("NVIDIA Future 9000")], jnp.bfloat16) is None


@pytest.mark.parametrize("kind", sorted(gpt_models.PEAK_FLOPS))
def test_every_table_entry_is_a_dense_figure_in_a_plausible_range(kind):
    assert 10e12 < gpt_models.PEAK_FLOPS[kind] < 5000e12
