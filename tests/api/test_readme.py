"""The README works as printed: its settings table is `api.settings.Settings`, its links and
those of `docs/` lead somewhere, every ``inasched`` command the pages name exists, the
benchmark commands take the flags they are given, and every command of its ``sh`` blocks runs
against a real service (``inasched up``: SQLite, the embedded soft switch, loopback) and
prints what the README shows after it.

Sample output is written as ``#`` lines under the command; ``...`` stands for anything.
The test changes only what a fresh service makes different (its URL, its tenant token, the
join token each submission prints) and submits ``--gradient-bytes 65536`` in place of a
model, so that the README's jobs take seconds here."""

from __future__ import annotations

import argparse
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from api.settings import Settings, markdown_table, settings_rows
from tests.api.conftest import free_port

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
SH_BLOCK = re.compile(r"^```sh\n(.*?)^```", re.M | re.S)
LINK = re.compile(r"\]\(([^)\s]+)\)")
README_URL = "http://127.0.0.1:8000"
# A command's own limit: the README's jobs take seconds with the test's small gradients.
COMMAND_TIMEOUT_S = 180
UP_TIMEOUT_S = 60


def _readme() -> str:
    return README.read_text(encoding="utf-8")


def test_the_readme_settings_table_is_the_rendered_one() -> None:
    table = _readme().split("<!-- settings:begin -->\n", 1)[1].split("<!-- settings:end -->", 1)[0]
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


def test_the_validation_page_states_the_emu_validation_as_its_report_does() -> None:
    report = ROOT / "bench" / "results" / "emu-validation" / "validation.md"
    verdict = re.search(r"Validation (PASSED|FAILED)", report.read_text(encoding="utf-8"))
    assert verdict is not None, "validation.md states no verdict"
    text = " ".join((DOCS / "validation.md").read_text(encoding="utf-8").split())
    says_passes = "validation passes" in text
    says_fails = "validation fails" in text
    assert (says_passes, says_fails) == (verdict[1] == "PASSED", verdict[1] == "FAILED")


def test_the_readme_is_a_product_readme() -> None:
    text = _readme()
    assert len(text.splitlines()) <= 300
    assert "INASCHED_DATAPATH" not in text


@pytest.mark.parametrize("page", [README, *sorted(DOCS.glob("*.md"))], ids=lambda p: p.name)
def test_no_page_keeps_a_run_history(page: Path) -> None:
    """Pages state the current figure with its command: no dates, times or machine loads."""
    text = page.read_text(encoding="utf-8")
    assert re.search(r"\b20\d\d-\d\d-\d\d\b|\bUTC\b|load average", text) is None


def _anchors(page: Path) -> set[str]:
    headings = re.findall(r"^#+ (.+)$", page.read_text(encoding="utf-8"), re.M)
    return {re.sub(r"[^\w\- ]", "", h.lower()).replace(" ", "-") for h in headings}


@pytest.mark.parametrize("page", [README, *sorted(DOCS.glob("*.md"))], ids=lambda p: p.name)
def test_every_link_leads_to_a_file_and_heading_that_exist(page: Path) -> None:
    for target in LINK.findall(page.read_text(encoding="utf-8")):
        if target.startswith(("http://", "https://")):
            continue
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        assert linked.exists(), f"{page.name}: {target}"
        if anchor:
            assert anchor in _anchors(linked), f"{page.name}: {target}"


# Code in a page (a fenced block or a `span`), and an `inasched` command named in it.
CODE = re.compile(r"```.*?```|`[^`\n]+`", re.S)
COMMAND = re.compile(r"(?<![\w/.-])inasched ([a-z][a-z-]*)(?: ([a-z][a-z-]*))?")


def _named_commands() -> set[tuple[str, str | None]]:
    """``(command, action or None)`` of every ``inasched`` command in the README and docs/."""
    named: set[tuple[str, str | None]] = set()
    for page in [README, *sorted(DOCS.glob("*.md"))]:
        for code in CODE.findall(page.read_text(encoding="utf-8")):
            named |= {(m[1], m[2]) for m in COMMAND.finditer(code)}
    return named


def test_every_command_the_pages_name_exists() -> None:
    from cli.main import build_parser

    commands = _choices(build_parser())
    named = _named_commands()
    assert ("jobs", "list") in named and ("token", "create") in named
    for command, action in sorted(named, key=str):
        assert command in commands, f"inasched {command}"
        actions = _choices(commands[command])
        if actions and action is not None:  # a command with actions (jobs, token)
            assert action in actions, f"inasched {command} {action}"


