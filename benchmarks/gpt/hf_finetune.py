"""Fine-tune an imported Hugging Face GPT-2 folder with its own tokenizer.json: does the loss fall?

Run: ``JAX_PLATFORMS=cpu .venv/bin/python benchmarks/gpt/hf_finetune.py [--shape small|gpt2-small]``
(prints a few lines; the figures go into ``benchmarks/gpt/RESULTS.md`` by hand).

Nothing is downloaded. The script

1. learns a byte-level BPE ``tokenizer.json`` (GPT-2's kind: ``<|endoftext|>`` is a special token)
   from the embedded corpus with the `tokenizers` library;
2. writes a randomly initialised GPT-2-shaped model (GPT-2's architecture: biases, LayerNorm eps
   1e-5, learned positions, tanh GELU, tied head) as a Hugging Face folder with that tokenizer, the
   way ``gpt export`` does;
3. ``gpt import``s the folder (the run keeps the tokenizer), then ``gpt train --init-from`` the
   imported run for ``--steps`` steps on the embedded corpus: ``data.tokenizer`` follows the
   source's tokenizer.json;
4. prints the train loss of the first and the last step (``metrics.csv``), ``gpt eval --text`` of
   held-out text (the last 5% of the corpus, inside the validation split) before and after, and a
   greedy sample decoded with the tokenizer.

``--shape small`` (default) is d_model 192, 4 layers, 6 heads, context 128: minutes on two CPU
cores. ``--shape gpt2-small`` is GPT-2 small's 768/12/12 (context 256; an accelerator's job).
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import io
import os
import tempfile
import time
from contextlib import redirect_stdout
from pathlib import Path

SHAPES = {
    "small": {"d_model": 192, "n_layers": 4, "n_heads": 6, "seq_len": 128},
    "gpt2-small": {"d_model": 768, "n_layers": 12, "n_heads": 12, "seq_len": 256},
}


def _tokenizer_json(path: Path, vocab: int, text: str) -> Path:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=["<|endoftext|>"],
        show_progress=False,
    )
    tok.train_from_iterator([text], trainer)
    tok.save(str(path))
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", default="small", choices=sorted(SHAPES))
    parser.add_argument("--vocab", type=int, default=2048, help="ids of the BPE tokenizer")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--seq-len", type=int, default=0, help="context; 0 = the shape's")
    args = parser.parse_args()
    os.environ.setdefault("WANDB_MODE", "disabled")

    import jax

    from gpt_models import (
        PRESETS,
        BPETokenizer,
        default_corpus,
        export_hf,
        init_params,
        load_run,
    )
    from gpt_models import (
        main as gpt,
    )

    work = Path(tempfile.mkdtemp(prefix="hf_finetune."))
    t0 = time.perf_counter()
    file = _tokenizer_json(work / "tokenizer.json", args.vocab, default_corpus())
    tok = BPETokenizer.from_file(file)
    model = dataclasses.replace(
        PRESETS["gpt2-small"].model,
        vocab_size=-(-tok.vocab_size // 64) * 64,
        vocab_real=tok.vocab_size if tok.vocab_size % 64 else 0,
        **{**SHAPES[args.shape], **({"seq_len": args.seq_len} if args.seq_len else {})},
    )
    params = init_params(model, jax.random.key(0))
    n_params = sum(p.value.size for p in params.values())
    hf = export_hf(model, params, work / "hf", tokenizer=file)
    with redirect_stdout(io.StringIO()):
        assert gpt(["import", str(hf), "--name", "imported", "--out", str(work)]) == 0
    t_import = time.perf_counter() - t0
    flags = ["train", "--init-from", str(work / "imported"), "--out", str(work), "--name", "ft",
             "--set", f"train.steps={args.steps}", "--set", f"train.batch_size={args.batch_size}",
             "--set", f"train.lr={args.lr}", "--set", "train.warmup_steps=2",
             "--set", "train.eval_batches=2",
             "--set", "sample.max_new_tokens=24", "--set", "sample.temperature=0"]  # fmt: skip
    t1 = time.perf_counter()
    with redirect_stdout(io.StringIO()):
        assert gpt(flags) == 0
    t_train = time.perf_counter() - t1
    with open(work / "ft" / "metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    losses = [(int(r["step"]), float(r["loss"])) for r in rows if r.get("loss")]
    cfg, _, _ = load_run(work / "ft")
    held_out = default_corpus()
    (work / "held_out.txt").write_text(held_out[-len(held_out) // 20 :])  # inside the val split
    scores = {}
    for run in ("imported", "ft"):
        text = io.StringIO()
        with redirect_stdout(text):
            assert (
                gpt(["eval", "--run", str(work / run), "--text", str(work / "held_out.txt")]) == 0
            )
        scores[run] = text.getvalue().strip().splitlines()[-1]
    out = io.StringIO()
    with redirect_stdout(out):
        assert gpt(["sample", "--run", str(work / "ft"), "--prompt", "The return statement"]) == 0
    print(
        f"shape {args.shape}: {n_params / 1e6:.2f} M params, tokenizer {tok.vocab_size} ids "
        f"(model vocab {cfg.model.vocab_size}, data.tokenizer = run's tokenizer.json: "
        f"{cfg.data.tokenizer.endswith('imported/tokenizer.json')}), batch {args.batch_size} x "
        f"{cfg.model.seq_len}, lr {args.lr}"
    )
    print(f"train loss (nats/token): step {losses[0][0]} {losses[0][1]:.3f} -> step "
          f"{losses[-1][0]} {losses[-1][1]:.3f}")  # fmt: skip
    print(f"held-out text (last 5% of the corpus), gpt eval --text: before {scores['imported']!r}, "
          f"after {scores['ft']!r}")  # fmt: skip
    print(f"tokenizer + export + import {t_import:.1f} s, {args.steps} steps {t_train:.1f} s "
          f"(with compile), load average {os.getloadavg()[0]:.1f}")  # fmt: skip
    print(f"greedy sample: {out.getvalue().strip()!r}")


if __name__ == "__main__":
    main()
