"""The gpt-models task pages (docs/gpt-models/) are findable and stay short.

Every page there is in the mkdocs nav and linked from the README's "what to read" list, so a
page added for a new feature cannot be left where only the site search finds it; and none grows
back into one long page (docs/gpt_models.md was one of 1,513 lines: no page over about 400).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
PAGES = ROOT / "docs" / "gpt-models"
if not (ROOT / "mkdocs.yml").is_file():  # an installed wheel's tests, away from the repository
    pytest.skip(f"no {ROOT / 'mkdocs.yml'} here", allow_module_level=True)

MAX_LINES = 420  # "about 400"


def _task_pages() -> list[str]:
    return sorted(str(p.relative_to(ROOT / "docs")) for p in PAGES.rglob("*.md"))


def test_every_task_page_is_in_the_nav():
    nav = set(
        re.findall(r":\s*(gpt-models/[\w/.-]+\.md)\s*$", (ROOT / "mkdocs.yml").read_text(), re.M)
    )
    assert [p for p in _task_pages() if p not in nav] == [], "add these pages to mkdocs.yml's nav"


def test_the_readme_links_every_task_page():
    links = set(
        re.findall(r"\]\(docs/(gpt-models/[\w/.-]+\.md)\)", (ROOT / "README.md").read_text())
    )
    missing = [p for p in _task_pages() if p not in links]
    assert missing == [], "link these pages from the README's list of what to read"


def test_no_gpt_models_page_is_over_about_400_lines():
    pages = [*PAGES.rglob("*.md"), ROOT / "docs" / "gpt_models.md"]
    long = {
        str(p.relative_to(ROOT)): n
        for p in pages
        if (n := len(p.read_text().splitlines())) > MAX_LINES
    }
    assert long == {}, f"split these pages (at most {MAX_LINES} lines each)"
