"""The generated reference pages (docs/gpt-models/reference/) say what the code says.

``docs/_ext/gpt_reference.py`` writes the CLI page from the ``gpt`` argument parser and the config
page from the schema; these tests fail when a committed page differs from what it would write now
(a flag, key, default, help text or preset changed without rewriting the page), and when a flag,
command or key has no help text to put there.
"""

from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path

import pytest

from gpt_models import PRESETS, Config
from gpt_models.internal import CONFIG_CHOICES, cli_parser, key_meanings

GENERATOR = Path(__file__).resolve().parents[3] / "docs" / "_ext" / "gpt_reference.py"
if not GENERATOR.is_file():  # an installed wheel's tests, away from the repository
    pytest.skip(f"no {GENERATOR} here", allow_module_level=True)


def _generator():
    spec = importlib.util.spec_from_file_location("gpt_reference", GENERATOR)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


gen = _generator()


def test_the_committed_reference_pages_are_what_the_code_gives():
    stale = [str(p.relative_to(gen.ROOT)) for p in gen.stale()]
    assert not stale, (
        f"{', '.join(stale)} differ from the parser / config schema: run "
        f"`python {gen.SCRIPT}` and commit the result"
    )


def test_every_command_and_flag_has_help_text():
    assert gen.missing_cli_help(cli_parser()) == [], "add help= to these arguments"


def test_every_config_key_has_a_meaning():
    meanings = key_meanings()
    missing = [key for key, meaning in meanings.items() if not meaning.strip()]
    assert not missing, f"add these keys to their section's `Attributes:` list: {missing}"


def test_a_flag_or_command_without_help_is_reported():
    parser = argparse.ArgumentParser(prog="gpt")
    parser.add_argument("--helped", help="has some")
    parser.add_argument("--bare")
    parser.add_argument("--hidden", help=argparse.SUPPRESS)  # hidden on purpose: not reported
    sub = parser.add_subparsers(dest="command")
    sub.add_parser("quiet").add_argument("path")
    assert gen.missing_cli_help(parser) == ["gpt --bare BARE", "gpt quiet", "gpt quiet PATH"]


def test_a_changed_page_is_reported_stale(tmp_path, monkeypatch):
    monkeypatch.setattr(gen, "PAGES", tmp_path)
    assert sorted(p.name for p in gen.stale()) == ["cli.md", "config.md"]  # none written yet
    assert gen.main([]) == 0
    assert gen.stale() == []
    page = tmp_path / "config.md"
    page.write_text(
        page.read_text().replace(
            "`model.d_model` | integer | `128`", "`model.d_model` | integer | `64`"
        )
    )
    assert gen.stale() == [page]
    assert gen.main(["--check"]) == 1


def test_the_config_page_lists_every_key_with_its_type_default_and_presets():
    page = gen.config_page(Config, dict(PRESETS), key_meanings(), CONFIG_CHOICES)
    rows = [line for line in page.splitlines() if line.startswith("| `")]
    assert [row.split("`")[1] for row in rows] == list(key_meanings())
    row = next(r for r in rows if r.startswith("| `model.mlp`"))
    choices = ", ".join(f"`{c}`" for c in CONFIG_CHOICES["model.mlp"])
    assert row.startswith(f'| `model.mlp` | one of {choices} | `"gelu"` | MLP')
    assert '`tiny`: `"relu2"`' in row and "`gpt2-small`" not in row  # gpt2 keeps the default


def test_the_cli_page_has_every_command_and_flag_with_its_default():
    page = gen.cli_page(cli_parser())
    for command in ("train", "prepare", "sample", "eval", "config show", "import", "export"):
        assert f"\n## gpt {command}\n" in page
    assert "- `--out DIR` (`runs`): parent folder of run folders" in page
    assert "- `--dry-run` (off): compile the train step" in page
    assert "- `--out DIR` (required): the store folder" in page
    assert "RUN/evals/&lt;task&gt;" in page  # prose escaped for Markdown
