"""gpt_models benchmark: our train step vs a minimal hand-written JAX + optax step, and checkpoints.

Run: ``.venv/bin/python benchmarks/gpt/run.py`` (writes ``benchmarks/gpt/RESULTS.md``).

* Throughput: tokens/s and MFU of ``tiny`` and a ~10M-parameter config on CPU, our jitted step
  (``gpt_models`` blox model, lox metrics, paramspec shardings, donation) against a plain JAX +
  optax step of the same architecture written in ~60 lines below, run in the same process in
  alternating rounds (so machine load hits both alike); the ratio is what the abstractions cost.
* Compile time of the first step (ours).
* Checkpoint save (the blocking part: until ``save`` returns and training could go on) and restore of
  a ``gpt2-small`` train state (params and Adam moments, ~1.5 GB).
* Peak host memory of sharded ``init_params`` for ``gpt2-small`` on 8 CPU devices
  (``init_memory.py``, in its own process).
* On a GPU: ``gpt2-small`` tokens/s and MFU with bf16 compute.
* With ``--peer``: side by side with the PyTorch peer trainer (``peer.py``), separate processes
  alternating torch, ours, torch, ours; ``--peer-only`` runs just that row (quick re-runs):
  ``python benchmarks/gpt/run.py --peer-only --torch-python $HOME/torch-venv/bin/python``.

MFU = flops_per_token * tokens/s / peak, flops_per_token = 6 * N_matmul + 12 * L * d * T for a
full run, less with LoRA (see ``docs/gpt_models.md``); the CPU peak is the measured float32 matmul
throughput of this process.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax

from gpt_models import (
    PRESETS,
    Checkpointer,
    Config,
    MeshConfig,
    abstract_state,
    compile_train_step,
    compute_dtype,
    flops_per_token,
    init_state,
    keep_host_memory,
    make_mesh,
    make_optimizer,
    make_schedule,
    param_count,
    to_items,
    tune_host_allocator,
)

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import peer
from provenance import provenance

HERE = Path(__file__).parent
# run.py rewrites a report above this line and keeps what is below it: the sections other scripts
# here measure, written by hand, each with its own date, commit and command.
KEEP_BELOW = "<!-- run.py rewrites everything above this line and keeps everything below it. -->"

# bf16 dense peak per chip (FLOP/s) for the GPU MFU; half of it in float32.
_GPU_PEAKS = (("H200", 989e12), ("H100", 989e12), ("A100", 312e12))


@functools.cache
def measured_cpu_flops() -> float:
    """FLOP/s of a 1024x1024 float32 matmul chain on the CPU backend (best of three runs)."""
    n, reps = 1024, 8
    x = jnp.ones((n, n), jnp.float32) / n
    f = jax.jit(lambda a: functools.reduce(lambda acc, _: acc @ a, range(reps), a))
    f(x).block_until_ready()
    best = float("inf")
    for _ in range(3):
        t = time.perf_counter()
        f(x).block_until_ready()
        best = min(best, time.perf_counter() - t)
    return 2 * n**3 * reps / best


def peak_flops(devices: list, dtype, override: float = 0.0) -> float:
    """The MFU denominator: ``override``, the measured CPU matmul rate, or a GPU's table peak."""
    if override > 0:
        return override
    if devices[0].platform == "cpu":
        return measured_cpu_flops()
    per_chip = next((p for name, p in _GPU_PEAKS if name in devices[0].device_kind), 0.0)
    return per_chip / (2 if jnp.dtype(dtype) == jnp.float32 else 1) * len(devices)


def _safe_copy(state):
    # As the trainer does: on CPU orbax may read a buffer the next (donating) step overwrites.
    return jax.tree.map(jnp.copy, state) if jax.default_backend() == "cpu" else state


# ---------------------------------------------------------------------------------------------------
# The baseline: the same architecture (RMSNorm, RoPE, QK-norm, ReLU² or GELU, tied embeddings)
# written directly against jax.numpy and optax, with a dict of arrays as params.


