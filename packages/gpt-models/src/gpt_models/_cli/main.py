"""The ``gpt`` command line: ``gpt train``, ``prepare``, ``sample``, ``eval``, ``serve``,
``config show``.

This module is the argument parser and the exit statuses; what each command does is
``commands.py``. User mistakes (bad flags, unknown config keys, bad values, missing data, an
impossible mesh, a missing extra) print one message naming the problem and the valid choices and
exit with status 2, without a traceback (a run folder another process is training in counts too).
Other exit statuses: 1 training diverged; 3 a multi-process run could not start (``--init-timeout``)
or lost a process; 4 the disk filled up (the newest complete checkpoint stays restorable); 128 + N
stopped by signal N after saving.
"""

from __future__ import annotations

import argparse
import sys
import warnings
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext

from .._config.presets import PRESETS
from .._errors import TrainingDivergedError, UsageError
from .hf import export_parser, import_parser
from .prepare import prepare_parser
from .quiet_stderr import quiet_stderr
from .serve import serve_parser

EXIT_USAGE = 2
EXIT_DIVERGED = 1

_SHOW = (
    "every config key with its value and meaning: gpt config show [--config X] [--set KEY=VALUE]"
)


_RESTART = (
    "On CPU (JAX's CPU backend only, Linux with glibc), gpt train restarts itself once before\n"
    "JAX starts, with glibc's start-up tunables (one malloc arena, no per-thread cache), so that\n"
    "its peak memory is the same in every run; the programs it starts do not inherit them.\n"
    "GPT_CPU_RESTART=0 turns the restart off; your own GLIBC_TUNABLES or MALLOC_* settings are\n"
    "left as they are, without a restart."
)

_STACK = ("core-primitives", "lox-logging", "blox-params", "paramspec-sharding", "jax", "jaxlib",
          "optax", "orbax-checkpoint")  # fmt: skip


def _versions() -> str:
    """``gpt --version``: this package's version, then what it runs on (what a bug report needs)."""
    from importlib.metadata import PackageNotFoundError, version

    def of(name: str) -> str:
        try:
            return version(name)
        except PackageNotFoundError:
            return "not installed"

    under = ", ".join(f"{name} {of(name)}" for name in _STACK)
    return f"gpt-models {of('gpt-models')} ({under}; Python {sys.version.split()[0]})"


class _Version(argparse.Action):
    """``--version``: one unwrapped line (argparse's own action rewraps it), looked up when
    asked."""

    def __init__(self, option_strings: Sequence[str], dest: str, help: str | None = None) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help=help)

    def __call__(self, parser: argparse.ArgumentParser, *_: object) -> None:
        print(_versions())
        parser.exit()


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gpt",
        description="Train, sample from and evaluate small GPT models (byte-level by default).",
        epilog=f"Config keys: {_SHOW}",
    )
    parser.add_argument(
        "--version",
        action=_Version,
        help="print the versions of gpt-models, the stack under it and JAX",
    )
    sub = parser.add_subparsers(
        dest="command",
        required=True,
        metavar="{train,prepare,sample,eval,serve,config,import,export}",
    )
    train = sub.add_parser(
        "train",
        help="train a model (defaults: tiny model, embedded corpus)",
        epilog=f"{_RESTART}\n\n{_SHOW}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    prepare = sub.add_parser("prepare", help="tokenize a corpus of any size into a token store")
    sample = sub.add_parser("sample", help="generate text from a run's newest checkpoint")
    evaluate = sub.add_parser(
        "eval", help="validation loss, bits per byte of text, or task accuracy of a run"
    )
    serve = sub.add_parser(
        "serve", help="serve a run over the OpenAI API (needs pip install 'gpt-models[serve]')"
    )
    config = sub.add_parser("config", help="show a resolved config: gpt config show")
    imports = sub.add_parser("import", help="make a run folder from a Hugging Face model folder")
    export = sub.add_parser("export", help="write a run as a Hugging Face model folder")
    _train_parser(train)
    _sample_parser(sample)
    _eval_parser(evaluate)
    _config_parser(config)
    serve_parser(serve)
    prepare_parser(prepare)
    import_parser(imports)
    export_parser(export)
    return parser


def _set_arg(p: argparse.ArgumentParser, help: str) -> None:
    """``--set KEY=VALUE`` (repeatable), every command's way to change a config key."""
    p.add_argument(
        "--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE", help=help
    )


def _config_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--config",
        default=None,
        metavar="PRESET|FILE.toml",
        help=f"a preset ({', '.join(PRESETS)}) or a TOML file; default tiny",
    )
    _set_arg(
        p,
        "override a config key, e.g. --set model.d_model=256 (repeatable; "
        "`gpt config show` lists every key)",
    )


