"""A two-source mixture's batches: the ``data.sources`` sampler against grain's ``MapDataset.mix``.

    python benchmarks/data/bench_mixture.py [--steps 1000 --batch-size 32 --seq-len 128]

Both pipelines build the same thing from two token arrays (12M and 3M random uint16 ids, written
as nanoGPT ``.bin`` files to a temporary folder and memory-mapped) at weights 0.8/0.2: step ``s``'s batch of ``--batch-size`` windows of ``--seq-len + 1`` ids.
Printed per pipeline: milliseconds per batch, the observed token shares of the two sources over
``--steps`` steps, and whether step ``s``'s batch is the same when asked for again out of order
(what a resumed run needs). grain is optional: without it only the ``data.sources`` sampler is
measured (grain is not a dependency of gpt-models; install it into a scratch environment, e.g.
``pip install grain``, and put this checkout's packages on ``PYTHONPATH``).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

from gpt_models import DataConfig, DataSource, load_dataset, train_batch

SIZES = (12_000_000, 3_000_000)
WEIGHTS = (0.8, 0.2)


def _ours(paths: list[Path], args: argparse.Namespace) -> dict[str, object]:
    sources = tuple(DataSource(str(p), w) for p, w in zip(paths, WEIGHTS, strict=True))
    data = DataConfig(sources=sources, val_fraction=0.01)
    mix = load_dataset(data, seq_len=args.seq_len, vocab_size=8192).train

    def batch(step: int) -> np.ndarray:
        return train_batch(mix, step, seed=0, batch_size=args.batch_size, grad_accum=1,
                           seq_len=args.seq_len)[0]  # fmt: skip

    t = time.perf_counter()
    batches = [batch(s) for s in range(args.steps)]
    ms = (time.perf_counter() - t) / args.steps * 1e3
    rows = np.concatenate([mix.row_sources(s, seed=0, batch_size=args.batch_size)  # type: ignore[union-attr]
                           for s in range(args.steps)])  # fmt: skip
    again = all((batch(s) == batches[s]).all() for s in (args.steps - 1, 7, args.steps // 2))
    return {"ms": ms, "shares": np.bincount(rows, minlength=2) / len(rows), "again": again}


def _grain(paths: list[Path], args: argparse.Namespace) -> dict[str, object] | None:
    try:
        import grain
    except ImportError:
        return None
    parts = [np.memmap(p, dtype=np.uint16, mode="r") for p in paths]
    L = args.seq_len + 1
    sources = []
    for k, arr in enumerate(parts):
        # Every start of a window, in a seeded random order: grain's random access by index.
        ds = (
            grain.MapDataset.range(len(arr) - L)
            .shuffle(seed=k)
            .map(lambda s, arr=arr, k=k: (k, arr[s : s + L].astype(np.int32)))
        )
        sources.append(ds)
    mixed = grain.MapDataset.mix(sources, weights=list(WEIGHTS)).batch(args.batch_size)

    t = time.perf_counter()
    batches = [mixed[s] for s in range(args.steps)]
    ms = (time.perf_counter() - t) / args.steps * 1e3
    rows = np.concatenate([b[0] for b in batches])
    again = all((mixed[s][1] == batches[s][1]).all() for s in (args.steps - 1, 7, args.steps // 2))
    it = iter(mixed.to_iter_dataset())
    t = time.perf_counter()
    for _ in range(args.steps):
        next(it)
    ms_iter = (time.perf_counter() - t) / args.steps * 1e3
    state = it.get_state()
    return {"ms": ms, "ms_iter": ms_iter, "shares": np.bincount(rows, minlength=2) / len(rows),
            "again": again, "state": state}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--seq-len", type=int, default=128)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    folder = Path(tempfile.mkdtemp())
    paths = [folder / f"{name}.bin" for name in ("a", "b")]
    for path, n in zip(paths, SIZES, strict=True):
        rng.integers(0, 8192, n, dtype=np.uint16).tofile(path)
    for name, fn in (("data.sources", _ours), ("grain MapDataset.mix", _grain)):
        r = fn(paths, args)
        if r is None:
            print(f"{name}: not installed")
            continue
        shares = ", ".join(f"{x:.4f}" for x in r["shares"])  # type: ignore[union-attr]
        extra = (
            f", iterator {r['ms_iter']:.3f} ms/batch, state {r['state']}" if "ms_iter" in r else ""
        )
        print(f"{name}: {r['ms']:.3f} ms/batch (random access){extra}; token shares {shares}; "
              f"same batch asked again: {r['again']}")  # fmt: skip


if __name__ == "__main__":
    main()
