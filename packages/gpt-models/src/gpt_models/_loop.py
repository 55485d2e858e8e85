"""The training loop and run folders: ``train``, ``evaluate_run``, ``sample_run``.

A run folder ``runs/<name>/`` holds ``config.toml`` (the resolved config), ``checkpoints/`` (orbax),
``metrics/`` (lox ``SaveLogger``), ``loss.png`` and ``sample.txt``. Nothing is written outside it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import signal
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

import jax
import jax.numpy as jnp
import numpy as np

import lox
import paramspec as ps

from . import _config
from ._checkpoint import Checkpointer
from ._config import Config
from ._data import Dataset, eval_batches, load_dataset, train_batch
from ._errors import ConfigError, TrainingDivergedError, UsageError
from ._model import compute_dtype, flops_per_token
from ._parallel import make_mesh
from ._progress import Progress, peak_flops, plot_losses
from ._sample import generate
from ._tokenizer import ByteTokenizer
from ._train import (
    abstract_state,
    batch_sharding,
    compile_eval_step,
    compile_train_step,
    init_state,
    make_optimizer,
)


class Interrupted(Exception):
    """SIGTERM/SIGINT arrived; a checkpoint of the last finished step was saved."""

    def __init__(self, signum: int, step: int):
        super().__init__(f"signal {signum} at step {step}")
        self.signum, self.step = signum, step


@dataclasses.dataclass
class RunResult:
    """What ``train`` reports: the final step, losses, throughput and the sample text."""

    run_dir: Path
    step: int
    loss: float
    val_loss: float
    tokens_per_s: float
    mfu: float
    sample: str


# ----------------------------------------------------------------------------------------------------
# Run folder


def check_run_name(name: str) -> str:
    """A run name is one plain folder name: writes must never escape ``--out``."""
    bad = not name or name in (".", "..") or any(c in name for c in "/\\\0") or name.startswith(".")
    if bad:
        raise UsageError(
            f"Run name {name!r} is not a plain folder name. Use letters, digits, '-', '_' or '.', "
            "without '/' and not starting with '.', e.g. --name tiny-exp1."
        )
    return name


def _is_primary() -> bool:
    return jax.process_index() == 0


def _write_text(path: Path, text: str) -> None:
    if _is_primary():
        path.write_text(text, encoding="utf-8")


# ----------------------------------------------------------------------------------------------------
# Mesh and data checks (user errors, exit status 2)


def _check_batch_fits(cfg: Config, mesh: Any) -> None:
    shards = mesh.shape["data"] * mesh.shape["fsdp"]
    micro = cfg.train.batch_size // cfg.train.grad_accum
    if micro % shards or micro % jax.process_count():
        raise ConfigError(
            f"The micro-batch (train.batch_size / train.grad_accum = {micro}) must split evenly over "
            f"the {shards} batch shards (mesh.data * mesh.fsdp) and {jax.process_count()} processes. "
            f"Use a batch size that is a multiple of {math.lcm(shards, jax.process_count()) * cfg.train.grad_accum}."
        )
    if cfg.train.batch_size % jax.process_count():
        raise ConfigError(
            f"train.batch_size must be a multiple of the process count {jax.process_count()}."
        )


def _abstract(cfg: Config, optimizer: Any, mesh: Any) -> Any:
    try:
        return abstract_state(cfg, optimizer, mesh)
    except ps.ShardingError as err:  # e.g. heads not divisible by mesh.tensor
        raise ConfigError(
            f"Impossible mesh for this model: {err}\nChoose mesh sizes that divide the sharded "
            "dimensions (heads and kv_heads and mlp and vocab by mesh.tensor; d_model by mesh.fsdp)."
        ) from err


# ----------------------------------------------------------------------------------------------------
# Signals


@contextlib.contextmanager
def _stop_on_signals() -> Iterator[dict[str, int]]:
    """Turn SIGTERM/SIGINT into a flag the loop checks after each step (so it can save first)."""
    flag: dict[str, int] = {}
    if threading.current_thread() is not threading.main_thread():
        yield flag  # signal handlers can only be installed from the main thread
        return

    def handler(signum: int, frame: Any) -> None:
        if "signum" in flag and signum == signal.SIGINT:
            raise KeyboardInterrupt  # a second Ctrl-C stops right away
        flag["signum"] = signum

    previous = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield flag
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


# ----------------------------------------------------------------------------------------------------
# Helpers


def _host(tree: Any) -> Any:
    # Replicated outputs: read this process's copy (works when the array spans other processes too).
    return jax.tree.map(lambda x: np.asarray(x.addressable_data(0)), tree)


def _global_batch(local: np.ndarray, sharding: Any, global_rows: int) -> jax.Array:
    shape = list(local.shape)
    shape[-2] = global_rows
    return jax.make_array_from_process_local_data(sharding, local, tuple(shape))


def _meta(cfg: Config, step: int, dataset: Dataset) -> dict[str, Any]:
    # The data position is the step: batches are a pure function of (train.seed, step).
    return {
        "step": step,
        "data": {"seed": cfg.train.seed, "next_step": step, "source": dataset.source},
    }


def _loggers(cfg: Config, run: Path) -> lox.Logger:
    loggers: list[lox.Logger] = [lox.SaveLogger(run / "metrics", flush_every=20)]
    if cfg.log.wandb != "disabled":
        loggers.append(
            lox.WandbLogger(
                project=cfg.log.wandb_project,
                name=run.name,
                mode=cfg.log.wandb,
                dir=str(run),
                config=_config.to_dict(cfg),
            )
        )
    return lox.MultiLogger(*loggers)


class _Evaluator:
    def __init__(self, cfg: Config, mesh: Any, abstract: Any, dataset: Dataset) -> None:
        t = cfg.train
        self.fn = compile_eval_step(cfg, mesh, abstract)
        self.sharding = jax.sharding.NamedSharding(
            mesh, jax.sharding.PartitionSpec(("data", "fsdp"), None)
        )
        self.batches = eval_batches(
            dataset.val, n_batches=t.eval_batches, batch_size=t.batch_size // t.grad_accum,
            seq_len=cfg.model.seq_len, process_index=jax.process_index(),
            process_count=jax.process_count(),
        )  # fmt: skip
        self.rows = t.batch_size // t.grad_accum

    def __call__(self, params: Any) -> float:
        losses = []
        for local in self.batches:
            batch = jax.make_array_from_process_local_data(
                self.sharding, local, (self.rows, local.shape[-1])
            )
            losses.append(self.fn(params, batch))
        return float(np.mean([_host(x) for x in losses]))


def _safe_copy(state: Any) -> Any:
    # On CPU a device buffer and the host array orbax reads may share memory; the next step donates
    # (overwrites) the state, so hand orbax a private copy. Accelerators copy to host anyway.
    if jax.default_backend() == "cpu":
        return jax.tree.map(jnp.copy, state)
    return state


# ----------------------------------------------------------------------------------------------------
# train


def train(
    cfg: Config,
    run_dir: str | Path,
    *,
    resume: bool = False,
    stream: TextIO | None = None,
    write_sample: bool = True,
) -> RunResult:
    """Train ``cfg`` in ``run_dir`` (created; or continued from its last checkpoint with ``resume``).

    Args:
        cfg: the config (validated here).
        run_dir: the run folder.
        resume: continue from the newest readable checkpoint in ``run_dir/checkpoints``.
        stream: where the progress bar and messages go (default ``sys.stderr``).
        write_sample: generate ``sample.txt`` at the end.

    Raises:
        ConfigError, DataError: bad config, data or mesh (the CLI exits with status 2).
        TrainingDivergedError: the loss became NaN/inf; the last good checkpoint is kept.
        Interrupted: SIGTERM/SIGINT; a checkpoint of the last finished step was saved first.
    """
    cfg = _config.validate(cfg)
    stream = stream or sys.stderr
    run = Path(run_dir)
    mesh = make_mesh(cfg.mesh)
    _check_batch_fits(cfg, mesh)
    dataset = load_dataset(cfg.data, seq_len=cfg.model.seq_len, vocab_size=cfg.model.vocab_size)
    optimizer = make_optimizer(cfg.train)
    abstract = _abstract(cfg, optimizer, mesh)
    if _is_primary():
        run.mkdir(parents=True, exist_ok=True)
    _write_text(run / "config.toml", _config.dumps(cfg))
    ckpt = Checkpointer(run / "checkpoints", keep=cfg.train.keep_checkpoints)
    try:
        return _train(
            cfg, run, resume, stream, write_sample, mesh, dataset, optimizer, abstract, ckpt
        )
    finally:
        ckpt.close()


def _restore_or_init(cfg: Config, resume: bool, optimizer: Any, mesh: Any, abstract: Any, ckpt: Checkpointer,
                     stream: TextIO) -> tuple[Any, int]:  # fmt: skip
    if not resume:
        if ckpt.steps():
            raise UsageError(
                f"{ckpt.directory.parent} already holds checkpoints (steps {ckpt.steps()}). Resume it "
                f"with `gpt train --resume {ckpt.directory.parent}`, or pick another --name."
            )
        return init_state(cfg, optimizer, mesh), 0
    state, meta, step = ckpt.restore(abstract)
    if meta.get("data", {}).get("seed", cfg.train.seed) != cfg.train.seed:
        print("note: train.seed changed since the checkpoint; batches will differ.", file=stream)
    print(f"Resumed from checkpoint step {step} in {ckpt.directory}", file=stream)
    return state, step


def _train(cfg: Config, run: Path, resume: bool, stream: TextIO, write_sample: bool, mesh: Any,
           dataset: Dataset, optimizer: Any, abstract: Any, ckpt: Checkpointer) -> RunResult:  # fmt: skip
    t = cfg.train
    state, start = _restore_or_init(cfg, resume, optimizer, mesh, abstract, ckpt, stream)
    step_fn = compile_train_step(cfg, optimizer, mesh, abstract)
    evaluate = _Evaluator(cfg, mesh, abstract, dataset)
    bsharding = batch_sharding(mesh)
    micro_rows = t.batch_size // t.grad_accum
    primary = _is_primary()
    logger = _loggers(cfg, run) if primary else None
    log_state = logger.init() if logger else None
    tokens_per_step = t.batch_size * cfg.model.seq_len
    peak = peak_flops(list(mesh.devices.flat), compute_dtype(cfg.model), t.peak_flops)
    progress = Progress(
        t.steps, start, tokens_per_step, flops_per_token(cfg.model), peak,
        every=cfg.log.every, stream=stream if primary else open_devnull(),
    )  # fmt: skip
    if primary:
        n = sum(x.size for x in jax.tree.leaves(state.params))
        print(
            f"Training {n / 1e6:.2f}M parameters on {mesh.devices.size} {jax.default_backend()} "
            f"device(s), mesh {dict(mesh.shape)}, data {dataset.source} "
            f"({len(dataset.train):,} train / {len(dataset.val):,} val tokens) -> {run}",
            file=stream,
        )

    def fetch(step: int) -> jax.Array:
        local = train_batch(
            dataset.train, step, seed=t.seed, batch_size=t.batch_size, grad_accum=t.grad_accum,
            seq_len=cfg.model.seq_len, process_index=jax.process_index(),
            process_count=jax.process_count(),
        )  # fmt: skip
        return _global_batch(local, bsharding, micro_rows)

    loss = val = math.nan
    last_saved = start if resume else -1
    with _stop_on_signals() as stop:
        batch = fetch(start) if start < t.steps else None
        for step in range(start, t.steps):
            state, logs = step_fn(state, batch)
            if step + 1 < t.steps:
                batch = fetch(step + 1)  # overlaps with the step running on the device
            logs = _host(logs)
            loss = float(logs["loss"][-1])
            if not math.isfinite(loss):
                ckpt.wait()
                progress.close()
                raise TrainingDivergedError(_diverged_message(cfg, run, step, loss, ckpt))
            done = step + 1
            extra = {}
            if done % t.eval_every == 0 or done == t.steps:
                val = evaluate(state.params)
                progress.val = val
                extra["val_loss"] = np.array([val], np.float32)
            tps, mfu = progress.rates(done)
            if done % cfg.log.every == 0 or extra:
                extra |= {
                    "tokens_per_s": np.array([tps], np.float32),
                    "mfu": np.array([mfu], np.float32),
                }
            if logger:
                logs = logs | lox.logdict(
                    extra, steps={k: {"step": np.array([step], np.int32)} for k in extra}
                )
                log_state = logger.log(log_state, logs)
            progress.update(done, loss, force=bool(extra.get("val_loss") is not None))
            if "signum" in stop:
                ckpt.save(done, _safe_copy(state), _meta(cfg, done, dataset))
                ckpt.wait()
                progress.close()
                if logger:
                    logger.finish(log_state)
                raise Interrupted(stop["signum"], done)
            if (t.checkpoint_every and done % t.checkpoint_every == 0) or done == t.steps:
                ckpt.save(done, _safe_copy(state), _meta(cfg, done, dataset))
                last_saved = done
        progress.close()
    ckpt.wait()
    if logger:
        logger.finish(log_state)
    if math.isnan(val):
        val = evaluate(state.params)
    tps, mfu = progress.rates(t.steps)
    sample = ""
    if primary:
        metrics = lox.load(run / "metrics" / "run_0")
        plot_losses(metrics, run / "loss.png")
    if write_sample:
        sample = sample_text(state.params, cfg)
        _write_text(run / "sample.txt", sample)
    del last_saved
    return RunResult(run, t.steps, loss, val, tps, mfu, sample)


def open_devnull() -> TextIO:
    import os

    return open(os.devnull, "w")


def _diverged_message(cfg: Config, run: Path, step: int, loss: float, ckpt: Checkpointer) -> str:
    saved = ckpt.steps()
    where = (
        f"the last good checkpoint (step {saved[-1]}) is intact in {ckpt.directory}"
        if saved
        else "no checkpoint was saved yet"
    )
    return (
        f"Training diverged: the loss is {loss} at step {step + 1}. The run stopped; {where}. "
        f"This usually means the learning rate is too high for this model and batch (train.lr = "
        f"{cfg.train.lr:g}). Try --set train.lr={cfg.train.lr / 3:.2g}, a longer warmup "
        f"(train.warmup_steps = {cfg.train.warmup_steps}) or a smaller train.grad_clip, in a new run."
    )


# ----------------------------------------------------------------------------------------------------
# sample / eval on a finished run


def sample_text(params: Any, cfg: Config, *, prompt: str | None = None, max_new_tokens: int | None = None,
                temperature: float | None = None, top_k: int | None = None, top_p: float | None = None,
                seed: int = 0) -> str:  # fmt: skip
    """Generate text with the byte tokenizer; defaults come from the config's ``[sample]`` section."""
    s = cfg.sample
    tok = ByteTokenizer()
    ids = tok.encode(s.prompt if prompt is None else prompt)
    room = cfg.model.seq_len - len(ids)
    n = min(s.max_new_tokens, room) if max_new_tokens is None else max_new_tokens
    out = generate(
        jax.tree.map(_local, params), ids, cfg.model, max_new_tokens=n,
        temperature=s.temperature if temperature is None else temperature,
        top_k=(s.top_k or None) if top_k is None else top_k,
        top_p=(s.top_p if s.top_p < 1 else None) if top_p is None else top_p,
        key=jax.random.key(seed),
    )  # fmt: skip
    return tok.decode(np.asarray(out))


