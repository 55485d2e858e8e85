"""``gpt prepare SRC... --out DIR``: tokenize a corpus into a token store (``_data/prepare.py``)."""

from __future__ import annotations

import argparse
import sys


def prepare_parser(p: argparse.ArgumentParser) -> None:
    """The flags of ``gpt prepare``."""
    p.add_argument(
        "sources",
        nargs="+",
        metavar="SRC",
        help="text files (.txt/.md: one document each), .jsonl (one per line: "
        'text, or chat {"messages": [...]} or {"prompt", "completion"} '
        "examples, which get a loss mask), "
        ".parquet (one per row), each optionally .gz/.zst, or folders of them "
        "(their other files are skipped, and listed)",
    )
    p.add_argument(
        "--out",
        required=True,
        metavar="DIR",
        help="the store folder (shards + manifest.json): a new or empty folder, or "
        "this command's own unfinished output; train on it with "
        "gpt train --set data.path=DIR",
    )
    p.add_argument(
        "--tokenizer",
        default="byte",
        metavar="byte|bpe|FILE.json|HF_DIR",
        help="byte (default), bpe (trained here on the first ~64 MB of documents), "
        "a tokenizers tokenizer.json or a Hugging Face folder holding one (chat "
        "examples are rendered with the chat_template of a "
        "tokenizer_config.json beside it)",
    )
    p.add_argument(
        "--bpe-vocab-size",
        type=int,
        default=None,
        help="ids of the BPE tokenizer --tokenizer bpe trains, 257..65536; default 2048",
    )
    p.add_argument(
        "--val-fraction",
        type=float,
        default=0.01,
        help="share of documents (by a hash of file name and position) held out "
        "for validation; default 0.01. At least one document must land there "
        "(a smaller corpus is refused, naming a fraction that works); 0 writes "
        "a train-only store",
    )
    p.add_argument(
        "--text-field",
        default="text",
        help="the JSON field (.jsonl) or column (.parquet) holding the text; default text",
    )
    p.add_argument(
        "--shard-tokens",
        type=int,
        default=1 << 26,
        help=f"token ids per shard file; default {1 << 26}",
    )


def prepare_command(args: argparse.Namespace) -> int:
    """``gpt prepare``: write (or resume, or confirm) the store and print its summary."""
    from .._data.prepare import prepare
    from .._errors import UsageError
    from .empty_values import refuse_empty

    refuse_empty(
        "gpt prepare",
        [
            *(("SRC", src, "gpt prepare corpus/ --out data/store") for src in args.sources),
            ("--out", args.out, "data/store"),
            ("--tokenizer", args.tokenizer, "bpe"),
            ("--text-field", args.text_field, "text"),
        ],
        required=("--out",),
    )
    if args.bpe_vocab_size is not None and args.tokenizer != "bpe":
        raise UsageError(
            f"gpt prepare --bpe-vocab-size {args.bpe_vocab_size} applies to --tokenizer bpe (the "
            f"tokenizer trained here), not --tokenizer {args.tokenizer}; pass --tokenizer bpe, or "
            "leave --bpe-vocab-size out."
        )
    result = prepare(
        args.sources,
        args.out,
        tokenizer=_tokenizer_file(args.tokenizer),
        val_fraction=args.val_fraction,
        text_field=args.text_field,
        shard_tokens=args.shard_tokens,
        **({} if args.bpe_vocab_size is None else {"bpe_vocab_size": args.bpe_vocab_size}),
        progress=sys.stderr,
    )
    m = result.manifest
    tokens, docs = m["tokens"], m["documents"]
    if result.up_to_date:
        print(
            f"{args.out} is up to date: same inputs and settings, every shard verifies; nothing to "
            f"do."
        )
    what = f"{docs['train']:,} train / {docs['val']:,} val documents"
    if m.get("loss_mask"):  # chat or completion examples: what the loss will count
        masked = m["masked_tokens"]
        share = (masked["train"] + masked["val"]) / max(tokens["train"] + tokens["val"], 1)
        units, name = (m["pairs"], "pairs") if "pairs" in m else (m["examples"], "examples")
        what = (
            f"{m['kind']} data, {units['train']:,} train / {units['val']:,} val "
            f"{name} with a loss mask ({share:.1%} of the tokens counted: "
            f"{masked['train']:,} / {masked['val']:,})"
        )
    print(
        f"{args.out}: {what}, "
        f"{tokens['train']:,} / {tokens['val']:,} tokens ({m['tokenizer']['kind']} tokenizer, "
        f"{m['tokenizer']['vocab_size']} ids, {m['dtype']}), "
        f"{len(m['shards']['train']) + len(m['shards']['val'])} shards, "
        f"{m['undecodable_bytes']} undecodable bytes replaced."
    )
    if m.get("chat_format"):
        _say_end_of_turn(m["chat_format"])
    if docs["val"] == 0:  # --val-fraction 0: a train-only store, which gpt train refuses
        fix = result.val_fix or "a --val-fraction above 0"
        print(
            f"gpt: warning: {args.out} has no validation split (--val-fraction 0), and gpt train "
            f"needs one. Fix (prepare again, into a new --out): {fix}.",
            file=sys.stderr,
        )
        return 0
    print(
        f"Train on it: gpt train --set data.path={args.out}"
        + (" --set data.tokenizer=bpe" if m["tokenizer"]["kind"] == "bpe" else "")
    )
    return 0


def _tokenizer_file(tokenizer: str) -> str:
    """``--tokenizer``, with a folder (a Hugging Face model's, as ``gpt import`` and ``--init-from``
    take them, or a run folder) replaced by the ``tokenizer.json`` in it."""
    from pathlib import Path

    from .._errors import UsageError
    from .._runs.hf_folder import folder_tokenizer

    folder = Path(tokenizer)
    if tokenizer in ("byte", "bpe") or not folder.is_dir():
        return tokenizer
    found = folder_tokenizer(folder)
    if found is not None:
        return str(found)
    if (folder / "config.toml").is_file():
        why = "it is a run folder of the byte tokenizer, which needs no file"
        fix = "pass --tokenizer byte"
    else:
        held = sorted(p.name for p in folder.iterdir())[:6]
        why = f"it holds {', '.join(held) or 'nothing'}" + (", ..." if len(held) == 6 else "")
        fix = (
            "save the model's tokenizer in the tokenizers library's format there (transformers: "
            f"AutoTokenizer.from_pretrained('{folder}').save_pretrained('{folder}')), or pass the "
            "path of a tokenizer.json"
        )
    raise UsageError(
        f"gpt prepare --tokenizer {folder}: the folder has no tokenizer.json ({why}). Expected "
        f"byte, bpe, a tokenizer.json or a Hugging Face folder holding one; {fix}."
    )


def _say_end_of_turn(chat: dict[str, object]) -> None:
    """Which token ends an assistant turn, where ``gpt sample`` and an export stop (or why none)."""
    ids = chat["end_of_turn_ids"]
    assert isinstance(ids, list)
    if not ids:
        print(f"note: {chat['note']}", file=sys.stderr)
        return
    print(
        f"Chat template: {chat['template_file']}; an assistant turn ends with "
        f"{chat['end_of_turn_text']!r} (id {ids[0]}), where gpt sample and exported models stop."
    )
