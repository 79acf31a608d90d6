"""Every bad argument of ``inasched bench jct`` is one line on stderr and exit status 2, before
anything runs or is written; ``--out`` refuses a non-empty folder unless ``--force``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from bench.jct.cli import main


def _refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as exit_info:
        main([*argv, "--quiet"])
    assert exit_info.value.code == 2
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("inasched bench jct: error: ")
    assert "Traceback" not in captured.err and captured.out == ""
    return lines[0]


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--workload", "nope"], "no workload 'nope': give 'philly', 'philly:FILE'"),
        (["--workload", "synthetic-0"], "'synthetic-0' has no jobs: synthetic-N needs N >= 1"),
        (["--workload", "synthetic-3", "--sweep", "memory=-5"], "memory=-5: aggregators must"),
        (["--workload", "synthetic-3", "--sweep", "memory=1024,x"], "aggregators must be a whole"),
        (["--workload", "synthetic-3", "--sweep", "load=2,0"], "load must be a number > 0"),
        (["--workload", "synthetic-3", "--set", "link_gbps=0"], "link_gbps=0: link_gbps must be"),
        (["--workload", "synthetic-3", "--set", "ps_gbps=nan"], "ps_gbps must be a number > 0"),
        (["--workload", "synthetic-3", "--set", "window=0"], "window must be >= 1"),
        (["--workload", "synthetic-3", "--set", "ps_processes=0"], "ps_processes must be"),
        (["--workload", "synthetic-3", "--set", "priority=sjf"], "unknown priority function"),
        (["--workload", "synthetic-3", "--set", "speed"], "--set wants PARAM=VALUE"),
        (["--workload", "synthetic-3", "--policies", "esa,fifo"], "unknown policies ['fifo']"),
        (["--workload", "synthetic-3", "--policies", "esa-norelease", "--emu"], "--sim only"),
        (["--workload", "philly:/no/such/trace.csv"], "cannot read the Philly trace"),
        (["--workload", "synthetic-3", "--emu-hosts", "10.77.2.1"], "--emu-hosts configures"),
    ],
)
def test_a_bad_argument_is_one_line_and_writes_nothing(
    argv: list[str], says: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    assert says in _refused([*argv, "--out", str(out)], capsys)
    assert not out.exists()


def test_an_unwritable_out_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # A folder under a regular file can never be created, whoever runs the test.
    blocker = tmp_path / "file"
    blocker.write_text("")
    line = _refused(["--workload", "synthetic-3", "--out", str(blocker / "out")], capsys)
    assert f"--out {blocker / 'out'} cannot be written" in line
    line = _refused(["--workload", "synthetic-3", "--out", str(blocker)], capsys)
    assert line.endswith(f"--out {blocker} is a file; give a folder (new or empty)")


def test_out_refuses_a_folder_with_results_unless_forced(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "summary.json").write_text("{}")
    argv = ["--workload", "synthetic-3", "--policies", "atp", "--out", str(tmp_path)]
    line = _refused(argv, capsys)
    assert f"--out {tmp_path} is not empty; give a new folder, or --force" in line
    assert (tmp_path / "summary.json").read_text() == "{}"
    assert main([*argv, "--force", "--quiet"]) == 0
    assert (tmp_path / "summary.json").read_text() != "{}"


def test_an_empty_out_folder_is_used_as_it_is(tmp_path: Path) -> None:
    argv = ["--workload", "synthetic-3", "--policies", "atp", "--out", str(tmp_path), "--quiet"]
    assert main(argv) == 0
    assert (tmp_path / "summary.json").exists()


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--workload", "nope"], "--workload nope: no workload 'nope'"),
        (["--workload", "synthetic-0"], "--workload synthetic-0: 'synthetic-0' has no jobs"),
        (["--sweep", "memory=-5"], "memory=-5: aggregators must be >= 1, got -5"),
        (["--set", "link_gbps=0"], "link_gbps=0: link_gbps must be a number > 0, got 0.0"),
        (["--out", "{blocker}/out"], "--out {blocker}/out cannot be written"),
    ],
)
def test_the_command_line_prints_one_line_not_a_traceback(
    argv: list[str], says: str, tmp_path: Path
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    # argparse keeps a flag's last value: `argv` overrides the valid run given first.
    given = ["--workload", "synthetic-3", "--out", str(tmp_path / "out"), *argv]
    done = subprocess.run(
        [sys.executable, "-m", "bench.jct", *(a.format(blocker=blocker) for a in given)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert "Traceback" not in done.stderr and done.stdout == ""
    assert done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith("inasched bench jct: error: ")
    assert says.format(blocker=blocker) in done.stderr
    assert not (tmp_path / "out").exists()
