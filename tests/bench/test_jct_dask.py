"""``inasched bench jct --dask``: a sweep on a real Dask cluster on loopback (``dask scheduler``
and ``dask worker`` processes, as docs/evaluation.md starts them) writes the files a ``--jobs 1``
run writes, and every way of not having a usable cluster is one line and exit status 2."""

from __future__ import annotations

import json
import os
import shlex
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from distributed import Client, LocalCluster  # the dask extra, which make installs

import bench
import bench.jct.fabric
import bench.jct.sim
from bench.jct import cluster
from bench.jct.cli import main

ROOT = Path(bench.__file__).resolve().parents[1]
# Two points of a 2x1 grid (heatmaps too) on four jobs: seconds per point.
SWEEP = ["--workload", "synthetic-4", "--policies", "atp,esa", "--sim", "--quiet",
         "--sweep", "memory=256,16384", "--sweep", "load=4"]  # fmt: skip
WORKERS = 2


def _spawn(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with open(log, "wb") as f:
        return subprocess.Popen(
            [sys.executable, "-m", "dask", *args], env=env, stdout=f, stderr=subprocess.STDOUT
        )


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@pytest.fixture(scope="module")
def scheduler(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The address of a scheduler with `WORKERS` single-threaded worker processes; they import
    the project as an installed one would (PYTHONPATH: this checkout)."""
    tmp = tmp_path_factory.mktemp("dask")
    path = os.pathsep.join([str(ROOT), str(ROOT / "p4"), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "PYTHONPATH": path}
    file = tmp / "scheduler.json"
    procs = [_spawn(["scheduler", "--host", "127.0.0.1", "--port", "0", "--dashboard-address",
                     ":0", "--scheduler-file", str(file)], env, tmp / "scheduler.log")]  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not file.exists() or not file.read_text().strip():
            assert procs[0].poll() is None, (tmp / "scheduler.log").read_text()
            assert time.monotonic() < deadline, "no scheduler file after 60 s"
            time.sleep(0.2)
        address = json.loads(file.read_text())["address"]
        procs.append(_spawn(["worker", address, "--nworkers", str(WORKERS), "--nthreads", "1",
                             "--no-dashboard"], env, tmp / "worker.log"))  # fmt: skip
        with Client(address, set_as_default=False) as client:
            client.wait_for_workers(WORKERS, timeout=60)
        yield address
    finally:
        for proc in reversed(procs):
            _stop(proc)


def _files(out: Path) -> dict[str, bytes]:
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}


def test_a_sweep_on_the_cluster_writes_the_files_of_a_jobs_1_run(
    scheduler: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    local, remote = tmp_path / "jobs-1", tmp_path / "dask"
    assert main([*SWEEP, "--out", str(local), "--jobs", "1"]) == 0

    def here(*args: object) -> None:
        raise AssertionError("a --dask point ran in this process")

    # The workers are other processes: they run the real simulator, this one none.
    monkeypatch.setattr(bench.jct.sim, "run_policy", here)
    assert main([*SWEEP, "--out", str(remote), "--dask", scheduler]) == 0

    want, got = _files(local), _files(remote)
    assert sorted(got) == sorted(want)
    point = "memory=16384,load=4/"
    assert {"sweep.csv", "heatmap_esa_over_atp.png", f"{point}report.md", f"{point}summary.json",
            f"{point}jct_cdf.png", f"{point}jobs.csv"} <= set(got)  # fmt: skip
    # Only the command line in each report differs (the CPU seconds of cpu.csv always do).
    ran_here = "inasched bench jct " + shlex.join([*SWEEP, "--out", str(local), "--jobs", "1"])
    ran_there = "inasched bench jct " + shlex.join(
        [*SWEEP, "--out", str(remote), "--dask", scheduler]
    )
    for name in want:
        if name == "cpu.csv":
            continue
        if name.endswith("report.md"):
            assert ran_here in want[name].decode()
            assert got[name].decode() == want[name].decode().replace(ran_here, ran_there), name
        else:
            assert got[name] == want[name], name


def test_a_fabric_sweep_on_the_cluster_writes_the_files_of_a_jobs_1_run(
    scheduler: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    topology = str(ROOT / "scheduler" / "data" / "topology-2tors.json")
    sweep = ["--workload", "synthetic-4", "--policies", "esa,tiered", "--sim", "--quiet",
             "--topology", topology, "--placement", "spread",
             "--sweep", "spine_memory=256,4096"]  # fmt: skip
    local, remote = tmp_path / "jobs-1", tmp_path / "dask"
    assert main([*sweep, "--out", str(local), "--jobs", "1"]) == 0

    def here(*args: object, **kwargs: object) -> None:
        raise AssertionError("a --dask point ran in this process")

    monkeypatch.setattr(bench.jct.fabric, "simulate_fabric", here)
    assert main([*sweep, "--out", str(remote), "--dask", scheduler]) == 0

    want, got = _files(local), _files(remote)
    assert sorted(got) == sorted(want)
    assert {"sweep.csv", "spine_memory=256/summary.json", "spine_memory=4096/report.md"} <= set(got)
    ran_here = "inasched bench jct " + shlex.join([*sweep, "--out", str(local), "--jobs", "1"])
    ran_there = "inasched bench jct " + shlex.join(
        [*sweep, "--out", str(remote), "--dask", scheduler]
    )
    for name in want:
        if name == "cpu.csv":
            continue
        if name.endswith("report.md"):
            assert ran_here in want[name].decode()
            assert got[name].decode() == want[name].decode().replace(ran_here, ran_there), name
        else:
            assert got[name] == want[name], name


def test_a_worker_with_other_sources_is_refused_before_any_point_runs(
    scheduler: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setattr(cluster, "source_fingerprint", lambda: "another checkout")
    _assert_one_line_error(
        [*SWEEP, "--out", str(tmp_path / "x"), "--dask", scheduler], tmp_path / "x", capsys,
        f"--dask {scheduler}: worker tcp://", "holds other sources",
    )  # fmt: skip


def test_an_unreachable_scheduler_is_one_line_naming_its_address(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(cluster, "CONNECT_TIMEOUT_S", 1.0)
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        address = f"tcp://127.0.0.1:{free.getsockname()[1]}"
    out = tmp_path / "x"
    _assert_one_line_error(
        [*SWEEP, "--out", str(out), "--dask", address], out, capsys,
        f"--dask {address}: no Dask scheduler answered within 1 s",
    )  # fmt: skip


def test_a_server_that_is_not_a_scheduler_is_refused_in_bounded_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # It accepts the connection and never answers the handshake (as an HTTP port would not).
    monkeypatch.setattr(cluster, "CONNECT_TIMEOUT_S", 1.0)
    with socket.create_server(("127.0.0.1", 0)) as silent:
        address = f"tcp://127.0.0.1:{silent.getsockname()[1]}"
        out = tmp_path / "x"
        _assert_one_line_error(
            [*SWEEP, "--out", str(out), "--dask", address], out, capsys,
            f"--dask {address}: no Dask scheduler answered within 1 s",
        )  # fmt: skip


def test_a_scheduler_without_workers_says_how_to_start_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(cluster, "CONNECT_TIMEOUT_S", 1.0)
    with LocalCluster(n_workers=0, processes=False, dashboard_address=None) as empty:
        out = tmp_path / "x"
        _assert_one_line_error(
            [*SWEEP, "--out", str(out), "--dask", empty.scheduler_address], out, capsys,
            "has no worker after 1 s", f"dask worker {empty.scheduler_address}",
        )  # fmt: skip


def test_dask_not_installed_says_how_to_install_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "distributed", None)  # import distributed: ImportError
    out = tmp_path / "x"
    _assert_one_line_error(
        [*SWEEP, "--out", str(out), "--dask", "tcp://127.0.0.1:8786"], out, capsys,
        "--dask needs dask.distributed", "pip install 'inasched[dask]'",
    )  # fmt: skip


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        (["--jobs", "2"], "give --jobs N (N processes on this machine) or --dask ADDRESS"),
        (["--jobs", "1"], "not both"),
        (["--emu"], "--dask runs --sim only"),
    ],
)
def test_dask_with_jobs_or_emu_is_refused(
    extra: list[str], says: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "x"
    argv = ["--workload", "synthetic-4", "--out", str(out), "--dask", "tcp://127.0.0.1:1", *extra]
    _assert_one_line_error(argv, out, capsys, says)


def _assert_one_line_error(
    argv: list[str], out: Path, capsys: pytest.CaptureFixture[str], *says: str
) -> None:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    assert err.startswith("inasched bench jct: error: ")
    for part in says:
        assert part in err
    assert not out.exists()
