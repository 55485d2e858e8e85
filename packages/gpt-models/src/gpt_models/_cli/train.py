"""Training wired by the command: resolve the run once, plan it, attach the hooks, train.

``gpt train`` and the library's :func:`train` and :func:`plan_training` are the same four steps:
:func:`~gpt_models.resolve_run` (everything the run reads, decided once), ``plan_run`` (the checks
and the compiled step, measured), :func:`training_hooks` (evaluation and the end-of-run sample from
``_inference``, the metrics logger) and ``run_training``. ``_training`` never imports evaluation
or sampling: they reach the loop as hooks from here.
"""

from __future__ import annotations

import logging
import math
import sys
import tempfile
import time
from pathlib import Path
from typing import TextIO

from .._compute.preflight import Plan
from .._config.schema import Config
from .._errors import DiskFullError
from .._inference.evaluate import Evaluator
from .._inference.sampling import end_of_run_sample
from .._inference.tasks import TaskEvals
from .._runs.run import Run, resolve_run
from .._training.hooks import Hooks
from .._training.logging import make_logger
from .._training.loop import RunResult, run_training
from .._training.plans import TrainPlan, plan_run
from .._training.preference import prepare_reference
from .._training.signals import TrainingInterrupted

EXIT_DISK_FULL = 4  # the multi-process failures exit with 3 (startup.EXIT_PEERS)


def training_hooks(run: Run, plan: TrainPlan, *, sample: bool, stream: TextIO) -> Hooks:
    """``gpt train``'s hooks: the validation loss and ``eval.tasks`` at each evaluation, the run's
    metrics (``metrics/``, TensorBoard, wandb) and, with ``sample``, ``sample.txt``.

    Raises:
        DataError: an ``eval.tasks`` file that cannot be read (before anything is written).
    """
    cfg = run.config
    tasks = TaskEvals(cfg, run.tokenizer)  # a bad eval.tasks file fails here, not at an eval

    def sample_text(params: object) -> str:
        return end_of_run_sample(params, cfg, run.tokenizer, run.chat, stream)

    # A preference run's reference: a copy of the init weights, or its pairs' log-probs computed
    # now (before the evaluator reads its validation batches, which then carry them).
    reference = prepare_reference(run, plan, stream)
    return Hooks(
        evaluate=Evaluator(cfg, plan.mesh, plan.abstract.params, run.data, reference=reference),
        tasks=tasks if tasks.tasks else None,
        sample=sample_text if sample else None,
        logger=make_logger(cfg, run.folder),
        reference=reference,
    )


def train(
    cfg: Config,
    run_dir: str | Path,
    *,
    resume: bool = False,
    stream: TextIO | None = None,
    write_sample: bool = True,
    profile: tuple[int, int] | None = None,
) -> RunResult:
    """Train ``cfg`` in ``run_dir`` (created; or continued from its last checkpoint with
    ``resume``).

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
        ConfigError, DataError: bad config, data, mesh or a missing wandb (the CLI exits with
            status 2).
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
        ...     model=dataclasses.replace(
        ...         tiny.model, seq_len=32, d_model=32, n_layers=1, n_heads=2
        ...     ),
        ...     train=dataclasses.replace(tiny.train, steps=2, batch_size=8, warmup_steps=1,
        ...                               eval_batches=1),
        ...     sample=dataclasses.replace(tiny.sample, max_new_tokens=4),
        ... )
        >>> result = train(cfg, tempfile.mkdtemp() + "/run", stream=io.StringIO())
        >>> result.step, sorted(p.name for p in result.run_dir.iterdir())
        (2, ['checkpoints', 'config.toml', 'loss.png', 'metrics', 'metrics.csv', 'sample.txt'])
    """
    stream = stream or sys.stderr
    run = resolve_run(run_dir, cfg, resume=resume, stream=stream)
    plan = plan_run(run, profile=profile, stream=stream)
    hooks = training_hooks(run, plan, sample=write_sample, stream=stream)
    return run_training(run, plan, hooks, stream=stream)


