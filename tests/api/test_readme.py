"""The README's settings table names every setting of `api.settings.Settings`, with its
default, and nothing else; so adding a setting without documenting it fails here."""

from __future__ import annotations

import re
from pathlib import Path

from api.settings import Settings

README = Path(__file__).resolve().parents[2] / "README.md"
ROW = re.compile(r"^\| (`INASCHED_[A-Z0-9_]+`(?:, `INASCHED_[A-Z0-9_]+`)*) \| ([^|]*) \|", re.M)


def _settings_table() -> dict[str, str]:
    text = README.read_text(encoding="utf-8")
    section = text.split("\n## Settings\n", 1)[1].split("\n## ", 1)[0]
    table = section.split("\n\n| variable | read by |", 1)[0]
    rows: dict[str, str] = {}
    for names, default in ROW.findall(table):
        variables = re.findall(r"INASCHED_[A-Z0-9_]+", names)
        defaults = [d.strip().strip("`") for d in default.split(",")]
        for i, variable in enumerate(variables):
            rows[variable] = defaults[i] if len(defaults) == len(variables) else default.strip()
    return rows


def test_every_setting_is_in_the_readme_table_with_its_default() -> None:
    rows = _settings_table()
    fields = {f"INASCHED_{name.upper()}": info for name, info in Settings.model_fields.items()}
    assert set(rows) == set(fields)
    for variable, info in fields.items():
        if info.default is None or variable == "INASCHED_DATA_DIR":
            continue  # said in words ("embedded", "SQLite in the data dir") or a path
        documented, default = rows[variable].replace(",", ""), info.default
        if isinstance(default, int | float):
            assert float(documented) == default, (variable, documented, default)
        else:
            assert documented == str(default), (variable, documented, default)


def test_the_readme_states_the_emu_validation_as_its_report_does() -> None:
    report = README.parent / "bench" / "results" / "emu-validation" / "validation.md"
    verdict = re.search(r"Validation (PASSED|FAILED)", report.read_text(encoding="utf-8"))
    assert verdict is not None, "validation.md states no verdict"
    text = " ".join(README.read_text(encoding="utf-8").split())
    gaps = text.split("## Known gaps", 1)[1]
    says_passes = "validation passes" in text and "validation passes only" in gaps
    says_fails = "do not yet agree" in text or "validation fails" in text
    assert (says_passes, says_fails) == (verdict[1] == "PASSED", verdict[1] == "FAILED")
