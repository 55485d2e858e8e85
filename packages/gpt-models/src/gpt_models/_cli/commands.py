"""What each ``gpt`` command does, given its parsed arguments (the parser is ``main.py``).

Each returns the exit status; user mistakes raise ``UsageError`` and ``_cli.main`` prints them.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import math
import os
import re
import sys
import time
from pathlib import Path

from core_primitives import list_alternatives

from .._config.schema import Config, fit_warmup
from .._config.toml import apply_overrides, dumps, load_config, parse_set, valid_keys
from .._errors import ConfigError, DiskFullError, UsageError
from .._runs.folders import check_run_folder, new_run_dir, run_config
from .empty_values import refuse_empty

# The keys `gpt sample` / `gpt eval` may override: the rest (shapes above all) is fixed by the run.
_SAMPLE_KEYS = ("sample.",)
_EVAL_KEYS = ("data.", "train.eval_batches")
EXIT_DISK_FULL = 4  # the multi-process failures exit with 3 (startup.EXIT_PEERS)


def train_command(args: argparse.Namespace) -> int:
    """``gpt train``: resolve the config, train in a new (or the resumed) run folder, report."""
    _check_train_flags(args)
    _maybe_distributed(args)
    import jax

    from .._training.loop import train as run_training
    from .._training.signals import TrainingInterrupted

    if args.resume:
        run = check_run_folder(args.resume, flag="--resume")
    elif args.name is None and jax.process_count() > 1:
        raise UsageError(
            "Multi-process training needs an explicit --name (the same on every process)."
        )
    else:
        run = new_run_dir(args.out, args.name, args.config)
    cfg = _train_config(args)
    resume = bool(args.resume)
    if args.auto_resume:
        from .auto_resume import auto_resume

        cfg, resume, said = auto_resume(run, cfg)
        print(said, file=sys.stderr)
    if args.dry_run:
        return _dry_run(cfg, run, resume, args.profile)
    started = time.perf_counter()
    try:
        result = run_training(cfg, run, resume=resume, profile=args.profile)
    except TrainingInterrupted as stop:
        if stop.skipped:  # after the last step: training is complete, its end was cut short
            print(
                f"\nStopped by signal {stop.signum} after the last step ({stop.step}); its "
                f"checkpoint is saved, but {' and '.join(stop.skipped)} "
                f"{'was' if len(stop.skipped) == 1 else 'were'} not written. A "
                f"sample: gpt sample --run {run}",
                file=sys.stderr,
            )
            return 128 + stop.signum
        print(
            f"\nStopped by signal {stop.signum} after step {stop.step}; checkpoint saved. Continue with:"
            f"\n  gpt train --resume {run}",
            file=sys.stderr,
        )
        return 128 + stop.signum
    except DiskFullError as err:
        logging.getLogger("absl").setLevel(logging.CRITICAL)  # orbax's writers winding down
        print(f"gpt: error: {err}", file=sys.stderr)
        return EXIT_DISK_FULL
    except Exception as err:
        from .._distributed.startup import exit_on_lost_peer, is_peer_failure
        from .._runs.diskfull import disk_full_message

        if (message := disk_full_message(err, run)) is not None:
            # Orbax's background writers may still log the same failure while they wind down;
            # our message is the one that says what to do.
            logging.getLogger("absl").setLevel(logging.CRITICAL)
            print(f"gpt: error: {message}", file=sys.stderr)
            return EXIT_DISK_FULL
        if is_peer_failure(err):
            exit_on_lost_peer(err, run)
        raise
    minutes = (time.perf_counter() - started) / 60
    done = (
        f"Done in {minutes:.1f} min: step {result.step}, train loss {result.loss:.4f}, "
        f"val loss {result.val_loss:.4f} {result.val_unit}, {result.tokens_per_s / 1e3:.1f}k tok/s"
        f"{'' if math.isnan(result.mfu) else f', MFU {100 * result.mfu:.1f}%'}."
    )
    if result.resumed_from == result.step:  # resumed a complete run: no step was trained
        done = (
            f"Nothing to train: the run was at step {result.step} = train.steps already; its "
            f"val loss {result.val_loss:.4f} {result.val_unit}, loss.png and sample.txt were written "
            f"again. Train further with gpt train --resume {run} --set train.steps=N "
            f"(N > {result.step})."
        )
    print(
        f"\n{done}\nRun folder: {run} "
        f"(config.toml, checkpoints/, metrics/, metrics.csv, loss.png, sample.txt)\n\n--- sample "
        f"---\n{result.sample}\n--------------",
    )
    return 0


def _dry_run(cfg: Config, run: Path, resume: bool, profile: tuple[int, int] | None) -> int:
    """``gpt train --dry-run``: the plan of the run, compiled but not run; nothing is written.

    It makes every check the launch makes (the run folder, ``--resume``, ``--profile``), so "it
    fits" means the same command starts.
    """
    from .._training.loop import plan_training
    from .._training.preflight import check_fits

    plan = plan_training(cfg, run, resume=resume, profile=profile)
    print(f"Plan of this run (dry run: nothing trained, nothing written):\n{plan.describe()}")
    check_fits(plan)  # OutOfMemoryError: exit 2 with the settings that fit
    print("It fits: the same command without --dry-run trains it.")
    return 0


def config_show_command(args: argparse.Namespace) -> int:
    """``gpt config show``: the config ``gpt train`` would run with the same flags, as TOML."""
    refuse_empty(
        "gpt config show", [("--config", args.config, "tiny"), ("--run", args.run, "runs/<name>")]
    )
    if args.run and args.config:
        raise UsageError(
            "gpt config show takes --run or --config, not both: a run's config is its config.toml."
        )
    base = run_config(args.run) if args.run else load_config(args.config or "tiny")
    cfg, note = fit_warmup(apply_overrides(base, parse_set(args.overrides), from_text=True))
    if note:
        print(f"note: {note}", file=sys.stderr)
    cfg, vocab_line = _resolved_vocab(cfg, args.run)
    from .._model.gpt import param_count

    head, _, rest = dumps(cfg).partition("\n")
    count = f"# {param_count(cfg.model) / 1e6:.2f}M parameters"
    if cfg.lora.enabled:  # the adapters are extra, and the only weights trained
        count += f" + {param_count(cfg) - param_count(cfg.model):,} in LoRA adapters (trained)"
    if vocab_line:
        count += " (with this vocab_size; the trained tokenizer decides it)"
        rest = re.sub(r"^vocab_size = (\d+)  #.*$", rf"vocab_size = \1  # {vocab_line}", rest,
                      count=1, flags=re.MULTILINE)  # fmt: skip
    print(f"{head}\n{count}\n{rest}", end="")
    return 0


def _resolved_vocab(cfg: Config, run: str | None) -> tuple[Config, str | None]:
    """``cfg`` with the vocabulary ``gpt train`` would give it, or the note for its line.

    A run's config.toml already holds it; the byte tokenizer, a tokenizer.json file (and token
    files with a sidecar) fix it without reading the text; a BPE tokenizer is trained on the data
    by ``gpt train`` itself.
    """
    if run:
        return cfg, None
    from .._data.run_tokenizer import prepare_tokenizer

    if cfg.data.tokenizer != "bpe":
        _, cfg = prepare_tokenizer(cfg, Path("."), resume=False, stream=sys.stderr)
        return cfg, None
    return cfg, (
        f"needs the data: gpt train trains the {cfg.data.tokenizer} tokenizer on it and sets "
        "this to its size, rounded up to a multiple of 64."
    )


def sample_command(args: argparse.Namespace) -> int:
    """``gpt sample``: text from a run's newest checkpoint; defaults from its ``[sample]``.

    A run trained on chat data (unless ``--raw``): the prompt as a user turn, the reply alone.
    """
    from .._data.run_tokenizer import run_tokenizer
    from .._runs.folders import load_run
    from .._runs.resolve import run_chat_format
    from .._training.evaluate import sample_lengths, sample_reply
    from .._training.plans import plan_sample
    from .eval_report import run_preflight

    run = _chosen_run(args)
    cfg = _run_config(args, run, _SAMPLE_KEYS) or run_config(run)
    tok = run_tokenizer(run, cfg)
    chat = None if args.raw else run_chat_format(run, cfg)
    stop = chat.end_of_turn_ids[0] if chat is not None and chat.end_of_turn_ids else None
    s = cfg.sample
    try:
        ids, n = sample_lengths(cfg, tok, args.prompt, args.max_new_tokens, chat)
        if args.max_new_tokens is not None and n < args.max_new_tokens:
            print(
                f"note: --max-new-tokens {args.max_new_tokens} capped to {n}: the prompt "
                f"({len(ids)} tokens) and the new tokens fill the model's context, "
                f"model.seq_len = {cfg.model.seq_len}.",
                file=sys.stderr,
            )
        # Before the checkpoint is read: a program that cannot fit is refused in seconds.
        plan = plan_sample(
            cfg, len(ids), n, temperature=s.temperature if args.temperature is None else args.temperature,
            top_k=(s.top_k or None) if args.top_k is None else args.top_k,
            top_p=(s.top_p if s.top_p < 1 else None) if args.top_p is None else args.top_p,
            stream=sys.stderr, stop_token=stop,
        )  # fmt: skip
        if run_preflight(args, plan):
            return 0
        cfg, params, _ = load_run(run, cfg)
        text, ended = sample_reply(
            params, cfg, prompt=args.prompt, max_new_tokens=n,
            temperature=args.temperature, top_k=args.top_k, top_p=args.top_p, seed=args.seed,
            tokenizer=tok, chat=chat,
        )  # fmt: skip
    except ValueError as err:  # too long for the context, empty prompt, bad sampling options
        if isinstance(err, UsageError):
            raise
        raise UsageError(str(err)) from err
    print(text)
    if chat is not None and not ended:
        print(
            f"note: the reply did not end within {n} new tokens (no {chat.end_of_turn_text!r}, "
            "the end of an assistant turn); raise --max-new-tokens to read on."
            if chat.end_of_turn_text.strip()
            else f"note: {chat.note}",
            file=sys.stderr,
        )
    return 0


def eval_command(args: argparse.Namespace) -> int:
    """``gpt eval``: ``val_loss <x>`` of a run's newest checkpoint, or ``--text`` / ``--task`` scores."""
    from .._training.evaluate import evaluate_run
    from .._training.plans import plan_eval
    from .eval_report import run_preflight

    if args.batch_size < 1:
        raise UsageError(f"gpt eval --batch-size {args.batch_size}: it must be >= 1, e.g. 8.")
    if args.lm_eval is not None or args.include_path is not None:
        from .lm_eval import lm_eval_command

        return lm_eval_command(args)
    if args.stride is not None and args.text is None:
        raise UsageError("gpt eval --stride applies to --text; pass --text FILE too.")
    if args.format is not None and args.task is None:
        raise UsageError(
            f"gpt eval --format {args.format} applies to --task; pass --task FILE.jsonl too."
        )
    refuse_empty(
        "gpt eval",
        [
            *(("--text", t, "@val") for t in args.text or ()),
            *(("--task", t, "tasks/mc.jsonl") for t in args.task or ()),
        ],
    )
    run = _chosen_run(args)
    config = _run_config(args, run, _EVAL_KEYS)
    if args.text is None and args.task is None:
        plan = plan_eval(config or run_config(run), run, stream=sys.stderr)
        if run_preflight(args, plan):
            return 0
        print(evaluate_run(run, config, step=plan.compiled).describe())
        return 0
    from .eval_report import eval_files

    return eval_files(args, run, config)


