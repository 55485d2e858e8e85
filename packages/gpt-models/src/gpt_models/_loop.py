"""The training loop and run folders: ``train``, ``evaluate_run``, ``sample_run``.

A run folder ``runs/<name>/`` holds ``config.toml`` (the resolved config), ``checkpoints/`` (orbax),
``metrics/`` (lox ``SaveLogger``), ``metrics.csv`` (the scalars as one table), ``loss.png``,
``sample.txt``, and ``tokenizer.json`` when ``data.tokenizer = "bpe"``. Nothing is written outside it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import math
import signal
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

import jax
import jax.numpy as jnp
import numpy as np

import lox
import paramspec as ps
from core_primitives import list_alternatives

from . import _config
from ._checkpoint import Checkpointer
from ._config import Config
from ._data import Dataset, Tokenizer, eval_batches, load_dataset, train_batch
from ._errors import ConfigError, TrainingDivergedError, UsageError
from ._metrics_csv import write_metrics_csv
from ._mfu import peak_flops, unknown_peak_note
from ._model import compute_dtype, flops_per_token
from ._parallel import make_mesh
from ._progress import Progress, plot_losses
from ._sample import generate
from ._tokenize import decode_lenient, prepare_tokenizer, run_tokenizer, save_tokenizer
from ._tokenizer import ByteTokenizer
from ._train import (
    abstract_params,
    abstract_state,
    batch_sharding,
    compile_eval_step,
    compile_train_step,
    from_items,
    init_state,
    make_optimizer,
    to_items,
)


class Interrupted(Exception):
    """SIGTERM/SIGINT arrived; a checkpoint of the last finished step was saved."""

    def __init__(self, signum: int, step: int):
        super().__init__(f"signal {signum} at step {step}")
        self.signum, self.step = signum, step


@dataclasses.dataclass
class RunResult:
    """What ``train`` reports: the final step, losses, throughput and the sample text.

    ``loss`` is the last train loss in nats per token, ``val_loss`` in nats per byte; ``mfu`` is NaN
    when the device's peak is unknown (CPU without ``train.peak_flops``).
    """

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

    # A signal the process was started ignoring stays ignored: a shell runs background jobs with
    # SIGINT ignored so that Ctrl-C in the terminal leaves them alone, and nohup-like launchers do
    # the same; catching it anyway would stop a run its owner meant to keep going.
    watched = [s for s in (signal.SIGTERM, signal.SIGINT) if signal.getsignal(s) != signal.SIG_IGN]
    previous = {s: signal.signal(s, handler) for s in watched}
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
    def __init__(self, cfg: Config, mesh: Any, params: Any, dataset: Dataset) -> None:
        t = cfg.train
        self.fn = compile_eval_step(cfg, mesh, params)
        self.sharding = jax.sharding.NamedSharding(
            mesh, jax.sharding.PartitionSpec(("data", "fsdp"), None)
        )
        self.batches = eval_batches(
            dataset.val, n_batches=t.eval_batches, batch_size=t.batch_size // t.grad_accum,
            seq_len=cfg.model.seq_len, process_index=jax.process_index(),
            process_count=jax.process_count(),
        )  # fmt: skip
        self.rows = t.batch_size // t.grad_accum
        # Unknown bytes (a .bin without a sidecar): the loss stays per token.
        self.bytes_per_token = dataset.bytes_per_token or 1.0

    def __call__(self, params: Any) -> float:
        """Mean validation loss in nats per byte (per token when the bytes are unknown)."""
        losses = []
        for local in self.batches:
            batch = jax.make_array_from_process_local_data(
                self.sharding, local, (self.rows, local.shape[-1])
            )
            losses.append(self.fn(params, batch))
        return float(np.mean([_host(x) for x in losses])) / self.bytes_per_token


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

    Example:
        >>> import dataclasses, io, tempfile
        >>> from gpt_models import PRESETS, train
        >>> tiny = PRESETS["tiny"]
        >>> cfg = dataclasses.replace(
        ...     tiny,
        ...     model=dataclasses.replace(tiny.model, seq_len=32, d_model=32, n_layers=1, n_heads=2),
        ...     train=dataclasses.replace(tiny.train, steps=2, batch_size=8, warmup_steps=1,
        ...                               eval_batches=1),
        ...     sample=dataclasses.replace(tiny.sample, max_new_tokens=4),
        ... )
        >>> result = train(cfg, tempfile.mkdtemp() + "/run", stream=io.StringIO())
        >>> result.step, sorted(p.name for p in result.run_dir.iterdir())
        (2, ['checkpoints', 'config.toml', 'loss.png', 'metrics', 'metrics.csv', 'sample.txt'])
    """
    cfg = _config.validate(cfg)
    stream = stream or sys.stderr
    run = Path(run_dir)
    tokenizer, cfg = prepare_tokenizer(cfg, run, resume=resume, stream=stream)
    mesh = make_mesh(cfg.mesh)
    _check_batch_fits(cfg, mesh)
    dataset = load_dataset(
        cfg.data, seq_len=cfg.model.seq_len, vocab_size=cfg.model.vocab_size, tokenizer=tokenizer
    )
    optimizer = make_optimizer(cfg.train)
    abstract = _abstract(cfg, optimizer, mesh)
    if _is_primary():
        run.mkdir(parents=True, exist_ok=True)
        save_tokenizer(tokenizer, run)
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
    items, meta, step = ckpt.restore(to_items(abstract))
    state = from_items(items)
    if meta.get("data", {}).get("seed", cfg.train.seed) != cfg.train.seed:
        print("note: train.seed changed since the checkpoint; batches will differ.", file=stream)
    print(f"Resumed from checkpoint step {step} in {ckpt.directory}", file=stream)
    return state, step


