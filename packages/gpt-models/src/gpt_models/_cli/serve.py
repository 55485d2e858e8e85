"""``gpt serve RUN``: a run's newest checkpoint answering over the OpenAI API (``_serving``).

The flags and the extra are checked first; then the memory pre-flight compiles the decoding step
for ``--max-batch`` sequences of ``--max-len`` tokens and refuses what cannot fit, before the
checkpoint is read or the port bound. The server then warms up (compiles its programs) and
prints the line ``gpt serve: ready ...`` with the address it listens on.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._errors import UsageError
from .empty_values import refuse_empty

EXTRA = "pip install 'gpt-models[serve]'"
KEY_ENV = "GPT_SERVE_API_KEY"

if TYPE_CHECKING:
    from .._config.schema import Config
    from .._serving.requests import Model


def serve_parser(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "run_dir", metavar="RUN", help="the run folder to serve (made by gpt train or gpt import)"
    )
    p.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to listen on; default 127.0.0.1 (this machine only). 0.0.0.0 opens the "
        "server to the network: set --api-key then",
    )
    p.add_argument(
        "--port",
        type=int,
        default=8000,
        help="port to listen on; 0 picks a free one (default 8000)",
    )
    p.add_argument(
        "--max-batch",
        type=int,
        default=8,
        help="sequences decoded side by side (the KV cache's slots); requests join the batch "
        "at the next step. Default 8",
    )
    p.add_argument(
        "--max-len",
        type=int,
        default=None,
        help="tokens per sequence, prompt and reply together (the KV cache's positions); at "
        "most model.seq_len, its default",
    )
    p.add_argument(
        "--max-queue",
        type=int,
        default=None,
        help="sequences that may wait for a slot; past that a request gets 503 with "
        "Retry-After. Default 4 x --max-batch",
    )
    p.add_argument(
        "--api-key",
        default=None,
        metavar="KEY",
        help=f"answer only requests with 'Authorization: Bearer KEY' (others get 401); "
        f"default: the {KEY_ENV} environment variable, else no key",
    )
    p.add_argument(
        "--drain-timeout",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="on SIGTERM: let requests in flight finish for up to this long, then exit 0 "
        "(Ctrl-C: the same, then exit 130); default 30",
    )
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="run the memory pre-flight (the decoding step and its KV cache, compiled and "
        "measured) and print it; serve nothing. Exit 0 when it fits, 2 when it does not",
    )


def _check_flags(args: argparse.Namespace) -> None:
    refuse_empty(
        "gpt serve", [("RUN", args.run_dir, "runs/<name>"), ("--host", args.host, "127.0.0.1")]
    )
    for flag, value, low in (
        ("--max-batch", args.max_batch, 1),
        ("--max-len", args.max_len, 2),
        ("--max-queue", args.max_queue, 0),
    ):
        if value is not None and value < low:
            raise UsageError(
                f"gpt serve {flag} {value}: it must be >= {low}, e.g. {flag} {low + 7}."
            )
    if not 0 <= args.port <= 65535:
        raise UsageError(f"gpt serve --port {args.port}: a port is 0..65535 (0: any free one).")
    if not args.drain_timeout > 0:
        raise UsageError(
            f"gpt serve --drain-timeout {args.drain_timeout}: it must be > 0, e.g. 30."
        )


def require_serve() -> None:
    """The extra's packages, or a one-line :class:`UsageError` naming the extra."""
    try:
        import starlette  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as err:
        raise UsageError(f"gpt serve needs the serve extra ({err}): {EXTRA}") from err


def serve_command(args: argparse.Namespace) -> int:
    """``gpt serve``: pre-flight, load, warm up, serve until SIGTERM."""
    _check_flags(args)
    require_serve()
    from .._compute.preflight import check_fits
    from .._data.run_tokenizer import run_tokenizer
    from .._inference.sampling import stop_ids
    from .._runs.chat_file import run_chat_format
    from .._runs.folders import check_run_folder, load_run, run_config
    from .._serving.plan import plan_serve
    from .._serving.requests import Model

    run = check_run_folder(args.run_dir, flag="RUN")
    cfg = run_config(run, flag="RUN")
    seq_len = cfg.model.seq_len
    if args.max_len is not None and args.max_len > seq_len:
        raise UsageError(
            f"gpt serve --max-len {args.max_len}: the model's context (model.seq_len) is "
            f"{seq_len} tokens; use --max-len {seq_len} or less."
        )
    max_len = args.max_len or seq_len
    plan = plan_serve(cfg, args.max_batch, max_len, sys.stderr)
    plan = dataclasses.replace(plan, untouched="No checkpoint was read and no port was bound.")
    print(
        f"Plan of gpt serve:\n{plan.describe()}",
        file=sys.stderr if not args.dry_run else sys.stdout,
    )
    check_fits(plan)  # OutOfMemoryError: exit 2 with the --max-batch that fits
    if args.dry_run:
        print("It fits: the same command without --dry-run serves it.")
        return 0
    tok = run_tokenizer(run, cfg)
    model = Model(
        name=Path(run).name,
        max_len=max_len,
        max_batch=args.max_batch,
        tokenizer=tok,
        chat=run_chat_format(run, cfg),
        defaults=cfg.sample,
        ends=stop_ids(tok),
    )
    cfg, params, step = load_run(run, cfg)
    return _serve(args, model, cfg, params, f"{run} at step {step}")


def _serve(args: argparse.Namespace, model: Model, cfg: Config, params: Any, what: str) -> int:
    """Warm the engine up (its programs compiled), then serve until stopped."""
    from .._distributed.mesh import on_one_device
    from .._serving.app import Service
    from .._serving.decode import split_cache
    from .._serving.engine import Engine
    from .._serving.server import serve

    weights = split_cache(on_one_device(params))[0]
    queue = 4 * args.max_batch if args.max_queue is None else args.max_queue
    engine = Engine(cfg.model, weights, (args.max_batch, model.max_len, queue), sys.stderr)
    engine.warm_up()
    key = args.api_key if args.api_key is not None else os.environ.get(KEY_ENV) or None
    service = Service(model, engine, key, int(time.time()))
    serve(service, args.host, args.port, args.drain_timeout, sys.stderr, what)
    return 0