def _plain_init(cfg, key):
    d, h, hd, f, L, V = (
        cfg.d_model,
        cfg.n_heads,
        cfg.head_dim,
        cfg.ff_dim,
        cfg.n_layers,
        cfg.vocab_size,
    )
    ks = iter(jax.random.split(key, 8))
    n = lambda shape, std=0.02: std * jax.random.normal(next(ks), shape)
    out_std = 0.02 / np.sqrt(2 * L)
    return {
        "embed": n((V, d)),
        "wq": n((L, d, h, hd)), "wk": n((L, d, h, hd)), "wv": n((L, d, h, hd)),
        "wo": n((L, h, hd, d), out_std), "w_in": n((L, d, f)), "w_out": n((L, f, d), out_std),
        "n1": jnp.ones((L, d)), "n2": jnp.ones((L, d)), "qn": jnp.ones((L, hd)),
        "kn": jnp.ones((L, hd)), "nf": jnp.ones((d,)),
    }  # fmt: skip


def _rms(x, s):
    return x * jax.lax.rsqrt((x * x).mean(-1, keepdims=True) + 1e-6) * s


def _rope(x, theta=10000.0):
    half = x.shape[-1] // 2
    ang = jnp.arange(x.shape[1])[:, None] * theta ** (-jnp.arange(half) / half)
    sin, cos = jnp.sin(ang)[None, :, None], jnp.cos(ang)[None, :, None]
    x1, x2 = x[..., :half], x[..., half:]
    return jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1)


def _plain_loss(p, batch, cfg):
    x = p["embed"][batch[:, :-1]]
    for i in range(cfg.n_layers):
        h = _rms(x, p["n1"][i])
        q = _rope(_rms(jnp.einsum("btd,dnh->btnh", h, p["wq"][i]), p["qn"][i]))
        k = _rope(_rms(jnp.einsum("btd,dnh->btnh", h, p["wk"][i]), p["kn"][i]))
        v = jnp.einsum("btd,dnh->btnh", h, p["wv"][i])
        a = jax.nn.dot_product_attention(q, k, v, is_causal=True)
        x = x + jnp.einsum("btnh,nhd->btd", a, p["wo"][i])
        h = _rms(x, p["n2"][i]) @ p["w_in"][i]
        h = jnp.square(jax.nn.relu(h)) if cfg.mlp == "relu2" else jax.nn.gelu(h)
        x = x + h @ p["w_out"][i]
    logits = _rms(x, p["nf"]) @ p["embed"].T
    return optax.softmax_cross_entropy_with_integer_labels(logits, batch[:, 1:]).mean()


def _plain_step(cfg: Config):
    t = cfg.train
    opt = optax.chain(
        optax.clip_by_global_norm(t.grad_clip),
        optax.adamw(make_schedule(t), b1=t.beta1, b2=t.beta2, weight_decay=t.weight_decay,
                    mask=lambda p: jax.tree.map(lambda a: a.ndim >= 2, p)),
    )  # fmt: skip

    # The same XLA:CPU option our step gets by default (docs/gpt_models.md, CPU performance), so the
    # ratio stays what the abstractions cost rather than a compiler flag.
    cpu = jax.default_backend() == "cpu"
    options = {"xla_cpu_experimental_xnn_graph_fusion_mode": "XNN_GRAPH_FUSION_MODE_GREEDY"}

    @functools.partial(jax.jit, donate_argnums=(0, 1), compiler_options=options if cpu else None)
    def step(params, opt_state, batch):
        loss, grads = jax.value_and_grad(_plain_loss)(params, batch, cfg.model)
        updates, opt_state = opt.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    params = _plain_init(cfg.model, jax.random.key(0))
    return step, params, opt.init(params)


# ---------------------------------------------------------------------------------------------------


def _configs() -> dict[str, Config]:
    tiny = PRESETS["tiny"]
    m10 = dataclasses.replace(
        tiny,
        model=dataclasses.replace(tiny.model, d_model=384, n_layers=6, n_heads=6, seq_len=256),
        train=dataclasses.replace(tiny.train, batch_size=8),
    )
    one = MeshConfig(data=1, fsdp=1, tensor=1)
    return {"tiny": dataclasses.replace(tiny, mesh=one), "~10M": dataclasses.replace(m10, mesh=one)}


