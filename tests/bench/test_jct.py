"""The JCT harness on a tiny synthetic workload in --sim: files, schema, ratios, sweeps."""

from __future__ import annotations

import csv
import json
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest

from api.settings import Settings
from bench.jct.cli import main
from bench.jct.output import PLOTS, read_jobs_csv
from bench.jct.params import BenchParams, parse_sweep
from bench.jct.results import JOB_COLUMNS
from bench.jct.store import store_run
from scheduler.workload import synthetic_jobs, write_workload
from tests.api.conftest import Api, make_api

POLICY_KEYS = {"avg_jct", "p50_jct", "p95_jct", "p99_jct", "memory_utilisation", "in_switch_share"}
WORKLOAD = "synthetic-12"


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("jct")
    assert main(["--workload", WORKLOAD, "--out", str(out), "--sim", "--quiet"]) == 0
    return out


def test_sim_run_leaves_every_output_file(run_dir: Path) -> None:
    for name in ("summary.json", "jobs.csv", "report.md", *PLOTS):
        assert (run_dir / name).stat().st_size > 0, name
    for plot in PLOTS:
        assert (run_dir / plot).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_summary_has_exactly_the_documented_shape(run_dir: Path) -> None:
    doc = json.loads((run_dir / "summary.json").read_text())
    assert set(doc) == {"policies", "ratios", "parameters"}
    assert set(doc["policies"]) == {"static", "atp", "esa"}
    for numbers in doc["policies"].values():
        assert set(numbers) == POLICY_KEYS
        assert all(isinstance(v, float) for v in numbers.values())
        assert 0.0 <= numbers["memory_utilisation"] <= 1.0
        assert 0.0 <= numbers["in_switch_share"] <= 1.0
        assert numbers["p50_jct"] <= numbers["p95_jct"] <= numbers["p99_jct"]
    assert set(doc["ratios"]) == {"esa_over_atp", "esa_over_static"}
    assert doc["parameters"]["aggregators"] == BenchParams().aggregators
    assert doc["parameters"]["workload"] == WORKLOAD


def test_jobs_csv_has_one_row_per_job_and_policy(run_dir: Path) -> None:
    with open(run_dir / "jobs.csv", newline="") as f:
        reader = csv.DictReader(f)
        assert tuple(reader.fieldnames or ()) == JOB_COLUMNS
        rows = list(reader)
    per_policy = defaultdict(set)
    for row in rows:
        per_policy[row["policy"]].add(int(row["job_id"]))
    assert set(per_policy) == {"static", "atp", "esa"}
    assert all(ids == set(range(12)) for ids in per_policy.values())
    assert len(rows) == 3 * 12


def test_summary_and_ratios_are_computed_from_the_job_rows(run_dir: Path) -> None:
    doc = json.loads((run_dir / "summary.json").read_text())
    jct: dict[str, list[float]] = defaultdict(list)
    switch: dict[str, float] = defaultdict(float)
    total: dict[str, float] = defaultdict(float)
    for job in read_jobs_csv(run_dir / "jobs.csv"):
        assert job.jct_s == pytest.approx(job.finish_s - job.arrival_s)
        assert job.jct_s >= job.compute_s * (1 - 1e-9)
        jct[job.policy].append(job.jct_s)
        switch[job.policy] += job.bytes_switch
        total[job.policy] += job.bytes_switch + job.bytes_ps
    for policy, values in jct.items():
        got = doc["policies"][policy]
        assert got["avg_jct"] == pytest.approx(np.mean(values))
        assert got["p99_jct"] == pytest.approx(np.percentile(values, 99))
        assert got["in_switch_share"] == pytest.approx(switch[policy] / total[policy])
    mean = {p: np.mean(v) for p, v in jct.items()}
    assert doc["ratios"]["esa_over_atp"] == pytest.approx(mean["atp"] / mean["esa"])
    assert doc["ratios"]["esa_over_static"] == pytest.approx(mean["static"] / mean["esa"])


def test_static_never_sends_bytes_to_a_ps(run_dir: Path) -> None:
    rows = [j for j in read_jobs_csv(run_dir / "jobs.csv") if j.policy == "static"]
    assert all(j.bytes_ps == 0 for j in rows)


def test_report_names_every_parameter_with_a_source(run_dir: Path) -> None:
    report = (run_dir / "report.md").read_text()
    doc = json.loads((run_dir / "summary.json").read_text())
    for name in doc["parameters"]:
        line = next(ln for ln in report.splitlines() if ln.startswith(f"| `{name}` |"))
        assert line.rstrip("| ").split("|")[-1].strip(), f"{name} has no source"
    assert "inasched bench jct --workload synthetic-12" in report
    assert "## Targets" in report


