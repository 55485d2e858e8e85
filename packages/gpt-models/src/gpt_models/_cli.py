"""The ``gpt`` command: ``gpt train``, ``gpt sample``, ``gpt eval``.

User mistakes (bad flags, unknown config keys, bad values, missing data, an impossible mesh) print one
message naming the problem and the valid choices and exit with status 2, without a traceback.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path

EXIT_USAGE = 2
EXIT_DIVERGED = 1


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gpt",
        description="Train, sample from and evaluate small GPT models (byte-level by default).",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="{train,sample,eval}")
    _train_parser(
        sub.add_parser("train", help="train a model (defaults: tiny model, embedded corpus)")
    )
    _sample_parser(sub.add_parser("sample", help="generate text from a run's newest checkpoint"))
    _run_args(sub.add_parser("eval", help="print the validation loss of a run's newest checkpoint"))
    return parser


def _train_parser(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", default=None, metavar="PRESET|FILE.toml",
                   help="a preset (tiny, gpt2-small, gpt2-medium) or a TOML file; default tiny")  # fmt: skip
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config key, e.g. --set model.d_model=256 (repeatable)")  # fmt: skip
    p.add_argument("--out", default="runs", metavar="DIR", help="parent folder of run folders")
    p.add_argument("--name", default=None, help="run folder name (default: <preset>-<date>-<time>)")
    p.add_argument("--resume", default=None, metavar="RUN",
                   help="continue a run from its newest checkpoint (its config.toml, plus --set)")  # fmt: skip
    p.add_argument("--mesh", default=None, metavar="data=N,fsdp=N,tensor=N",
                   help="shorthand for --set mesh.*, e.g. --mesh data=2,fsdp=4")  # fmt: skip
    p.add_argument("--wandb", default=None, choices=("disabled", "offline", "online"),
                   help="shorthand for --set log.wandb=...; default disabled")  # fmt: skip
    p.add_argument("--coordinator", default=None, metavar="HOST:PORT",
                   help="multi-host: address of process 0 (or JAX_COORDINATOR_ADDRESS)")  # fmt: skip
    p.add_argument("--num-processes", type=int, default=None, help="multi-host: process count")
    p.add_argument("--process-id", type=int, default=None, help="multi-host: this process's index")


def _run_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--run", default=None, metavar="RUN",
                   help="the run folder made by `gpt train`, e.g. runs/tiny-20250101-120000")  # fmt: skip
    # The positional form (`gpt sample runs/x`) predates --run; kept working, left out of --help.
    p.add_argument("run_dir", nargs="?", default=None, help=argparse.SUPPRESS)


def _sample_parser(p: argparse.ArgumentParser) -> None:
    _run_args(p)
    p.add_argument("--prompt", required=True, help="text to continue")
    p.add_argument("--max-new-tokens", type=int, default=None,
                   help="tokens to generate (default: [sample] of the run, capped by model.seq_len)")  # fmt: skip
    p.add_argument("--temperature", type=float, default=None, help="0 = greedy")
    p.add_argument("--top-k", type=int, default=None)
    p.add_argument("--top-p", type=float, default=None)
    p.add_argument("--seed", type=int, default=0)


def _usage_error(message: str) -> int:
    print(f"gpt: error: {message}", file=sys.stderr)
    return EXIT_USAGE


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``gpt`` command; returns the exit status."""
    args = _parser().parse_args(argv)
    if args.command == "train":
        _maybe_distributed(args)
    from ._errors import TrainingDivergedError, UsageError

    try:
        return {"train": _cmd_train, "sample": _cmd_sample, "eval": _cmd_eval}[args.command](args)
    except UsageError as err:
        return _usage_error(str(err))
    except TrainingDivergedError as err:
        print(f"gpt: {err}", file=sys.stderr)
        return EXIT_DIVERGED


def _maybe_distributed(args: argparse.Namespace) -> None:
    # Only when asked: auto-detection is for clusters and must not slow down a laptop run.
    if args.coordinator or args.num_processes or os.environ.get("JAX_COORDINATOR_ADDRESS"):
        import paramspec as ps

        ps.initialize_distributed(args.coordinator, args.num_processes, args.process_id)


