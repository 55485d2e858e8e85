"""What each ``gpt`` command does, given its parsed arguments (the parser is ``main.py``).

Each returns the exit status; user mistakes raise ``UsageError`` and ``_cli.main`` prints them.
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from .._config.schema import Config, fit_warmup
from .._config.toml import apply_overrides, dumps, load_config, parse_set
from .._errors import UsageError
from .._runs.folders import check_run_folder, new_run_dir, run_config
from .empty_values import refuse_empty
from .run_args import EVAL_KEYS, SAMPLE_KEYS, chosen_run, read_run_config
from .train_flags import FLAG_EXAMPLES, check_train_flags, maybe_distributed, train_overrides

if TYPE_CHECKING:
    from .._compute.preflight import Plan


def train_command(args: argparse.Namespace) -> int:
    """``gpt train``: resolve the run once, plan it, and train it in a new (or the resumed) run
    folder with the command's hooks; or, with ``--dry-run``, print the plan."""
    refuse_empty(
        "gpt train",
        [(f, getattr(args, f[2:].replace("-", "_")), e) for f, e in FLAG_EXAMPLES.items()],
    )
    check_train_flags(args)
    maybe_distributed(args)
    overrides = train_overrides(args)
    import jax

    from .._runs.run import resolve_run
    from .._training.plans import plan_run

    if args.resume:
        folder = check_run_folder(args.resume, flag="--resume")
    elif args.name is None and jax.process_count() > 1:
        raise UsageError(
            "Multi-process training needs an explicit --name (the same on every process)."
        )
    else:
        folder = new_run_dir(args.out, args.name, args.config)
    run = resolve_run(
        folder,
        args.config,
        overrides=overrides,
        resume=bool(args.resume),
        auto_resume=args.auto_resume,
        init_from=args.init_from,
        dry_run=args.dry_run,
        stream=sys.stderr,
    )
    plan = plan_run(run, profile=args.profile, stream=sys.stderr)
    if run.dry_run:
        return _dry_run(plan.preflight)
    from .train import train_and_report

    return train_and_report(run, plan)


def _dry_run(plan: Plan) -> int:
    """``gpt train --dry-run``: the plan of the run, compiled but not run; nothing is written.

    The run was resolved with every check the launch makes (the run folder, ``--resume``,
    ``--profile``), so "it fits" means the same command starts.
    """
    from .._compute.preflight import check_fits

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
    count = f"# {param_count(cfg.model.base) / 1e6:.2f}M parameters"
    if cfg.lora.enabled:  # the adapters are extra, and the only weights trained
        count += f" + {param_count(cfg) - param_count(cfg.model.base):,} in LoRA adapters (trained)"
    if vocab_line:
        count += " (with this vocab_size; the trained tokenizer decides it)"
        rest = re.sub(
            r"^vocab_size = (\d+)  #.*$",
            rf"vocab_size = \1  # {vocab_line}",
            rest,
            count=1,
            flags=re.MULTILINE,
        )
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
    from .._data.chat_format import sampling_format
    from .._data.run_tokenizer import run_tokenizer
    from .._inference.plans import plan_sample
    from .._inference.sampling import Sampling, sample_lengths, sample_reply, stop_ids
    from .._runs.chat_file import run_chat_format
    from .._runs.folders import load_run
    from .eval_report import run_preflight

    run = chosen_run(args)
    cfg = read_run_config(args, run, SAMPLE_KEYS) or run_config(run)
    tok = run_tokenizer(run, cfg)
    chat = None if args.raw else sampling_format(run_chat_format(run, cfg), cfg)
    ends = stop_ids(tok, args.raw) if chat is None else chat.end_of_turn_ids
    stop = ends[0] if ends else None
    asked = Sampling(
        args.prompt, args.max_new_tokens, args.temperature, args.top_k, args.top_p, args.seed
    )
    got = asked.resolved(cfg.sample)
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
            cfg,
            len(ids),
            n,
            temperature=got.temperature,
            top_k=got.top_k,
            top_p=got.top_p,
            stream=sys.stderr,
            stop_token=stop,
        )
        if run_preflight(args, plan):
            return 0
        cfg, params, _ = load_run(run, cfg)
        asked = dataclasses.replace(asked, max_new_tokens=n)
        text, ended = sample_reply(params, cfg, asked, tokenizer=tok, chat=chat, raw=args.raw)
    except ValueError as err:  # too long for the context, empty prompt, bad sampling options
        if isinstance(err, UsageError):
            raise
        raise UsageError(str(err)) from err
    print(text)
    if chat is None and ended:  # as transformers' generate stops on the export
        print(
            f"note: the text ended at the tokenizer's end-of-text token (id {stop}) within "
            f"{n} new tokens; --raw goes on past it.",
            file=sys.stderr,
        )
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
    """``gpt eval``: ``val_loss <x>`` of a run's newest checkpoint, or ``--text`` / ``--task``
    scores."""
    from .._inference.evaluate import evaluate_run
    from .._inference.plans import plan_eval
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
    run = chosen_run(args)
    config = read_run_config(args, run, EVAL_KEYS)
    if args.text is None and args.task is None:
        plan = plan_eval(config or run_config(run), run, stream=sys.stderr)
        if run_preflight(args, plan):
            return 0
        print(evaluate_run(run, config, step=plan.compiled).describe())
        return 0
    from .eval_report import eval_files

    return eval_files(args, run, config)
