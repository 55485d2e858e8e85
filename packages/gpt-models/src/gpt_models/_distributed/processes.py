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
