"""Today's Hugging Face families, imported and exported exactly, against transformers itself.

Each test builds a tiny random checkpoint with transformers (every weight drawn at random, norm
scales and biases included, so that no option can hide behind a zero or a one), then checks that
``import_hf`` gives transformers' logits within 1e-4 and its 20 greedy tokens (cached and
uncached, well past any sliding window), and that ``export_hf`` writes a folder transformers
reloads with the same logits and that imports back to the same config and params. They need torch
and transformers (nox -s interop installs them) and skip without.
"""

from __future__ import annotations

import dataclasses
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gpt_models import (
    CheckpointFormatError,
    LoRAConfig,
    export_adapter,
    export_hf,
    forward,
    generate,
    import_hf,
    init_params,
    main,
    train_loss,
)

pytestmark = pytest.mark.interop
torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

VOCAB = 100  # not a multiple of 64: the import pads it
SHAPE = {"vocab_size": VOCAB, "hidden_size": 32, "intermediate_size": 48,
         "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 2,
         "max_position_embeddings": 64}  # fmt: skip
WINDOW = {"sliding_window": 4}
SANDWICH_LAYERS = {"layer_types": ["sliding_attention", "sliding_attention", "full_attention"]}
# family -> (transformers config class, its options beyond the shape)
FAMILIES = {
    "Qwen2ForCausalLM": ("Qwen2Config", {"tie_word_embeddings": True}),
    "Qwen3ForCausalLM": ("Qwen3Config", {"head_dim": 16}),
    "MistralForCausalLM": ("MistralConfig", WINDOW),
    "Olmo2ForCausalLM": ("Olmo2Config", {"rms_norm_eps": 1e-5}),
    "Gemma2ForCausalLM": ("Gemma2Config", {
        **WINDOW, "head_dim": 16, "query_pre_attn_scalar": 12, "attn_logit_softcapping": 2.0,
        "final_logit_softcapping": 3.0, "layer_types": ["sliding_attention", "full_attention"] * 2,
        "num_hidden_layers": 4}),
    "Gemma3ForCausalLM": ("Gemma3TextConfig", {
        **WINDOW, **SANDWICH_LAYERS, "head_dim": 16, "query_pre_attn_scalar": 16,
        "rope_parameters": {"full_attention": {"rope_type": "default", "rope_theta": 10000.0},
                            "sliding_attention": {"rope_type": "default", "rope_theta": 50.0}}}),
    "MixtralForCausalLM": ("MixtralConfig", {**WINDOW, "num_local_experts": 4,
                                             "num_experts_per_tok": 2}),
    "Qwen3MoeForCausalLM": ("Qwen3MoeConfig", {"head_dim": 16, "num_experts": 4,
                                               "num_experts_per_tok": 2,
                                               "moe_intermediate_size": 24}),
}  # fmt: skip


def hf_model(arch: str, **changes):
    """A tiny ``arch`` with every weight random (seeded), in eval mode."""
    config_class, options = FAMILIES[arch]
    config = getattr(transformers, config_class)(**{**SHAPE, **options, **changes})
    config.architectures = [arch]
    torch.manual_seed(0)
    model = getattr(transformers, arch)(config).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.3)
    return model


def hf_logits(model, tokens: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        return model(torch.tensor(tokens)).logits.float().numpy()


def hf_greedy(model, prompt: np.ndarray, n: int) -> list[int]:
    with torch.no_grad():
        out = model.generate(torch.tensor(prompt), max_new_tokens=n, do_sample=False,
                             min_new_tokens=n, pad_token_id=0)  # fmt: skip
    return out[0, prompt.shape[1] :].tolist()


TOKENS = np.random.default_rng(0).integers(0, VOCAB, (2, 24))


@pytest.mark.parametrize("arch", list(FAMILIES))
def test_import_matches_transformers_and_export_reloads(arch, tmp_path):
    model = hf_model(arch)
    model.save_pretrained(tmp_path / "hf")
    cfg, params = import_hf(tmp_path / "hf")
    want = hf_logits(model, TOKENS)
    logits = np.asarray(forward(params, jnp.asarray(TOKENS), cfg))
    assert np.abs(logits[..., :VOCAB] - want).max() <= 1e-4
    prompt = TOKENS[:1, :3]
    greedy = hf_greedy(model, prompt, 20)  # 23 positions: far past a window of 4
    for cache in (True, False):
        out = generate(params, jnp.asarray(prompt), cfg, max_new_tokens=20, temperature=0.0,
                       key=jax.random.key(0), use_cache=cache)  # fmt: skip
        assert np.asarray(out)[0, -20:].tolist() == greedy
    export_hf(cfg, params, tmp_path / "out")
    assert json.loads((tmp_path / "out" / "config.json").read_text())["architectures"] == [arch]
    again = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "out").eval()
    assert np.abs(hf_logits(again, TOKENS) - want).max() <= 1e-4
    back_cfg, back = import_hf(tmp_path / "out")
    assert back_cfg == cfg
    assert all(np.array_equal(back[k].value, params[k].value) for k in params)


