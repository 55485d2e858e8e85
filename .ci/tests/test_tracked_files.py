"""Rules over every file git tracks, so that they stay true as the repository grows.

- The repository speaks for itself: no ticket numbers ("issue 12", "the issue's case") that send a
  reader to a tracker they cannot open, and no words about how a change was made (work sessions,
  lent machines, measurement rounds, "rooms" for layers). Name the behaviour, the layer or the date.
- Tests, conftests, benchmarks and integration tests import no private module of the stack's
  packages except through ``gpt_models.internal``, the one declared home of what they may reach
  (see docs/decisions.md).

Reads the files as text with ``git ls-files`` (about a second); skipped where git is missing.
"""

from __future__ import annotations

import ast
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# Ticket references, and words for how the repository was made rather than what it does. Each
# pattern is one reason a reader would stop; the message says which matched.
TICKET = re.compile(r"\b[Ii]ssues?\s*#?\d+|\b[Ii]ssue's\b|\b[Tt]he issue\b|\b[Tt]ickets?\b")
MAKING = re.compile(
    r"\b(?:[Tt]his|[Ll]ast|[Pp]revious) session's|\b(?:[Nn]ext|[Ll]ast) session\b|\bsessions' "
    r"|gpu_session|\blent\b|\bdevice. tool|\bhelpers' |\b[Rr]ound [0-9]+\b"
    r"|\brooms\b|\b_rooms?\b|\b(?:coding|AI|LLM) agents?\b|\bworktrees?\b"
)
# Not prose: the lock file's package names and hashes, and this file's own patterns.
SKIPPED = {"uv.lock", ".ci/tests/test_tracked_files.py"}

PACKAGES = ("gpt_models", "lox", "blox", "paramspec", "core_primitives")
DECLARED = "gpt_models.internal"
# Where the code that uses the packages as a user would lives.
USERS = re.compile(r"^(packages/[^/]+/tests/|integration_tests/|benchmarks/|conftest\.py$)")


def _tracked() -> list[str]:
    try:
        out = subprocess.run(
            ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
        ).stdout
    except (OSError, subprocess.CalledProcessError) as err:
        pytest.skip(f"no git checkout to list the tracked files of ({err})")
    return [p for p in out.decode().split("\0") if p]


def _text(path: str) -> str | None:
    data = (ROOT / path).read_bytes()
    if b"\0" in data:
        return None  # binary: images, weights, arrays
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _hits(pattern: re.Pattern[str]) -> list[str]:
    hits = []
    for path in _tracked():
        text = None if path in SKIPPED else _text(path)
        for number, line in enumerate((text or "").splitlines(), start=1):
            for match in pattern.finditer(line):
                hits.append(f"{path}:{number}: {match.group(0)!r} in {line.strip()[:100]!r}")
    return hits


def test_no_ticket_numbers():
    hits = _hits(TICKET)
    assert not hits, "name the behaviour instead of the ticket:\n" + "\n".join(hits)


def test_no_words_about_how_the_repository_was_made():
    hits = _hits(MAKING)
    assert not hits, "say what the code or measurement is, not how it was made:\n" + "\n".join(hits)


def _private_imports(source: str) -> list[str]:
    """The private modules of the stack's packages that ``source`` imports."""
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
        for name in _private_imports((ROOT / path).read_text(encoding="utf-8"))
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
    assert rule.search(text)


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
    assert not TICKET.search(text) and not MAKING.search(text)


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