def test_a_sim_report_has_the_ps_load_and_no_data_plane_table(run_dir: Path) -> None:
    lines = (run_dir / "report.md").read_text().splitlines()
    header = "| policy | critical packets | esa's copies | time with copies over capacity |"
    at = lines.index(header)
    assert lines[at + 1] == "|---|---:|---:|---:|"
    rows = [ln.split(" | ")[0].strip("| ") for ln in lines[at + 2 : at + 5]]
    assert rows == ["static", "atp", "esa"]
    assert not any(ln.startswith("| policy | aggregated") for ln in lines)  # --emu only


def test_sweep_writes_one_csv_row_per_value(tmp_path: Path) -> None:
    values = ["4096", "16384"]
    args = ["--workload", WORKLOAD, "--out", str(tmp_path), "--policies", "atp,esa"]
    assert main([*args, "--sweep", f"memory={','.join(values)}", "--quiet"]) == 0
    with open(tmp_path / "sweep.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [r["memory"] for r in rows] == values
    for row, value in zip(rows, values, strict=True):
        doc = json.loads((tmp_path / f"memory={value}" / "summary.json").read_text())
        assert doc["parameters"]["aggregators"] == int(value)
        assert float(row["esa_over_atp"]) == pytest.approx(doc["ratios"]["esa_over_atp"])
        assert row["esa_over_static"] == ""  # static was not run


def test_a_workload_file_runs_like_a_named_workload(tmp_path: Path) -> None:
    path = tmp_path / "w.csv"
    write_workload(synthetic_jobs(5, seed=3), path)
    out = tmp_path / "out"
    assert main(["--workload", str(path), "--out", str(out), "--policies", "esa", "--quiet"]) == 0
    doc = json.loads((out / "summary.json").read_text())
    assert set(doc["policies"]) == {"esa"}
    assert doc["ratios"] == {"esa_over_atp": None, "esa_over_static": None}


def test_a_sweep_of_an_unknown_parameter_is_refused() -> None:
    with pytest.raises(ValueError, match="sweepable"):
        parse_sweep("colour=red,blue")
    with pytest.raises(ValueError, match="PARAM=V1"):
        parse_sweep("memory")


def test_a_run_is_posted_to_the_service_with_its_rows(run_dir: Path) -> None:
    seen: list[httpx.Request] = []

    def service(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(201, json={"id": 7, "workload": WORKLOAD})

    client = httpx.Client(base_url="http://svc", transport=httpx.MockTransport(service))
    stored = store_run("http://svc", "tok", run_dir, WORKLOAD, "sim", client=client)
    assert stored["id"] == 7
    (request,) = seen
    assert request.url.path == "/bench/runs"
    assert request.headers["authorization"] == "Bearer tok"
    body = json.loads(request.content)
    assert set(body) == {"workload", "backend", "summary", "jobs"}
    assert body["summary"] == json.loads((run_dir / "summary.json").read_text())
    assert len(body["jobs"]) == 3 * 12
    assert set(body["jobs"][0]) == set(JOB_COLUMNS)


def test_inasched_bench_jct_runs_the_benchmark(tmp_path: Path) -> None:
    # The README's spelling: `inasched bench jct ...`.
    from cli.main import main as cli_main

    out = tmp_path / "run"
    code = cli_main(
        ["bench", "jct", "--workload", "synthetic-5", "--policies", "atp", "--out", str(out),
         "--sim", "--quiet"]
    )  # fmt: skip
    assert code == 0
    assert (out / "summary.json").exists()


def test_report_shows_the_ps_load_of_each_policy(run_dir: Path) -> None:
    report = (run_dir / "report.md").read_text().splitlines()
    rows = {ln.split("|")[1].strip(): ln for ln in report if ln.count("|") == 5 and "%" in ln}
    assert set(rows) == {"static", "atp", "esa"}
    # static never sends a byte to a PS; only esa makes completion copies.
    assert rows["static"].split("|")[2:4] == [" 0.000 ", " 0.000 "]
    assert rows["atp"].split("|")[3].strip() == "0.000"
    assert float(rows["atp"].split("|")[2]) > 0 and float(rows["esa"].split("|")[3]) > 0


def test_bench_jct_says_the_run_went_only_to_out_without_a_service(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    argv = ["--workload", "synthetic-5", "--policies", "atp", "--out", str(out), "--quiet"]
    assert main(argv) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith(f"output: {out} (stored nowhere else: with --service URL --token")


@pytest.fixture
def service(tmp_path: Path) -> Iterator[Api]:
    settings = Settings(
        data_dir=tmp_path / "service", switch={"target": "memory", "aggregators": 256}
    )
    yield from make_api(settings)


def test_bench_jct_says_which_service_run_it_stored(
    service: Api, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = str(service.client.base_url).rstrip("/")
    out = tmp_path / "run"
    argv = ["--workload", "synthetic-5", "--policies", "atp", "--out", str(out), "--quiet"]
    assert main([*argv, "--service", url, "--token", service.token]) == 0
    (run,) = service.client.get("/bench/runs", headers=service.auth()).json()
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last == (
        f"output: {out}; stored in {url} as run {run['id']} (Benchmarks page: {url}/#/bench)"
    )