# Llama 3's RoPE scaling at a tiny size: with a base of 100 and 4 frequencies per head, one is
# kept, one blended and two divided (wavelengths 6.3, 20, 63 and 200 against 32 / 4 and 32 / 1).
LLAMA3_ROPE = {"rope_type": "llama3", "rope_theta": 100.0, "factor": 8.0, "low_freq_factor": 1.0,
               "high_freq_factor": 4.0, "original_max_position_embeddings": 32}  # fmt: skip


@pytest.mark.parametrize(
    "rope",
    [LLAMA3_ROPE, {"rope_type": "linear", "rope_theta": 100.0, "factor": 4.0}],
    ids=["llama3", "linear"],
)
def test_llama_with_rope_scaling_matches_transformers_and_exports_it_back(rope, tmp_path):
    config = transformers.LlamaConfig(**SHAPE, rope_parameters=dict(rope))
    config.architectures = ["LlamaForCausalLM"]
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.3)
    plain = transformers.LlamaForCausalLM(transformers.LlamaConfig(**SHAPE, rope_theta=100.0))
    plain.load_state_dict(model.state_dict())
    assert np.abs(hf_logits(plain.eval(), TOKENS) - hf_logits(model, TOKENS)).max() > 1e-2
    model.save_pretrained(tmp_path / "hf")
    cfg, params = import_hf(tmp_path / "hf")
    assert cfg.model.rope_scaling == rope["rope_type"]
    logits = np.asarray(forward(params, jnp.asarray(TOKENS), cfg))
    assert np.abs(logits[..., :VOCAB] - hf_logits(model, TOKENS)).max() <= 1e-4
    if rope["rope_type"] == "llama3":  # 20 greedy tokens, decoded with the cache
        prompt = TOKENS[:1, :3]
        out = generate(params, jnp.asarray(prompt), cfg, max_new_tokens=20, temperature=0.0,
                       key=jax.random.key(0))  # fmt: skip
        assert np.asarray(out)[0, -20:].tolist() == hf_greedy(model, prompt, 20)
    export_hf(cfg, params, tmp_path / "out")
    written = json.loads((tmp_path / "out" / "config.json").read_text())
    assert written["rope_parameters"] == rope
    assert written["rope_scaling"] == {k: v for k, v in rope.items() if k != "rope_theta"}
    again = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "out").eval()
    assert np.abs(hf_logits(again, TOKENS) - hf_logits(model, TOKENS)).max() <= 1e-4
    assert import_hf(tmp_path / "out")[0] == cfg


@pytest.mark.parametrize("arch", ["MixtralForCausalLM", "Qwen3MoeForCausalLM"])
def test_the_load_balancing_loss_is_transformers_aux_loss(arch, tmp_path):
    model = hf_model(arch, output_router_logits=True, router_aux_loss_coef=0.25)
    model.save_pretrained(tmp_path / "hf")
    cfg, params = import_hf(tmp_path / "hf")
    assert cfg.model.router_aux_loss_coef == 0.25
    batch = jnp.asarray(np.concatenate([TOKENS, TOKENS[:, :1]], axis=1))  # 24 inputs each
    stats = jax.jit(train_loss, static_argnums=2)(params, batch, cfg)[1]
    with torch.no_grad():
        out = model(torch.tensor(TOKENS))  # the router logits of the same 24 inputs
    assert abs(float(stats["aux_loss"]) - float(out.aux_loss)) <= 1e-4
    export_hf(cfg, params, tmp_path / "out")
    assert (
        json.loads((tmp_path / "out" / "config.json").read_text())["router_aux_loss_coef"] == 0.25
    )


def test_the_sliding_window_is_what_transformers_windows():
    """Logits beyond the window differ from the same model without one: the window is real."""
    windowed = hf_model("MistralForCausalLM")
    plain = hf_model("MistralForCausalLM", sliding_window=None)
    a, b = hf_logits(windowed, TOKENS), hf_logits(plain, TOKENS)
    assert np.abs(a[:, :4] - b[:, :4]).max() <= 1e-5 and np.abs(a[:, 5:] - b[:, 5:]).max() > 1e-2


