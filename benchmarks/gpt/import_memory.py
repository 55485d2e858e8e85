"""Peak memory of `import_hf` on a random GPT-2-small-shaped Hugging Face folder.

    python benchmarks/gpt/import_memory.py [--folder DIR]

Writes the folder once with ``export_hf`` (random float32 weights, vocabulary 50257 padded to
50304), then imports it in a fresh process and prints the peak RSS above that process's baseline
(JAX and gpt_models imported, the CPU device started) as a multiple of the parameter bytes.
Target: <= 1.3x.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

CHILD = """
import sys
import jax
from gpt_models import import_hf
jax.devices()
def rss():
    return int(open('/proc/self/statm').read().split()[1]) * 4096
base = rss()
cfg, params = import_hf(sys.argv[1])
nbytes = sum(v.nbytes for v in jax.tree.leaves(params))
# VmHWM, not ru_maxrss: a child's ru_maxrss starts at its parent's RSS at fork time.
status = open('/proc/self/status').read()
peak = int(status.split('VmHWM:')[1].split()[0]) * 1024
print(f"params {nbytes / 1e6:.0f} MB, baseline {base / 1e6:.0f} MB, peak {peak / 1e6:.0f} MB: "
      f"peak above baseline {(peak - base) / nbytes:.2f}x the params")
"""


def write_folder(folder: Path) -> None:
    import jax

    from gpt_models import PRESETS, export_hf, init_params

    model = PRESETS["gpt2-small"].model
    export_hf(model, init_params(model, jax.random.key(0)), folder)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--folder", type=Path, help="an existing folder to import (default: write one)")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = args.folder or Path(tmp) / "gpt2-small-random"
        if args.folder is None:
            write_folder(folder)
        out = subprocess.run([sys.executable, "-c", CHILD, str(folder)], check=True,
                             capture_output=True, text=True)  # fmt: skip
        print(out.stdout.strip())


if __name__ == "__main__":
    main()
