"""Fail unless every direct requirement was installed at exactly its declared lower bound.

Run by `nox -s floors` after `uv pip install --resolution lowest-direct`: uv then picks the lowest
version of each direct requirement that resolves *with everything else*. A floor nothing can reach
(say `numpy>=1.26` while every supported JAX needs numpy 2) resolves silently to a higher version;
this check turns that into a failure that says which floor to raise, so declared floors stay true.

    python .ci/check_floors.py REQUIREMENT [REQUIREMENT ...]

`floor_problems` is the testable core (see `.ci/tests/test_check_floors.py`).
"""

from __future__ import annotations

import importlib.metadata as md
import sys
from collections.abc import Iterable, Mapping

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

LOWER_BOUND_OPERATORS = (">=", "==", "~=", "===")


def lower_bound(req: Requirement) -> Version | None:
    """The declared floor of a requirement (`>=`, `==`, `~=`), or None when it has none."""
    floors = [Version(s.version) for s in req.specifier if s.operator in LOWER_BOUND_OPERATORS]
    return max(floors) if floors else None


def floor_problems(requirements: Iterable[str], installed: Mapping[str, str]) -> list[str]:
    """One message per requirement not installed at its floor (or declaring no floor).

    `installed` maps canonical distribution names to installed versions.

    >>> floor_problems(["numpy>=1.26"], {"numpy": "2.0.0"})[0].split(":")[0]
    'numpy>=1.26 resolved to 2.0.0, not its floor 1.26'
    >>> floor_problems(["numpy>=2.0", "jax>=0.7.2"], {"numpy": "2.0.0", "jax": "0.7.2"})
    []
    """
    problems = []
    for text in requirements:
        req = Requirement(text)
        name = canonicalize_name(req.name)
        floor = lower_bound(req)
        got = installed.get(name)
        if floor is None:
            problems.append(f"{text} declares no lower bound: add one (e.g. `{req.name}>=X`)")
        elif got is None:
            problems.append(f"{text} is not installed: the floors session installs it, so check it")
        elif Version(got) != floor:
            problems.append(
                f"{text} resolved to {got}, not its floor {floor}: no environment with "
                f"{req.name}=={floor} satisfies the other requirements at their floors. "
                f"Raise the floor to the lowest version that works (at most {got})."
            )
    return problems


def main(argv: list[str]) -> int:
    installed = {canonicalize_name(d.metadata["Name"]): d.version for d in md.distributions()}
    problems = floor_problems(argv, installed)
    for p in problems:
        print(f"floors: {p}", file=sys.stderr)
    if not problems:
        print(f"floors: all {len(argv)} requirements installed at their declared floors")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
