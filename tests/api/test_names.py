"""Names come from one place: policy and priority names from `scheduler.registry`, job states
from `JobState`; the schemas, the CLI, the settings and the benchmarks take theirs from there,
no code lists every policy or every priority function by hand, and no code writes a state as a
bare string (which would skip the transition check)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from pydantic import ValidationError

from api.schemas import JobPublic, PolicyUpdate, SwitchPublic
from api.settings import Settings
from cli.main import build_parser
from scheduler.memory import JobState
from scheduler.registry import policy_names, priority_names

ROOT = Path(__file__).resolve().parents[2]
# `job.state = "failed"`, `job.state, job.reason = "failed", ...`: a state write as a literal.
LITERAL_STATE_WRITE = re.compile(r"\.state\s*(,[^=\n]*)?=\s*[\"']")
# Where the names are defined: the only files that may list them.
REGISTRY_FILES = {"scheduler/registry.py", "scheduler/priority.py"}


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
        Settings(policy={"policy": "nope"})


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


def _listed_names(node: ast.AST) -> set[str]:
    """The names a literal lists: a tuple, list or set of strings, a dict's string keys, or a
    comma-separated string (``"static,atp,esa"``, as a CLI default)."""
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        items: list[ast.expr | None] = list(node.elts)
    elif isinstance(node, ast.Dict):
        items = list(node.keys)
    elif isinstance(node, ast.Constant) and isinstance(node.value, str) and "," in node.value:
        return {part.strip() for part in node.value.split(",")}
    else:
        return set()
    return {i.value for i in items if isinstance(i, ast.Constant) and isinstance(i.value, str)}


def _hand_written_lists(paths: list[Path], root: Path = ROOT) -> list[str]:
    """``file:line`` of every literal listing all the registered policies or priorities."""
    everything = (set(policy_names()), set(priority_names()))
    return [
        f"{path.relative_to(root)}:{node.lineno}"
        for path in paths
        if str(path.relative_to(root)) not in REGISTRY_FILES
        for node in ast.walk(ast.parse(path.read_text(), str(path)))
        if any(names <= _listed_names(node) for names in everything)
    ]


def _library_files() -> list[Path]:
    return [
        *sorted((ROOT / "scheduler").rglob("*.py")),
        *sorted((ROOT / "api").rglob("*.py")),
        *sorted((ROOT / "bench" / "jct").rglob("*.py")),
        ROOT / "bench" / "simspeed.py",
        ROOT / "bench" / "api.py",
    ]


def test_no_code_lists_every_policy_or_priority_by_hand() -> None:
    assert _hand_written_lists(_library_files()) == []


def test_a_hand_written_list_of_the_names_is_found(tmp_path: Path) -> None:
    probes = {
        "choices.py": 'CHOICES = ("static", "atp", "esa")\n',
        "default.py": 'DEFAULT = "static,atp,esa"\n',
        "loop.py": 'for p in ["las", "fifo", "srtf", "static"]:\n    pass\n',
        "table.py": 'LABELS = {"static": 1, "atp": 2, "esa": 3}\n',
        "one.py": 'BASELINE = "static"\nPAIR = ("atp", "esa")\n',
    }
    for name, text in probes.items():
        (tmp_path / name).write_text(text)
    found = _hand_written_lists(sorted(tmp_path.glob("*.py")), tmp_path)
    assert found == ["choices.py:1", "default.py:1", "loop.py:1", "table.py:1"]
