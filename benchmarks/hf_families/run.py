"""The table of the Hugging Face families: one row per family, against transformers itself.

For each family of gpt-models' ``tests/test_hf_families.py`` (the same tiny random checkpoints,
built by transformers): the logits' max |diff| after ``import_hf``, whether 20 greedy tokens
(KV cache, past the sliding window) equal transformers', the max |diff| of transformers' logits
on the ``export_hf`` folder, and the wall time of ``import_hf``. Needs torch and transformers
(``nox -s interop`` installs them). ``python benchmarks/hf_families/run.py [--out RESULTS.md]``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from gpt_models import export_hf, forward, generate, import_hf

sys.path.insert(0, str(Path(__file__).parents[2] / "packages" / "gpt-models" / "tests"))
from test_hf_families import FAMILIES, TOKENS, VOCAB, hf_greedy, hf_logits, hf_model


def row(arch: str, folder: Path) -> str:
    import transformers

    model = hf_model(arch)
    model.save_pretrained(folder / "hf")
    start = time.perf_counter()
    cfg, params = import_hf(folder / "hf")
    seconds = time.perf_counter() - start
    want = hf_logits(model, TOKENS)
    logits = np.asarray(forward(params, jnp.asarray(TOKENS), cfg))[..., :VOCAB]
    prompt = TOKENS[:1, :3]
    ours = generate(params, jnp.asarray(prompt), cfg, max_new_tokens=20, temperature=0.0,
                    key=jax.random.key(0))  # fmt: skip
    greedy = np.asarray(ours)[0, -20:].tolist() == hf_greedy(model, prompt, 20)
    export_hf(cfg, params, folder / "out")
    again = transformers.AutoModelForCausalLM.from_pretrained(folder / "out").eval()
    reload = np.abs(hf_logits(again, TOKENS) - want).max()
    diff = np.abs(logits - want).max()
    return f"| {arch} | {diff:.1e} | {greedy} | {reload:.1e} | {seconds:.2f} s |"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    lines = ["| family | logits max abs diff | greedy 20 equal | export reload max abs diff "
             "| import time |", "|---|---|---|---|---|"]  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        for arch in FAMILIES:
            lines.append(row(arch, Path(tmp) / arch))
            print(lines[-1], flush=True)
    if args.out:
        args.out.write_text("\n".join(lines) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