def plan_training(
    cfg: Config,
    run_dir: str | Path | None = None,
    *,
    resume: bool = False,
    stream: TextIO | None = None,
    profile: tuple[int, int] | None = None,
) -> Plan:
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
    # Without a folder: one that does not exist, so that none of a launch's checks of it apply.
    folder = Path(run_dir) if run_dir is not None else Path(tempfile.mkdtemp()) / "dry-run"
    run = resolve_run(folder, cfg, resume=resume, dry_run=True, stream=stream)
    return plan_run(run, profile=profile, stream=stream).preflight


def train_and_report(run: Run, plan: TrainPlan) -> int:
    """``gpt train`` of a resolved and planned run: train it with ``gpt train``'s hooks and say
    how it ended (done, stopped by a signal, a full disk, a lost peer); the exit status."""
    hooks = training_hooks(run, plan, sample=True, stream=sys.stderr)
    started = time.perf_counter()
    try:
        result = run_training(run, plan, hooks)
    except TrainingInterrupted as stop:
        print(_interrupted(stop, run.folder), file=sys.stderr)
        return 128 + stop.signum
    except DiskFullError as err:
        logging.getLogger("absl").setLevel(logging.CRITICAL)  # orbax's writers winding down
        print(f"gpt: error: {err}", file=sys.stderr)
        return EXIT_DISK_FULL
    except Exception as err:
        from .._distributed.startup import exit_on_lost_peer, is_peer_failure
        from .._runs.diskfull import disk_full_message

        if (message := disk_full_message(err, run.folder)) is not None:
            # Orbax's background writers may still log the same failure while they wind down;
            # our message is the one that says what to do.
            logging.getLogger("absl").setLevel(logging.CRITICAL)
            print(f"gpt: error: {message}", file=sys.stderr)
            return EXIT_DISK_FULL
        if is_peer_failure(err):
            exit_on_lost_peer(err, run.folder)
        raise
    print(_done(result, run.folder, (time.perf_counter() - started) / 60))
    return 0


def _interrupted(stop: TrainingInterrupted, run: Path) -> str:
    if stop.skipped:  # after the last step: training is complete, its end was cut short
        were = "was" if len(stop.skipped) == 1 else "were"
        return (
            f"\nStopped by signal {stop.signum} after the last step ({stop.step}); its "
            f"checkpoint is saved, but {' and '.join(stop.skipped)} {were} not written. A "
            f"sample: gpt sample --run {run}"
        )
    return (
        f"\nStopped by signal {stop.signum} after step {stop.step}; checkpoint saved. Continue "
        f"with:\n  gpt train --resume {run}"
    )


def _done(result: RunResult, run: Path, minutes: float) -> str:
    mfu = "" if math.isnan(result.mfu) else f", MFU {100 * result.mfu:.1f}%"
    per = "nats/pair" if result.val_unit == "nats/pair" else "nats/token"  # preference: per pair
    done = (
        f"Done in {minutes:.1f} min: step {result.step}, train loss {result.loss:.4f} "
        f"{per}, val loss {result.val_loss:.4f} {result.val_unit}, "
        f"{result.tokens_per_s / 1e3:.1f}k tok/s{mfu}."
    )
    if result.resumed_from == result.step:  # resumed a complete run: no step was trained
        done = (
            f"Nothing to train: the run was at step {result.step} = train.steps already; its "
            f"val loss {result.val_loss:.4f} {result.val_unit}, loss.png and sample.txt were "
            f"written again. Train further with gpt train --resume {run} --set train.steps=N "
            f"(N > {result.step})."
        )
    return (
        f"\n{done}\nRun folder: {run} "
        "(config.toml, checkpoints/, metrics/, metrics.csv, loss.png, sample.txt)\n\n--- sample "
        f"---\n{result.sample}\n--------------"
    )