def _local(x: jax.Array) -> jax.Array:
    # Generation runs on one device: gather sharded params (they may span several processes).
    if x.is_fully_addressable:
        return jax.device_put(x, jax.devices()[0])
    from jax.experimental import multihost_utils

    return jnp.asarray(multihost_utils.process_allgather(x, tiled=True))


def load_run(run_dir: str | Path) -> tuple[Config, Any, int]:
    """``(config, params, step)`` of a run folder's newest readable checkpoint, on one device."""
    run = Path(run_dir)
    if not (run / "config.toml").is_file():
        raise UsageError(
            f"{run} is not a run folder: it has no config.toml. Pass the folder `gpt train` created, "
            "e.g. runs/<name>."
        )
    cfg = _config.load_config(str(run / "config.toml"))
    cfg = dataclasses.replace(cfg, mesh=_config.MeshConfig(data=1, fsdp=1, tensor=1))
    mesh = make_mesh(cfg.mesh, jax.devices()[:1])
    optimizer = make_optimizer(cfg.train)
    ckpt = Checkpointer(run / "checkpoints", keep=cfg.train.keep_checkpoints)
    try:
        state, _, step = ckpt.restore(abstract_state(cfg, optimizer, mesh))
    finally:
        ckpt.close()
    return cfg, state.params, step


def evaluate_run(run_dir: str | Path) -> float:
    """Validation loss (nats per token) of a run's newest checkpoint on its fixed val windows."""
    cfg, params, _ = load_run(run_dir)
    mesh = make_mesh(cfg.mesh, jax.devices()[:1])
    dataset = load_dataset(cfg.data, seq_len=cfg.model.seq_len, vocab_size=cfg.model.vocab_size)
    abstract = abstract_state(cfg, make_optimizer(cfg.train), mesh)
    return _Evaluator(cfg, mesh, abstract, dataset)(params)