def bench_throughput(name: str, cfg: Config, rounds: int, steps: int) -> dict:
    mesh = make_mesh(cfg.mesh, jax.devices()[:1])
    opt = make_optimizer(cfg.train)
    t0 = time.perf_counter()
    ours = compile_train_step(cfg, opt, mesh, abstract_state(cfg, opt, mesh))
    state = init_state(cfg, opt, mesh)
    rng = np.random.default_rng(0)
    batch = jnp.asarray(
        rng.integers(0, 256, (1, cfg.train.batch_size, cfg.model.seq_len + 1)), jnp.int32
    )
    state, logs = ours(state, batch)
    float(logs["loss"][0])
    compile_s = time.perf_counter() - t0
    plain, params, opt_state = _plain_step(cfg)
    params, opt_state, loss = plain(params, opt_state, batch[0])
    float(loss)
    keep_host_memory()  # both steps compiled: reuse their scratch memory, as `gpt train` does
    times: dict[str, list[float]] = {"ours": [], "plain": []}
    for _ in range(rounds):  # alternate, so both see the same machine load
        t = time.perf_counter()
        for _ in range(steps):
            state, logs = ours(state, batch)
            float(logs["loss"][0])  # the trainer reads the loss every step too
        times["ours"].append(time.perf_counter() - t)
        t = time.perf_counter()
        for _ in range(steps):
            params, opt_state, loss = plain(params, opt_state, batch[0])
            float(loss)
        times["plain"].append(time.perf_counter() - t)
    tokens = steps * cfg.train.batch_size * cfg.model.seq_len
    peak = peak_flops(jax.devices()[:1], compute_dtype(cfg.model), cfg.log.peak_flops)
    fpt = flops_per_token(cfg)
    out = {"name": name, "params": param_count(cfg.model), "compile_s": compile_s, "peak": peak}
    for k, v in times.items():
        tps = tokens / statistics.median(v)
        out[k] = (tps, tps * fpt / peak)
    out["ratio"] = out["ours"][0] / out["plain"][0]
    return out


def bench_checkpoint(reps: int = 2) -> dict:
    cfg = dataclasses.replace(PRESETS["gpt2-small"], mesh=MeshConfig(data=1, fsdp=1, tensor=1))
    mesh = make_mesh(cfg.mesh, jax.devices()[:1])
    opt = make_optimizer(cfg.train)
    state = init_state(cfg, opt, mesh)
    jax.block_until_ready(state)
    nbytes = sum(x.nbytes for x in jax.tree.leaves(state))
    abstract = abstract_state(cfg, opt, mesh)
    saves, totals, restores, params_only = [], [], [], []
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_TMP")) as tmp:
        for r in range(reps):
            ckpt = Checkpointer(Path(tmp) / f"c{r}", keep=1)
            t = time.perf_counter()
            ckpt.save(1, to_items(_safe_copy(state)), {"step": 1})  # as the trainer does
            saves.append(time.perf_counter() - t)
            ckpt.wait()
            totals.append(time.perf_counter() - t)
            restores.append(_timed_restore(ckpt, to_items(abstract)))
            # What `gpt sample` / `gpt eval` read: the params item alone, not the Adam moments.
            params_only.append(_timed_restore(ckpt, {"params": abstract.params}))
            ckpt.close()
    return {"gb": nbytes / 1e9, "save": min(saves), "total": min(totals), "restore": min(restores),
            "restore_params": min(params_only)}  # fmt: skip


def _timed_restore(ckpt: Checkpointer, targets: dict) -> float:
    t = time.perf_counter()
    back, _, _ = ckpt.restore(targets)
    jax.block_until_ready(back)
    return time.perf_counter() - t


def bench_gpu(steps: int = 20) -> dict | None:
    if jax.default_backend() != "gpu":
        return None
    cfg = dataclasses.replace(
        PRESETS["gpt2-small"],
        model=dataclasses.replace(PRESETS["gpt2-small"].model, dtype="bfloat16"),
        train=dataclasses.replace(PRESETS["gpt2-small"].train, batch_size=16, grad_accum=1),
        mesh=MeshConfig(data=1, fsdp=1, tensor=1),
    )
    mesh = make_mesh(cfg.mesh, jax.devices()[:1])
    opt = make_optimizer(cfg.train)
    step = compile_train_step(cfg, opt, mesh, abstract_state(cfg, opt, mesh))
    state = init_state(cfg, opt, mesh)
    batch = jnp.zeros((1, 16, cfg.model.seq_len + 1), jnp.int32)
    for _ in range(3):
        state, logs = step(state, batch)
    float(logs["loss"][0])
    t = time.perf_counter()
    for _ in range(steps):
        state, logs = step(state, batch)
    float(logs["loss"][0])
    tps = steps * 16 * cfg.model.seq_len / (time.perf_counter() - t)
    peak = peak_flops(jax.devices()[:1], jnp.bfloat16)
    return {
        "device": jax.devices()[0].device_kind,
        "tps": tps,
        "mfu": tps * flops_per_token(cfg) / peak,
    }


