"""Rules over every file git tracks, so that they stay true as the repository grows.

- The repository speaks for itself: no ticket numbers ("issue 12", "the issue's case") that send a
  reader to a tracker they cannot open, and no words about how a change was made (work sessions,
  lent machines, measurement rounds, "rooms" for layers). Name the behaviour, the layer or the date.
- Tests, conftests, benchmarks and integration tests import no private module of the stack's
  packages except through ``gpt_models.internal``, the one declared home of what they may reach
  (see docs/decisions.md).

Reads the files git lists (``git ls-files``) as text, in well under a second; skipped where git is
missing.
"""

from __future__ import annotations

import ast
import functools
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# Ticket references, and words for how the repository was made rather than what it does: each
# rule is a word to look for (lower case) and the pattern that makes it a finding. Looking for the
# word first keeps the scan of every tracked file well under a second.
Rules = dict[str, re.Pattern[str]]
TICKET: Rules = {
    "issue": re.compile(r"\b[Ii]ssues?\s*#?\d+|\b[Ii]ssue's\b|\b[Tt]he issue\b"),
    "ticket": re.compile(r"\b[Tt]ickets?\b"),
}
MAKING: Rules = {
    "session": re.compile(
        r"\b(?:[Tt]his|[Ll]ast|[Pp]revious) session's|\b(?:[Nn]ext|[Ll]ast) session\b"
        r"|\bsessions' |gpu_session"
    ),
    "lent": re.compile(r"\blent\b"),
    "tool": re.compile(r"\bdevice. tool"),
    "helpers'": re.compile(r"\bhelpers' "),
    "round": re.compile(r"\b[Rr]ound [0-9]+\b"),
    "room": re.compile(r"\brooms\b|\b_rooms?\b"),
    "agent": re.compile(r"\b(?:coding|AI|LLM) agents?\b"),
    "worktree": re.compile(r"\bworktrees?\b"),
}
# Not prose: the lock file's package names and hashes, and this file's own patterns.
SKIPPED = {"uv.lock", ".ci/tests/test_tracked_files.py"}

PACKAGES = ("gpt_models", "lox", "blox", "paramspec", "core_primitives")
DECLARED = "gpt_models.internal"
# What any private import of theirs contains: `pkg._mod`, `pkg.sub._mod` or `from pkg import _mod`.
PRIVATE = re.compile(rf"\b(?:{'|'.join(PACKAGES)})\b[\w.]*(?:\._|\s+import\s+_)")
# Where the code that uses the packages as a user would lives.
USERS = re.compile(r"^(packages/[^/]+/tests/|integration_tests/|benchmarks/|conftest\.py$)")


@functools.cache
def _tracked() -> list[str]:
    try:
        out = subprocess.run(
            ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
        ).stdout
    except (OSError, subprocess.CalledProcessError) as err:
        pytest.skip(f"no git checkout to list the tracked files of ({err})")
    return [p for p in out.decode().split("\0") if p]


@functools.cache
def _text(path: str) -> str | None:
    data = (ROOT / path).read_bytes()
    if b"\0" in data:
        return None  # binary: images, weights, arrays
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _found(line: str, rules: Rules) -> list[str]:
    low = line.lower()
    return [m.group(0) for word, rx in rules.items() if word in low for m in rx.finditer(line)]


def _hits(rules: Rules) -> list[str]:
    hits = []
    for path in _tracked():
        text = "" if path in SKIPPED else (_text(path) or "")
        low = text.lower()
        if not any(word in low for word in rules):
            continue
        for number, line in enumerate(text.splitlines(), start=1):
            for found in _found(line, rules):
                hits.append(f"{path}:{number}: {found!r} in {line.strip()[:100]!r}")
    return hits


def test_no_ticket_numbers():
    hits = _hits(TICKET)
    assert not hits, "name the behaviour instead of the ticket:\n" + "\n".join(hits)


def test_no_words_about_how_the_repository_was_made():
    hits = _hits(MAKING)
    assert not hits, "say what the code or measurement is, not how it was made:\n" + "\n".join(hits)


def _private_imports(source: str) -> list[str]:
    """The private modules of the stack's packages that ``source`` imports."""
    if not PRIVATE.search(source):  # most files: no need to parse them
        return []
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found += [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and "import" in node.value
        ):
            found += _private_imports_in_text(node.value)  # source run by `python -c`
    return [
        name
        for name in found
        if name.split(".")[0] in PACKAGES
        and any(part.startswith("_") and not part.startswith("__") for part in name.split("."))
        and not name.startswith(DECLARED)
    ]


def _private_imports_in_text(text: str) -> list[str]:
    try:
        return _private_imports(text)
    except SyntaxError:
        return []


def test_tests_and_benchmarks_reach_internals_only_through_the_declared_module():
    reaches = [
        f"{path}: imports {name}"
        for path in _tracked()
        if USERS.match(path) and path.endswith(".py")
        for name in _private_imports(_text(path) or "")
    ]
    assert not reaches, f"take what tests may reach from {DECLARED}:\n" + "\n".join(reaches)


@pytest.mark.parametrize(
    ("text", "rule"),
    [
        ("Fixed (issue 13).", TICKET),
        ("Issues 24 and 28: the catalogue.", TICKET),
        ("as in the issue's measurement", TICKET),
        ("in this session's CI runs", MAKING),
        ("bash benchmarks/gpt/gpu_session.sh", MAKING),
        ("## Round 3 (afternoon)", MAKING),
        ("lent by a tool for 15 minutes", MAKING),
        ("a module imports its own room and the rooms below", MAKING),
    ],
)
def test_the_patterns_catch_what_they_are_for(text, rule):
    assert _found(text, rule)


@pytest.mark.parametrize(
    "text",
    [
        "every nox session runs pytest from the root",
        "every install reads the wheels this session just built",
        '@pytest.fixture(scope="session")',
        "python benchmarks/gpt/run.py --rounds 5",
        "the prompt needs room for one new token",
        "a known issue in XLA:CPU",
        "round(x, 2)",
    ],
)
def test_the_patterns_leave_ordinary_words_alone(text):
    assert not _found(text, TICKET) and not _found(text, MAKING)


def test_a_private_import_is_found_in_code_and_in_subprocess_source():
    source = (
        "import gpt_models._training.loop as loop\n"
        "from lox import _save\n"
        "from gpt_models.internal import training_loop\n"
        "CODE = 'from blox._linear import dense'\n"
    )
    assert _private_imports(source) == [
        "gpt_models._training.loop",
        "lox._save",
        "blox._linear",
        "blox._linear.dense",
    ]
