"""Fail unless the environment holds only core-primitives, JAX and JAX's own dependencies."""

import importlib.metadata as md
import re
import sys


def _name(req: str) -> str:
    return re.split(r"[\s;<>=!~\[(]", req, maxsplit=1)[0].lower().replace("_", "-")


def _closure(root: str) -> set[str]:
    seen, todo = set(), [root]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        dist = md.distribution(name)
        todo += [_name(r) for r in dist.requires or [] if "extra ==" not in r]
    return seen


installed = {d.metadata["Name"].lower().replace("_", "-") for d in md.distributions()}
allowed = _closure("jax") | {"core-primitives", "pip", "setuptools", "wheel"}
extra = sorted(installed - allowed)
if extra:
    sys.exit(f"core-primitives pulled packages beyond JAX's own dependencies: {extra}")
print(f"core-primitives installs only JAX and its dependencies: {sorted(installed)}")
