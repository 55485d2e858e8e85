"""``gpt import DIR --name NAME`` and ``gpt export RUN OUT_DIR``: Hugging Face folders in and out
(``_runs/hf_import.py``, ``_runs/hf_export.py``)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

_DTYPE_HELP = "float32 (default) or bfloat16"


def import_parser(p: argparse.ArgumentParser) -> None:
    """The flags of ``gpt import``."""
    p.add_argument(
        "source",
        metavar="DIR",
        help="a Hugging Face model folder (config.json + model.safetensors or its "
        "sharded index) of a GPT2LMHeadModel or LlamaForCausalLM",
    )
    p.add_argument("--name", required=True, help="the new run folder's name")
    p.add_argument("--out", default="runs", help="the folder of run folders; default runs")
    p.add_argument(
        "--dtype",
        default="float32",
        choices=("float32", "bfloat16"),
        help=f"parameter dtype of the run: {_DTYPE_HELP}",
    )


def export_parser(p: argparse.ArgumentParser) -> None:
    """The flags of ``gpt export``."""
    p.add_argument("run", metavar="RUN", help="a run folder (its newest checkpoint is exported)")
    p.add_argument(
        "out",
        metavar="OUT_DIR",
        help="the Hugging Face folder to write (must not exist): config.json, "
        "model.safetensors, the run's tokenizer with tokenizer_config.json, and "
        "generation_config.json",
    )
    p.add_argument(
        "--dtype",
        default="float32",
        choices=("float32", "bfloat16"),
        help=f"dtype of the written tensors: {_DTYPE_HELP}",
    )
    p.add_argument(
        "--adapter",
        action="store_true",
        help="a LoRA run: write its adapters alone as a PEFT adapter folder "
        "(adapter_config.json, adapter_model.safetensors) for "
        "peft.PeftModel.from_pretrained on the base model; without it the "
        "adapters are merged into the exported weights",
    )


def import_command(args: argparse.Namespace) -> int:
    """``gpt import``: a run folder at step 0 from a Hugging Face folder."""
    from .._data.chat_format import read_chat_format
    from .._runs.chat_file import CHAT_FILE
    from .._runs.folders import check_run_name
    from .._runs.hf_import import import_run
    from .empty_values import refuse_empty

    refuse_empty(
        "gpt import",
        [("DIR", args.source, "gpt import hf/gpt2 --name gpt2"), ("--out", args.out, "runs")],
    )
    run = import_run(
        args.source, Path(args.out) / check_run_name(args.name), dtype=args.dtype, notes=sys.stderr
    )
    print(f"imported {args.source} into {run} (step 0); try: gpt eval --run {run}")
    if (run / CHAT_FILE).is_file():
        chat = read_chat_format(run / CHAT_FILE)
        if chat.end_of_turn_ids:
            print(
                f"Chat template: {chat.template_file}; gpt sample --run {run} writes a prompt as a "
                f"user turn and stops at the end of the reply ({chat.end_of_turn_text!r}, id "
                f"{chat.end_of_turn_ids[0]}); --raw continues it as plain text."
            )
    return 0


def export_command(args: argparse.Namespace) -> int:
    """``gpt export``: a run's newest checkpoint, with its tokenizer, as a Hugging Face folder."""
    from .._data.run_tokenizer import run_tokenizer
    from .._errors import DataError
    from .._model.lora import lora_summary
    from .._runs.chat_file import run_chat_format
    from .._runs.folders import check_run_folder, load_run
    from .._runs.hf_export import export_hf
    from .empty_values import refuse_empty

    example = "gpt export runs/<name> hf/<name>"
    refuse_empty("gpt export", [("RUN", args.run, example), ("OUT_DIR", args.out, example)])
    run = check_run_folder(args.run, flag="RUN")
    cfg, params, step = load_run(run)
    if args.adapter:
        return _export_adapter(run, cfg, params, step, args)
    tok = run_tokenizer(run, cfg)
    try:
        chat = run_chat_format(run, cfg)
    except DataError as err:  # the weights still export; the note says what the folder lacks
        chat = None
        print(f"note: the export carries no chat template: {err}", file=sys.stderr)
    fits = tok.vocab_size <= cfg.model.real_vocab  # not: imported weights without a tokenizer
    out = export_hf(
        cfg, params, args.out, dtype=args.dtype, tokenizer=tok if fits else None, chat=chat
    )
    print(f"exported {run} (step {step}) to {out}")
    if chat is not None and fits and chat.end_of_turn_ids:
        print(
            f"note: {run} was trained on chat data: {out} carries its chat template "
            "(tokenizer.apply_chat_template) and generate stops at the end of an assistant turn "
            f"({chat.end_of_turn_text!r}, id {chat.end_of_turn_ids[0]}).",
            file=sys.stderr,
        )
    elif chat is not None and fits:
        print(f"note: {out} carries the run's chat template. {chat.note}", file=sys.stderr)
    if cfg.lora.enabled:
        print(
            f"note: the LoRA adapters ({lora_summary(cfg.model)}) are merged into the "
            "exported weights; gpt export --adapter writes them alone, for peft.",
            file=sys.stderr,
        )
    if not fits:
        print(
            f"note: {run} has no tokenizer of its own (its model has {cfg.model.real_vocab} ids, "
            f"the byte tokenizer {tok.vocab_size}), so the export holds the weights alone; add "
            "the model's tokenizer.json to it.",
            file=sys.stderr,
        )
    elif json.loads((out / "config.json").read_text(encoding="utf-8"))["eos_token_id"] is None:
        print(
            f"note: the run's tokenizer has no end-of-text token (a BPE that gpt train learnt "
            f"from text; its documents were never separated), so {out} names no eos_token_id "
            "and transformers' generate runs to max_new_tokens. A run trained on a gpt prepare "
            "store has one.",
            file=sys.stderr,
        )
    return 0


def _export_adapter(run: Path, cfg: Any, params: Any, step: int, args: argparse.Namespace) -> int:
    """``gpt export --adapter``: the run's LoRA adapters as a PEFT adapter folder."""
    from .._runs.adapter_export import export_adapter

    out = export_adapter(cfg, params, args.out, dtype=args.dtype, notes=sys.stderr)
    print(f"exported the LoRA adapters of {run} (step {step}) to {out}")
    base = json.loads((out / "adapter_config.json").read_text())["base_model_name_or_path"]
    if base is not None:  # else export_adapter's note said why, and what to load them onto
        print(
            f"note: peft loads them onto {base}, the Hugging Face folder {run} started from: "
            f"AutoPeftModelForCausalLM.from_pretrained({str(out)!r}), or PeftModel.from_pretrained("
            f"AutoModelForCausalLM.from_pretrained({base!r}), {str(out)!r}).",
            file=sys.stderr,
        )
    return 0
