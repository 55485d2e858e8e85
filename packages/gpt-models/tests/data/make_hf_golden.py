"""Write the Hugging Face golden folders that tests/test_hf.py imports (needs torch + transformers).

Run by hand (or by the ``interop`` nox session) in an environment that has torch and transformers,
never in the project's .venv::

    python packages/gpt-models/tests/data/make_hf_golden.py

It builds two small random models with transformers, every weight (biases and norm scales
included) drawn from a normal distribution so that no term is zero, and saves for each:

- ``hf_gpt2/`` (``GPT2LMHeadModel``, one ``model.safetensors``; vocabulary 100, not a multiple of
  64, so the import pads it) and ``hf_llama/`` (``LlamaForCausalLM`` with grouped-query attention
  and an untied head, saved in shards with ``model.safetensors.index.json``);
- ``hf_gpt2.npz`` / ``hf_llama.npz``: ``tokens (2, 16)``, transformers' float32 ``logits``, its mean
  next-token ``loss`` on ``tokens``, and ``greedy``: the 20 tokens it picks greedily after
  ``tokens[0, :4]``.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import torch
import transformers

HERE = Path(__file__).resolve().parent


def _randomize(model: torch.nn.Module, seed: int) -> None:
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(("ln_1.weight", "ln_2.weight", "ln_f.weight", "norm.weight")):
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=gen))
            else:
                p.copy_(0.2 * torch.randn(p.shape, generator=gen))


def _write(name: str, model: torch.nn.Module, vocab: int, shard: str | None) -> None:
    model.eval()
    folder = HERE / name
    shutil.rmtree(folder, ignore_errors=True)
    kwargs = {"max_shard_size": shard} if shard else {}
    model.save_pretrained(folder, safe_serialization=True, **kwargs)
    gen = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, vocab, (2, 16), generator=gen)
    with torch.no_grad():
        out = model(tokens, labels=tokens)
        greedy = model.generate(
            tokens[:1, :4], max_new_tokens=20, do_sample=False, pad_token_id=0,
            attention_mask=torch.ones_like(tokens[:1, :4]),
        )  # fmt: skip
    np.savez(
        HERE / f"{name}.npz",
        tokens=tokens.numpy().astype(np.int32),
        logits=out.logits.float().numpy(),
        loss=np.float32(out.loss.item()),
        greedy=greedy[0, 4:].numpy().astype(np.int32),
    )
    print(f"{name}: loss {out.loss.item():.6f}, greedy {greedy[0, 4:].tolist()}")


def main() -> None:
    torch.manual_seed(0)
    gpt2 = transformers.GPT2LMHeadModel(
        transformers.GPT2Config(
            vocab_size=100, n_positions=32, n_embd=32, n_layer=2, n_head=2,
            resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
        )
    )  # fmt: skip
    _randomize(gpt2, 0)
    gpt2.tie_weights()
    _write("hf_gpt2", gpt2, 100, None)
    llama = transformers.LlamaForCausalLM(
        transformers.LlamaConfig(
            vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
            rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False,
        )
    )  # fmt: skip
    _randomize(llama, 1)
    _write("hf_llama", llama, 96, "40KB")


if __name__ == "__main__":
    main()
