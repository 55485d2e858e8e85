"""Batch building from a token store (shards read with pread) vs from the same ids in memory.

    python benchmarks/data/bench_batches.py STORE_DIR [--batch-size 32 --seq-len 128]

Times ``train_batch`` (what ``gpt train`` calls once per step) over the store's train split as
``load_dataset`` opens it and over ``np.concatenate`` of its shards, for a few hundred steps, and
prints milliseconds per step for both. Run it after a ``gpt train`` of the same shape to set the
figures against that run's step time. The first pass reads pages from disk (cold), the second
from the page cache.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from gpt_models import DataConfig, load_dataset, train_batch


def _ms_per_step(tokens: object, steps: int, batch: int, seq: int) -> float:
    t = time.perf_counter()
    for s in range(steps):
        train_batch(tokens, s, seed=0, batch_size=batch, grad_accum=1, seq_len=seq)  # type: ignore[arg-type]
    return (time.perf_counter() - t) / steps * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("store")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--vocab-size", type=int, default=8256)
    args = ap.parse_args()
    manifest = json.loads(Path(args.store, "manifest.json").read_text())
    tok = None
    if manifest["tokenizer"]["kind"] == "bpe":
        from gpt_models import BPETokenizer

        tok = BPETokenizer.load(f"{args.store}/tokenizer.json")
    cfg = DataConfig(path=args.store, tokenizer=manifest["tokenizer"]["kind"])
    t = time.perf_counter()
    ds = load_dataset(cfg, seq_len=args.seq_len, vocab_size=args.vocab_size, tokenizer=tok)
    open_s = time.perf_counter() - t
    shape = (args.steps, args.batch_size, args.seq_len)
    cold = _ms_per_step(ds.train, *shape)
    warm = _ms_per_step(ds.train, *shape)
    memory = np.asarray(ds.train[: len(ds.train)])
    mem = _ms_per_step(memory, *shape)
    print(json.dumps({
        "store": args.store, "train_tokens": len(ds.train), "open_and_verify_s": round(open_s, 2),
        "ms_per_step_store_cold": round(cold, 3), "ms_per_step_store_warm": round(warm, 3),
        "ms_per_step_in_memory": round(mem, 3), "batch": [args.batch_size, args.seq_len],
    }))  # fmt: skip


if __name__ == "__main__":
    main()
