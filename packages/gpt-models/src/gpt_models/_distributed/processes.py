"""Multi-process bookkeeping shared by training, evaluation and run folders.

Every process runs the same program on its own rows of the batch; only process 0 writes files and
prints, and replicated results are read from this process's own copy.
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np


def is_primary() -> bool:
    """Whether this process writes the run folder and the console output (process 0)."""
    return jax.process_index() == 0


def host_value(tree: Any) -> Any:
    """Replicated arrays as numpy, read from this process's copy (works across processes too)."""
    return jax.tree.map(lambda x: np.asarray(x.addressable_data(0)), tree)


_JOB: list[str] = []  # set once this process has joined a multi-process job


def note_job(coordinator_address: str, num_processes: int) -> None:
    """Record the job this process joined (``startup.start``), for :func:`job_identity`."""
    _JOB[:] = [f"{coordinator_address} ({num_processes} processes)"]


def job_identity() -> str | None:
    """The same text in every process of one multi-process job (its coordinator and size), and a
    different one in any other job running at the same time; ``None`` for a single process."""
    return _JOB[0] if _JOB and jax.process_count() > 1 else None
