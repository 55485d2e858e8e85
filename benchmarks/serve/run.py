"""`gpt serve` under load: N concurrent clients against requests sent one at a time.

A model of the `tiny` preset's shape (random weights: the speed does not depend on them) is made
a run folder (`export_hf` + `gpt import`), served by `gpt serve --max-batch 16` in a subprocess,
and asked for fixed-length completions (`ignore_eos`, so every request makes `--new` tokens) by
1 (sequential), 4 and 16 client threads at once, each with the official `openai` client. Reported:
completion tokens/s over the wall time, and the p50/p95 latency of one request; then the
server's KV cache as its pre-flight sized it against the process's measured peak RSS.

    python benchmarks/serve/run.py [--requests 32] [--new 64] [--out benchmarks/serve/RESULTS.md]

Not a test: CI does not run it (`nox -s bench` does).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from provenance import provenance

HERE = Path(__file__).resolve().parent
PROMPT = "The quick brown fox jumps over the lazy dog. "  # 45 byte tokens


def make_run(root: Path) -> tuple[Path, str]:
    """The run folder, and its model in words."""
    import jax

    from gpt_models import PRESETS, export_hf, init_params, main

    cfg = dataclasses.replace(PRESETS["tiny"].model, pos="rope", norm="rmsnorm", mlp="swiglu",
                              bias=False, tie_embeddings=False)  # fmt: skip
    export_hf(cfg, init_params(cfg, jax.random.key(0)), root / "hf")
    assert main(["import", str(root / "hf"), "--name", "bench", "--out", str(root)]) == 0
    shape = (f"d_model {cfg.d_model}, {cfg.n_layers} layers, {cfg.n_heads} heads, seq_len "
             f"{cfg.seq_len}")  # fmt: skip
    return root / "bench", shape


def start(run: Path, log: Path, max_batch: int) -> tuple[subprocess.Popen, str]:
    cmd = [sys.executable, "-m", "gpt_models", "serve", str(run), "--port", "0",
           "--max-batch", str(max_batch), "--max-queue", "64"]  # fmt: skip
    with log.open("w") as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err)
    while "gpt serve: ready" not in log.read_text():
        if proc.poll() is not None:
            raise SystemExit(f"gpt serve exited:\n{log.read_text()}")
        time.sleep(0.2)
    return proc, re.search(r"on (http://\S+)", log.read_text()).group(1)  # type: ignore[union-attr]


def measure(url: str, clients: int, requests: int, new: int) -> dict[str, float]:
    import openai

    client = openai.OpenAI(base_url=url, api_key="none", max_retries=0, timeout=600)

    def one(i: int) -> tuple[float, int]:
        start = time.perf_counter()
        out = client.completions.create(
            model="bench", prompt=PROMPT, max_tokens=new, temperature=0.8, seed=i,
            extra_body={"ignore_eos": True},
        )  # fmt: skip
        return time.perf_counter() - start, out.usage.completion_tokens

    one(-1)  # warm: the prompt's bucket compiled
    start = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(clients) as pool:
        done = list(pool.map(one, range(requests)))
    wall = time.perf_counter() - start
    latencies = sorted(t for t, _ in done)
    return {
        "tokens_s": sum(n for _, n in done) / wall,
        "p50": statistics.median(latencies),
        "p95": latencies[min(len(latencies) - 1, round(0.95 * (len(latencies) - 1)))],
        "wall": wall,
    }


def peak_rss(pid: int) -> str:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return f"{int(line.split()[1]) / 1024:.0f} MiB"
    return "unknown"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=32, help="requests per row")
    parser.add_argument("--new", type=int, default=64, help="tokens each request makes")
    parser.add_argument("--out", default=str(HERE / "RESULTS.md"), help="the report to write")
    args = parser.parse_args()
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        run, shape = make_run(Path(tmp))
        log = Path(tmp) / "serve.log"
        proc, url = start(run, log, 16)
        try:
            rows = {c: measure(url, c, args.requests, args.new) for c in (1, 4, 16)}
            rss = peak_rss(proc.pid)
        finally:
            proc.terminate()
            proc.wait(timeout=120)
        text = log.read_text()
    kv = re.search(r"^KV cache\s+(.*)$", text, re.MULTILINE).group(1)  # type: ignore[union-attr]
    program = re.search(r"memory\s+(\S+ \S+)", text).group(1)  # type: ignore[union-attr]
    base = rows[1]["tokens_s"]
    table = "\n".join(
        f"| {'1 (sequential)' if c == 1 else c} | {r['tokens_s']:.0f} | {r['tokens_s'] / base:.1f}x "
        f"| {r['p50']:.2f} | {r['p95']:.2f} |"
        for c, r in rows.items()
    )
    load = f"{load_before:.1f} before, {os.getloadavg()[0]:.1f} after"
    cmd = "python benchmarks/serve/run.py"
    report = f"""# `gpt serve`: concurrent clients against sequential requests

{provenance(cmd)}

The `tiny` preset's shape ({shape}; Llama-style: RoPE, RMSNorm,
SwiGLU), random weights, served by `gpt serve --max-batch 16`; each request is a {len(PROMPT)}-token
prompt and {args.new} new tokens (`ignore_eos`). Each row sends {args.requests} requests from as
many client threads as its first column says (the official `openai` client; each thread sends its
next request when its last one is answered), after one warm-up request. Tokens/s: completion
tokens over the row's wall time; latency: one request, end to end. Machine load average (1 min): {load}.

| concurrent clients | tokens/s | vs sequential | p50 latency (s) | p95 latency (s) |
|---|---|---|---|---|
{table}

Memory: the pre-flight's KV cache is {kv}; the decoding step it compiled needs {program}
(cache, weights and temporaries); the server process's peak RSS was {rss} (the Python
interpreter, JAX and XLA's compiled programs, uvicorn, and the arrays).

A step decodes the busy slots only (rounded up to a power of two), so a request alone does not
pay for 16 slots; more slots per step cost more on a CPU, whose matmuls are already busy at a
batch of one, so batching gains here are well below the concurrency. An accelerator, idle at a
batch of one, gains more per slot: measure there before sizing a deployment.
"""
    Path(args.out).write_text(report)
    print(report)


if __name__ == "__main__":
    main()
