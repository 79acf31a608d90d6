"""The ``inasched`` command line: tokens, jobs over HTTP, delegation, bad settings."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from api.cli import main
from api.settings import Settings
from tests.api.conftest import Api


def test_token_create_prints_a_token_that_opens_the_api(
    api: Api, settings: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["token", "create", "carol", "--data-dir", str(settings.data_dir)]
    assert main([*argv, "--database-url", settings.resolved_database_url]) == 0
    token = capsys.readouterr().out.strip()
    assert api.client.get("/jobs", headers=api.auth(token)).status_code == 200


def test_jobs_submit_list_cancel_over_http(api: Api, capsys: pytest.CaptureFixture[str]) -> None:
    base = ["jobs", "--url", str(api.client.base_url), "--token", api.token]
    assert main([*base, "submit", "cli-job", "--workers", "2", "--iterations", "5",
                 "--gradient-bytes", "1024"]) == 0  # fmt: skip
    created = json.loads(capsys.readouterr().out)
    assert created["name"] == "cli-job" and created["join_token"]
    assert main([*base, "list"]) == 0
    listing = capsys.readouterr().out
    assert "cli-job" in listing and "1 jobs" in listing
    assert main([*base, "cancel", str(created["id"])]) == 0
    assert json.loads(capsys.readouterr().out)["state"] == "cancelled"
    assert main([*base, "cancel", str(created["id"])]) == 1
    assert "409" in capsys.readouterr().err


def test_jobs_without_a_token_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["jobs", "--url", "http://127.0.0.1:9", "--token", "", "list"]) == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_bad_setting_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["token", "create", "x", "--data-dir", str(tmp_path)]
    code = main([*argv, "--database-url", "notaurl://"])
    assert code == 2
    assert capsys.readouterr().err.startswith("inasched: ")
