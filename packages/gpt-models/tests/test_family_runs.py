"""Every Hugging Face family through the commands a fine-tune uses: ``gpt train --init-from`` a
folder of that family on chat data with LoRA, ``gpt eval`` of the run, and ``gpt export`` back to
the same family with the tokenizer and the chat template.

The folders are written by ``export_hf`` from random weights in each family's shape (no torch
needed); test_hf_families.py checks against transformers that those folders are the family's.
"""

from __future__ import annotations

import dataclasses
import json

import jax
import pytest

from gpt_models import PRESETS, export_hf, import_hf, init_params, load_run, main

SHAPE = {"vocab_size": 256, "seq_len": 64, "d_model": 32, "n_layers": 2, "n_heads": 2,
         "n_kv_heads": 1, "d_ff": 64}  # fmt: skip
GEMMA = {"mlp": "geglu", "norm_plus_one": True, "embed_scale": True,
         "norm_placement": "sandwich", "tie_embeddings": True, "sliding_window": 8,
         "global_every": 2}  # fmt: skip
# family -> the model keys (beyond a small Llama) that make export_hf write it
FAMILIES = {
    "Qwen2ForCausalLM": {"qkv_bias": True},
    "Qwen3ForCausalLM": {"qk_norm": True, "d_head": 8},
    "MistralForCausalLM": {"sliding_window": 8},
    "Olmo2ForCausalLM": {"qk_norm": True, "qk_norm_scope": "all", "norm_placement": "post"},
    "Gemma2ForCausalLM": {**GEMMA, "attn_softcap": 50.0, "logit_softcap": 30.0},
    "Gemma3ForCausalLM": {**GEMMA, "qk_norm": True, "rope_local_theta": 1000.0},
    "MixtralForCausalLM": {"n_experts": 4, "experts_per_token": 2},
    "Qwen3MoeForCausalLM": {"qk_norm": True, "n_experts": 4, "experts_per_token": 2,
                            "moe_d_ff": 16, "moe_norm_topk": False},
}  # fmt: skip
CHATS = [
    {"messages": [{"role": "user", "content": f"hi {i}"},
                  {"role": "assistant", "content": f"hello {i}!"}]}
    for i in range(24)
]  # fmt: skip


@pytest.fixture(scope="module")
def chat_store(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("chats")
    src = tmp / "chats.jsonl"
    src.write_text("".join(json.dumps(c) + "\n" for c in CHATS), encoding="utf-8")
    assert main(["prepare", str(src), "--out", str(tmp / "store"), "--val-fraction", "0.2"]) == 0
    return tmp / "store"


@pytest.mark.slow
@pytest.mark.parametrize("arch", list(FAMILIES))
def test_init_from_chat_sft_with_lora_eval_and_export_in_every_family(
    arch, chat_store, tmp_path, capsys
):
    model = dataclasses.replace(PRESETS["llama-tiny"].model, **SHAPE, **FAMILIES[arch])
    source = export_hf(model, init_params(model, jax.random.key(0)), tmp_path / "hf")
    assert json.loads((source / "config.json").read_text())["architectures"] == [arch]
    targets = "attn" if model.n_experts else "attn,mlp"  # the experts take no adapters
    args = ["train", "--init-from", str(source), "--out", str(tmp_path), "--name", "ft",
            "--set", f"data.path={chat_store}", "--set", "lora.rank=4",
            "--set", f"lora.targets={targets}", "--set", "train.steps=2",
            "--set", "train.batch_size=8", "--set", "train.warmup_steps=0",
            "--set", "train.eval_every=2", "--set", "train.eval_batches=1",
            "--set", "sample.max_new_tokens=2", "--set", "mesh.data=-1"]  # fmt: skip
    assert main(args) == 0
    cfg, _, step = load_run(tmp_path / "ft")
    assert step == 2 and cfg.lora.rank == 4
    capsys.readouterr()
    assert main(["eval", "--run", str(tmp_path / "ft")]) == 0
    assert capsys.readouterr().out.startswith("val_loss ")
    assert main(["export", str(tmp_path / "ft"), str(tmp_path / "out")]) == 0
    out = tmp_path / "out"
    assert json.loads((out / "config.json").read_text())["architectures"] == [arch]
    assert "chat_template" in json.loads((out / "tokenizer_config.json").read_text())
    assert import_hf(out)[0].model == import_hf(source)[0].model  # adapters merged, same shape