def _check_train_flags(args: argparse.Namespace) -> None:
    """Flags that cannot work, refused before JAX starts or anything is read or written."""
    refuse_empty(
        "gpt train",
        [(f, getattr(args, f[2:].replace("-", "_")), e) for f, e in _FLAG_EXAMPLES.items()],
    )
    if args.auto_resume and (args.name is None or args.resume is not None):
        raise UsageError(
            "gpt train --auto-resume needs --name NAME (and no --resume): it continues "
            "OUT/NAME if that run has checkpoints and starts it otherwise, so the same command "
            "can be re-run after every preemption. Example: gpt train --auto-resume --name my-run."
        )
    if args.resume is not None and args.name is not None:
        raise UsageError(
            f"gpt train got --resume {args.resume} and --name {args.name}: --resume continues "
            f"that run in its own folder, --name starts a new one. Pass one: --resume "
            f"{args.resume}, or --name {args.name} without --resume."
        )
    out = Path(args.out)
    if args.resume is None and out.exists() and not out.is_dir():
        raise UsageError(
            f"gpt train --out {out}: that is a file, but --out is the folder that holds run "
            "folders. Pass a folder (new or existing), e.g. --out runs."
        )
    _check_distributed_flags(args)


_FLAG_EXAMPLES = {
    "--resume": "runs/<name>",
    "--config": "tiny",
    "--out": "runs",
    "--coordinator": "10.0.0.1:1234",
    "--mesh": "data=2,fsdp=4",
    "--init-from": "runs/<name>",
}


