"""The step loop of a run: batches, the jitted step, the hooks when due, progress, checkpoints.

``loop.py`` sets a launch up (restore, the run folder) and hands the steps to :class:`StepLoop`;
what happens at each step (fetch the next batch while the device runs, check the loss, evaluate
and log through the command's hooks when due, save) is here.
"""

from __future__ import annotations

import io
import math
import time
from typing import Any, TextIO

import jax
import jax.numpy as jnp
import numpy as np

import lox

from .._compute.host_memory import await_scratch, keep_host_memory
from .._config.schema import Config
from .._data.corpus import Dataset, train_batch
from .._distributed.mesh import MICRO_BATCH_AXES, place_batch
from .._distributed.processes import host_value, is_primary
from .._errors import TrainingDivergedError
from .._model.flops import flops_per_token
from .._model.gpt import compute_dtype
from .._model.lora import lora_summary, trainable_count
from .._runs.checkpoint import CapturedLogs, Checkpointer
from .._runs.run import Run
from .hooks import Hooks
from .metrics_csv import write_metrics_csv
from .mfu import peak_flops, unknown_peak_note
from .plans import TrainPlan
from .profiling import StepProfiler
from .progress import Progress
from .signals import TrainingInterrupted
from .source_metrics import SourceMetrics
from .step import to_items


def _meta(cfg: Config, step: int, dataset: Dataset, extra: dict[str, Any]) -> dict[str, Any]:
    # The data position is the step: batches are a pure function of (train.seed, step). The
    # stores' identities and a mixture's token counts come along: a resume checks the first and
    # continues the second.
    data = {"seed": cfg.train.seed, "next_step": step, "source": dataset.source}
    return {"step": step, "data": data | extra}


def _safe_copy(state: Any) -> Any:
    # On CPU a device buffer and the host array orbax reads may share memory; the next step donates
    # (overwrites) the state, so hand orbax a private copy. Accelerators copy to host anyway.
    if jax.default_backend() == "cpu":
        return jax.tree.map(jnp.copy, state)
    return state