def _train_parser(p: argparse.ArgumentParser) -> None:
    _config_args(p)
    p.add_argument("--out", default="runs", metavar="DIR", help="parent folder of run folders")
    p.add_argument("--name", default=None, help="run folder name (default: <preset>-<date>-<time>)")
    p.add_argument(
        "--resume",
        default=None,
        metavar="RUN",
        help="continue a run from its newest checkpoint (its config.toml, plus --set)",
    )
    p.add_argument(
        "--init-from",
        default=None,
        metavar="RUN_OR_HF_DIR",
        help="start a new run from the weights of a run folder or a Hugging Face "
        "folder (its architecture, a fresh optimizer, step 0); shorthand for "
        "--set init.source=...",
    )
    p.add_argument(
        "--auto-resume",
        action="store_true",
        help="with --name: continue OUT/NAME from its newest checkpoint if it has one "
        "(same config required), else start it; for job scripts re-run after "
        "preemption",
    )
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="compile the train step and print the plan (parameters, optimizer state, "
        "memory per device, tokens per step, FLOPs per token); train nothing, "
        "write nothing. Exit 0 when it fits, 2 when it does not",
    )
    p.add_argument(
        "--mesh",
        default=None,
        metavar="data=N,fsdp=N,tensor=N",
        help="shorthand for --set mesh.*, e.g. --mesh data=2,fsdp=4",
    )
    p.add_argument(
        "--wandb",
        default=None,
        choices=("disabled", "offline", "online"),
        help="shorthand for --set log.wandb=...; default disabled; "
        "needs pip install 'gpt-models[wandb]'",
    )
    p.add_argument(
        "--profile",
        default=None,
        type=_profile_range,
        metavar="START:STOP",
        help="record a JAX profiler trace of steps START+1..STOP (e.g. 2:5, after the "
        "first step has compiled) into RUN/profile, for TensorBoard's Profile tab "
        "or ui.perfetto.dev",
    )
    p.add_argument(
        "--cluster",
        default="auto",
        choices=("auto", "none", "slurm", "mpi", "k8s", "tpu"),
        help="multi-host without --coordinator: find the other processes the way "
        "jax.distributed does (SLURM, Open MPI's mpirun, Kubernetes, TPU pods); auto tries "
        "each, none trains as one process; default auto",
    )
    p.add_argument(
        "--coordinator",
        default=None,
        metavar="HOST:PORT",
        help="multi-host: address of process 0 (or JAX_COORDINATOR_ADDRESS)",
    )
    p.add_argument("--num-processes", type=int, default=None, help="multi-host: process count")
    p.add_argument("--process-id", type=int, default=None, help="multi-host: this process's index")
    p.add_argument(
        "--init-timeout",
        type=_positive_seconds,
        default=300.0,
        metavar="SECONDS",
        help="multi-host: give up (exit status 3) if not every process has joined "
        "the coordinator after this long; default 300",
    )
    p.add_argument(
        "--heartbeat-timeout",
        type=_positive_seconds,
        default=60.0,
        metavar="SECONDS",
        help="multi-host: stop every process when one has not been heard from for "
        "this long (a hung or lost peer); default 60",
    )


def _profile_range(text: str) -> tuple[int, int]:
    start, sep, stop = text.partition(":")
    try:
        first, last = int(start), int(stop)
    except ValueError:
        first = last = -1
    if not sep or first < 0 or last <= first:
        raise argparse.ArgumentTypeError(
            f"expected START:STOP, two step counts with 0 <= START < STOP (the steps after START "
            f"have finished up to STOP are traced), got {text!r}; e.g. --profile 2:5"
        )
    return first, last


def _positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {text!r}")
    return value


