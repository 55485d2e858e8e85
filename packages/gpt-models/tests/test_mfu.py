"""MFU: the FLOPs a train step computes per token (full and LoRA runs), and the peaks: an exact
device-kind table, none on CPU, an override per device."""

import dataclasses
import re
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


# --- FLOPs per token ------------------------------------------------------------------------------


def _model(preset, **changes):
    return dataclasses.replace(gpt_models.PRESETS[preset].model, **changes)


@pytest.mark.parametrize(
    "model",
    [_model("gpt2-small"), _model("llama-tiny"), _model("tiny", n_kv_heads=2, mlp="swiglu")],
    ids=["gpt2-small", "llama-tiny", "tiny-gqa-swiglu"],
)
def test_full_training_counts_six_flops_per_weight_and_the_attention_square(model):
    d, f, L, hd = model.d_model, model.ff_dim, model.n_layers, model.head_dim
    attention = d * model.n_heads * hd * 2 + 2 * d * model.kv_heads * hd  # q, o; k, v
    mlp = (3 if model.mlp == "swiglu" else 2) * d * f
    n_matmul = L * (attention + mlp) + d * model.vocab_size
    expected = 6 * n_matmul + 12 * L * d * model.seq_len
    assert gpt_models.flops_per_token(model) == expected
    # A Config without LoRA counts the same as its model section.
    cfg = dataclasses.replace(gpt_models.PRESETS["tiny"], model=model)
    assert gpt_models.flops_per_token(cfg) == expected


def _lora_run(model, **lora):
    cfg = dataclasses.replace(gpt_models.PRESETS["finetune-lora"], model=model)
    return dataclasses.replace(cfg, lora=gpt_models.LoRAConfig(**lora))


def test_lora_counts_no_weight_gradient_for_frozen_weights_and_the_adapters_matmuls():
    # d 32, 2 layers, 2 heads of 16, one kv head (k and v: 32 -> 16), swiglu MLP of 64, vocab 320.
    model = _model("llama-tiny", d_model=32, n_layers=2, n_heads=2, n_kv_heads=1, d_ff=64,
                   vocab_size=320, vocab_real=300, seq_len=32)  # fmt: skip
    per_layer = 32 * 32 + 32 * 16 + 32 * 16 + 32 * 32 + 3 * 32 * 64  # q, k, v, o, gate/up/down
    n_matmul = 2 * per_layer + 32 * 320  # and the output projection onto the vocabulary
    adapters = 2 * (8 * (32 + 32) + 8 * (32 + 16))  # rank 8 on q (32 -> 32) and v (32 -> 16)
    attention = 12 * 2 * 32 * 32
    # Forward 2 and activation gradients 2 over every weight; weight gradients for none of them;
    # forward, activation and weight gradients (6) for the adapters.
    expected = 4 * n_matmul + 6 * adapters + attention
    assert expected == 150016
    assert gpt_models.flops_per_token(_lora_run(model, rank=8, targets="q,v")) == expected
    assert gpt_models.flops_per_token(_lora_run(model, rank=0, targets="q,v")) == (
        6 * n_matmul + attention
    )


def test_lora_on_the_mlp_of_a_model_without_a_gate_adapts_up_and_down():
    model = _model("tiny", d_model=32, n_layers=2, n_heads=2, seq_len=32)  # gelu, d_ff 128
    n_matmul = 2 * (4 * 32 * 32 + 2 * 32 * 128) + 32 * 256
    adapters = 2 * 2 * 4 * (32 + 128)  # 2 layers, up and down, rank 4
    expected = 4 * n_matmul + 6 * adapters + 12 * 2 * 32 * 32
    assert gpt_models.flops_per_token(_lora_run(model, rank=4, targets="mlp")) == expected


def test_dry_run_of_a_lora_run_prints_its_smaller_count(tmp_path, small_args, make_config, capsys):
    args = ["train", "--dry-run", "--out", str(tmp_path), *small_args, "--set", "lora.rank=8"]
    assert gpt_models.main(args) == 0
    out = capsys.readouterr().out
    found = re.search(r"FLOPs per token +(\S+) \(training, forward and backward; LoRA: frozen "
                      r"weights get no weight gradient\)", out)  # fmt: skip
    assert found, out
    full = gpt_models.flops_per_token(make_config())
    lora = gpt_models.flops_per_token(make_config(lora={"rank": 8}))
    assert found.group(1) == f"{lora:.3g}"
    assert float(found.group(1)) < full  # 1.68e+05 against 2.21e+05
