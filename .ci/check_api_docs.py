"""Fail when a public name of a package has no entry in the built API reference.

    python .ci/check_api_docs.py SITE_DIR

The public names are the re-exports of each package's `__init__.py` (`from ._x import y as y`,
the project's one way to export); an entry is the anchor mkdocstrings gives a rendered object
(`id="lox.spool"`) on that package's page (`SITE_DIR/<import name>/index.html`). Run by
`nox -s docs` after `mkdocs build`, so an API page listing nothing fails the session.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXPORT = re.compile(r"^[ \t]*from \S+ import (\w+) as \1$", re.MULTILINE)


def public_names(init_source: str) -> list[str]:
    """The names an `__init__.py` re-exports.

    >>> public_names("from ._a import f as f\\nfrom ._b import g\\n    from . import compat as compat")
    ['f', 'compat']
    """
    return EXPORT.findall(init_source)


def missing_entries(module: str, names: list[str], html: str) -> list[str]:
    """The names with no rendered entry (`id="module.name"`) in a page's HTML.

    >>> missing_entries("lox", ["log", "tap"], '<h2 id="lox.log">log</h2>')
    ['tap']
    """
    return [n for n in names if f'id="{module}.{n}"' not in html]


def main(site: Path) -> int:
    problems = []
    inits = sorted(ROOT.glob("packages/*/src/*/__init__.py"))
    for init in inits:
        module = init.parent.name
        page = site / module / "index.html"
        if not page.is_file():
            problems.append(
                f"{module}: no API page {page} (add docs/{module}.md with `::: {module}`)"
            )
            continue
        names = public_names(init.read_text())
        for name in missing_entries(module, names, page.read_text()):
            problems.append(
                f"{module}.{name} is exported by {init.relative_to(ROOT)} but has no entry on "
                f"{page.relative_to(site)}: list it under `members:` of `::: {module}` in "
                f"docs/{module}.md"
            )
    for p in problems:
        print(f"api docs: {p}", file=sys.stderr)
    if not problems:
        print(f"api docs: every exported name of {len(inits)} packages has a rendered entry")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
