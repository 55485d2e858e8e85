"""Multi-process start-up and peer loss for ``gpt train``: say what we wait for, never wait forever.

``jax.distributed.initialize`` waits silently, and when its ``initialization_timeout`` runs out it
aborts the process from C++ (a check-failure stack trace that names neither the address nor the
process). So we (1) say what we wait for, (2) for process i > 0, wait for the coordinator's port to
accept connections in Python first (the usual failure: process 0 never started or the address is
wrong), and (3) run a watchdog that prints our message and exits *before* JAX's own deadline for the
rest (a process that never joins). JAX's deadline is set a margin later, so ours always fires first.

After start-up, a peer that dies makes the survivors' next collective fail;
:func:`exit_on_lost_peer`
turns that into one message naming the lost process and an exit that skips JAX's shutdown barrier
(which would otherwise wait for the dead peer, then abort from C++). A peer that hangs is caught by
JAX's heartbeat (``--heartbeat-timeout``), which stops every process with JAX's own message.
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn, TextIO

from .._errors import UsageError
from .processes import note_job

if TYPE_CHECKING:
    from paramspec import Cluster

# Exit status of a multi-process failure: start-up timed out, or a peer was lost. Distinct from 2
# (a mistake in the command) because relaunching the same command may well work.
EXIT_PEERS = 3

# JAX's own initialization deadline comes this long after ours, so our message is the one printed.
_JAX_MARGIN_S = 30


def split_address(address: str) -> tuple[str, int]:
    """``(host, port)`` of a ``HOST:PORT`` coordinator address (``[::1]:1234`` too).

    Raises:
        UsageError: not ``HOST:PORT`` with a port from 1 to 65535.
    """
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        example = f"{(host if sep else address) or '10.0.0.1'}:1234"
        raise UsageError(
            f"gpt train --coordinator {address}: expected HOST:PORT with a port number from "
            f"1 to 65535, e.g. --coordinator {example} (the address of process 0, the same on "
            "every process)."
        )
    return host.strip("[]"), int(port)


def _fail(message: str, stream: TextIO) -> NoReturn:
    print(f"gpt: error: {message}", file=stream, flush=True)
    # os._exit, not sys.exit: JAX's atexit shutdown would wait for the missing peers, then abort
    # from C++. Nothing of ours is left to flush (checkpoints commit atomically on their own).
    os._exit(EXIT_PEERS)


def _wait_for_port(address: str, deadline: float) -> bool:
    """True once something accepts connections at ``address``; False at ``deadline``."""
    host, port = split_address(address)
    while True:
        try:
            with socket.create_connection((host, port), timeout=1.0):
                return True
        except OSError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.25)


@contextlib.contextmanager
def _watchdog(seconds: float, message: str, stream: TextIO) -> Iterator[None]:
    """Exit with ``message`` if the block has not finished after ``seconds``."""
    done = threading.Event()

    def watch() -> None:
        if not done.wait(seconds):
            _fail(message, stream)

    thread = threading.Thread(target=watch, name="gpt-startup-watchdog", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()


def start(
    address: str | None,
    num_processes: int | None,
    process_id: int | None,
    *,
    init_timeout: float,
    heartbeat_timeout: int,
    cluster: Cluster | None = None,
    stream: TextIO | None = None,
) -> None:
    """Join the multi-process run, or exit with status 3 and a message within ``init_timeout`` s.

    ``None`` arguments come from ``JAX_COORDINATOR_ADDRESS`` / ``JAX_NUM_PROCESSES`` /
    ``JAX_PROCESS_ID``, then from the detected ``cluster`` (flags and variables win).
    """
    import paramspec as ps

    stream = stream or sys.stderr
    address = address or os.environ.get("JAX_COORDINATOR_ADDRESS")
    n = num_processes if num_processes is not None else _env_int("JAX_NUM_PROCESSES")
    i = process_id if process_id is not None else _env_int("JAX_PROCESS_ID")
    if cluster is not None:
        address = address or cluster.coordinator_address
        n = cluster.num_processes if n is None else n
        i = cluster.process_id if i is None else i
        cluster = cluster._replace(coordinator_address=address, num_processes=n, process_id=i)
    who = cluster.describe() if cluster else f"process {i} of {n}"
    where = "" if cluster else f" the coordinator at {address}"
    deadline = time.monotonic() + init_timeout
    print(
        f"{who}: waiting for all {n} processes to join{where} "
        f"(giving up after {init_timeout:g} s, --init-timeout)",
        file=stream,
        flush=True,
    )
    if address and str(i) not in ("0", "None") and not _wait_for_port(address, deadline):
        _fail(
            f"{who}: no coordinator is listening at {address} after {init_timeout:g} s. Process 0 "
            f"hosts it: {_start_hint(cluster)} (it must be reachable from this host at that "
            "address and port), or raise --init-timeout if it starts later.",
            stream,
        )
    left = max(deadline - time.monotonic(), 0.0)
    with _watchdog(
        left,
        f"{who}: gave up after {init_timeout:g} s waiting for all {n} processes to join the "
        f"coordinator at {address}; not every process arrived. {_join_hint(cluster, n)}, or "
        "raise --init-timeout if some start later.",
        stream,
    ):
        ps.initialize_distributed(
            address,
            n,
            i,
            initialization_timeout=int(left) + _JAX_MARGIN_S,
            heartbeat_timeout_seconds=heartbeat_timeout,
        )
    note_job(str(address), int(str(n)))


def _env_int(var: str) -> int | None:
    text = os.environ.get(var)
    return int(text) if text and text.strip().isdigit() else None


# What tells each process of a detected cluster its place: named when a peer does not arrive.
_SCHEDULER_VARS = {
    "slurm": "SLURM_NTASKS, SLURM_PROCID and SLURM_STEP_NODELIST",
    "mpi": "OMPI_COMM_WORLD_SIZE, OMPI_COMM_WORLD_RANK and OMPI_MCA_orte_hnp_uri",
    "k8s": "the Job's completions, JOB_COMPLETION_INDEX and its headless service",
    "tpu": "TPU_WORKER_ID and TPU_WORKER_HOSTNAMES",
}


def _start_hint(cluster: Cluster | None) -> str:
    if cluster is None:
        return "start process 0 with the same --coordinator"
    return f"check that task 0 of {cluster.job} started and runs the same command"


def _join_hint(cluster: Cluster | None, n: object) -> str:
    if cluster is None:
        return (
            f"Check that every process was started with --num-processes {n}, the same "
            f"--coordinator and a distinct --process-id in 0..{_last(n)}"
        )
    return (
        f"Check that {cluster.job} started all {n} tasks with the same command (the scheduler's "
        f"{_SCHEDULER_VARS[cluster.kind]} tell each process its place; JAX_COORDINATOR_PORT "
        "moves the coordinator's port if another job holds it)"
    )


def _last(n: object) -> str:
    return str(int(str(n)) - 1) if str(n).isdigit() else "N-1"


# Texts of the runtime errors a collective raises when a peer's connection breaks (Gloo on CPU,
# NCCL on GPU, the coordination service on any backend).
_PEER_SIGNS = (
    "gloo",
    "nccl",
    "connection reset",
    "connection refused",
    "socket closed",
    "unavailable",
    "heartbeat",
    "coordination service",
)


def is_peer_failure(err: BaseException) -> bool:
    """Whether ``err`` comes from a broken connection to another process of a multi-process run."""
    import jax

    if not jax.distributed.is_initialized() or jax.process_count() < 2:
        return False
    text = str(err).lower()
    return any(sign in text for sign in _PEER_SIGNS)


def exit_on_lost_peer(err: BaseException, run: object, stream: TextIO | None = None) -> NoReturn:
    """Report a lost peer (naming it when it can be told) and exit with status 3 at once."""
    import jax

    stream = stream or sys.stderr
    me, n = jax.process_index(), jax.process_count()
    lost = f"process {1 - me}" if n == 2 else "another process"
    detail = " ".join(str(err).split())[:300]
    log = Path(str(run), "errors.log")
    details = f" The full error chain: {log}." if me == 0 and log.is_file() else ""
    _fail(
        f"process {me} of {n} lost contact with {lost} of the run (it died, was stopped or the "
        f"network failed): {detail}\nEvery process stops; the last complete checkpoint in {run} "
        f"is intact. Restart all {n} processes with `gpt train --resume {run}`.{details}",
        stream,
    )
