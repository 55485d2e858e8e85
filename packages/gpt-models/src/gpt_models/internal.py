"""The internals that gpt-models' own tests and benchmarks reach, declared in one place.

Nothing here is public API: any name may change or go away in any release, without notice and
without a changelog entry. Code outside this repository should use ``gpt_models``'s public names.
Tests and benchmarks take internals from here and nowhere else (a repository test fails on any
other import of a private module), so a refactor that moves one of these changes this list, not
the tests.

Modules, for a test that patches a name where the code looks it up:

- ``training_plans``: where ``plan_run`` finds ``plan_step`` (the pre-flight that compiles the step
  the loop then runs). Tests patch it to fail a step on demand.
- ``training_loop``: where ``run_training`` finds ``run_lock`` and ``plot_losses``. Tests patch them
  to plant a file just before the lock is taken, and to send a signal right after the loss plot.
- ``runs_lock``: the run folder's lock (``_runs/lock.py``); ``check_joinable``, what a process > 0
  of a multi-process job checks before it joins process 0's run, is tested without a second
  process (a single process's job identity is ``None``).
- ``launcher``: the ``gpt`` program's start (``_cli/launcher.py``): the CPU restart's pure
  decision and its clean-up, tested without a subprocess, and its ``os``/``platform`` lookups,
  which a test patches to make a restart fail.
- ``data_prepare``: where ``prepare`` finds ``_CHUNK_BYTES`` (text per chunk) and
  ``write_json_atomic`` (its resume state and manifest). Tests patch them to stop a prepare
  between a chunk's ids and that chunk's state, as a ``kill -9`` could.

Functions: ``PendingDigest``, ``read_digest`` and ``verify_digest``, a checkpoint's per-array
digest, which a benchmark times apart from the checkpoint write; ``preference_sums``, the
preference losses and reward metrics from the answers' log-probs, which the TRL parity test
compares with TRL's own loss function.

The sources of the generated reference pages (``docs/_ext/gpt_reference.py``) and of their drift
test: ``cli_parser()``, the ``gpt`` command's argument parser; ``key_meanings()``, each config key's
meaning as ``gpt config show`` prints it; ``CONFIG_CHOICES``, the values a string key accepts.
"""

from ._cli import launcher
from ._cli.main import _parser as cli_parser
from ._config.schema import CHOICES as CONFIG_CHOICES
from ._config.toml import key_meanings
from ._data import prepare as data_prepare
from ._model.preference import preference_sums
from ._runs import lock as runs_lock
from ._runs.digest import PendingDigest, read_digest
from ._runs.digest import verify as verify_digest
from ._training import loop as training_loop
from ._training import plans as training_plans

__all__ = [
    "CONFIG_CHOICES",
    "PendingDigest",
    "cli_parser",
    "data_prepare",
    "key_meanings",
    "launcher",
    "preference_sums",
    "read_digest",
    "runs_lock",
    "training_loop",
    "training_plans",
    "verify_digest",
]