class StepLoop:
    """The step loop's moving parts: batches, metrics, progress, evaluation and checkpoints."""

    def __init__(
        self,
        run: Run,
        plan: TrainPlan,
        hooks: Hooks,
        ckpt: Checkpointer,
        restored: Any,
        stream: TextIO,
    ) -> None:
        """``restored``: the state the loop starts from, its step and its checkpoint's metadata
        (``loop.Restored``)."""
        cfg, t = run.config, run.config.train
        self.cfg, self.run_dir, self.mesh, self.dataset = cfg, run.folder, plan.mesh, run.data
        self.ckpt, self.start, self.hooks = ckpt, restored.step, hooks
        self.stores = run.stores  # recorded with each checkpoint
        self.step_fn = plan.preflight.compiled  # compiled by the pre-flight (plans.plan_step)
        # A preference step's copy of the init weights, its third argument (hooks.py).
        self.reference = () if hooks.reference is None else (hooks.reference,)
        self.stream = stream if is_primary() else io.StringIO()  # only process 0 reports
        # A mixture's per-source metrics, their counts continued from the checkpoint's.
        self.sources = SourceMetrics(cfg, run.data, restored, self.stream)
        self.logger = hooks.logger if is_primary() else None
        self.log_state = self.logger.init() if self.logger else None
        devices = list(self.mesh.devices.flat)
        peak = peak_flops(devices, compute_dtype(cfg.model), cfg.log.peak_flops)
        self.peak_note = unknown_peak_note(devices, cfg.log.peak_flops)
        self.started = time.perf_counter()
        pairs = cfg.preference.enabled  # a preference loss: per pair, not per byte
        self.progress = Progress(
            t.steps,
            self.start,
            t.batch_size * cfg.window,
            flops_per_token(cfg),
            peak,
            every=cfg.log.every,
            stream=self.stream,
            bytes_per_token=None if pairs else run.data.bytes_per_token,
        )
        if pairs:
            self.progress.unit = "nats/pair"
        self.loss = self.val = math.nan
        self.eval_seconds = 0.0  # of the last record(): kept out of the step-time split
        self.at: dict[str, Any] = {}  # the step running and clean-up logs (train's error log)
        self.orbax = CapturedLogs()  # held while the steps run (see _run_steps)
        self.profiler = StepProfiler(
            plan.profile if is_primary() else None, run.folder / "profile", self.stream
        )

    @property
    def unit(self) -> str:
        """The validation loss's unit (nats/byte; nats/token where the data's bytes are unknown)."""
        return self.hooks.evaluate.unit if self.hooks.evaluate else "nats/byte"

    def evaluate(self, params: Any) -> dict[str, np.ndarray]:
        """The evaluation hooks' metrics of ``params`` (``val_loss`` and the task scores)."""
        out: dict[str, np.ndarray] = {}
        if self.hooks.evaluate is not None:
            self.val = self.progress.val = self.hooks.evaluate(params)
            out |= self.hooks.evaluate.metrics(self.val)
        if self.hooks.tasks is not None:
            out |= {k: np.array([v], np.float32) for k, v in self.hooks.tasks(params).items()}
        return out

    def announce(self, state: Any) -> None:
        trained, n = trainable_count(state.params)
        what = f"{n / 1e6:.2f}M parameters"
        if trained < n:  # LoRA: the adapters alone are trained
            what = (
                f"{trained:,} of {n:,} parameters ({100 * trained / n:.2f}%: "
                f"LoRA {lora_summary(self.cfg.model)}; the rest frozen)"
            )
        ds, cfg = self.dataset, self.cfg
        window = (  # a window shorter than the model's positions (a fine-tune at a shorter length)
            ""
            if cfg.window == cfg.model.seq_len
            else f", windows of {cfg.window} of the model's {cfg.model.seq_len} positions"
        )
        print(
            f"Training {what} on {self.mesh.devices.size} "
            f"{jax.default_backend()} device(s), mesh {dict(self.mesh.shape)}, data {ds.source} "
            f"({len(ds.train):,} train / {len(ds.val):,} val tokens{window}) -> {self.run_dir}",
            file=self.stream,
        )
        if self.peak_note:
            print(self.peak_note, file=self.stream)

    def baseline(self, state: Any) -> None:
        """Evaluate the weights a fine-tune starts from, before its first step.

        Logged as ``val_loss`` (and the task scores) at step -1: metrics count an update's 0-based
        index, so the evaluation before update 0 is one before it.
        """
        extra = self.evaluate(state.params)
        print(
            f"Baseline before the first step: val loss {self.val:.4f} {self.unit} on the "
            f"validation split of {self.dataset.source}",
            file=self.stream,
        )
        if self.logger:
            steps = {k: {"step": np.array([-1], np.int32)} for k in extra}
            self.log_state = self.logger.log(self.log_state, lox.logdict(extra, steps=steps))

    def fetch(self, step: int) -> Any:
        """Step ``step``'s batch on the mesh: token ids, or a dict of them (a packed batch)."""
        t = self.cfg.train
        local = train_batch(
            self.dataset.train,
            step,
            seed=t.seed,
            batch_size=t.batch_size,
            grad_accum=t.grad_accum,
            seq_len=self.cfg.window,
            process_index=jax.process_index(),
            process_count=jax.process_count(),
        )
        return place_batch(local, self.mesh, MICRO_BATCH_AXES)

    def run(self, state: Any, stop: dict[str, int]) -> Any:
        steps, times, clock = self.cfg.train.steps, self.progress.times, time.perf_counter
        batch = self.fetch(self.start) if self.start < steps else None
        keep_host_memory(False)  # what compiling freed goes back before the first step adds to it
        for step in range(self.start, steps):
            self.at["step"] = step + 1  # counted from 1, as the messages count them
            # From the second step on (the first compiles), each step reuses the previous one's
            # scratch memory, except while a checkpoint save is being written (see save).
            if step > self.start and not self.ckpt.saving():
                keep_host_memory()  # (again, after an evaluation or a save; else a no-op)
            self.profiler.before(step)
            with await_scratch(self.step_fn):  # its scratch is free before the next step asks
                t0 = clock()
                state, logs = self.step_fn(state, batch, *self.reference)
                t1 = clock()
                if step + 1 < steps:
                    batch = self.fetch(step + 1)  # overlaps with the step running on the device
                t2 = clock()
                logs = host_value(logs)  # waits for the step
            t3 = clock()
            self.profiler.after(step)  # writing a trace out is no part of the split either
            t4 = clock()
            self.record(step, logs, state)
            if step > self.start:  # the first step compiles: its times would swamp the split
                times.add("compute", t1 - t0 + t3 - t2)
                times.add("data", t2 - t1)
                times.add("log", clock() - t4 - self.eval_seconds)
            if "signum" in stop:
                self.save(step + 1, state)
                raise TrainingInterrupted(stop["signum"], step + 1)
            every = self.cfg.train.checkpoint_every
            if (every and (step + 1) % every == 0) or step + 1 == steps:
                self.save(step + 1, state)
        return state

    def record(self, step: int, logs: Any, state: Any) -> None:
        """Check the loss, evaluate when due, log metrics and move the progress bar."""
        t, done = self.cfg.train, step + 1
        logs, per_source = self.sources(step, logs)
        self.loss = float(logs["loss"][-1])
        if not math.isfinite(self.loss):
            self.ckpt.wait()  # the last good checkpoint is complete before we report it
            raise TrainingDivergedError(_diverged_message(self.cfg, step, self.loss, self.ckpt))
        extra: dict[str, np.ndarray] = {}
        self.eval_seconds = 0.0
        if done % t.eval_every == 0 or done == t.steps:
            started = time.perf_counter()
            # The evaluation's own scratch buffers are mapped and unmapped as glibc does by default
            # instead of settling in the kept heap: trimmed before it, kept again by the next step
            # (which faults its scratch in once).
            keep_host_memory(False)
            extra |= self.evaluate(state.params)
            self.eval_seconds = time.perf_counter() - started
        if done % self.cfg.log.every == 0 or extra:
            tps, mfu = self.progress.rates(done)
            extra |= {
                "tokens_per_s": np.array([tps], np.float32),
                "wall_time": np.array([time.perf_counter() - self.started], np.float32),
            }
            if math.isfinite(mfu):  # no MFU without a known peak (CPU, unknown device kinds)
                extra["mfu"] = np.array([mfu], np.float32)
        if self.logger:
            extra |= per_source
            steps = {k: {"step": np.array([step], np.int32)} for k in extra}
            self.log_state = self.logger.log(self.log_state, logs | lox.logdict(extra, steps=steps))
        self.progress.update(done, self.loss, force="val_loss" in extra)

    def save(self, step: int, state: Any) -> None:
        # A save waits for the previous one; when that failed (a lost peer's barrier), orbax logs
        # the failure with its traceback before raising it: kept for the run's error log.
        held = len(self.orbax.records)  # reports of earlier saves, which this one waits for
        meta = _meta(self.cfg, step, self.dataset, {"stores": self.stores, **self.sources.record()})
        items = to_items(_safe_copy(state))
        # Orbax's writer threads allocate while the next steps run: in a kept heap their blocks
        # land in the free scratch buffer and split it, and the next step's scratch is then a new
        # one (a tiny run with 5 saves settled at 1.46 GB of heap instead of 0.81). Unkept (glibc's
        # defaults: scratch buffers mapped per step, free memory trimmed) until the save is done.
        keep_host_memory(False)
        self.ckpt.save(step, items, meta)  # on failure, _close_after keeps them for the error log
        if self.logger:  # what the checkpoint covers, the metrics cover: nothing lost on kill -9
            self.logger.flush(self.log_state)
        self.orbax.replay(held)  # those saves went well: their reports were only warnings

    def close(self) -> None:
        """Runs on success, NaN and signals alike: pending writes finish, metrics are flushed."""
        self.profiler.stop()
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
        f"(train.warmup_steps = {cfg.train.warmup_steps}) or a smaller train.grad_clip, in a new "
        f"run."
    )
