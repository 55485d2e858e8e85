"""The run folder a command that reads a finished run names (``gpt sample``, ``gpt eval``), and the
``--set`` keys such a command may change in that run's config."""

from __future__ import annotations

import argparse
from pathlib import Path

from core_primitives import list_alternatives

from .._config.schema import Config
from .._config.toml import apply_overrides, parse_set, valid_keys
from .._errors import ConfigError, UsageError
from .._runs.folders import run_config
from .._runs.resolve import resolve_paths
from .empty_values import refuse_empty

# The keys `gpt sample` / `gpt eval` may override: the rest (shapes above all) is fixed by the run.
SAMPLE_KEYS = ("sample.",)
EVAL_KEYS = ("data.", "train.eval_batches")


def chosen_run(args: argparse.Namespace) -> str:
    """The run folder of ``gpt sample`` / ``gpt eval``: ``--run RUN`` or the older positional
    form."""
    if args.run and args.run_dir and Path(args.run) != Path(args.run_dir):
        raise UsageError(
            f"gpt {args.command} got two run folders, --run {args.run} and {args.run_dir}. "
            f"Pass one: gpt {args.command} --run {args.run}."
        )
    refuse_empty(
        f"gpt {args.command}",
        [
            ("--run", args.run, "runs/<name>"),
            ("RUN", args.run_dir, f"gpt {args.command} --run runs/<name>"),
        ],
    )
    run = args.run or args.run_dir
    if not run:
        raise UsageError(
            f"gpt {args.command} needs the run folder to read: none was given. Pass the folder "
            f"`gpt train` made, e.g. gpt {args.command} --run runs/<name>."
        )
    return run


def read_run_config(args: argparse.Namespace, run: str, allowed: tuple[str, ...]) -> Config | None:
    """The run's config with ``--set`` applied, for the keys this command may change."""
    if not args.overrides:
        return None
    overrides = parse_set(args.overrides)
    fixed = [k for k in overrides if not k.startswith(allowed)]
    if fixed:
        settable = [k for k in valid_keys() if k.startswith(allowed)]
        keys = " and ".join(k + "*" if k.endswith(".") else k for k in allowed)
        raise ConfigError(
            f"gpt {args.command} --set {fixed[0]}: only {keys} can be set "
            f"here; the rest of the config is fixed by the run it trained ({run}/config.toml). "
            f"Settable: {list_alternatives(settable)}."
        )
    if {"data.path", "data.sources"} & set(overrides):  # other data: its kind is found again
        overrides.setdefault("data.kind", "")
    return resolve_paths(apply_overrides(run_config(run), overrides, from_text=True))
