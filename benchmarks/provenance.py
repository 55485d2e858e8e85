"""The line each benchmark report opens with: when, on what and from which commit, and how to rerun.

A benchmark script imports it after putting this folder on its path::

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from provenance import provenance
"""

from __future__ import annotations

import datetime
import os
import platform
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def provenance(command: str) -> str:
    """``Run of <date> at commit <id> on <machine>, JAX <version> (<backend>). Rerun: <command>.``

    Args:
        command: the command line that writes this report again, from the repository root.
    """
    import jax

    return (
        f"Run of {datetime.date.today().isoformat()} at commit {commit()} on {machine()}, "
        f"JAX {jax.__version__} ({jax.default_backend()}), Python {platform.python_version()}. "
        f"Rerun: `{command}`."
    )


def commit() -> str:
    """The checkout's commit, marked when the measured code had changes not yet committed."""
    try:
        out = subprocess.run(
            ["git", "-C", str(ROOT), "describe", "--always", "--dirty=+uncommitted-changes"],
            capture_output=True,
            text=True,
            check=True,
            timeout=30,
        )
    except (OSError, subprocess.SubprocessError):
        return "unknown (not a git checkout)"
    return out.stdout.strip()


def machine() -> str:
    """The CPU model, its core count and architecture, e.g. ``AMD EPYC, 2 cores (x86_64)``."""
    return f"{cpu_name()}, {os.cpu_count()} cores ({platform.machine()})"


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()
