"""The packages' sources are formatted by ruff, not bent to fit a line count, and no module passes
500 lines: ``# fmt: skip`` only
on module-level data tables (a preset, a mapping of names), at most 40 of them in all. Long lines
are ruff's own check (E501 on ``packages/*/src``)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MARK = "# fmt: skip"
MOST = 40


def _skips(path: Path) -> list[tuple[int, bool]]:
    """Each ``# fmt: skip`` line of ``path`` and whether it closes a module-level data table."""
    text = path.read_text(encoding="utf-8")
    tables: set[int] = set()
    for node in ast.parse(text).body:
        value = getattr(node, "value", None)
        literal = (ast.Dict, ast.Tuple, ast.List, ast.Set, ast.Call)
        if isinstance(node, ast.Assign | ast.AnnAssign) and isinstance(value, literal):
            tables |= set(range(node.lineno, (node.end_lineno or node.lineno) + 1))
    return [
        (n, n in tables)
        for n, line in enumerate(text.splitlines(), 1)
        if line.rstrip().endswith(MARK)
    ]


def test_fmt_skip_only_on_data_tables():
    found = {
        str(path.relative_to(ROOT)): _skips(path)
        for path in sorted(ROOT.glob("packages/*/src/**/*.py"))
    }
    elsewhere = [f"{p}:{n}" for p, marks in found.items() for n, table in marks if not table]
    total = sum(len(marks) for marks in found.values())
    print(f"{total} '# fmt: skip' in packages/*/src, all on data tables: {not elsewhere}")
    assert not elsewhere, f"'# fmt: skip' outside a module-level data table: {elsewhere}"
    assert total <= MOST, f"{total} '# fmt: skip' in packages/*/src, more than {MOST}"


def test_the_check_tells_a_table_from_code(tmp_path):
    module = tmp_path / "m.py"
    module.write_text(
        f"TABLE = {{'a': 1,\n         'b': 2}}  {MARK}\n\n"
        f"def f(x,\n      y):  {MARK}\n    return x\n"
    )
    assert _skips(module) == [(2, True), (5, False)]


LONGEST = 500


def test_no_source_module_over_500_lines():
    # A module past a few hundred lines holds more than one concern: split it along that seam.
    long = {
        str(path.relative_to(ROOT)): n
        for path in sorted(ROOT.glob("packages/*/src/**/*.py"))
        if (n := len(path.read_text(encoding="utf-8").splitlines())) > LONGEST
    }
    assert long == {}, f"modules over {LONGEST} lines (split each by concern): {long}"


WIDEST = 100


def test_no_line_over_100_columns_outside_data_tables():
    # ruff's E501 passes a long line that ends in a pragma (a type-ignore or a noqa comment):
    # those count here too. Only the `# fmt: skip` data tables may be wider.
    wide = [
        f"{path.relative_to(ROOT)}:{n} ({len(line)} columns)"
        for path in sorted(ROOT.glob("packages/*/src/**/*.py"))
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if len(line) > WIDEST and not line.rstrip().endswith(MARK)
    ]
    assert wide == [], f"lines over {WIDEST} columns (wrap them; a pragma is no exemption): {wide}"