def _choices(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _benchmark_commands() -> list[str]:
    section = _readme().split("\n## Benchmarks\n", 1)[1]
    return re.findall(r"^`((?:inasched bench|python -m bench)[^`]*)`$", section, re.M)


@pytest.mark.parametrize("command", _benchmark_commands())
def test_each_benchmark_command_takes_the_flags_it_is_given(command: str) -> None:
    words = shlex.split(command)
    # `inasched bench jct ...` or `python -m bench.MODULE ...`
    program = (
        [sys.executable, "-m", "cli", *words[1:3]]
        if words[0] == "inasched"
        else [
            sys.executable,
            *words[1:3],
        ]
    )
    shown = subprocess.run(
        [*program, "--help"], capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S
    )
    assert shown.returncode == 0, shown.stderr
    for flag in (w.split("=", 1)[0] for w in words if w.startswith("--")):
        assert re.search(rf"{re.escape(flag)}\b", shown.stdout), (command, flag)


@dataclass
class _Step:
    command: str
    expected: list[str] = field(default_factory=list)


def _steps(block: str) -> Iterator[_Step]:
    step: _Step | None = None
    for raw in block.splitlines():
        line = raw.strip()
        if not line:
            continue
        if line.startswith("#"):
            assert step is not None, f"sample output before any command: {raw!r}"
            step.expected.append(line.lstrip("#").strip())
            continue
        if step is not None:
            yield step
        step = _Step(re.sub(r"\s+#\s.*$", "", line))
    if step is not None:
        yield step


def _prints(output: str, expected: list[str]) -> bool:
    """Whether `output` has the `expected` lines in order (whitespace runs alike)."""
    lines = iter(" ".join(line.split()) for line in output.splitlines())
    for want in expected:
        pattern = re.compile(".*".join(re.escape(" ".join(p.split())) for p in want.split("...")))
        if not any(pattern.fullmatch(line) for line in lines):
            return False
    return True


@dataclass
class _Shell:
    """Runs the README's commands in order, as a user's shell would, in one directory."""

    cwd: Path
    env: dict[str, str]
    url: str
    tenant_token: str
    join_token: str = ""
    background: list[subprocess.Popen[str]] = field(default_factory=list)

    def as_run_here(self, command: str) -> str:
        command = command.replace(README_URL, self.url)
        command = command.replace("ina_t_...", self.tenant_token)
        command = command.replace("ina_j_...", self.join_token)
        if " jobs submit " in f" {command} ":
            command = re.sub(r"--model \S+", "--gradient-bytes 65536", command)
        return command

    def run(self, step: _Step) -> None:
        command = self.as_run_here(step.command)
        if command == "wait":
            self.wait()
            return
        if command.startswith("export "):
            for assignment in shlex.split(command)[1:]:
                name, _, value = assignment.partition("=")
                self.env[name] = value
            return
        if command.endswith("&"):
            self.background.append(self._start(command.rstrip("& ")))
            return
        done = self._start(command)
        out, err = done.communicate(timeout=COMMAND_TIMEOUT_S)
        assert done.returncode == 0, (step.command, out, err)
        expected = [line.replace(README_URL, self.url) for line in step.expected]
        assert _prints(out, expected), (step.command, out, expected)
        token = re.search(r"join token \(shown only now\): (\S+)", out)
        if token:
            self.join_token = token[1]

    def _start(self, command: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            command,
            shell=True,
            cwd=self.cwd,
            env=self.env,
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )

    def wait(self) -> None:
        running, self.background = self.background, []
        for process in running:
            out, err = process.communicate(timeout=COMMAND_TIMEOUT_S)
            assert process.returncode == 0, (process.args, out, err)


@pytest.fixture
def shell(tmp_path: Path) -> Iterator[_Shell]:
    """A shell in `tmp_path` whose ``inasched`` is this checkout's, beside a real ``inasched
    up`` whose data dir is the shell's ``./data`` (so the ``token`` commands reach its store)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shim = bin_dir / "inasched"
    shim.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -m cli "$@"\n')
    shim.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith("INASCHED_")}
    env["PATH"] = f"{bin_dir}{os.pathsep}{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    port = free_port(socket.SOCK_STREAM)
    up = subprocess.Popen(
        [sys.executable, "-m", "cli", "up", "--port", str(port)],
        cwd=tmp_path,
        env=env,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        token = _tenant_token(up)
        yield _Shell(cwd=tmp_path, env=env, url=f"http://127.0.0.1:{port}", tenant_token=token)
    finally:
        up.send_signal(signal.SIGINT)
        try:
            up.wait(timeout=UP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            up.kill()
            up.wait()


def _tenant_token(up: subprocess.Popen[str]) -> str:
    assert up.stdout is not None
    for line in up.stdout:
        found = re.search(r"tenant 'local' token: (\S+)", line)
        if found:
            return found[1]
    raise AssertionError(f"`inasched up` exited ({up.wait()}) without printing a token")


@pytest.mark.slow
def test_every_command_of_the_readme_works_as_printed(shell: _Shell) -> None:
    blocks = SH_BLOCK.findall(_readme())
    assert blocks, "the README has no sh blocks"
    for block in blocks:
        for step in _steps(block):
            shell.run(step)
        shell.wait()