def _run_args(p: argparse.ArgumentParser, keys: str, example: str) -> None:
    p.add_argument(
        "--run",
        default=None,
        metavar="RUN",
        help="the run folder made by `gpt train`, e.g. runs/tiny-20250101-120000",
    )
    # The positional form (`gpt sample runs/x`) predates --run; kept working, left out of --help.
    p.add_argument("run_dir", nargs="?", default=None, help=argparse.SUPPRESS)
    _set_arg(p, f"override {keys} of the run's config, e.g. --set {example} (repeatable)")


def _sample_parser(p: argparse.ArgumentParser) -> None:
    _run_args(p, "sample.* keys", "sample.max_new_tokens=32")
    p.add_argument(
        "--prompt",
        default=None,
        help="text to continue (default: sample.prompt of the run's config); for a run "
        "trained on chat data, the user's message: it is written as one user turn "
        "with the run's chat template, generation stops at the end of the "
        "assistant's turn, and only the reply is printed",
    )
    p.add_argument(
        "--raw",
        action="store_true",
        help="the model's raw continuation up to --max-new-tokens: no chat template, "
        "and no stop at the end of a turn or at the tokenizer's end-of-text token "
        "(where other runs stop, as transformers' generate does on an export)",
    )
    p.add_argument(
        "--max-new-tokens",
        type=int,
        default=None,
        help="tokens to generate (default: sample.max_new_tokens); capped, with a note, so that "
        "the prompt and the new tokens fit in model.seq_len",
    )
    p.add_argument(
        "--temperature",
        type=float,
        default=None,
        help="softmax temperature, >= 0; 0 = greedy (default: sample.temperature)",
    )
    p.add_argument(
        "--top-k",
        type=int,
        default=None,
        metavar="K",
        help="sample among the K most likely tokens only; 0 = all (default: sample.top_k)",
    )
    p.add_argument(
        "--top-p",
        type=float,
        default=None,
        metavar="P",
        help="sample among the most likely tokens holding probability P, in (0, 1]; "
        "1 = all (default: sample.top_p)",
    )
    p.add_argument(
        "--seed",
        type=int,
        default=0,
        help="random seed of the sampling; the same seed gives the same text (default 0)",
    )
    _dry_run_arg(p, "the sampling program")


def _dry_run_arg(p: argparse.ArgumentParser, program: str) -> None:
    p.add_argument(
        "--dry-run",
        action="store_true",
        help=f"compile {program} and print its memory against the device's; read no "
        "checkpoint, write nothing. Exit 0 when it fits, 2 when it does not",
    )


def _eval_parser(p: argparse.ArgumentParser) -> None:
    _run_args(p, "data.* keys or train.eval_batches", "train.eval_batches=4")
    # action="extend": `--task a.jsonl --task b.jsonl` scores both (a repeated flag replaced
    # the earlier one's files).
    p.add_argument(
        "--text",
        nargs="+",
        action="extend",
        default=None,
        metavar="FILE_OR_DIR",
        help="score whole text files (folders: their UTF-8 files): nats/token and "
        "bits per byte, sliding window; repeatable",
    )
    p.add_argument(
        "--stride",
        type=int,
        default=None,
        help="--text and --lm-eval's rolling log-likelihoods: tokens between window "
        "starts, 1..model.seq_len (default seq_len // 2; seq_len = "
        "non-overlapping windows)",
    )
    p.add_argument(
        "--task",
        nargs="+",
        action="extend",
        default=None,
        metavar="FILE.jsonl",
        help="multiple-choice / cloze accuracy on JSONL task files (repeatable); saved "
        "as RUN/evals/<task>-<key>-<step>.json (<key>: from the file's path)",
    )
    p.add_argument(
        "--format",
        default=None,
        choices=("hellaswag", "mc", "cloze"),
        help="--task file format (default: told by the first example's fields)",
    )
    p.add_argument(
        "--lm-eval",
        default=None,
        metavar="TASK[,TASK]",
        help="EleutherAI lm-evaluation-harness tasks, groups or tags (needs pip install "
        "'gpt-models[lm-eval]'); saved as RUN/evals/lm-eval/<task>-<step>.json",
    )
    p.add_argument(
        "--include-path",
        default=None,
        metavar="DIR",
        help="--lm-eval: a folder of task YAML files to add to the harness's tasks",
    )
    p.add_argument(
        "--batch-size",
        type=int,
        default=8,
        help="windows (--text) or context+choice rows (--task, --lm-eval) per model "
        "call; default 8",
    )
    _dry_run_arg(p, "the eval step (or the --text/--task/--lm-eval scorer)")


