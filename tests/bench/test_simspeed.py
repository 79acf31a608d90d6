"""bench.simspeed --validate-only: the light and the contended families side by side."""

from __future__ import annotations

import pytest

from bench.simspeed import main


def test_validate_only_prints_light_and_new_families_side_by_side(
    capsys: pytest.CaptureFixture[str],
) -> None:
    main(["--validate-only", "--cases", "1", "--families", "light,ps-0.6"])
    out = capsys.readouterr().out
    rows = [line.split() for line in out.splitlines()]
    table = [r for r in rows if r and r[0] in ("light", "ps-0.6") and len(r) == 6]
    assert {(r[0], r[1]) for r in table} == {
        (f, p) for f in ("light", "ps-0.6") for p in ("static", "atp", "esa")
    }
    # Every row states whether its family is within the bound.
    assert all(r[-1] in ("yes", "NO") for r in table)
    assert "fragment-level vs aggregate simulator" in out
