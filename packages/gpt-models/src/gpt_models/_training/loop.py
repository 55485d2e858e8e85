"""The training loop: :func:`run_training` trains a resolved run with its plan and the command's
hooks,
from scratch or from its last checkpoint.

Around the jitted step it restores or initialises the state, takes the run lock, keeps the run's
records, and hands the steps to ``step_loop.py``; it stops on NaN and on SIGTERM/SIGINT (after
saving), and at the end writes the loss plot and the hooks' sample. What the run is, and every
check that can fail on it, was decided before (``_runs.run.resolve_run``, ``plans.plan_run``);
evaluation and sampling are the command's hooks (``hooks.py``).
"""

from __future__ import annotations

import dataclasses
import errno
import math
import shutil
import sys
from pathlib import Path
from typing import Any, NamedTuple, TextIO

import lox

from .._compute.host_memory import keep_host_memory
from .._compute.preflight import Plan, check_fits, is_out_of_memory, out_of_memory_message
from .._config.toml import dumps
from .._data.run_tokenizer import save_tokenizer
from .._distributed.processes import is_primary
from .._errors import (
    ConfigError,
    DiskFullError,
    OutOfMemoryError,
    TrainingDivergedError,
    UsageError,
)
from .._runs.chat_file import keep_chat_format
from .._runs.checkpoint import CapturedLogs, Checkpointer
from .._runs.diskfull import disk_full_message
from .._runs.folders import write_text
from .._runs.launch import carry_records, holds_checkpoints
from .._runs.lock import join_run, run_lock
from .._runs.resolve import check_same_stores
from .._runs.run import Run
from .._runs.runlog import log_failure
from .._runs.snapshot import committed_steps
from .hooks import Hooks
from .init_from import init_state_from
from .plans import TrainPlan
from .progress import plot_losses
from .signals import TrainingInterrupted, stop_on_signals
from .step import from_items, init_state, to_items
from .step_loop import StepLoop


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


def run_training(
    run: Run, plan: TrainPlan, hooks: Hooks, *, stream: TextIO | None = None
) -> RunResult:
    """Train ``run`` as ``plan`` says, with ``hooks`` (created; or continued from its newest
    checkpoint when ``run.resume``). A plan that does not fit is refused before anything is
    written (``OutOfMemoryError``, with settings that fit).

    Raises:
        UsageError: the run folder holds checkpoints made since it was resolved.
        TrainingDivergedError: the loss became NaN/inf; the last good checkpoint is kept.
        TrainingInterrupted: SIGTERM/SIGINT; a checkpoint of the last finished step was saved first.
        DiskFullError, OutOfMemoryError: the disk filled up, or a step ran out of memory.
    """
    stream = stream or sys.stderr
    check_fits(plan.preflight)
    folder = run.folder
    created = is_primary() and not folder.exists()
    at: dict[str, Any] = {}  # the loop's step and clean-up log lines, for the run's error log
    try:
        if is_primary():
            folder.mkdir(parents=True, exist_ok=True)
        # Held until training ends, and taken before looking for checkpoints, so that of two
        # launches into one run folder only one gets past this line (process 0 writes for all).
        # The other processes of a job join process 0's run (refused if another job holds it).
        with run_lock(folder, stream=stream) if is_primary() else join_run(folder):
            ckpt = Checkpointer(folder / "checkpoints", keep=run.config.train.keep_checkpoints)
            try:
                return _run_steps(run, plan, hooks, ckpt, at, stream)
            except BaseException as err:
                failure = _reported(err, plan.preflight, folder, at)
                if failure is err:
                    raise
                raise failure from err
            finally:
                ckpt.close()
    except (UsageError, ConfigError, KeyboardInterrupt) as err:
        # A launch refused (an init source whose weights turn out unreadable) or interrupted
        # (Ctrl-C) before its first step leaves no folder it made; an out-of-memory keeps its
        # error log.
        if created and not isinstance(err, OutOfMemoryError) and not _trained(folder):
            shutil.rmtree(folder, ignore_errors=True)
        raise


def _trained(run: Path) -> bool:
    return (run / "config.toml").exists() or bool(committed_steps(run / "checkpoints"))


