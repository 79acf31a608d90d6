"""The README's settings table is the one `api.settings.markdown_table` renders from the
settings object, so adding a setting without documenting it fails here."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from api.settings import Settings, markdown_table, settings_rows

README = Path(__file__).resolve().parents[2] / "README.md"
BEGIN, END = "<!-- settings:begin -->\n", "<!-- settings:end -->"


def test_the_readme_settings_table_is_the_rendered_one() -> None:
    text = README.read_text(encoding="utf-8")
    table = text.split(BEGIN, 1)[1].split(END, 1)[0]
    assert table == markdown_table(), "regenerate it: python -m api.settings --markdown"


def test_every_variable_of_the_table_sets_its_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, variable, default, _ in settings_rows():
        if isinstance(default, bool) or not isinstance(default, int):
            continue  # one numeric setting at a time shows the name reaches its field
        wanted = default * 2 if default else 1  # within every field's range (64 lanes: 128)
        monkeypatch.setenv(variable, str(wanted))
        section, _, field = name.rpartition(".")
        settings = Settings()
        value = getattr(getattr(settings, section), field) if section else getattr(settings, name)
        monkeypatch.delenv(variable)
        assert value == wanted, (variable, value)


def test_the_readme_states_the_emu_validation_as_its_report_does() -> None:
    report = README.parent / "bench" / "results" / "emu-validation" / "validation.md"
    verdict = re.search(r"Validation (PASSED|FAILED)", report.read_text(encoding="utf-8"))
    assert verdict is not None, "validation.md states no verdict"
    text = " ".join(README.read_text(encoding="utf-8").split())
    gaps = text.split("## Known gaps", 1)[1]
    says_passes = "validation passes" in text and "validation passes only" in gaps
    says_fails = "do not yet agree" in text or "validation fails" in text
    assert (says_passes, says_fails) == (verdict[1] == "PASSED", verdict[1] == "FAILED")
