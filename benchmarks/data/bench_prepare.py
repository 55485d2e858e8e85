"""``gpt prepare`` on generated corpora: wall time, tokens/s against the raw batch encoder, peak RSS,
and a kill -9 + re-run that must give the same store as an uninterrupted run.

    python benchmarks/data/make_corpus.py --gb 0.1 --out /tmp/corpus-a
    python benchmarks/data/make_corpus.py --gb 0.3 --out /tmp/corpus-b
    python benchmarks/data/bench_prepare.py --tokenizer /tmp/tok.json /tmp/corpus-a /tmp/corpus-b

Each prepare runs in a child process: ``gpt_models.prepare`` timed inside it (so without the
import of gpt_models and JAX), its peak RSS from ``getrusage``. The baseline is the `tokenizers`
library's ``encode_batch_fast`` on the same documents in batches of 512 (read and JSON-parsed
outside the timed calls: only the encoder's own time counts), in a child process of the same run
right after. A re-run with the ``gpt prepare`` CLI then verifies the store and does nothing. The
kill test uses the CLI on the first corpus: killed with SIGKILL halfway (by the uninterrupted
run's process time), re-run, and its manifest's tokens and shard sha256s compared with the
uninterrupted store's (``--no-kill`` skips it, e.g. for a multi-GB corpus once the test has run
on a small one).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

GPT = [sys.executable, "-m", "gpt_models"]

RAW = r"""
import json, sys, time
from pathlib import Path
from tokenizers import Tokenizer
tok_arg, corpus, limit = sys.argv[1], Path(sys.argv[2]), float(sys.argv[3]) * 1e6
tok = None if tok_arg == "byte" else Tokenizer.from_file(tok_arg)
ntok, n, dt, batch = 0, 0, 0.0, []

def encode(texts):
    global ntok, dt
    t = time.perf_counter()
    if tok is None:
        ntok += sum(len(s.encode()) for s in texts)
    else:
        ntok += sum(len(e.ids) for e in tok.encode_batch_fast(texts, add_special_tokens=False))
    dt += time.perf_counter() - t

for f in sorted(corpus.rglob("*.jsonl")):
    for line in f.open(encoding="utf-8"):
        batch.append(json.loads(line)["text"])
        n += len(batch[-1])
        if len(batch) == 512:
            encode(batch)
            batch = []
        if limit and n >= limit:
            break
    if limit and n >= limit:
        break
encode(batch)
print(json.dumps({"tokens": ntok, "seconds": dt, "mb": n / 1e6}))
"""


PEAK = (
    "import json, resource, subprocess, sys; "
    "out = subprocess.run(sys.argv[1:], check=True, capture_output=True, text=True).stdout; "
    "print(json.dumps([resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, out]))"
)
# gpt_models.prepare timed inside the process: the work, without the ~5-25 s of importing
# gpt_models (JAX included) that a `gpt prepare` process also spends on this machine.
TIMED = (
    "import sys, time; from gpt_models import prepare; t = time.perf_counter(); "
    "prepare([sys.argv[1]], sys.argv[2], tokenizer=sys.argv[3]); print(time.perf_counter() - t)"
)


def _child(cmd: list[str]) -> tuple[float, float, str]:
    """Run ``cmd`` under a fresh parent: its wall seconds, peak RSS (MB) and stdout."""
    t = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", PEAK, *cmd], check=True, capture_output=True)
    rss, stdout = json.loads(out.stdout)
    return time.perf_counter() - t, rss / 1e3, stdout


def _prepare(corpus: str, out: Path, tok: str) -> list[str]:
    return [*GPT, "prepare", corpus, "--out", str(out), "--tokenizer", tok]


def _bytes(corpus: str) -> int:
    return sum(p.stat().st_size for p in Path(corpus).rglob("*") if p.is_file())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("corpora", nargs="+", help="corpus folders, smallest first")
    ap.add_argument("--tokenizer", default="byte")
    ap.add_argument("--raw-mb", type=float, default=0.0, help="0: the whole corpus")
    ap.add_argument("--work", default=None, help="where the stores go (default: a temp dir)")
    ap.add_argument("--no-kill", action="store_true", help="skip the kill -9 + re-run test")
    args = ap.parse_args()
    work = Path(args.work or tempfile.mkdtemp(prefix="bench-prepare-"))
    rows = []
    for corpus in args.corpora:
        store = work / (Path(corpus).name + "-store")
        shutil.rmtree(store, ignore_errors=True)
        cmd = [sys.executable, "-c", TIMED, corpus, str(store), args.tokenizer]
        wall, rss, inner = _child(cmd)
        m = json.loads((store / "manifest.json").read_text())
        tokens = m["tokens"]["train"] + m["tokens"]["val"]
        raw = json.loads(
            subprocess.run(
                [sys.executable, "-c", RAW, args.tokenizer, corpus, str(args.raw_mb)],
                check=True, capture_output=True, text=True,
            ).stdout
        )  # fmt: skip
        raw_rate = raw["tokens"] / raw["seconds"]
        rows.append({
            "corpus": corpus, "gb": _bytes(corpus) / 1e9, "process_wall_s": wall,
            "prepare_s": float(inner), "tokens": tokens, "tokens_per_s": tokens / float(inner),
            "raw_tokens_per_s": raw_rate, "ratio": tokens / float(inner) / raw_rate,
            "peak_rss_mb": rss,
        })  # fmt: skip
        print(json.dumps(rows[-1]), flush=True)
        t = time.perf_counter()
        subprocess.run(_prepare(corpus, store, args.tokenizer), check=True, capture_output=True)
        rerun = time.perf_counter() - t
        print(json.dumps({"corpus": corpus, "cli_rerun_verify_s": rerun}), flush=True)
    if args.no_kill:
        return
    # kill -9 halfway through the first corpus, then re-run
    corpus, first = args.corpora[0], rows[0]
    whole = json.loads((work / (Path(corpus).name + "-store") / "manifest.json").read_text())
    killed = work / "killed-store"
    shutil.rmtree(killed, ignore_errors=True)
    proc = subprocess.Popen(
        _prepare(corpus, killed, args.tokenizer),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    time.sleep(first["process_wall_s"] / 2)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    left = sorted(p.name for p in killed.iterdir())
    t = time.perf_counter()
    subprocess.run(_prepare(corpus, killed, args.tokenizer), check=True, capture_output=True)
    again = json.loads((killed / "manifest.json").read_text())
    print(json.dumps({
        "kill9_after_s": first["process_wall_s"] / 2, "files_after_kill": left,
        "manifest_after_kill": "manifest.json" in left, "rerun_s": time.perf_counter() - t,
        "tokens_equal": again["tokens"] == whole["tokens"],
        "shards_equal": again["shards"] == whole["shards"],
    }), flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