def bench_init_memory() -> str:
    """``init_memory.py`` in its own process (it needs 8 CPU devices and a fresh peak RSS)."""
    proc = subprocess.run(
        [sys.executable, str(HERE / "init_memory.py")], capture_output=True, text=True, timeout=900
    )
    if proc.returncode != 0:
        return f"failed: {proc.stderr.strip().splitlines()[-1:]}"
    return proc.stdout.strip().splitlines()[-1]


def _report(
    rows: list[dict],
    ckpt: dict | None,
    gpu: dict | None,
    init: str | None,
    args: argparse.Namespace,
) -> str:
    load = os.getloadavg()
    command = f"python benchmarks/gpt/run.py --rounds {args.rounds} --steps {args.steps}"
    lines = [
        "# gpt_models benchmark results",
        "",
        f"{provenance(command + (' --peer' if args.peer else ''))} Written by that script down to "
        "the marker below; the sections after it are kept.",
        "",
        f"Load average at the end {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} (1/5/15 min): "
        "other jobs shared these cores, so absolute numbers are noisy and the same-process ratio "
        "is the number to read. Median over rounds; ours and the plain step alternate within each "
        "round.",
        "",
        "## Train step throughput (CPU, one device, float32)",
        "",
        "| config | params | ours tok/s | ours MFU | plain JAX+optax tok/s | plain MFU | ours / plain | first step (compile) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['name']} | {r['params'] / 1e6:.2f}M | {r['ours'][0]:,.0f} | {100 * r['ours'][1]:.1f}% "
            f"| {r['plain'][0]:,.0f} | {100 * r['plain'][1]:.1f}% | {r['ratio']:.3f} | {r['compile_s']:.1f} s |"
        )
    if rows:
        lines.append("")
        lines.append(
            f"CPU peak used for MFU: {rows[0]['peak'] / 1e9:.0f} GFLOP/s (measured float32 1024x1024 "
            "matmul throughput in this process, best of a probe before and one after the runs)."
        )
    if ckpt:
        lines += [
            "",
            "## Checkpoint (gpt2-small train state: params + AdamW moments, CPU, local disk)",
            "",
            "| state size | save, blocking part (incl. the CPU copy) | save, until written | restore "
            "| restore params only (`gpt sample`, `gpt eval`) |",
            "|---|---|---|---|---|",
            f"| {ckpt['gb']:.2f} GB | {ckpt['save']:.2f} s | {ckpt['total']:.2f} s | {ckpt['restore']:.2f} s "
            f"| {ckpt['restore_params']:.2f} s |",
        ]
    if init:
        lines += [
            "",
            "## Sharded init memory (`init_memory.py`: gpt2-small, 8 CPU devices, mesh fsdp=8)",
            "",
            f"{init}. Target: peak RSS growth <= 1.2x the parameter bytes (on CPU the parameters "
            "themselves are host memory, 1.0x).",
        ]
    lines += ["", "## GPU (gpt2-small, bf16 compute, batch 16 x 1024)", ""]
    if gpu:
        lines.append(f"{gpu['device']}: {gpu['tps']:,.0f} tok/s, MFU {100 * gpu['mfu']:.1f}%.")
    else:
        lines.append(
            f"Not measured: JAX found no GPU on this machine (backend {jax.default_backend()}). On "
            "a GPU machine, `nox -s bench_gpu` measures it into `RESULTS-gpu.md`, which holds the "
            "numbers of one NVIDIA H200."
        )
    return "\n".join(lines) + "\n"


