"""bench.api at tiny sizes: every path of the CLI runs (submissions on an empty store and with a
backlog, the round-time table, --json) against real service processes and a real SQLite store,
and against PostgreSQL when ``INASCHED_TEST_POSTGRES_URL`` is set. No wall-clock asserts."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import pytest

from api.store.db import open_database
from api.store.models import Job
from bench.api import _busy, main
from bench.api_rounds import fill_store, round_times
from scheduler.memory import JobState


def test_a_tiny_run_prints_both_cases_the_round_table_and_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out_json = tmp_path / "api.json"
    args = ["--clients", "3", "--jobs", "12", "--backlog", "30", "--repeats", "1", "--rate", "100"]
    args += ["--round-sizes", "5,20", "--rounds", "2", "--json", str(out_json)]
    assert main(args) == 0
    out = capsys.readouterr().out
    rows = [line.split() for line in out.splitlines()]
    databases = (
        {"sqlite", "postgresql"} if os.environ.get("INASCHED_TEST_POSTGRES_URL") else {"sqlite"}
    )
    submissions = [r for r in rows if len(r) == 12 and r[0] in databases]
    assert {(r[0], r[1], r[2]) for r in submissions} == {
        (d, b, o) for d in databases for b, o in (("0", "max"), ("0", "100/s"), ("30", "max"))
    }
    assert all(r[5] == "0" for r in submissions)  # no errors
    assert "x rate" in out and "full read" in out
    assert f"machine: {os.cpu_count()} cores, load average " in out
    body = json.loads(out_json.read_text())
    assert body["machine"]["cores"] == os.cpu_count() and body["machine"]["busy_cores"] == 0
    assert body["machine"]["load_before"] >= 0
    assert {(s["database"], s["backlog"], s["rate"]) for s in body["submissions"]} == {
        (d, b, r) for d in databases for b, r in ((0, None), (0, 100), (30, None))
    }
    for s in body["submissions"]:
        assert s["jobs"] == 12 and s["errors"] == 0 and s["rate_ratio"] > 0
        # Only the paced run on the empty store has a p99 target.
        assert (s["p99_ratio"] is None) == (s["rate"] is None)
    assert [(r["database"], r["rounds"]) for r in body["rounds"] if r["database"] == "sqlite"] == [
        ("sqlite", 2),
        ("sqlite", 2),
    ]


def test_round_times_see_the_store_grow(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'rounds.db'}"
    rows = round_times("sqlite", url, policy="static", sizes=(3, 40), rounds=2)
    # Every submitted job stays active: the first size, its two submissions, then the second.
    assert [r.active for r in rows] == [5, 42]
    assert all(0 <= r.queued <= r.active for r in rows)
    assert all(r.median_ms > 0 and r.max_ms >= r.median_ms for r in rows)


def test_fill_store_adds_queued_jobs_of_one_tenant() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        engine, sessions = open_database(f"sqlite:///{tmp}/fill.db", pool_size=1)
        try:
            tenant = fill_store(sessions, tenant="backlog", jobs=2500)
            with sessions() as s:
                jobs = s.query(Job).all()
            assert len(jobs) == 2500
            assert {(j.tenant_id, j.state) for j in jobs} == {(tenant, JobState.QUEUED)}
        finally:
            engine.dispose()


@pytest.mark.parametrize(
    "bad", [["--round-sizes", "100,10"], ["--jobs", "0"], ["--busy-cores", "-1"]]
)
def test_bad_arguments_get_one_clear_line(
    bad: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(bad)
    assert exited.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("python -m bench.api: error: argument")


def _spinners() -> list[int]:
    """Pids of this process's children that spin (`bench.api._busy`)."""
    me = str(os.getpid())
    found = []
    for proc in Path("/proc").iterdir():
        try:
            ppid = (proc / "stat").read_text().rsplit(")", 1)[1].split()[1]
            cmdline = (proc / "cmdline").read_bytes()
        except (OSError, IndexError):
            continue  # not a process, or it ended meanwhile
        if ppid == me and b"while True: pass" in cmdline:
            found.append(int(proc.name))
    return found


def test_busy_cores_spin_during_the_block_and_are_reaped_after() -> None:
    with _busy(2):
        assert len(_spinners()) == 2
    assert _spinners() == []
    with pytest.raises(RuntimeError), _busy(1):
        raise RuntimeError("a measurement failed")
    assert _spinners() == []
