"""Whether a launch can start in its run folder, decided before anything is written, the same for
``train`` and ``gpt train --dry-run`` (both resolve the run, which calls :func:`check_launch`); and
the run's records (its metrics) carried over into a resumed run.

A dry run that says "it fits" must be a promise that the same command starts: so the checks of
the run folder (a new name that already holds checkpoints, links, permissions) and of the run's
records live here; the ``--profile`` range is checked against ``Launch.start`` by the training's
plan.

The metrics are a record of a run, not its state: a resumed run continues bit for bit from its
checkpoint whatever became of ``metrics/``. A record that cannot be continued (deleted, its index
gone or cut short, a chunk missing) is kept aside under a new name and a new one starts at the
resumed step, with one line saying so.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import TextIO

import lox

from .._config.schema import Config
from .._distributed.processes import is_primary
from .._errors import UsageError
from .folders import check_run_target
from .lock import check_joinable, check_not_in_use
from .snapshot import committed_steps

# The run's subfolders a launch writes into; a resumed launch needs each to be writable.
_WRITTEN = ("checkpoints", "metrics", "tensorboard", "profile")


@dataclasses.dataclass(frozen=True)
class Launch:
    """What :func:`check_launch` found: the step the run trains from, and what to say of its
    records.

    ``records`` maps a record (``metrics``, ``metrics.csv``, ``tensorboard``) to why it cannot be
    continued as it is; :func:`carry_records` acts on it once the launch is accepted.
    """

    start: int
    records: dict[str, str]


def check_launch(cfg: Config, run: Path, *, resume: bool) -> Launch:
    """Every check of the run folder a launch makes before it writes anything.

    Raises:
        UsageError: the folder cannot be trained into (see ``check_run_target``), a new run's
            folder already holds checkpoints, or a subfolder to write is not writable.
    """
    if is_primary():
        check_run_target(run, resume=resume)
        check_not_in_use(run)
    else:
        check_joinable(run)
    steps = committed_steps(run / "checkpoints")
    if steps and not resume:
        raise holds_checkpoints(run, steps)
    start = steps[-1] if resume and steps else 0
    if resume:
        _check_writable(run)
    return Launch(start, _record_problems(cfg, run) if resume and is_primary() else {})


def holds_checkpoints(run: Path, steps: list[int]) -> UsageError:
    """The refusal of a new run into a folder that already holds checkpoints."""
    return UsageError(
        f"{run} already holds checkpoints (steps {steps}). Resume it with `gpt train --resume "
        f"{run}`, or pick another --name."
    )


def _check_writable(run: Path) -> None:
    for name in _WRITTEN:
        folder = run / name
        if folder.is_dir() and not os.access(folder, os.W_OK | os.X_OK):
            raise UsageError(
                f"--resume: {folder} is not writable (a read-only file system, or its "
                f"permissions), and continuing the run writes into it. Make it writable (chmod -R "
                f"u+w {folder}, or remount), or move it aside (mv {folder} {folder}-old) to start "
                "it anew from the resumed step."
            )


def _record_problems(cfg: Config, run: Path) -> dict[str, str]:
    found = {}
    metrics = run / "metrics" / "run_0"
    if not (run / "metrics").exists():
        found["metrics"] = "there is no metrics/ folder"
    elif not metrics.is_dir():
        found["metrics"] = "metrics/ holds no log (no run_0/)"
    else:
        # Read now: lox reads a save's index when it first appends to it, which would be after
        # steps were trained and checkpoints saved.
        try:
            lox.load(metrics)
        except (lox.DamagedSaveError, OSError, ValueError) as err:
            found["metrics"] = f"metrics/ cannot be read ({err})"
        else:
            if not _ends_a_line(metrics / "lox-index.jsonl"):  # lox ignores a torn last line
                found["metrics index"] = "the metrics index ends in an unfinished line"
    if "metrics" not in found and not (run / "metrics.csv").is_file():
        found["metrics.csv"] = "there is no metrics.csv"
    if cfg.log.tensorboard and not (run / "tensorboard").is_dir():
        found["tensorboard"] = "there is no tensorboard/ folder"
    return found


def _ends_a_line(index: Path) -> bool:
    with index.open("rb") as fh:
        fh.seek(0, os.SEEK_END)
        if fh.tell() == 0:
            return True
        fh.seek(-1, os.SEEK_END)
        return fh.read(1) == b"\n"


def carry_records(run: Path, launch: Launch, stream: TextIO) -> None:
    """Once the launch is accepted: set a damaged metrics log aside and say what happens to each
    record :func:`check_launch` found wanting."""
    at = launch.start
    for record, why in launch.records.items():
        if record == "metrics" and (run / "metrics").exists():
            aside = _free_name(run, "metrics-damaged")
            (run / "metrics").rename(aside)
            then = f"kept it as {aside.name}/ and started a new metrics log at step {at + 1}"
        elif record == "metrics":
            then = f"a new metrics log starts at step {at + 1}"
        elif record == "metrics index":
            then = "its events are dropped, and the steps after the checkpoint are logged again"
        elif record == "metrics.csv":
            then = "it is written again from metrics/ when training ends"
        else:
            then = f"a new TensorBoard log starts at step {at + 1}"
        print(
            f"note: resuming {run}: {why}; {then}. Training continues from checkpoint step {at}.",
            file=stream,
        )


def _free_name(run: Path, base: str) -> Path:
    n, path = 1, run / base
    while path.exists():
        n += 1
        path = run / f"{base}-{n}"
    return path
