"""``inasched worker`` says what it does: a start line and progress lines on stdout, none
with ``--quiet``, and its exit statuses in ``--help``. Real processes: a service on a soft
switch (the robustness tests' rig) and the worker command."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import pytest
from p4ctl.protocol import Policy

from tests.workers.test_worker_robustness import Rig
from workers.client import ClientStats
from workers.progress import ProgressLines, size_text
from workers.rendezvous import HashedPlacement, WorkerJoin
from workers.worker import EXIT_ENDED, EXIT_JOIN, EXIT_TIMEOUT

HANG_GUARD_S = 120  # not a performance bound: only keeps a broken run from hanging CI


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    made = Rig(tmp_path_factory.mktemp("progress"))
    try:
        yield made
    finally:
        made.close()


def _run_worker(rig: Rig, *argv: str) -> tuple[int, str, str]:
    job = rig.submit(iterations=5, gradient_bytes=40_000)
    cmd = [sys.executable, "-m", "cli", "--service", rig.url, "worker"]
    cmd += ["--job", str(job["id"]), "--token", job["join_token"], *argv]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=HANG_GUARD_S)
    return done.returncode, done.stdout, done.stderr


def test_a_worker_prints_a_start_line_and_its_progress(rig: Rig) -> None:
    status, out, err = _run_worker(rig)
    assert status == 0, err
    lines = out.splitlines()
    start, last = lines[0], lines[-1]
    assert "5 iterations of a 40.0 KB gradient through" in start  # a job without a model
    assert f"through the switch at {rig.data}" in start
    assert "5 of 5 iterations, goodput " in last and "aggregated in the switch" in last


def test_a_quiet_worker_prints_nothing(rig: Rig) -> None:
    status, out, err = _run_worker(rig, "--quiet")
    assert status == 0, err
    assert out == ""


def test_help_lists_the_exit_statuses() -> None:
    cmd = [sys.executable, "-m", "cli", "worker", "--help"]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    for status in (0, EXIT_ENDED, EXIT_TIMEOUT, EXIT_JOIN, 1, 2):
        assert f"\n  {status}  " in out


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _stats(switch: int, ps: int) -> ClientStats:
    return ClientStats(
        sent=0, resent=0, fast_resent=0, results_switch=0, results_ps=0,
        bytes_switch=switch, bytes_ps=ps, ignored=0,
    )  # fmt: skip


def test_progress_lines_come_at_most_every_interval_and_at_the_last_iteration() -> None:
    join = WorkerJoin(
        job_id=4, switch_job_id=4, worker_id=0, fan_in=2, policy=Policy.ESA,
        switch=("127.0.0.1", 9000), ps=("127.0.0.1", 9001), lanes=64, window=8,
        placement=HashedPlacement(seed=0, pool=64),
    )  # fmt: skip
    lines: list[str] = []
    clock = _Clock()
    progress = ProgressLines(lines.append, interval_s=10.0, clock=clock)
    progress.start(join, iterations=100, gradient_bytes=2_000_000, model="")
    for done in range(1, 101):
        clock.now = done * 1.0  # one second per iteration
        progress.iteration(done, _stats(switch=3 * done, ps=done))
    assert lines[0].startswith("job 4 worker 0: 100 iterations of a 2.0 MB gradient")
    assert len(lines) == 1 + 10  # at 10 s, 20 s, ... 100 s: the last is the last iteration
    assert lines[-1] == (
        "job 4 worker 0: 100 of 100 iterations, goodput 2.0 MB/s, 75.0% aggregated in the switch"
    )


def test_sizes_read_in_decimal_units() -> None:
    assert [size_text(n) for n in (0, 999, 40_000, 97_500_000, 3e12)] == [
        "0 B", "999 B", "40.0 KB", "97.5 MB", "3000.0 GB",
    ]  # fmt: skip