def _config_parser(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="action", required=True, metavar="{show}")
    show = sub.add_parser(
        "show",
        help="print every key of a resolved config with its value and meaning (valid TOML)",
        description="Print the config `gpt train` would use with the same --config and --set: "
        "every key, its value and a one-line meaning. The output is TOML; save it, edit it and "
        "pass it back with --config FILE.toml.",
    )
    _config_args(show)
    show.add_argument(
        "--run",
        default=None,
        metavar="RUN",
        help="show the config of a run folder (its config.toml, plus --set)",
    )


def _show_warning(
    message: Warning | str, category: type[Warning], *args: object, **kw: object
) -> None:
    # One line in the CLI's own voice: the source line Python shows with a warning is ours, not the
    # user's, and says nothing to them.
    print(f"gpt: warning: {message}", file=sys.stderr)


def _usage_error(message: str) -> int:
    print(f"gpt: error: {message}", file=sys.stderr)
    return EXIT_USAGE


def main(argv: Sequence[str] | None = None) -> int:
    """The ``gpt`` command as a function: run it with ``argv`` and return the exit status.

    0 on success, 2 for a usage error (the message is printed, no traceback), 1 when training
    diverged, ``128 + signum`` when SIGTERM/SIGINT stopped training (after saving a checkpoint).

    Example:
        >>> from gpt_models import main
        >>> main(["config", "show", "--set", "train.steps=5"])  # doctest: +ELLIPSIS
        # Resolved gpt-models config: ...
        steps = 5  # optimizer steps of the whole run.
        ...
        warmup_steps = 0  # steps of linear warmup from 0 to lr (cut to 10% of the run if >= steps).
        ...
        0
    """
    return run(parse(argv))


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    """``argv`` (default: this process's command line) as ``gpt``'s parser reads it; ``--help``,
    ``--version`` and usage errors exit here."""
    return _parser().parse_args(argv)


def run(
    args: argparse.Namespace, loading: Callable[[], AbstractContextManager[object]] = nullcontext
) -> int:
    """The command ``args`` (from :func:`parse`) asks for, run: its exit status.

    ``loading`` wraps the import of the command's own code, before the command has done anything
    (the ``gpt`` program stops at once on a Ctrl-C there: see ``launcher.py``).
    """
    quiet_stderr()  # orbax's late reports after a failed save or restore (see quiet_stderr.py)
    if args.command not in ("config", "prepare"):
        from .._compute.host_memory import tune_host_allocator_for_cli

        tune_host_allocator_for_cli()  # before the command starts JAX (see tune_host_allocator)
    with loading():
        command = _command(args.command)
    try:
        with warnings.catch_warnings():
            # Our own warnings (a damaged checkpoint skipped) are messages to the user here.
            warnings.filterwarnings("always", category=UserWarning, module=r"gpt_models\.")
            warnings.showwarning = _show_warning
            return command(args)
    except UsageError as err:
        return _usage_error(str(err))
    except TrainingDivergedError as err:
        print(f"gpt: {err}", file=sys.stderr)
        return EXIT_DIVERGED


def _command(name: str) -> Callable[[argparse.Namespace], int]:
    """The function of command ``name``, importing only its own module: ``gpt prepare`` and
    ``gpt export`` load neither the training code nor what it imports (a Ctrl-C during an import
    waits for it to finish, so fewer imports also stop sooner)."""
    if name in ("train", "sample", "eval", "config"):
        from . import commands

        return {
            "train": commands.train_command,
            "sample": commands.sample_command,
            "eval": commands.eval_command,
            "config": commands.config_show_command,
        }[name]
    if name == "serve":
        from .serve import serve_command

        return serve_command
    if name == "prepare":
        from .prepare import prepare_command

        return prepare_command
    from .hf import export_command, import_command

    return {"import": import_command, "export": export_command}[name]


if __name__ == "__main__":
    sys.exit(main())
