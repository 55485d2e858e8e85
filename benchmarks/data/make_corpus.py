"""Build a .jsonl corpus of about --gb gigabytes from text already on this machine (no download).

The paragraphs come from the Python standard library's sources and docs (``.py``, ``.txt``,
``.rst`` of the stdlib) and CPython's help topics; each document is a seeded random run of 1..12
paragraphs of at most 20 kB, so the corpus is as large as asked without being one text repeated.
Files of ~128 MB each go to --out (keep them out of git: e.g. /tmp/corpus).

    python benchmarks/data/make_corpus.py --gb 0.5 --out /tmp/corpus-0.5
"""

from __future__ import annotations

import argparse
import json
import random
import sysconfig
from pathlib import Path


def paragraphs() -> list[str]:
    from pydoc_data.topics import topics

    texts = list(topics.values())
    root = Path(sysconfig.get_paths()["stdlib"])
    for path in sorted(root.rglob("*")):
        if path.suffix in (".py", ".txt", ".rst") and path.is_file() and "test" not in path.parts:
            try:
                texts.append(path.read_text(encoding="utf-8"))
            except (UnicodeDecodeError, OSError):
                continue
    # Paragraphs of 40 B..20 kB: the stdlib holds a few MB-long "paragraphs" (data tables) that are
    # no prose and would make one document of a corpus dominate its tokenizing time.
    return [p for t in texts for p in t.split("\n\n") if 40 < len(p.strip()) <= 20_000]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gb", type=float, required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--file-mb", type=int, default=128)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    paras, rng = paragraphs(), random.Random(args.seed)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    total, target, index = 0, int(args.gb * 1e9), 0
    while total < target:
        with (out / f"part-{index:04d}.jsonl").open("w", encoding="utf-8") as f:
            size = 0
            while size < args.file_mb * 1e6 and total + size < target:
                doc = "\n\n".join(rng.choices(paras, k=rng.randint(1, 12)))
                line = json.dumps({"text": doc}) + "\n"
                f.write(line)
                size += len(line)
        total += size
        index += 1
    print(f"{len(paras):,} paragraphs -> {total / 1e9:.2f} GB in {index} files under {out}")


if __name__ == "__main__":
    main()
