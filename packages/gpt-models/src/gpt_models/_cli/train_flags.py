"""``gpt train``'s flags checked before JAX starts or anything is read or written, the multi-process
start-up they ask for, and the ``--set``-style overrides the shorthand flags stand for."""

from __future__ import annotations

import argparse
import math
import os
from pathlib import Path
from typing import TYPE_CHECKING

from .._config.toml import parse_set
from .._errors import ConfigError, UsageError

if TYPE_CHECKING:
    from paramspec import Cluster


def train_overrides(args: argparse.Namespace) -> dict[str, str]:
    """``--set`` with ``--mesh`` and ``--wandb`` folded in, as dotted keys."""
    overrides = parse_set(args.overrides)
    if args.mesh:
        overrides |= _parse_mesh(args.mesh)
    if args.wandb:
        overrides["log.wandb"] = args.wandb
    return overrides


def check_train_flags(args: argparse.Namespace) -> None:
    """Flags that cannot work, refused before JAX starts or anything is read or written (an
    empty path or name among them by ``refuse_empty``, with :data:`FLAG_EXAMPLES`, first)."""
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


FLAG_EXAMPLES = {
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


def maybe_distributed(args: argparse.Namespace) -> None:
    """Join the other processes of the run: those the flags or ``JAX_*`` variables name, else the
    cluster that ``--cluster`` detects (``paramspec.detect_cluster``); else run as one process."""
    cluster = None
    if not (args.coordinator or args.num_processes or os.environ.get("JAX_COORDINATOR_ADDRESS")):
        cluster = _detect(args.cluster, math.ceil(args.init_timeout))
        if cluster is None:
            return
    from .._distributed import startup

    try:
        startup.start(
            args.coordinator,
            args.num_processes,
            args.process_id,
            init_timeout=args.init_timeout,
            heartbeat_timeout=math.ceil(args.heartbeat_timeout),
            cluster=cluster,
        )
    except ValueError as err:  # paramspec.initialize_distributed's checks of the arguments
        raise UsageError(f"gpt train --coordinator/--num-processes/--process-id: {err}") from err


def _detect(kind: str, timeout_s: int) -> Cluster | None:
    if kind == "none":
        return None
    import paramspec as ps

    try:
        return ps.detect_cluster(kind, timeout_s=timeout_s)
    except ValueError as err:
        raise UsageError(
            f"gpt train --cluster {kind}: {err} Or pass --cluster none to train as one process."
        ) from err


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