def _gpu_report(gpu: dict) -> str:
    return (
        "# gpt_models GPU benchmark\n\n"
        f"{provenance('nox -s bench_gpu')} {jax.device_count()} x {gpu['device']}; one device "
        "measured.\n\n"
        "## gpt2-small, bf16 compute, batch 16 x 1024\n\n"
        f"{gpu['device']}: {gpu['tps']:,.0f} tok/s, MFU {100 * gpu['mfu']:.1f}%.\n"
    )


def _rescale_cpu_peak(rows: list[dict]) -> None:
    """Re-measure the CPU peak after the runs and keep the higher figure for every row.

    The matmul probe is itself slowed down by other jobs on a shared machine; a low probe would
    inflate MFU, so the best of two probes, minutes apart, is used.
    """
    if jax.default_backend() != "cpu" or not rows:
        return
    measured_cpu_flops.cache_clear()
    peak = max(measured_cpu_flops(), *(r["peak"] for r in rows))
    for r in rows:
        for k in ("ours", "plain"):
            tps, mfu = r[k]
            r[k] = (tps, mfu * r["peak"] / peak)
        r["peak"] = peak


def _write(out: str, text: str) -> None:
    """Write ``text`` to ``out``, keeping what a previous report held below ``KEEP_BELOW``."""
    path = Path(out)
    old = path.read_text() if path.exists() else ""
    kept = old.split(KEEP_BELOW, 1)[1] if KEEP_BELOW in old else "\n"
    path.write_text(f"{text}\n{KEEP_BELOW}{kept}")


def _peer_rows(args: argparse.Namespace) -> list[str]:
    skipped = peer.torch_missing(args.torch_python)
    if skipped:
        print(f"[peer] skipped: {skipped}", flush=True)
        return peer.report([], skipped, args.peer_seconds)
    rows = [
        peer.side_by_side(s, args.peer_reps, args.peer_seconds, args.peer_dir, args.torch_python)
        for s in args.peer_shapes.split(",")
    ]
    return peer.report(rows, None, args.peer_seconds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--skip-checkpoint", action="store_true")
    parser.add_argument("--skip-init-memory", action="store_true")
    parser.add_argument("--out", default=str(HERE / "RESULTS.md"))
    parser.add_argument("--peer", action="store_true", help="add the PyTorch side-by-side rows")
    parser.add_argument("--peer-only", action="store_true", help="only the PyTorch rows")
    parser.add_argument("--peer-reps", type=int, default=3, help="torch/ours pairs per shape")
    parser.add_argument("--peer-seconds", type=float, default=30.0, help="training time per run")
    parser.add_argument("--peer-shapes", default=",".join(peer.SHAPES))
    parser.add_argument("--peer-dir", type=Path, default=peer.DEFAULT_PEER_DIR)
    parser.add_argument("--torch-python", default=peer.DEFAULT_TORCH_PYTHON)
    parser.add_argument(
        "--gpu-only",
        action="store_true",
        help="only the GPU section (nox -s bench_gpu); exits non-zero when JAX sees no GPU",
    )
    args = parser.parse_args()
    if not args.gpu_only:  # the CPU sections measure what `gpt train` runs on CPU
        tune_host_allocator()
    if args.gpu_only:
        gpu = bench_gpu()
        if gpu is None:
            sys.exit(f"--gpu-only: JAX's default backend is {jax.default_backend()!r}, not a GPU")
        text = _gpu_report(gpu)
        _write(args.out, text)
        print(text)
        return
    peer_lines = _peer_rows(args) if args.peer or args.peer_only else []
    if args.peer_only:
        command = "python benchmarks/gpt/run.py --peer-only"
        text = "\n".join(["# gpt_models vs PyTorch (CPU)", "", provenance(command), *peer_lines])
        _write(args.out, text + "\n")
        print(text)
        return
    rows = []
    for name, cfg in _configs().items():
        rows.append(bench_throughput(name, cfg, args.rounds, args.steps))
        print(rows[-1], flush=True)
    _rescale_cpu_peak(rows)
    ckpt = None if args.skip_checkpoint else bench_checkpoint()
    print(ckpt, flush=True)
    init = None if args.skip_init_memory else bench_init_memory()
    print(init, flush=True)
    gpu = bench_gpu()
    text = (
        _report(rows, ckpt, gpu, init, args) + "\n".join(peer_lines) + ("\n" if peer_lines else "")
    )
    _write(args.out, text)
    print(text)


if __name__ == "__main__":
    main()
