"""``gpt import DIR --name NAME`` and ``gpt export RUN OUT_DIR``: Hugging Face folders (``_runs/hf*.py``)."""

from __future__ import annotations

import argparse
from pathlib import Path

_DTYPE_HELP = "float32 (default) or bfloat16"


def import_parser(p: argparse.ArgumentParser) -> None:
    """The flags of ``gpt import``."""
    p.add_argument("source", metavar="DIR",
                   help="a Hugging Face model folder (config.json + model.safetensors or its "
                        "sharded index) of a GPT2LMHeadModel or LlamaForCausalLM")  # fmt: skip
    p.add_argument("--name", required=True, help="the new run folder's name")
    p.add_argument("--out", default="runs", help="the folder of run folders; default runs")
    p.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"),
                   help=f"parameter dtype of the run: {_DTYPE_HELP}")  # fmt: skip


def export_parser(p: argparse.ArgumentParser) -> None:
    """The flags of ``gpt export``."""
    p.add_argument("run", metavar="RUN", help="a run folder (its newest checkpoint is exported)")
    p.add_argument(
        "out", metavar="OUT_DIR", help="the Hugging Face folder to write (must not exist)"
    )
    p.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"),
                   help=f"dtype of the written tensors: {_DTYPE_HELP}")  # fmt: skip


def import_command(args: argparse.Namespace) -> int:
    """``gpt import``: a run folder at step 0 from a Hugging Face folder."""
    from .._runs.folders import check_run_name
    from .._runs.hf_run import import_run
    from .empty_values import refuse_empty

    refuse_empty(
        "gpt import",
        [("DIR", args.source, "gpt import hf/gpt2 --name gpt2"), ("--out", args.out, "runs")],
    )
    run = import_run(args.source, Path(args.out) / check_run_name(args.name), dtype=args.dtype)
    print(f"imported {args.source} into {run} (step 0); try: gpt eval --run {run}")
    return 0


def export_command(args: argparse.Namespace) -> int:
    """``gpt export``: a run's newest checkpoint as a Hugging Face folder."""
    from .._runs.folders import check_run_folder, load_run
    from .._runs.hf import export_hf
    from .empty_values import refuse_empty

    example = "gpt export runs/<name> hf/<name>"
    refuse_empty("gpt export", [("RUN", args.run, example), ("OUT_DIR", args.out, example)])
    run = check_run_folder(args.run, flag="RUN")
    cfg, params, step = load_run(run)
    tokenizer = run / "tokenizer.json"  # a BPE or imported run's tokenizer goes along
    out = export_hf(
        cfg,
        params,
        args.out,
        dtype=args.dtype,
        tokenizer=tokenizer if tokenizer.is_file() else None,
    )
    print(f"exported {run} (step {step}) to {out}")
    return 0
