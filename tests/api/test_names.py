"""Names come from one place: policy and priority names from `scheduler.registry`, job states
from `JobState`; the schemas, the CLI and the settings take theirs from there, and no code
writes a state as a bare string (which would skip the transition check)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from pydantic import ValidationError

from api.cli import build_parser
from api.schemas import JobPublic, PolicyUpdate, SwitchPublic
from api.settings import Settings
from scheduler.memory import JobState
from scheduler.registry import policy_names, priority_names

ROOT = Path(__file__).resolve().parents[2]
# `job.state = "failed"`, `job.state, job.reason = "failed", ...`: a state write as a literal.
LITERAL_STATE_WRITE = re.compile(r"\.state\s*(,[^=\n]*)?=\s*[\"']")


def test_schemas_list_the_registered_names() -> None:
    update = PolicyUpdate.model_json_schema()["properties"]
    assert update["policy"]["enum"] == list(policy_names())
    assert update["priority"]["anyOf"][0]["enum"] == list(priority_names())
    states = JobPublic.model_json_schema()["$defs"]["JobState"]["enum"]
    assert states == [s.value for s in JobState]


def test_an_unknown_name_is_refused_with_the_known_ones() -> None:
    with pytest.raises(ValidationError, match="known: static, atp, esa"):
        PolicyUpdate.model_validate({"policy": "fifo"})
    with pytest.raises(ValidationError, match="known: fifo, las, srtf, static"):
        PolicyUpdate.model_validate({"policy": "esa", "priority": "sjf"})
    with pytest.raises(ValidationError):
        Settings(policy="nope")


def test_cli_choices_are_the_registered_names() -> None:
    parser = build_parser()
    args = parser.parse_args(["up", "--policy", "atp", "--priority", "las"])
    assert (args.policy, args.priority) == ("atp", "las")
    with pytest.raises(SystemExit):
        parser.parse_args(["up", "--policy", "fifo"])


def test_switch_view_is_typed() -> None:
    counters = SwitchPublic.model_json_schema()["properties"]["counters"]
    assert counters == {"$ref": "#/$defs/SwitchCountersPublic"}


def test_no_state_is_written_as_a_string_literal() -> None:
    offenders = [
        f"{path.relative_to(ROOT)}:{n}"
        for folder in ("api", "scheduler")
        for path in sorted((ROOT / folder).rglob("*.py"))
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if LITERAL_STATE_WRITE.search(line)
    ]
    assert offenders == []
