"""Cost of the checkpoint digests on a gpt2-small-shaped checkpoint (params + Adam state).

Run: ``.venv/bin/python benchmarks/gpt/checkpoint_digest.py [--repeats 3] [--preset gpt2-small]``
(prints a few lines; the figures go into ``benchmarks/gpt/RESULTS.md`` by hand). It times, in one
process and on one device:

- ``save_call``: ``Checkpointer.save`` until it returns (what blocks the training loop);
- ``save``: ``Checkpointer.save`` + ``wait`` (orbax writes every file; the digest is computed and
  written in a thread meanwhile);
- ``*_nodigest``: the same with the digest turned off (orbax alone, the baseline);
- ``digest``: computing the same digest alone, not overlapped with anything;
- ``restore``: ``Checkpointer.restore`` of every item (includes reading and checking the digest);
- ``verify``: the restore's check alone.

Reported as medians of ``--repeats`` rounds and as ratios against the baseline measured in the
same round; the target is <= 5% of the save.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="gpt2-small")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    import jax
    import optax

    from gpt_models import PRESETS, Checkpointer, abstract_params, make_mesh
    from gpt_models.internal import PendingDigest, read_digest
    from gpt_models.internal import verify_digest as verify

    cfg = PRESETS[args.preset]
    mesh = make_mesh(cfg.mesh, jax.devices()[:1])
    abstract = abstract_params(cfg, mesh)
    keys = iter(jax.random.split(jax.random.key(0), len(jax.tree.leaves(abstract))))
    params = jax.tree.map(lambda s: jax.random.normal(next(keys), s.shape, s.dtype), abstract)
    opt_state = optax.adamw(1e-3).init(params)
    items = {"params": params, "train": {"opt_state": opt_state}}
    n_bytes = sum(x.nbytes for x in jax.tree.leaves(items))
    target = jax.tree.map(
        lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding), items
    )

    names = ("save_call", "save_call_nodigest", "save", "save_nodigest", "digest", "restore",
             "verify")  # fmt: skip
    times: dict[str, list[float]] = {k: [] for k in names}
    for r in range(args.repeats):
        for digests in (False, True):
            folder = tempfile.mkdtemp(prefix="digest-bench-")
            ckpt = Checkpointer(folder, keep=1)
            ckpt._digests = digests  # the baseline: orbax alone
            suffix = "" if digests else "_nodigest"
            t = time.perf_counter()
            ckpt.save(r, items, {"step": r})
            times["save_call" + suffix].append(time.perf_counter() - t)
            ckpt.wait()
            times["save" + suffix].append(time.perf_counter() - t)
            if digests:
                t = time.perf_counter()
                PendingDigest(items).result()
                times["digest"].append(time.perf_counter() - t)
                t = time.perf_counter()
                restored, _, _ = ckpt.restore(target)
                jax.block_until_ready(restored)
                times["restore"].append(time.perf_counter() - t)
                recorded = read_digest(ckpt.directory, r)
                assert recorded is not None
                t = time.perf_counter()
                verify(restored, recorded)
                times["verify"].append(time.perf_counter() - t)
            ckpt.close()
            shutil.rmtree(folder)

    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"{args.preset}: {n_bytes / 1e6:.0f} MB of arrays on {jax.devices()[0].platform}")
    for k, v in med.items():
        print(f"  {k:8s} {v:7.3f} s  (runs: {', '.join(f'{x:.3f}' for x in times[k])})")
    blocking = med["save_call"] / med["save_call_nodigest"] - 1
    print(f"  save() blocking, with / without digest: {blocking:+.1%}")
    print(
        f"  save + wait, with / without digest:     {med['save'] / med['save_nodigest'] - 1:+.1%}"
    )
    print(f"  digest alone / save without it:         {med['digest'] / med['save_nodigest']:.1%}")
    print(
        f"  verify / restore without it:            {med['verify'] / (med['restore'] - med['verify']):.1%}"
    )


if __name__ == "__main__":
    main()
