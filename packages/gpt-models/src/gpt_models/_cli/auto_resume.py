"""``gpt train --auto-resume --name NAME``: continue the run if it has checkpoints, start it otherwise.

Meant for a cluster job script that a scheduler re-runs after every preemption: the same command
starts the run the first time and continues it afterwards. Continuing needs the same config (after
the resolution ``gpt train`` itself does: fitted warmup, the tokenizer's vocabulary); a different
one is refused with the keys that differ. Two copies requeued at once are kept apart by the run lock
that ``train`` takes (the second stops with ``RunInUseError``).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from .._config.schema import Config
from .._errors import UsageError
from .._runs.folders import run_config
from .._runs.resolve import resolve_config
from .._runs.snapshot import committed_steps


def auto_resume(run: Path, cfg: Config) -> tuple[Config, bool, str]:
    """The config to train, whether to resume, and the line that says which.

    Raises:
        UsageError: ``run`` has checkpoints of a different config (the message lists the keys).
    """
    steps = committed_steps(run / "checkpoints")
    if not steps or not (run / "config.toml").is_file():
        return cfg, False, f"--auto-resume: {run} has no checkpoint yet; starting the run."
    saved = run_config(run, flag="--auto-resume")
    differ = _differences(_resolved(cfg, run), saved)
    if differ:
        shown = "\n".join(f"  {k}: run has {a!r}, this command gives {b!r}" for k, a, b in differ)
        raise UsageError(
            f"--auto-resume: {run} holds a run with a different config, so it cannot be continued "
            f"with this command ({len(differ)} key(s) differ):\n{shown}\nRun the command that "
            f"started it, change it on purpose with `gpt train --resume {run} --set KEY=VALUE`, or "
            "pick another --name for a new run."
        )
    said = f"--auto-resume: {run} exists; continuing from its newest checkpoint (step {steps[-1]})."
    return saved, True, said


def _resolved(cfg: Config, run: Path) -> Config:
    # What train() writes to config.toml for this command: the same resolution, nothing written.
    return resolve_config(cfg, run, resume=True)[0]


def _flat(cfg: Config) -> dict[str, Any]:
    return {
        f"{section}.{key}": value
        for section, values in dataclasses.asdict(cfg).items()
        for key, value in values.items()
    }


def _differences(mine: Config, saved: Config) -> list[tuple[str, Any, Any]]:
    a, b = _flat(saved), _flat(mine)
    return [(k, a.get(k), b.get(k)) for k in sorted(a.keys() | b.keys()) if a.get(k) != b.get(k)]
