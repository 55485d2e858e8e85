"""The training loop: ``train`` runs a config in a run folder, from scratch or from its last checkpoint.

Around the jitted step (``step.py``) it fetches batches, evaluates, logs metrics, shows progress,
saves checkpoints, stops on NaN and on SIGTERM/SIGINT (after saving), and at the end writes the loss
plot and a sample. Run folders are ``_runs/``; signals ``signals.py``; metrics ``logging.py``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import io
import math
import shutil
import sys
from pathlib import Path
from typing import Any, TextIO

import jax
from jax.sharding import Mesh

import lox
import paramspec as ps

from .._config.schema import Config, DataConfig
from .._config.toml import dumps
from .._data.chat_format import ChatFormat
from .._data.corpus import Dataset, load_dataset
from .._data.run_tokenizer import save_tokenizer
from .._distributed.mesh import make_mesh
from .._distributed.processes import is_primary
from .._errors import (
    ConfigError,
    DiskFullError,
    OutOfMemoryError,
    TrainingDivergedError,
    UsageError,
)
from .._model.attention import check_attention
from .._runs.checkpoint import CapturedLogs, Checkpointer
from .._runs.diskfull import disk_full_message
from .._runs.folders import write_text
from .._runs.lock import run_lock
from .._runs.resolve import keep_chat_format, resolve_config, training_chat_format
from .._runs.runlog import log_failure
from .._runs.snapshot import committed_steps
from .evaluate import end_of_run_sample
from .host_memory import keep_host_memory
from .init_from import init_state_from
from .launch import Launch, carry_records, check_launch, holds_checkpoints
from .logging import check_tensorboard, check_wandb
from .plans import plan_step
from .preflight import Plan, check_fits, is_out_of_memory, out_of_memory_message
from .profiling import StepProfiler
from .progress import plot_losses
from .signals import TrainingInterrupted, stop_on_signals
from .step import (
    abstract_state,
    from_items,
    init_state,
    make_optimizer,
    to_items,
)
from .step_loop import StepLoop
from .tasks import TaskEvals


@dataclasses.dataclass
class RunResult:
    """What ``train`` returns: the final step, losses, throughput and the sample.

    ``loss`` is the last train loss in nats per token, ``val_loss`` in ``val_unit`` (nats per
    byte; per token for data whose bytes are unknown, a ``.bin`` without a sidecar); ``mfu`` is
    model FLOPs utilisation, NaN when the device's peak is unknown (CPU without
    ``log.peak_flops``); ``sample`` is the text written to ``sample.txt`` (empty with
    ``write_sample=False``). ``resumed_from`` is the step this call started at (0 for a new run):
    equal to ``step``, the run was complete already and no step was trained (``loss`` is NaN).
    """

    run_dir: Path
    step: int
    loss: float
    val_loss: float
    tokens_per_s: float
    mfu: float
    sample: str
    resumed_from: int = 0
    val_unit: str = "nats/byte"


def train(
    cfg: Config,
    run_dir: str | Path,
    *,
    resume: bool = False,
    stream: TextIO | None = None,
    write_sample: bool = True,
    profile: tuple[int, int] | None = None,
) -> RunResult:
    """Train ``cfg`` in ``run_dir`` (created; or continued from its last checkpoint with ``resume``).

    Every check that can fail on the config, data, mesh or wandb runs before ``run_dir`` is created.
    A ``train.warmup_steps`` that does not fit in ``train.steps`` is cut to 10% of the run, with a
    one-line note on ``stream``; ``config.toml`` records the value used.

    Args:
        cfg: the config (a ``Config`` is checked when it is built).
        run_dir: the run folder.
        resume: continue from the newest readable checkpoint in ``run_dir/checkpoints``.
        stream: where the progress bar and messages go (default ``sys.stderr``).
        write_sample: generate ``sample.txt`` at the end.
        profile: ``(start, stop)``: record a JAX profiler trace of steps ``start`` .. ``stop - 1``
            (0-based) into ``run_dir/profile`` (``gpt train --profile START:STOP``).

    Raises:
        ConfigError, DataError: bad config, data, mesh or a missing wandb (the CLI exits with status 2).
        UsageError: ``run_dir`` already holds checkpoints and ``resume`` is false, or ``profile``
            is not a range of the run's steps.
        TrainingDivergedError: the loss became NaN/inf; the last good checkpoint is kept.
        TrainingInterrupted: SIGTERM/SIGINT; a checkpoint of the last finished step was saved first.

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
    stream = stream or sys.stderr
    run = Path(run_dir)
    # First: a folder we may not write into is refused before minutes of compiling.
    launch = check_launch(cfg, run, resume=resume, profile=profile)
    cfg, mesh, tokenizer, dataset, optimizer, abstract, chat = _prepare(cfg, run, resume, stream)
    # Before anything is written: a step that cannot fit stops here, in seconds, with settings
    # that do (derived from the compiled step); the compiled step is the one the loop runs.
    plan = plan_step(cfg, optimizer, mesh, abstract, stream=stream)
    check_fits(plan)
    created = is_primary() and not run.exists()
    try:
        return _train_in(cfg, run, resume, stream, write_sample, mesh, dataset, optimizer,
                         abstract, plan, profile, launch, chat)  # fmt: skip
    except (UsageError, ConfigError) as err:
        # A launch refused before its first step leaves no folder it made (an init source whose
        # weights turn out unreadable); an out-of-memory keeps its error log.
        if created and not isinstance(err, OutOfMemoryError) and not _trained(run):
            shutil.rmtree(run, ignore_errors=True)
        raise