@pytest.mark.parametrize(
    ("arch", "changes", "needle"),
    [
        ("Qwen2ForCausalLM", {"use_sliding_window": True},
         "use_sliding_window = True is not supported (expected false"),
        ("Qwen3ForCausalLM", {"rope_parameters": {"rope_type": "yarn", "factor": 2.0,
                                                  "rope_theta": 10000.0}},
         "rope_parameters.rope_type = 'yarn' is not supported (expected 'default', 'linear', "
         "'llama3')"),
        ("Gemma2ForCausalLM", {"rope_scaling": {"rope_type": "linear", "factor": 8.0}},
         "rope_scaling.rope_type = 'linear' is not supported (expected 'default' only)"),
        ("Gemma3ForCausalLM", {"layer_types": ["sliding_attention", "full_attention",
                                               "full_attention"]},
         "(expected layers 2, 4, ... 'full_attention' and the others 'sliding_attention')"),
        ("Olmo2ForCausalLM", {"attention_bias": True}, "attention_bias = True is not supported"),
        ("Gemma2ForCausalLM", {"hidden_activation": "gelu"},
         "hidden_activation = 'gelu' is not supported (expected 'gelu_pytorch_tanh')"),
        ("Qwen3MoeForCausalLM", {"decoder_sparse_step": 2},
         "decoder_sparse_step = 2 is not supported (expected 1 (experts on every layer))"),
        ("MixtralForCausalLM", {"num_local_experts": 5},
         "model.layers.0.block_sparse_moe.experts.4.w1.weight"),
    ],
)  # fmt: skip
def test_an_option_we_lack_is_named_and_nothing_is_written(arch, changes, needle, tmp_path,
                                                            capsys):  # fmt: skip
    hf_model(arch).save_pretrained(tmp_path / "hf")
    path = tmp_path / "hf" / "config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))
    capsys.readouterr()
    assert main(["import", str(tmp_path / "hf"), "--name", "run", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and len(err.splitlines()) == 1
    assert not (tmp_path / "run").exists()


def test_a_tensor_of_the_wrong_shape_is_named(tmp_path):
    from safetensors.numpy import load_file, save_file

    hf_model("Qwen3ForCausalLM").save_pretrained(tmp_path / "hf")
    weights = tmp_path / "hf" / "model.safetensors"
    tensors = load_file(weights)
    tensors["model.layers.1.self_attn.q_norm.weight"] = np.ones(8, np.float32)
    save_file(tensors, weights, metadata={"format": "pt"})
    with pytest.raises(CheckpointFormatError, match=r"model\.layers\.1\.self_attn\.q_norm\.weight"):
        import_hf(tmp_path / "hf")


# peft and transformers warn about each other's deprecations: theirs, not ours.
@pytest.mark.filterwarnings("ignore::FutureWarning")
@pytest.mark.parametrize("arch", ["Qwen2ForCausalLM", "Gemma3ForCausalLM"])
def test_lora_on_every_projection_exports_an_adapter_peft_loads(arch, tmp_path):
    """LoRA targets q, k, v, o, gate, up, down of the new families (Gemma's GeGLU gate too);
    peft puts the exported adapter on the exported base and gets our logits."""
    peft = pytest.importorskip("peft")
    hf_model(arch).save_pretrained(tmp_path / "hf")
    imported, _ = import_hf(tmp_path / "hf")
    cfg = dataclasses.replace(imported, lora=LoRAConfig(rank=4, alpha=8.0, targets="attn,mlp"))
    params = init_params(cfg, jax.random.key(0))
    keys = iter(jax.random.split(jax.random.key(5), len(params)))
    params = type(params)({
        path: p.replace(value=0.2 * jax.random.normal(next(keys), p.shape, p.dtype))
        if "lora_" in path[-1] else p
        for path, p in params.items()
    }).locked()  # fmt: skip
    export_adapter(cfg, params, tmp_path / "adapter")
    export_hf(cfg.model, params.split(lambda path, _: "lora" not in path[-1])[0], tmp_path / "base")
    base = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "base")
    model = peft.PeftModel.from_pretrained(base, tmp_path / "adapter").eval()
    ours = np.asarray(forward(params, jnp.asarray(TOKENS), cfg))[..., :VOCAB]
    assert np.abs(ours - hf_logits(model, TOKENS)).max() <= 1e-4
    merged = tmp_path / "merged"
    export_hf(cfg, params, merged)  # the adapters merged into the weights: a plain model
    plain = transformers.AutoModelForCausalLM.from_pretrained(merged).eval()
    assert np.abs(ours - hf_logits(plain, TOKENS)).max() <= 1e-4
