"""Export our trained tiny runs and check that transformers reproduces their logits (opt-in).

Needs gpt_models and torch + transformers in one environment (the ``interop`` nox session makes
it); run from the repository root::

    python packages/gpt-models/tests/data/check_hf_interop.py [WORK_DIR]

For a GPT-2-shaped and a Llama-shaped model it trains a few steps with ``gpt_models.train``,
exports the run with ``gpt export``, loads the folder with
``transformers.AutoModelForCausalLM.from_pretrained`` (which must report no missing, unexpected or
mismatched key) and compares transformers' float32 logits with ours (max |diff| <= 1e-4) and the
greedy 20-token continuations (identical). Exits non-zero on any mismatch.
"""

from __future__ import annotations

import dataclasses
import io
import sys
import tempfile
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import torch
import transformers

import gpt_models

SHAPE = {"seq_len": 32, "d_model": 32, "n_layers": 2, "n_heads": 4}


def _config(preset: str) -> gpt_models.Config:
    base = gpt_models.PRESETS[preset]
    model = dataclasses.replace(base.model, **SHAPE, vocab_size=256, vocab_real=0)
    if preset == "llama-tiny":
        model = dataclasses.replace(model, n_kv_heads=2, d_ff=64)
    train = dataclasses.replace(
        base.train, steps=5, batch_size=8, warmup_steps=1, grad_accum=1, eval_batches=1
    )
    return dataclasses.replace(base, model=model, train=train)


def check(preset: str, work: Path) -> float:
    cfg = _config(preset)
    run = work / preset
    gpt_models.train(cfg, run, stream=io.StringIO(), write_sample=False)
    out = work / f"{preset}-hf"
    assert gpt_models.main(["export", str(run), str(out)]) == 0
    cfg, params, _ = gpt_models.load_run(run)
    model, info = transformers.AutoModelForCausalLM.from_pretrained(out, output_loading_info=True)
    bad = {k: v for k, v in info.items() if v}
    assert not bad, f"{preset}: transformers reports {bad}"
    model.eval()
    tokens = np.random.default_rng(0).integers(0, 256, (2, 16)).astype(np.int32)
    ours = np.asarray(gpt_models.forward(params, jnp.asarray(tokens), cfg))
    with torch.no_grad():
        theirs = model(torch.tensor(tokens).long()).logits.float().numpy()
    diff = float(np.abs(ours - theirs).max())
    prompt = tokens[:1, :4]
    mine = gpt_models.generate(params, jnp.asarray(prompt), cfg, max_new_tokens=20,
                               temperature=0.0, key=jax.random.key(0))  # fmt: skip
    with torch.no_grad():
        greedy = model.generate(torch.tensor(prompt).long(), max_new_tokens=20, do_sample=False,
                                attention_mask=torch.ones(1, 4, dtype=torch.long),
                                pad_token_id=0)  # fmt: skip
    same = np.asarray(mine)[0, -20:].tolist() == greedy[0, 4:].tolist()
    print(f"{preset}: logits max|diff| {diff:.2e} vs transformers, greedy 20 identical: {same}")
    assert diff <= 1e-4 and same, preset
    return diff


def main() -> None:
    work = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp())
    for preset in ("gpt2-small", "llama-tiny"):
        check(preset, work)


if __name__ == "__main__":
    main()