def _trained(run: Path) -> bool:
    return (run / "config.toml").exists() or bool(committed_steps(run / "checkpoints"))


def _train_in(cfg: Config, run: Path, resume: bool, stream: TextIO, write_sample: bool, mesh: Mesh,
              dataset: Dataset, optimizer: Any, abstract: Any, plan: Plan,
              profile: tuple[int, int] | None, launch: Launch,
              chat: ChatFormat | None) -> RunResult:  # fmt: skip
    if is_primary():
        run.mkdir(parents=True, exist_ok=True)
    # Held until training ends, and taken before looking for checkpoints, so that of two launches
    # into one run folder only one gets past this line (process 0 writes the folder for all).
    with run_lock(run, stream=stream) if is_primary() else contextlib.nullcontext():
        ckpt = Checkpointer(run / "checkpoints", keep=cfg.train.keep_checkpoints)
        at: dict[str, Any] = {}  # the loop's step and clean-up log lines, for the run's error log
        try:
            return _run_steps(
                cfg, run, resume, stream, write_sample, mesh, dataset, optimizer, abstract, ckpt,
                plan.compiled, profile, at, launch, chat,
            )  # fmt: skip
        except BaseException as err:
            typed = _typed_error(err, plan, run) if isinstance(err, Exception) else None
            if typed is not None:
                typed.__cause__ = err
            refused = isinstance(err, (UsageError, ConfigError)) and at.get("step") is None
            if is_primary() and not (refused and not isinstance(err, OutOfMemoryError)):
                # A refused launch (e.g. into a run that holds checkpoints) leaves the run as it was.
                _log_failure(run, at.get("step"), typed or err, at.get("clean-up", []))
            if typed is None:
                raise
            raise typed from err
        finally:
            ckpt.close()


def plan_training(
    cfg: Config, run_dir: str | Path | None = None, *, resume: bool = False,
    stream: TextIO | None = None, profile: tuple[int, int] | None = None,
) -> Plan:  # fmt: skip
    """What ``train(cfg, run_dir)`` would run, without running or writing anything.

    Makes the checks ``train`` makes of ``run_dir`` (when given) and of ``profile``, resolves the
    config as ``train`` does (fitted warmup, the tokenizer's vocabulary), compiles the train step
    ahead of time and measures its memory against the devices. ``gpt train --dry-run`` prints
    ``plan.describe()``.

    Returns:
        The plan: ``plan.fits``, ``plan.memory`` (bytes per device), ``plan.budget``, sizes.

    Example:
        >>> import io
        >>> from gpt_models import PRESETS, plan_training
        >>> plan = plan_training(PRESETS["tiny"], stream=io.StringIO())
        >>> plan.fits, plan.params > 0, plan.memory.temporaries > 0
        (True, True, True)
    """
    stream = stream or sys.stderr
    run = Path(run_dir) if run_dir is not None else Path("dry-run")
    if run_dir is not None:  # the checks `train` makes of its folder, with nothing written
        check_launch(cfg, run, resume=resume, profile=profile)
    cfg, mesh, _, _, optimizer, abstract, _ = _prepare(cfg, run, resume, stream)
    return plan_step(cfg, optimizer, mesh, abstract, stream=stream)