def _train(cfg: Config, run: Path, resume: bool, stream: TextIO, write_sample: bool, mesh: Any,
           dataset: Dataset, optimizer: Any, abstract: Any, ckpt: Checkpointer) -> RunResult:  # fmt: skip
    state, start = _restore_or_init(cfg, resume, optimizer, mesh, abstract, ckpt, stream)
    loop = _Loop(cfg, run, mesh, dataset, optimizer, abstract, ckpt, start, stream)
    loop.announce(state)
    try:
        with _stop_on_signals() as stop:
            state = loop.run(state, stop)
    finally:
        loop.close()
    val = loop.val if math.isfinite(loop.val) else loop.evaluate(state.params)
    tps, mfu = loop.progress.rates(cfg.train.steps)
    if loop.logger:
        plot_losses(lox.load(run / "metrics" / "run_0"), run / "loss.png", dataset.bytes_per_token)
    sample = ""
    if write_sample:
        sample = sample_text(state.params, cfg, tokenizer=dataset.tokenizer)
        _write_text(run / "sample.txt", sample)
    return RunResult(run, cfg.train.steps, loop.loss, val, tps, mfu, sample)


class _Loop:
    """The step loop's moving parts: batches, metrics, progress, evaluation and checkpoints."""

    def __init__(self, cfg: Config, run: Path, mesh: Any, dataset: Dataset, optimizer: Any,
                 abstract: Any, ckpt: Checkpointer, start: int, stream: TextIO) -> None:  # fmt: skip
        t = cfg.train
        self.cfg, self.run_dir, self.mesh, self.dataset, self.ckpt, self.start = (
            cfg, run, mesh, dataset, ckpt, start
        )  # fmt: skip
        self.stream = stream if _is_primary() else io.StringIO()  # only process 0 reports
        self.step_fn = compile_train_step(cfg, optimizer, mesh, abstract)
        self.evaluate = _Evaluator(cfg, mesh, abstract.params, dataset)
        self.logger = _loggers(cfg, run) if _is_primary() else None
        self.log_state = self.logger.init() if self.logger else None
        devices = list(mesh.devices.flat)
        peak = peak_flops(devices, compute_dtype(cfg.model), t.peak_flops)
        self.peak_note = unknown_peak_note(devices, t.peak_flops)
        self.started = time.perf_counter()
        self.progress = Progress(
            t.steps, start, t.batch_size * cfg.model.seq_len, flops_per_token(cfg.model), peak,
            every=cfg.log.every, stream=self.stream,
        )  # fmt: skip
        self.loss = self.val = math.nan

    def announce(self, state: Any) -> None:
        n = sum(x.size for x in jax.tree.leaves(state.params))
        ds = self.dataset
        print(
            f"Training {n / 1e6:.2f}M parameters on {self.mesh.devices.size} "
            f"{jax.default_backend()} device(s), mesh {dict(self.mesh.shape)}, data {ds.source} "
            f"({len(ds.train):,} train / {len(ds.val):,} val tokens) -> {self.run_dir}",
            file=self.stream,
        )
        if self.peak_note:
            print(self.peak_note, file=self.stream)

    def fetch(self, step: int) -> jax.Array:
        t = self.cfg.train
        local = train_batch(
            self.dataset.train, step, seed=t.seed, batch_size=t.batch_size,
            grad_accum=t.grad_accum, seq_len=self.cfg.model.seq_len,
            process_index=jax.process_index(), process_count=jax.process_count(),
        )  # fmt: skip
        return _global_batch(local, batch_sharding(self.mesh), t.batch_size // t.grad_accum)

    def run(self, state: Any, stop: dict[str, int]) -> Any:
        steps = self.cfg.train.steps
        batch = self.fetch(self.start) if self.start < steps else None
        for step in range(self.start, steps):
            state, logs = self.step_fn(state, batch)
            if step + 1 < steps:
                batch = self.fetch(step + 1)  # overlaps with the step running on the device
            self.record(step, _host(logs), state)
            if "signum" in stop:
                self.save(step + 1, state)
                raise Interrupted(stop["signum"], step + 1)
            every = self.cfg.train.checkpoint_every
            if (every and (step + 1) % every == 0) or step + 1 == steps:
                self.save(step + 1, state)
        return state

    def record(self, step: int, logs: Any, state: Any) -> None:
        """Check the loss, evaluate when due, log metrics and move the progress bar."""
        t, done = self.cfg.train, step + 1
        self.loss = float(logs["loss"][-1])
        if not math.isfinite(self.loss):
            self.ckpt.wait()  # the last good checkpoint is complete before we report it
            raise TrainingDivergedError(_diverged_message(self.cfg, step, self.loss, self.ckpt))
        extra = {}
        if done % t.eval_every == 0 or done == t.steps:
            self.val = self.progress.val = self.evaluate(state.params)
            extra["val_loss"] = np.array([self.val], np.float32)
        if done % self.cfg.log.every == 0 or extra:
            tps, mfu = self.progress.rates(done)
            extra |= {
                "tokens_per_s": np.array([tps], np.float32),
                "wall_time": np.array([time.perf_counter() - self.started], np.float32),
            }
            if math.isfinite(mfu):  # no MFU without a known peak (CPU, unknown device kinds)
                extra["mfu"] = np.array([mfu], np.float32)
        if self.logger:
            steps = {k: {"step": np.array([step], np.int32)} for k in extra}
            self.log_state = self.logger.log(self.log_state, logs | lox.logdict(extra, steps=steps))
        self.progress.update(done, self.loss, force="val_loss" in extra)

    def save(self, step: int, state: Any) -> None:
        self.ckpt.save(step, to_items(_safe_copy(state)), _meta(self.cfg, step, self.dataset))

    def close(self) -> None:
        """Runs on success, NaN and signals alike: pending writes finish, metrics are flushed."""
        self.progress.close()
        self.ckpt.wait()
        if self.logger:
            self.logger.finish(self.log_state)
            write_metrics_csv(self.run_dir / "metrics" / "run_0", self.run_dir / "metrics.csv")


def _diverged_message(cfg: Config, step: int, loss: float, ckpt: Checkpointer) -> str:
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
                seed: int = 0, tokenizer: Tokenizer | None = None) -> str:  # fmt: skip
    """Generate text with ``tokenizer`` (default bytes); defaults come from the config's ``[sample]``."""
    s = cfg.sample
    tok = tokenizer or ByteTokenizer()
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
    return decode_lenient(tok, np.asarray(out))