def _check_distributed_flags(args: argparse.Namespace) -> None:
    address = args.coordinator or os.environ.get("JAX_COORDINATOR_ADDRESS")
    if address is not None:
        from .._distributed.startup import split_address

        split_address(address)
    n = _count("--num-processes", args.num_processes, "JAX_NUM_PROCESSES")
    i = _count("--process-id", args.process_id, "JAX_PROCESS_ID")
    if (args.num_processes is not None or args.process_id is not None) and address is None:
        raise UsageError(_no_coordinator(args.num_processes, args.process_id))
    if n is not None and n < 1:
        raise UsageError(f"gpt train --num-processes {n}: expected 1 or more processes.")
    if i is not None and (i < 0 or (n is not None and i >= n)):
        top = f"0 to {n - 1}" if n is not None else "0 or more"
        raise UsageError(
            f"gpt train --process-id {i}: expected {top} (each of the --num-processes {n} "
            "processes gets a distinct id; process 0 hosts the coordinator)."
        )


def _no_coordinator(n: int | None, i: int | None) -> str:
    """Multi-process flags without an address: what was given, and the command for each process."""
    given = " ".join(
        f"{f} {v}" for f, v in (("--num-processes", n), ("--process-id", i)) if v is not None
    )
    n = n if n is not None and n > 1 else 2
    others = "1" if n == 2 else f"1 to {n - 1}, one each"
    return (
        f"gpt train {given} needs --coordinator HOST:PORT, the address of process 0 that every "
        "process connects to (or JAX_COORDINATOR_ADDRESS): without it the processes cannot find "
        "each other. Start every process with the same --coordinator and --num-processes and its "
        f"own --process-id, e.g. on the machine at 10.0.0.1: gpt train --coordinator 10.0.0.1:1234 "
        f"--num-processes {n} --process-id 0, and on the others the same with --process-id "
        f"{others}. For one process, leave the multi-process flags out."
    )