def _prepare(cfg: Config, run: Path, resume: bool, stream: TextIO) -> tuple[Any, ...]:
    """Every check on the config, data, mesh and wandb, before anything is written."""
    said = stream if is_primary() else io.StringIO()
    cfg, tokenizer = resolve_config(cfg, run, resume=resume, stream=said)
    check_wandb(cfg)
    check_tensorboard(cfg)
    check_attention(cfg.model)
    mesh = make_mesh(cfg.mesh)
    _check_batch_fits(cfg, mesh)
    dataset = load_dataset(
        cfg.data, seq_len=cfg.model.seq_len, vocab_size=cfg.model.vocab_size, tokenizer=tokenizer
    )
    for note in dataset.notes:  # examples too long for a row, left out (never cut)
        print(note, file=said)
    if cfg.data.kind == "store" and cfg.data.val_fraction != DataConfig().val_fraction:
        print(
            f"note: data.val_fraction = {cfg.data.val_fraction} does not apply to a token store: "
            f"{cfg.data.path} keeps the split gpt prepare made (its --val-fraction).",
            file=said,
        )
    TaskEvals(cfg, tokenizer)  # a bad eval.tasks file fails here, not at the first eval
    optimizer = make_optimizer(cfg.train)
    chat = training_chat_format(cfg, run, said)
    return cfg, mesh, tokenizer, dataset, optimizer, _abstract(cfg, optimizer, mesh), chat


def _typed_error(err: Exception, plan: Plan, run: Path) -> Exception | None:
    """The public error for a full disk or an out-of-memory behind ``err`` (``None``: neither)."""
    if isinstance(err, (DiskFullError, OutOfMemoryError)):
        return None
    if (message := disk_full_message(err, run)) is not None:
        full = DiskFullError(message)
        full.errno = errno.ENOSPC
        return full
    if is_out_of_memory(err):
        return OutOfMemoryError(out_of_memory_message(err, plan))
    return None


def _log_failure(run: Path, step: int | None, err: BaseException, lines: list[str]) -> None:
    # A diverged, interrupted or refused run says everything in its message; a crash (or a full
    # disk, an out-of-memory) keeps its traceback chain in the log for whoever debugs it, with
    # what orbax logged while stopping.
    told = (UsageError, TrainingDivergedError, TrainingInterrupted, KeyboardInterrupt)
    chain = not isinstance(err, told) or isinstance(err, OutOfMemoryError)
    log_failure(run, step, err, chain=chain, lines=lines if chain else [])


def _check_batch_fits(cfg: Config, mesh: Mesh) -> None:
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


def _abstract(cfg: Config, optimizer: Any, mesh: Mesh) -> Any:
    try:
        return abstract_state(cfg, optimizer, mesh)
    except ps.ShardingError as err:  # e.g. heads not divisible by mesh.tensor
        raise ConfigError(
            f"Impossible mesh for this model: {err}\nChoose mesh sizes that divide the sharded "
            "dimensions (heads and kv_heads and mlp and vocab by mesh.tensor; d_model by mesh.fsdp)."
        ) from err


def _restore_or_init(cfg: Config, resume: bool, optimizer: Any, mesh: Mesh, abstract: Any, ckpt: Checkpointer,
                     stream: TextIO) -> tuple[Any, int]:  # fmt: skip
    if not resume:
        if ckpt.steps():  # made since check_launch looked: another launch ran in between
            raise holds_checkpoints(ckpt.directory.parent, ckpt.steps())
        if cfg.init.source:
            t = cfg.train
            print(
                f"Starting from the weights of {cfg.init.source} (step 0). Schedule: lr {t.lr:g} "
                f"after {t.warmup_steps} warmup steps, cosine to {t.lr * t.min_lr_ratio:g} at step "
                f"{t.steps} (train.lr, train.warmup_steps, train.min_lr_ratio).",
                file=stream,
            )
            return init_state_from(cfg, optimizer, mesh), 0
        return init_state(cfg, optimizer, mesh), 0
    items, meta, step = ckpt.restore(to_items(abstract))
    if step > cfg.train.steps:  # before config.toml is rewritten with the smaller count
        run = ckpt.directory.parent
        raise UsageError(
            f"{run} is at step {step} (its newest checkpoint), past train.steps = "
            f"{cfg.train.steps}; a resumed run cannot go back. Train further with gpt train "
            f"--resume {run} --set train.steps=N (N > {step}), or read the run as it is with "
            f"gpt sample/eval --run {run}."
        )
    state = from_items(items)
    if gone := ckpt.discard_damaged(step):
        print(
            f"note: removed the damaged checkpoint step(s) {gone}; training from step {step} "
            "saves them again.",
            file=stream,
        )
    if meta.get("data", {}).get("seed", cfg.train.seed) != cfg.train.seed:
        print("note: train.seed changed since the checkpoint; batches will differ.", file=stream)
    print(f"Resumed from checkpoint step {step} in {ckpt.directory}", file=stream)
    return state, step