def _local(x: jax.Array) -> jax.Array:
    # Generation runs on one device: gather sharded params (they may span several processes).
    if x.is_fully_addressable:
        return jax.device_put(x, jax.devices()[0])
    from jax.experimental import multihost_utils

    return jnp.asarray(multihost_utils.process_allgather(x, tiled=True))


def load_run(run_dir: str | Path) -> tuple[Config, Any, int]:
    """``(config, params, step)`` of a run folder's newest readable checkpoint, on one device.

    Only the ``params`` item is read: the optimizer state (for Adam, twice the params) stays on disk.
    """
    run = check_run_folder(run_dir, flag="--run")
    cfg = _single_device(_config.load_config(str(run / "config.toml")))
    mesh = make_mesh(cfg.mesh, jax.devices()[:1])
    ckpt = Checkpointer(run / "checkpoints", keep=cfg.train.keep_checkpoints)
    try:
        items, _, step = ckpt.restore({"params": abstract_params(cfg, mesh)})
    finally:
        ckpt.close()
    return cfg, items["params"], step


def check_run_folder(run_dir: str | Path, *, flag: str) -> Path:
    """``run_dir`` as a Path if it is a run folder (it has ``config.toml``), else a UsageError."""
    run = Path(run_dir)
    if (run / "config.toml").is_file():
        return run
    found = "does not exist" if not run.exists() else "has no config.toml"
    if run.exists() and not run.is_dir():
        found = "is a file, not a folder"
    raise UsageError(
        f"{flag} {run}: not a run folder ({found}). Expected a folder made by `gpt train`, holding "
        f"config.toml and checkpoints/; pass one, e.g. {flag} runs/<name>{_run_hint(run)}."
    )


def _run_hint(run: Path) -> str:
    # Name the run folders next to the one given, since a typo in the name is the usual cause.
    parent = run.parent if run.parent.is_dir() else None
    runs = (
        sorted(p.name for p in parent.iterdir() if (p / "config.toml").is_file()) if parent else []
    )
    if not runs:
        return ""
    return f" (run folders in {parent}: {list_alternatives(runs, limit=10)})"


def _single_device(cfg: Config) -> Config:
    # Sampling and eval run on one device whatever mesh the run trained on: orbax reshards on restore.
    return dataclasses.replace(cfg, mesh=_config.MeshConfig(data=1, fsdp=1, tensor=1))


def evaluate_run(run_dir: str | Path) -> float:
    """Validation loss (nats per byte) of a run's newest checkpoint on its fixed val windows."""
    cfg, params, _ = load_run(run_dir)
    mesh = make_mesh(cfg.mesh, jax.devices()[:1])
    dataset = load_dataset(
        cfg.data, seq_len=cfg.model.seq_len, vocab_size=cfg.model.vocab_size,
        tokenizer=run_tokenizer(run_dir, cfg),
    )  # fmt: skip
    return _Evaluator(cfg, mesh, params, dataset)(params)
