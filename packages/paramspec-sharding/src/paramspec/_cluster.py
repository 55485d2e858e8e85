"""Which cluster started this process: SLURM, Open MPI, a TPU pod or Kubernetes, found by the same
detection ``jax.distributed.initialize()`` runs, but read before anything waits for a peer, so a
program can say what it found (and refuse an incomplete SLURM environment in one line)."""

from __future__ import annotations

import os
from typing import Any, NamedTuple

from core_primitives import compat

CLUSTER_KINDS = ("auto", "none", "slurm", "mpi", "k8s", "tpu")

# What each scheduler sets in every task; named in messages about a scheduler that was not found.
CLUSTER_VARIABLES = {
    "slurm": (
        "SLURM_JOB_ID",
        "SLURM_STEP_NODELIST",
        "SLURM_NTASKS",
        "SLURM_PROCID",
        "SLURM_LOCALID",
    ),
    "mpi": ("OMPI_MCA_orte_hnp_uri", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK"),
    "tpu": ("TPU_WORKER_ID", "TPU_WORKER_HOSTNAMES"),
    "k8s": ("KUBERNETES_SERVICE_HOST", "JOB_COMPLETION_INDEX"),
}

_OMPI_URI = "OMPI_MCA_orte_hnp_uri"  # lower case as Open MPI spells it

_EXTRA = {"k8s": " as an indexed Job, with the kubernetes package (pip install 'jax[k8s]')"}

_NAMES = {"slurm": "SLURM", "mpi": "Open MPI", "tpu": "TPU pod", "k8s": "Kubernetes"}


class Cluster(NamedTuple):
    """A cluster found by :func:`detect_cluster`: what ``jax.distributed`` will be started with."""

    kind: str
    coordinator_address: str
    num_processes: int
    process_id: int
    job: str

    def describe(self) -> str:
        """``process 0 of 2 (SLURM job 4242, coordinator node001:61586)``."""
        return (
            f"process {self.process_id} of {self.num_processes} ({self.job}, coordinator "
            f"{self.coordinator_address})"
        )


def detect_cluster(kind: str = "auto", *, timeout_s: int = 300) -> Cluster | None:
    """The cluster this process runs in, as ``jax.distributed.initialize()`` would detect it.

    ``kind`` is ``"auto"`` (try Open MPI, SLURM, TPU pods and Kubernetes, in JAX's order),
    ``"none"`` (never detect), or one of ``"slurm"``, ``"mpi"``, ``"k8s"``, ``"tpu"`` (that one
    only, and it must be there). ``JAX_COORDINATOR_PORT`` overrides the port the scheduler's
    variables imply, as it does for JAX. Nothing waits for a peer, except on Kubernetes and TPU
    pods, where finding the coordinator asks the cluster's API (up to ``timeout_s`` seconds).

    Returns:
        The :class:`Cluster`, or ``None`` when no cluster was found (``auto``) or asked (``none``).

    Raises:
        ValueError: ``kind`` is not one of the kinds above; the SLURM variables of a
            multi-task job are incomplete or not numbers; the cluster named by ``kind`` is not
            there; the detected process id is out of range.

    Example:
        >>> import paramspec as ps
        >>> env = {"SLURM_JOB_ID": "4242", "SLURM_STEP_NODELIST": "node[001-002]",
        ...        "SLURM_NTASKS": "2", "SLURM_PROCID": "1", "SLURM_LOCALID": "0"}
        >>> import os; os.environ.update(env)  # as srun sets them in each task
        >>> ps.detect_cluster().describe()
        'process 1 of 2 (SLURM job 4242, coordinator node001:61586)'
        >>> for var in env: del os.environ[var]
    """
    if kind not in CLUSTER_KINDS:
        raise ValueError(
            f"detect_cluster(kind={kind!r}): expected one of {', '.join(CLUSTER_KINDS)} ('auto' "
            "tries every scheduler JAX knows, 'none' runs one process)."
        )
    if kind == "none":
        return None
    slurm_job = kind in ("auto", "slurm") and _check_slurm(strict=kind == "slurm")
    environments = compat.cluster_environments()
    for name in environments if kind == "auto" else (kind,):
        if kind == "auto" and name == "k8s" and "JOB_COMPLETION_INDEX" not in os.environ:
            continue  # every pod (a notebook's too) is in Kubernetes; an indexed Job's is a job
        if name == "slurm" and not slurm_job:
            continue  # a one-task allocation (JAX 0.7 takes SLURM_JOB_ID alone for a job)
        for env in environments[name]:
            if env.is_env_present():
                return _read(name, env, timeout_s)
    if kind != "auto":
        raise ValueError(
            f"No {_NAMES[kind]} job found in this process's environment ({_NAMES[kind]} sets "
            f"{', '.join(CLUSTER_VARIABLES[kind])} in each process it starts, and they are not "
            f"all set). Start the program through {_NAMES[kind]}{_EXTRA.get(kind, '')}."
        )
    return None


def _read(kind: str, env: Any, timeout_s: int) -> Cluster:
    port = os.environ.get("JAX_COORDINATOR_PORT") or None
    try:
        address = compat.coordinator_address(env, timeout_s, port)
        count = int(env.get_process_count())
        index = int(env.get_process_id())
    except (RuntimeError, KeyError, ValueError, OSError) as err:  # e.g. a pod JAX may not read
        detail = " ".join(str(err).split())[:300]
        raise ValueError(
            f"Found a {_NAMES[kind]} job, but JAX could not read its coordinator and process "
            f"count: {type(err).__name__}: {detail} Fix the job's set-up, or set "
            "JAX_COORDINATOR_ADDRESS, JAX_NUM_PROCESSES and "
            "JAX_PROCESS_ID yourself."
        ) from err
    if not 0 <= index < count:
        raise ValueError(
            f"{_NAMES[kind]} says this is process {index} of {count}: process ids run from 0 to "
            f"{count - 1}. Check the scheduler's variables ({', '.join(CLUSTER_VARIABLES[kind])})."
        )
    return Cluster(kind, address, count, index, _job(kind, index))


def _job(kind: str, index: int) -> str:
    if kind == "slurm":
        return f"SLURM job {os.environ['SLURM_JOB_ID']}"
    if kind == "mpi":
        return f"Open MPI job {os.environ.get(_OMPI_URI, '?').split(';')[0]}"
    if kind == "k8s":
        return f"Kubernetes pod {os.environ.get('HOSTNAME', '?')}"
    return f"TPU pod worker {index}"


def _check_slurm(*, strict: bool) -> bool:
    """Whether every SLURM variable of a job's task is set; refuse a SLURM environment that names
    a multi-task job but cannot start it (any incomplete one when ``strict``)."""
    names = CLUSTER_VARIABLES["slurm"]
    given = {v: os.environ[v] for v in names if v in os.environ}
    for var in ("SLURM_NTASKS", "SLURM_PROCID", "SLURM_LOCALID"):
        if var in given and not given[var].strip().isdigit():
            raise ValueError(
                f"SLURM variable {var}={given[var]!r} is not a whole number; srun sets it to the "
                "task's number. Start the tasks with srun, or unset it."
            )
    missing = [v for v in names if v not in given]
    if not missing or not given:
        return not missing
    tasks = int(given.get("SLURM_NTASKS", "1"))
    if strict or tasks > 1 or given.get("SLURM_PROCID", "0") != "0":
        shown = ", ".join(f"{v}={given[v]}" for v in given) or "none of them"
        raise ValueError(
            f"Incomplete SLURM environment: {', '.join(missing)} not set (got {shown}); starting "
            f"a job's tasks together needs all of {', '.join(names)}. Start each task with srun "
            "(`srun python train.py` inside sbatch), or set JAX_COORDINATOR_ADDRESS, "
            "JAX_NUM_PROCESSES and JAX_PROCESS_ID yourself."
        )
    return False