def _reported(err: BaseException, plan: Plan, folder: Path, at: dict[str, Any]) -> BaseException:
    """What a failed launch raises (the public error for a full disk or an out-of-memory, else
    ``err`` itself), after logging it in the run's error log unless it was a refused launch."""
    typed = _typed_error(err, plan, folder) if isinstance(err, Exception) else None
    if typed is not None:
        typed.__cause__ = err
    refused = isinstance(err, (UsageError, ConfigError)) and at.get("step") is None
    if is_primary() and not (refused and not isinstance(err, OutOfMemoryError)):
        # A refused launch (e.g. into a run that holds checkpoints) leaves the run as it was.
        _log_failure(folder, at.get("step"), typed or err, at.get("clean-up", []))
    return typed or err


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


class Restored(NamedTuple):
    """The state a launch trains from, its step, and its checkpoint's metadata ({} when new)."""

    state: Any
    step: int
    meta: dict[str, Any]


def _restore_or_init(run: Run, plan: TrainPlan, ckpt: Checkpointer, stream: TextIO) -> Restored:
    cfg = run.config
    if not run.resume:
        if ckpt.steps():  # made since the run was resolved: another launch ran in between
            raise holds_checkpoints(run.folder, ckpt.steps())
        if run.init is not None:
            t = cfg.train
            print(
                f"Starting from the weights of {cfg.init.source} (step 0). Schedule: lr {t.lr:g} "
                f"after {t.warmup_steps} warmup steps, cosine to {t.lr * t.min_lr_ratio:g} at step "
                f"{t.steps} (train.lr, train.warmup_steps, train.min_lr_ratio).",
                file=stream,
            )
            return Restored(init_state_from(cfg, run.init, plan.optimizer, plan.mesh), 0, {})
        return Restored(init_state(cfg, plan.optimizer, plan.mesh), 0, {})
    items, meta, step = ckpt.restore(to_items(plan.abstract))
    if step > cfg.train.steps:  # before config.toml is rewritten with the smaller count
        folder = ckpt.directory.parent
        raise UsageError(
            f"{folder} is at step {step} (its newest checkpoint), past train.steps = "
            f"{cfg.train.steps}; a resumed run cannot go back. Train further with gpt train "
            f"--resume {folder} --set train.steps=N (N > {step}), or read the run as it is with "
            f"gpt sample/eval --run {folder}."
        )
    check_same_stores(run.stores, meta.get("data", {}).get("stores"), run.folder, step)
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
    return Restored(state, step, meta)


def _run_steps(
    run: Run, plan: TrainPlan, hooks: Hooks, ckpt: Checkpointer, at: dict[str, Any], stream: TextIO
) -> RunResult:
    cfg, folder = run.config, run.folder
    restored = _restore_or_init(run, plan, ckpt, stream)
    state, start = restored.state, restored.step
    if is_primary():  # before the metrics logger opens them
        carry_records(folder, dataclasses.replace(run.launch, start=start), stream)
    loop = StepLoop(run, plan, hooks, ckpt, restored, stream)
    loop.at = at
    # Only now that the launch is accepted (checkpoints restored, metrics opened): a refused or
    # failed launch leaves the run's config.toml as it was.
    if is_primary():
        save_tokenizer(run.tokenizer, folder)
        keep_chat_format(run.chat, folder)
    write_text(folder / "config.toml", dumps(cfg))
    loop.announce(state)
    if start == 0 and run.init is not None:
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
        if not math.isfinite(loop.val) and loop.hooks.evaluate is not None:
            loop.evaluate(state.params)
        tps, mfu = loop.progress.rates(cfg.train.steps)
        sample = _finish(run, loop, state, stop)
    return RunResult(
        folder, cfg.train.steps, loop.loss, loop.val, tps, mfu, sample, start, loop.unit
    )


def _finish(run: Run, loop: StepLoop, state: Any, stop: dict[str, int]) -> str:
    """The loss plot and the sample of a finished run (its text); after a signal, neither, and
    ``TrainingInterrupted`` naming what was not written."""
    metrics, skipped = run.folder / "metrics" / "run_0", []
    if loop.logger and metrics.is_dir() and "signum" not in stop:
        per = None if run.config.preference.enabled else run.data.bytes_per_token
        plot_losses(lox.load(metrics), run.folder / "loss.png", per)
    elif loop.logger:
        skipped.append("loss.png")
    sample = ""
    if loop.hooks.sample is not None and "signum" not in stop:
        sample = loop.hooks.sample(state.params)
        write_text(run.folder / "sample.txt", sample)
    elif loop.hooks.sample is not None:
        skipped.append("sample.txt")
    if "signum" in stop:
        raise TrainingInterrupted(stop["signum"], run.config.train.steps, tuple(skipped))
    return sample


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