def _count(flag: str, value: int | None, env: str) -> int | None:
    # The flag, else the environment variable that paramspec.initialize_distributed would read.
    if value is not None:
        return value
    text = os.environ.get(env)
    if text is None:
        return None
    try:
        return int(text)
    except ValueError:
        raise UsageError(
            f"gpt train: {env}={text!r} is not a whole number. Set it to the value {flag} would "
            f"take, or unset it and pass {flag}."
        ) from None


def _maybe_distributed(args: argparse.Namespace) -> None:
    # Only when asked: auto-detection is for clusters and must not slow down a laptop run.
    if args.coordinator or args.num_processes or os.environ.get("JAX_COORDINATOR_ADDRESS"):
        from .._distributed import startup

        try:
            startup.start(
                args.coordinator, args.num_processes, args.process_id,
                init_timeout=args.init_timeout, heartbeat_timeout=math.ceil(args.heartbeat_timeout),
            )  # fmt: skip
        except ValueError as err:  # paramspec.initialize_distributed's checks of the arguments
            raise UsageError(
                f"gpt train --coordinator/--num-processes/--process-id: {err}"
            ) from err


def _train_config(args: argparse.Namespace) -> Config:
    overrides = parse_set(args.overrides)
    if args.mesh:
        overrides |= _parse_mesh(args.mesh)
    if args.wandb:
        overrides["log.wandb"] = args.wandb
    if args.resume:
        if args.config:
            raise ConfigError(
                "--resume takes the run's own config.toml; do not pass --config with it."
            )
        base = load_config(str(Path(args.resume) / "config.toml"), run_folder=True)
    else:  # a fine-tune's schedule, not pre-training's, unless --config says otherwise
        base = load_config(args.config or ("finetune" if args.init_from else "tiny"))
    if getattr(args, "init_from", None):
        if args.resume:
            raise ConfigError(
                "--init-from starts a new run; --resume continues one. Pass only one of them."
            )
        from .._runs.resolve import adopt_init_source

        # The source's architecture and tokenizer, before --set (which may still change the free
        # model keys and data.tokenizer).
        base = adopt_init_source(dataclasses.replace(
            base, init=dataclasses.replace(base.init, source=args.init_from)
        ))  # fmt: skip
    cfg = apply_overrides(base, overrides, from_text=True)
    if args.resume:
        from .._runs.resolve import check_resume_model

        check_resume_model(Path(args.resume), base, cfg)
    return cfg


def _parse_mesh(text: str) -> dict[str, str]:
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


def _chosen_run(args: argparse.Namespace) -> str:
    """The run folder of ``gpt sample`` / ``gpt eval``: ``--run RUN`` or the older positional form."""
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


def _run_config(args: argparse.Namespace, run: str, allowed: tuple[str, ...]) -> Config | None:
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
    from .._runs.resolve import resolve_paths

    return resolve_paths(apply_overrides(run_config(run), overrides, from_text=True))