def _run_steps(cfg: Config, run: Path, resume: bool, stream: TextIO, write_sample: bool, mesh: Mesh,
           dataset: Dataset, optimizer: Any, abstract: Any, ckpt: Checkpointer,
           step_fn: Any, profile: tuple[int, int] | None, at: dict[str, Any],
           launch: Launch, chat: ChatFormat | None) -> RunResult:  # fmt: skip
    state, start = _restore_or_init(cfg, resume, optimizer, mesh, abstract, ckpt, stream)
    if is_primary():  # before the metrics logger opens them
        carry_records(run, dataclasses.replace(launch, start=start), stream)
    loop = StepLoop(cfg, run, mesh, dataset, abstract, ckpt, start, stream, step_fn)
    loop.at = at
    # Only now that the launch is accepted (checkpoints restored, metrics opened): a refused or
    # failed launch leaves the run's config.toml as it was.
    if is_primary():
        save_tokenizer(dataset.tokenizer, run)
        keep_chat_format(chat, run)
    write_text(run / "config.toml", dumps(cfg))
    loop.profiler = StepProfiler(profile if is_primary() else None, run / "profile", loop.stream)
    loop.announce(state)
    if start == 0 and cfg.init.source:
        loop.baseline(state)
    # One handler from the first step to the sample: a signal after the last step (while the
    # final checkpoint, loss.png or the sample are written) skips what is left and says so,
    # instead of killing the process with its lock file left behind.
    with stop_on_signals() as stop:
        # Orbax's writers report a failed background save (a full disk) from their threads, with
        # tracebacks, well before the failure reaches us at the next save: held until then, then
        # printed if that save went well, or kept for the run's error log if it did not.
        with loop.orbax:
            try:
                state = loop.run(state, stop)
                keep_host_memory(False)  # the steps are over: the final eval and sample trim again
            except BaseException as err:
                _close_after(loop, err)
                raise
            loop.close()
        loop.orbax.replay()
        val = loop.val if math.isfinite(loop.val) else loop.evaluate(state.params)
        tps, mfu = loop.progress.rates(cfg.train.steps)
        skipped: list[str] = []
        if loop.logger and "signum" not in stop:
            metrics = lox.load(run / "metrics" / "run_0")
            plot_losses(metrics, run / "loss.png", dataset.bytes_per_token)
        elif loop.logger:
            skipped.append("loss.png")
        sample = ""
        if write_sample and "signum" not in stop:
            sample = end_of_run_sample(state.params, cfg, dataset.tokenizer, chat, stream)
            write_text(run / "sample.txt", sample)
        elif write_sample:
            skipped.append("sample.txt")
        if "signum" in stop:
            raise TrainingInterrupted(stop["signum"], cfg.train.steps, tuple(skipped))
    return RunResult(
        run, cfg.train.steps, loop.loss, val, tps, mfu, sample, start, loop.evaluate.unit
    )


def _close_after(loop: StepLoop, err: BaseException) -> None:
    # The loop failed: still finish pending writes and flush metrics, but a clean-up that fails in
    # turn (no metrics folder yet when the first step ran out of memory) must not replace the real
    # error; it becomes a note on it. Orbax's own reports of the same failure while its writers
    # wind down (a lost peer's barrier, a full disk) go to the run's error log, not the terminal.
    with CapturedLogs() as captured:
        try:
            loop.close()
        except Exception as later:  # reported on the first error instead
            err.add_note(f"(While stopping, clean-up also failed: {type(later).__name__}: {later})")
    loop.at.setdefault("clean-up", []).extend(loop.orbax.lines + captured.lines)
