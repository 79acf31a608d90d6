"""Code states what is: a module docstring gives mechanism and invariants in at most
`MAX_MODULE_DOCSTRING_LINES` lines, and no comment or docstring carries a date, a time of day
in UTC or a commit id (history belongs in commit messages, figures in ``docs/``)."""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("api", "cli", "scheduler", "p4/p4ctl", "workers", "bench", "dashboards", "tests")
# Compiled sources, the P4 program and the dashboard's scripts have no docstrings; a date in
# them is found anywhere in the file.
OTHER_SOURCES = ("p4/p4ctl/csrc", "p4/include", "dashboards/static")
MAX_MODULE_DOCSTRING_LINES = 15
DATE = re.compile(r"\b20\d\d-[01]\d-[0-3]\d\b|\b[0-2]\d:[0-5]\d(?::[0-5]\d)? UTC\b")
# A hex word of 7 to 40 digits with at least one letter and one figure: an abbreviated or full
# commit id.
COMMIT = re.compile(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}\b")


def _python_files() -> list[Path]:
    return sorted(p for package in PACKAGES for p in (ROOT / package).rglob("*.py"))


def _prose(source: str) -> list[tuple[int, str]]:
    """The comments and docstrings of `source`, each with its line."""
    found = [
        (token.start[0], token.string)
        for token in tokenize.generate_tokens(io.StringIO(source).readline)
        if token.type == tokenize.COMMENT
    ]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Module | ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            docstring = ast.get_docstring(node, clean=False)
            if docstring:
                found.append((getattr(node, "lineno", 1), docstring))
    return found


def _name(path: Path) -> str:
    return str(path.relative_to(ROOT))


@pytest.mark.parametrize("path", _python_files(), ids=_name)
def test_module_docstring_is_short(path: Path) -> None:
    docstring = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")), clean=False)
    lines = len(docstring.strip().splitlines()) if docstring else 0
    assert lines <= MAX_MODULE_DOCSTRING_LINES, f"{_name(path)}: module docstring of {lines} lines"


def test_no_comment_or_docstring_carries_a_date_or_a_commit_id() -> None:
    found = [
        f"{_name(path)}:{line}: {match.group()}"
        for path in _python_files()
        for line, text in _prose(path.read_text(encoding="utf-8"))
        for pattern in (DATE, COMMIT)
        for match in pattern.finditer(text)
    ]
    assert found == []


def test_no_other_source_carries_a_date() -> None:
    found = [
        f"{_name(path)}: {match.group()}"
        for folder in OTHER_SOURCES
        for path in sorted((ROOT / folder).rglob("*"))
        if path.is_file() and path.suffix in {".c", ".h", ".p4", ".js", ".html", ".css"}
        for match in DATE.finditer(path.read_text(encoding="utf-8", errors="replace"))
    ]
    assert found == []
