"""The ``inasched`` command line: help, global options, jobs over HTTP, errors and exit codes."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from api.settings import Settings
from cli.jobs import ExitCode, jobs_table
from cli.main import build_parser, main
from cli.tokens import UP_TOKEN_FILE, up_token
from tests.api.conftest import Api

UNREACHABLE = "http://127.0.0.1:9"  # the discard port: nothing listens there


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _stderr_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("inasched: "), err
    return err


def test_top_level_help_is_plain_text_with_commands_and_exit_codes(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert "``" not in out and ":func:" not in out
    for command in ("up", "demo", "jobs", "token", "switch", "ps", "worker", "bench"):
        assert f"\n    {command} " in out, command
    for code in ExitCode:
        assert f"\n  {int(code)}  " in out
    assert "INASCHED_URL" in out and "INASCHED_TOKEN" in out


def test_every_jobs_token_and_submit_flag_has_help() -> None:
    commands = _subparsers(build_parser())
    parsers = [commands["jobs"], commands["token"]]
    parsers += _subparsers(commands["jobs"]).values()
    parsers += _subparsers(commands["token"]).values()
    assert len(parsers) == 9  # jobs: list, submit, limits, cancel; token: create, list, revoke
    for parser in parsers:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                assert all(a.help for a in action._choices_actions), parser.prog
            else:
                assert action.help and action.help != argparse.SUPPRESS, (parser.prog, action)


def test_token_create_prints_a_token_that_opens_the_api(
    api: Api, settings: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["token", "create", "carol", "--data-dir", str(settings.data_dir)]
    assert main([*argv, "--database-url", settings.resolved_database_url]) == 0
    token = capsys.readouterr().out.strip()
    assert api.client.get("/jobs", headers=api.auth(token)).status_code == 200


def test_jobs_submit_list_cancel_over_http(api: Api, capsys: pytest.CaptureFixture[str]) -> None:
    base = ["jobs", "--service", str(api.client.base_url), "--token", api.token]
    assert main([*base, "submit", "cli-job", "--workers", "2", "--iterations", "5",
                 "--gradient-bytes", "1024", "--json"]) == 0  # fmt: skip
    created = json.loads(capsys.readouterr().out)
    assert created["name"] == "cli-job" and created["join_token"]
    assert main([*base, "list"]) == 0
    listing = capsys.readouterr().out.splitlines()
    assert listing[0].split() == ["ID", "NAME", "STATE", "POLICY", "PRIO", "WORKERS",
                                  "PROGRESS", "JCT_S", "WHY"]  # fmt: skip
    assert listing[1].split()[:2] == [str(created["id"]), "cli-job"]
    assert listing[-1] == "1 of 1 jobs"
    assert main([*base, "list", "--json"]) == 0
    body = json.loads(capsys.readouterr().out)
    assert body["total"] == 1 and body["items"][0]["id"] == created["id"]
    assert main([*base, "cancel", str(created["id"])]) == 0
    assert capsys.readouterr().out.strip() == f"job {created['id']} 'cli-job': cancelled"


def test_submit_prints_the_join_token_and_the_worker_command(
    api: Api, capsys: pytest.CaptureFixture[str]
) -> None:
    url = str(api.client.base_url).rstrip("/")
    argv = ["jobs", "submit", "mine", "--workers", "3", "--iterations", "4", "--model", "vgg-16"]
    assert main([*argv, "--service", url, "--token", api.token]) == 0
    out = capsys.readouterr().out
    job = api.client.get("/jobs", headers=api.auth()).json()["items"][0]
    assert job["model"] == "VGG16" and job["n_workers"] == 3
    command = next(line.strip() for line in out.splitlines() if "inasched worker" in line)
    words = command.split()
    assert words[words.index("--job") + 1] == str(job["id"])
    assert words[words.index("--service") + 1] == url
    token = words[words.index("--token") + 1]
    assert f"join token (shown only now): {token}" in out
    joined = api.client.post(
        f"/jobs/{job['id']}/workers",
        json={"data_host": "127.0.0.1", "data_port": 40001},
        headers=api.auth(token),
    )
    assert joined.status_code == 201, joined.text


@pytest.mark.parametrize(
    "order",
    [
        ["--token", "T", "--service", "URL", "jobs", "list"],
        ["jobs", "--token", "T", "--service", "URL", "list"],
        ["jobs", "list", "--token", "T", "--service", "URL"],
        ["--service", "URL", "jobs", "list", "--token", "T"],
        ["--url=URL", "jobs", "list", "--token=T"],
    ],
)
def test_service_and_token_work_in_any_position(
    api: Api, order: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    api.submit(name="seen")
    url = str(api.client.base_url)
    argv = [w.replace("URL", url) if "URL" in w else w for w in order]
    argv = [w.replace("T", api.token) if w in ("T", "--token=T") else w for w in argv]
    assert main(argv) == 0
    assert "seen" in capsys.readouterr().out


def test_service_and_token_come_from_the_environment(
    api: Api, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    api.submit(name="from-env")
    monkeypatch.setenv("INASCHED_URL", str(api.client.base_url))
    monkeypatch.setenv("INASCHED_TOKEN", api.token)
    assert main(["jobs", "list"]) == 0
    assert "from-env" in capsys.readouterr().out
    monkeypatch.setenv("INASCHED_TOKEN", "ina_t_wrong")
    # A flag beats the environment.
    assert main(["jobs", "list", "--token", api.token]) == 0
    assert "from-env" in capsys.readouterr().out


def test_a_refused_request_is_one_readable_line_and_exit_1(
    api: Api, capsys: pytest.CaptureFixture[str]
) -> None:
    job = api.submit()
    base = ["--service", str(api.client.base_url), "--token", api.token, "jobs"]
    assert main([*base, "cancel", str(job["id"])]) == 0
    capsys.readouterr()
    assert main([*base, "cancel", str(job["id"])]) == ExitCode.REFUSED
    line = _stderr_line(capsys)
    assert "{" not in line and "(HTTP 409)" in line
    assert main([*base, "cancel", "999999"]) == ExitCode.REFUSED
    assert "job 999999 does not exist (HTTP 404)" in _stderr_line(capsys)


def test_a_validation_error_names_the_field(api: Api, capsys: pytest.CaptureFixture[str]) -> None:
    base = ["--service", str(api.client.base_url), "--token", api.token, "jobs", "submit"]
    assert main([*base, "x", "--workers", "99", "--iterations", "1",
                 "--gradient-bytes", "64"]) == ExitCode.REFUSED  # fmt: skip
    line = _stderr_line(capsys)
    assert "n_workers:" in line and "(HTTP 422)" in line and "[" not in line


def test_a_refused_token_exits_4(api: Api, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["jobs", "list", "--service", str(api.client.base_url), "--token", "ina_t_nobody"]
    assert main(argv) == ExitCode.UNAUTHORIZED
    assert "unknown API token" in _stderr_line(capsys)


def test_no_token_exits_4_in_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("INASCHED_TOKEN", raising=False)
    assert main(["jobs", "--service", UNREACHABLE, "list"]) == ExitCode.UNAUTHORIZED
    assert "INASCHED_TOKEN" in _stderr_line(capsys)


def test_an_unreachable_service_exits_3(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["jobs", "list", "--service", UNREACHABLE, "--token", "t"]) == 3
    assert "cannot reach the service at http://127.0.0.1:9" in _stderr_line(capsys)


@pytest.mark.parametrize(("given", "stored"), [("bert", "BERT-large"), ("resnet50", "ResNet-50")])
def test_submit_matches_model_names_ignoring_case_and_punctuation(
    api: Api, given: str, stored: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["jobs", "submit", "m", "--workers", "2", "--iterations", "1", "--model", given]
    assert main([*argv, "--service", str(api.client.base_url), "--token", api.token]) == 0
    assert api.client.get("/jobs", headers=api.auth()).json()["items"][0]["model"] == stored


def test_the_rest_api_matches_model_names_as_the_cli_does(api: Api) -> None:
    body = {"name": "rest", "n_workers": 2, "iterations": 1, "model": "resnet50"}
    created = api.client.post("/jobs", json=body, headers=api.auth())
    assert created.status_code == 201, created.text
    assert created.json()["gradient_bytes"] > 10**7
    bad = api.client.post("/jobs", json={**body, "model": "gpt"}, headers=api.auth())
    assert bad.status_code == 422 and "ResNet-50" in bad.text


def test_an_unknown_model_lists_the_known_ones_before_any_request(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["jobs", "submit", "m", "--workers", "2", "--iterations", "1", "--model", "resnet"]
    assert main([*argv, "--service", UNREACHABLE, "--token", "t"]) == ExitCode.USAGE
    line = _stderr_line(capsys)
    assert "ambiguous" in line and "known models: AlexNet, BERT-large" in line


def test_submit_window_reaches_the_workers(api: Api, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["jobs", "submit", "w", "--workers", "2", "--iterations", "1", "--gradient-bytes",
            "4096", "--window", "7", "--json"]  # fmt: skip
    assert main([*argv, "--service", str(api.client.base_url), "--token", api.token]) == 0
    job = json.loads(capsys.readouterr().out)
    joined = api.client.post(
        f"/jobs/{job['id']}/workers",
        json={"data_host": "127.0.0.1", "data_port": 40001},
        headers=api.auth(str(job["join_token"])),
    )
    assert joined.status_code == 201 and joined.json()["window"] == 7


def test_jobs_table_aligns_columns_and_shows_why() -> None:
    base = {"policy": "esa", "priority_level": 3, "n_workers": 2, "iterations": 10,
            "iterations_done": 0, "jct_s": None, "reason": None, "queue_reason": None}  # fmt: skip
    rows = [
        {**base, "id": 12, "name": "a", "state": "failed", "reason": "workers went silent"},
        {
            **base,
            "id": 3,
            "name": "longer-name",
            "state": "queued",
            "queue_reason": {"kind": "partition", "message": "waiting for 256 slots"},
        },  # fmt: skip
    ]
    rows.append({**base, "id": 4, "name": "liar", "state": "running", "overran_declaration": True})
    lines = jobs_table(rows).splitlines()
    assert lines[1].endswith("workers went silent") and lines[2].endswith("waiting for 256 slots")
    assert lines[3].endswith("over-ran its declared iterations: ranked by attained service")
    assert lines[0].index("STATE") == lines[1].index("failed") == lines[2].index("queued")
    assert lines[1].index("12") == lines[2].index("3") - 1  # ids right-aligned


def test_an_unusable_database_is_one_line_and_exit_3(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["token", "create", "x", "--data-dir", str(tmp_path)]
    code = main([*argv, "--database-url", "notaurl://"])
    assert code == ExitCode.UNREACHABLE
    _stderr_line(capsys)


@pytest.mark.parametrize(
    "argv",
    [
        ["jobs", "submit", "x", "--workers", "2", "--iterations", "1"],  # no size
        ["jobs", "submit", "x", "--workers", "2", "--iterations", "1",
         "--model", "bert", "--gradient-bytes", "64"],  # two sizes
        ["launch", "--workers", "2", "--iterations", "1",
         "--model", "bert", "--gradient-bytes", "64", "--", "train.py"],
        ["jobs", "submit", "x", "--workers", "two", "--iterations", "1"],  # argparse's own
        ["jobs", "frobnicate"],
        ["nosuch"],
    ],
)  # fmt: skip
def test_every_usage_error_exits_2_in_one_line(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    try:
        status = main(["--service", UNREACHABLE, "--token", "t", *argv])
    except SystemExit as exc:  # argparse's errors leave through SystemExit
        status = int(str(exc.code))
    assert status == ExitCode.USAGE
    assert "usage:" not in _stderr_line(capsys)


def test_a_reader_that_stops_reading_is_no_error(api: Api) -> None:
    for i in range(3):
        api.submit(name=f"j{i}", answer=True)
    read, write = os.pipe()
    os.close(read)  # as `inasched jobs list | head -1` once head has its line
    try:
        listed = subprocess.run(
            [sys.executable, "-m", "cli", "--service", str(api.client.base_url),
             "--token", api.token, "jobs", "list"],
            stdout=write, stderr=subprocess.PIPE, text=True, timeout=120,
        )  # fmt: skip
    finally:
        os.close(write)
    assert listed.returncode == 0 and listed.stderr == ""


def test_up_prints_the_same_token_on_every_start_while_it_is_live(api: Api, tmp_path: Path) -> None:
    with api.sessions() as s:
        first, reused = up_token(s, tenant="carol", data_dir=tmp_path)
        assert not reused
        assert up_token(s, tenant="carol", data_dir=tmp_path) == (first, True)
    assert (tmp_path / UP_TOKEN_FILE).stat().st_mode & 0o777 == 0o600
    revoked = api.client.delete("/tenants/carol/tokens", headers=api.auth(api.admin_token))
    assert revoked.status_code < 300, revoked.text
    with api.sessions() as s:
        second, reused = up_token(s, tenant="carol", data_dir=tmp_path)
        assert not reused and second != first
        assert up_token(s, tenant="dave", data_dir=tmp_path)[1] is False  # another tenant
    listed = api.client.get("/jobs", headers=api.auth(second))
    assert listed.status_code == 200