def _train_config(args: argparse.Namespace):
    from . import _config
    from ._errors import ConfigError

    overrides = _config.parse_set(args.overrides)
    if args.mesh:
        overrides |= _parse_mesh(args.mesh)
    if args.wandb:
        overrides["log.wandb"] = args.wandb
    if args.resume:
        if args.config:
            raise ConfigError(
                "--resume takes the run's own config.toml; do not pass --config with it."
            )
        base = _config.load_config(str(Path(args.resume) / "config.toml"))
    else:
        base = _config.load_config(args.config or "tiny")
    return _config.validate(_config.apply_overrides(base, overrides, from_text=True))


def _parse_mesh(text: str) -> dict[str, str]:
    from ._errors import ConfigError

    out = {}
    for part in text.split(","):
        key, sep, value = part.partition("=")
        if not sep or key.strip() not in ("data", "fsdp", "tensor"):
            raise ConfigError(
                f"--mesh expects comma-separated AXIS=SIZE with AXIS in data, fsdp, tensor; got "
                f"{text!r}. Example: --mesh data=2,fsdp=4."
            )
        out[f"mesh.{key.strip()}"] = value
    return out


def _run_dir(args: argparse.Namespace) -> Path:
    import jax

    from ._errors import UsageError
    from ._loop import check_run_folder, check_run_name

    if args.resume:
        return check_run_folder(args.resume, flag="--resume")
    if args.name is None and jax.process_count() > 1:
        raise UsageError(
            "Multi-process training needs an explicit --name (the same on every process)."
        )
    preset = args.config if args.config and not args.config.endswith(".toml") else "custom"
    name = args.name or f"{preset if args.config else 'tiny'}-{time.strftime('%Y%m%d-%H%M%S')}"
    return Path(args.out) / check_run_name(name)


def _cmd_train(args: argparse.Namespace) -> int:
    from ._loop import Interrupted, train

    run = _run_dir(args)
    cfg = _train_config(args)
    started = time.perf_counter()
    try:
        result = train(cfg, run, resume=bool(args.resume))
    except Interrupted as stop:
        print(
            f"\nStopped by signal {stop.signum} after step {stop.step}; checkpoint saved. Continue with:"
            f"\n  gpt train --resume {run}",
            file=sys.stderr,
        )
        return 128 + stop.signum
    minutes = (time.perf_counter() - started) / 60
    print(
        f"\nDone in {minutes:.1f} min: step {result.step}, train loss {result.loss:.4f}, "
        f"val loss {result.val_loss:.4f} nats/byte, {result.tokens_per_s / 1e3:.1f}k tok/s"
        f"{'' if math.isnan(result.mfu) else f', MFU {100 * result.mfu:.1f}%'}.\nRun folder: {run} "
        f"(config.toml, checkpoints/, metrics/, metrics.csv, loss.png, sample.txt)\n\n--- sample "
        f"---\n{result.sample}\n--------------",
    )
    return 0


def _chosen_run(args: argparse.Namespace) -> str:
    """The run folder of ``gpt sample`` / ``gpt eval``: ``--run RUN`` or the older positional form."""
    from ._errors import UsageError

    if args.run and args.run_dir and Path(args.run) != Path(args.run_dir):
        raise UsageError(
            f"gpt {args.command} got two run folders, --run {args.run} and {args.run_dir}. "
            f"Pass one: gpt {args.command} --run {args.run}."
        )
    run = args.run or args.run_dir
    if not run:
        raise UsageError(
            f"gpt {args.command} needs the run folder to read: none was given. Pass the folder "
            f"`gpt train` made, e.g. gpt {args.command} --run runs/<name>."
        )
    return run


def _cmd_sample(args: argparse.Namespace) -> int:
    from ._loop import load_run, sample_text
    from ._tokenize import run_tokenizer

    run = _chosen_run(args)
    cfg, params, _ = load_run(run)
    try:
        text = sample_text(
            params, cfg, prompt=args.prompt, max_new_tokens=args.max_new_tokens,
            temperature=args.temperature, top_k=args.top_k, top_p=args.top_p, seed=args.seed,
            tokenizer=run_tokenizer(run, cfg),
        )  # fmt: skip
    except ValueError as err:  # too long for the context, empty prompt
        return _usage_error(str(err))
    print(text)
    return 0


def _cmd_eval(args: argparse.Namespace) -> int:
    from ._loop import evaluate_run

    print(f"val_loss {evaluate_run(_chosen_run(args)):.6f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
