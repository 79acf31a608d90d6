"""bench.jct.validate without the emulation: the comparison, the fit and the whole command.

The probes' JCTs are made by the simulator itself with known parameters, so the fit must give
those parameters back."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from bench.jct.emu import EMU_AGGREGATORS, EMU_WINDOW, emu_workload
from bench.jct.params import BenchParams
from bench.jct.validate import calibrate as calibration
from bench.jct.validate import cli, fit, probe, report
from scheduler.config import SimConfig
from scheduler.workload import write_workload

TRUE = BenchParams(
    aggregators=EMU_AGGREGATORS,
    ps_processes="1",
    link_gbps=0.015,  # binds a lone probe (5,500 fragments/s per worker) ...
    ps_gbps=0.008,  # the PS binds atp's probe; at 0.02 the switch CPU would, and the fit
    # could not see ps_gbps at all (atp's iteration moves 0.04% per 7% of PS rate)
    sim=SimConfig(
        window=EMU_WINDOW,
        switch_pps=32_000.0,  # ... while two probes share the switch (4 packets a fragment:
        # 4,000 fragments/s each; alone, 8,000)
        job_setup_s=0.3,
        iteration_overhead_s=0.02,
        ps_switch_cost=2.5,  # a PS packet costs the shared CPU 2.5 switch packets
    ),
)
PROBE_BYTES, CONCURRENT = 65536, 2


def _simulated_probe(
    policy: str, grad_bytes: int, concurrent: int = CONCURRENT, compute_s: float = 0.0
) -> dict:
    run = fit.skewed_runner(None)

    def jct(k: int) -> float:
        jobs = probe.probe_jobs(grad_bytes, k, concurrent, compute_s)
        return statistics.fmean(j.jct_s for j in run(jobs, policy, TRUE).jobs)

    short, long = jct(probe.K1), jct(probe.K2)
    step = (long - short) / (probe.K2 - probe.K1)
    return {"per_iteration_s": step, "fixed_s": short - probe.K1 * step}


@pytest.fixture(scope="module")
def rates() -> dict:
    return {
        "probe_bytes": PROBE_BYTES,
        "probe_workers": probe.PROBE_WORKERS,
        "probe_jobs": CONCURRENT,
        "static": _simulated_probe("static", PROBE_BYTES),
        "atp": _simulated_probe("atp", PROBE_BYTES),
        "esa": _simulated_probe("esa", PROBE_BYTES),
        "overhead": _simulated_probe("static", probe.FRAGMENT_BYTES),
        "static_alone": _simulated_probe("static", PROBE_BYTES, 1),
    }


def test_the_fit_gives_back_the_parameters_that_made_the_probes(rates: dict) -> None:
    params, skew, derived = fit.matched_params(rates)
    assert skew is None
    assert params.link_gbps == pytest.approx(TRUE.link_gbps, rel=0.02)
    assert params.sim.switch_pps == pytest.approx(TRUE.sim.switch_pps, rel=0.02)
    assert params.ps_gbps == pytest.approx(TRUE.ps_gbps, rel=0.05)
    assert params.sim.ps_switch_cost == pytest.approx(TRUE.sim.ps_switch_cost, rel=0.03)
    assert params.sim.iteration_overhead_s == pytest.approx(TRUE.sim.iteration_overhead_s, rel=0.05)
    assert params.sim.job_setup_s == pytest.approx(TRUE.sim.job_setup_s, abs=0.01)
    assert derived["fit_rounds"] < 6  # it settled
    for name in ("static", "atp", "esa"):  # and reproduces every probe
        want = rates[name]["per_iteration_s"]
        assert derived["sim_probe_per_iteration_s"][name] == pytest.approx(want, rel=0.01)


def test_probes_that_compute_give_back_the_parameters_too() -> None:
    # Probes computing 0.4 s per iteration, as the default validation runs them (two here,
    # to keep the test quick): the per-iteration times then hold the compute too, and the fit
    # must take it out.
    compute, c = 0.4, 2
    rates = {
        "probe_bytes": PROBE_BYTES,
        "probe_jobs": c,
        "probe_compute_s": compute,
        "static": _simulated_probe("static", PROBE_BYTES, c, compute),
        "atp": _simulated_probe("atp", PROBE_BYTES, c, compute),
        "esa": _simulated_probe("esa", PROBE_BYTES, c, compute),
        "overhead": _simulated_probe("static", probe.FRAGMENT_BYTES, c, compute),
        "static_alone": _simulated_probe("static", PROBE_BYTES, 1, compute),
    }
    params, _, derived = fit.matched_params(rates)
    assert params.sim.switch_pps == pytest.approx(TRUE.sim.switch_pps, rel=0.05)
    assert params.sim.ps_switch_cost == pytest.approx(TRUE.sim.ps_switch_cost, rel=0.1)
    assert params.sim.iteration_overhead_s == pytest.approx(TRUE.sim.iteration_overhead_s, rel=0.05)
    assert params.sim.job_setup_s == pytest.approx(TRUE.sim.job_setup_s, abs=0.01)
    for name in ("static", "esa"):
        want = rates[name]["per_iteration_s"]
        assert derived["sim_probe_per_iteration_s"][name] == pytest.approx(want, rel=0.01)


def test_computing_probes_are_staggered_and_run_as_a_table_model() -> None:
    from bench.jct.emu import _worker_args
    from workers.worker import model_cost

    jobs = probe.probe_jobs(65536, 3, 4, compute_s=0.4)
    assert [j.arrival_s for j in jobs] == pytest.approx([0.0, 0.1, 0.2, 0.3])
    argv = _worker_args(jobs[0])
    full_bytes, full_s = model_cost(probe.PROBE_MODEL)
    assert argv[argv.index("--compute-scale") + 1] == repr(0.4 / full_s)
    assert argv[argv.index("--scale") + 1] == repr(65536 / full_bytes)
    assert all(j.arrival_s == 0 and j.iter_time_s == 0 for j in probe.probe_jobs(65536, 3, 2))


def test_probe_compute_is_seconds_or_the_workloads_mean(tmp_path: Path) -> None:
    jobs = emu_workload("synthetic-10", 0)
    write_workload(jobs, tmp_path / "workload.csv")
    mean = statistics.fmean(j.iter_time_s for j in jobs)
    assert cli._probe_compute("workload", tmp_path / "workload.csv") == pytest.approx(mean)
    assert cli._probe_compute("0.25", tmp_path / "workload.csv") == 0.25
    for bad in ("-1", "soon", "nan"):
        with pytest.raises(SystemExit, match="--probe-compute"):
            cli._probe_compute(bad, tmp_path / "workload.csv")


def test_compare_reports_gaps_ranking_and_verdict() -> None:
    def summary(**avg: float) -> dict:
        return {"policies": {k: {"avg_jct": x} for k, x in avg.items()}}

    emu = summary(static=10.0, atp=8.0, esa=6.0)
    good = report.compare(emu, summary(static=11.0, atp=7.5, esa=6.3))
    assert good["policies"]["static"]["gap_pct"] == pytest.approx(10.0)
    assert good["ranking_agrees"] and good["within_tolerance"] and good["passed"]
    far = report.compare(emu, summary(static=12.0, atp=8.0, esa=6.0))
    assert far["max_abs_gap_pct"] == pytest.approx(20.0) and not far["passed"]
    close = summary(static=10.0, atp=6.5, esa=6.0)
    swapped = report.compare(close, summary(static=10.0, atp=6.1, esa=6.2))
    assert swapped["within_tolerance"] and not swapped["ranking_agrees"]
    assert not swapped["passed"]
    assert swapped["sim_ranking"] == ["atp", "esa", "static"]


def test_compare_counts_the_runs_that_order_each_pair_as_the_mean_does() -> None:
    def runs(**values: list[float]) -> dict:
        return {"policies": {k: {"avg_jct": sum(x) / len(x), "runs": x, "spread_pct": 0.0}
                             for k, x in values.items()}}  # fmt: skip

    emu = runs(static=[5.0, 7.0, 6.0], atp=[6.0, 6.5, 9.0], esa=[7.0, 8.0, 9.5])
    sim = {"policies": {"static": {"avg_jct": 6.0}, "atp": {"avg_jct": 8.0},
                        "esa": {"avg_jct": 7.0}}}  # fmt: skip
    pairs = {(p["faster"], p["slower"]): p for p in report.compare(emu, sim)["pairs"]}
    assert set(pairs) == {("static", "atp"), ("static", "esa"), ("atp", "esa")}
    assert pairs[("static", "atp")]["emu_runs_agreeing"] == 2  # run 2: atp 6.5 < static 7.0
    assert pairs[("atp", "esa")]["emu_runs_agreeing"] == 3
    assert pairs[("static", "esa")]["emu_runs"] == 3
    assert pairs[("static", "atp")]["sim_agrees"] and not pairs[("atp", "esa")]["sim_agrees"]


def test_the_command_writes_the_validation_of_an_emu_folder(rates: dict, tmp_path: Path) -> None:
    # An "emulation" that is the simulator with the true parameters: the fitted --sim run must
    # then agree with it closely, in gap and ranking.
    from bench.jct.cli import run_bench

    jobs = emu_workload("synthetic-10", 0)
    write_workload(jobs, tmp_path / "workload.csv")
    run_bench(
        list(jobs), ["static", "atp", "esa"], TRUE, fit.skewed_runner(None), out=tmp_path,
        workload=str(tmp_path / "workload.csv"), backend="sim", command="test",
    )  # fmt: skip
    (tmp_path / "rates.json").write_text(json.dumps(rates))
    code = cli.main(["--emu-out", str(tmp_path), "--rates", str(tmp_path / "rates.json")])
    result = json.loads((tmp_path / "validation.json").read_text())
    assert result["max_abs_gap_pct"] < 3.0
    assert result["ranking_agrees"] and result["passed"] and code == 0
    assert "## Validation: --sim against --emu" in (tmp_path / "report.md").read_text()
    assert "Validation PASSED" in (tmp_path / "validation.md").read_text()


def test_repeated_emu_runs_are_averaged_and_must_share_a_workload(tmp_path: Path) -> None:
    for name, static, esa in (("a", 6.0, 5.0), ("b", 7.0, 5.5)):
        folder = tmp_path / name
        folder.mkdir()
        (folder / "workload.csv").write_text("same\n")
        policies = {"static": {"avg_jct": static}, "esa": {"avg_jct": esa}}
        (folder / "summary.json").write_text(json.dumps({"policies": policies}))
    mean = report.mean_summary([tmp_path / "a", tmp_path / "b"])
    assert mean["policies"]["static"]["avg_jct"] == pytest.approx(6.5)
    assert mean["policies"]["static"]["spread_pct"] == pytest.approx(100 / 6.5)
    assert mean["policies"]["esa"]["runs"] == [5.0, 5.5]
    (tmp_path / "b" / "workload.csv").write_text("other\n")
    with pytest.raises(ValueError, match="another workload"):
        report.mean_summary([tmp_path / "a", tmp_path / "b"])


def test_out_keeps_the_validation_apart_from_the_emu_folder(rates: dict, tmp_path: Path) -> None:
    from bench.jct.cli import run_bench

    runs, elsewhere = tmp_path / "emu", tmp_path / "probes-2-jobs"
    jobs = emu_workload("synthetic-10", 0)
    runs.mkdir()
    write_workload(jobs, runs / "workload.csv")
    run_bench(
        list(jobs), ["static", "esa"], TRUE, fit.skewed_runner(None), out=runs,
        workload=str(runs / "workload.csv"), backend="sim", command="test",
    )  # fmt: skip
    report = (runs / "report.md").read_text()
    (tmp_path / "rates.json").write_text(json.dumps(rates))
    argv = ["--emu-out", str(runs), "--rates", str(tmp_path / "rates.json")]
    assert cli.main([*argv, "--out", str(elsewhere)]) == 0
    assert json.loads((elsewhere / "validation.json").read_text())["passed"]
    assert (elsewhere / "sim" / "summary.json").exists()
    assert "Validation PASSED" in (elsewhere / "validation.md").read_text()
    # The emulation's folder is untouched: no validation files, no sim run, the same report.
    assert not (runs / "validation.json").exists() and not (runs / "sim").exists()
    assert (runs / "report.md").read_text() == report


def _simulated_emu_folder(folder: Path, seed: int, policies: list[str]) -> None:
    """An "--emu" folder whose runs are the simulator with the true parameters."""
    from bench.jct.cli import run_bench

    jobs = emu_workload("synthetic-10", seed)
    folder.mkdir(parents=True)
    write_workload(jobs, folder / "workload.csv")
    run_bench(
        list(jobs), policies, TRUE, fit.skewed_runner(None), out=folder,
        workload=str(folder / "workload.csv"), backend="sim", command="test",
    )  # fmt: skip


def test_the_calibration_gives_back_the_shared_rates_of_another_workload() -> None:
    # Average JCTs of a workload made with the true parameters; the calibration starts from
    # shared rates that are off by 2x and must find the ones that give those JCTs again.
    jobs = emu_workload("synthetic-10", 1)
    want = {p: calibration.sim_avg_jct(jobs, p, TRUE) for p in ("static", "atp", "esa")}
    off = TRUE.with_value("switch_pps", repr(TRUE.sim.switch_pps * 2))
    off = off.with_value("ps_switch_cost", repr(TRUE.sim.ps_switch_cost / 2))
    params, cal = calibration.calibrate(off, jobs, want)
    for policy, jct in want.items():
        assert cal["sim_avg_jct"][policy] == pytest.approx(jct, rel=0.01), policy
    assert params.sim.switch_pps == pytest.approx(TRUE.sim.switch_pps, rel=0.05)
    assert params.sim.ps_switch_cost == pytest.approx(TRUE.sim.ps_switch_cost, rel=0.05)
    # What the probes fixed is kept.
    for name in ("job_setup_s", "link_gbps", "ps_gbps", "iteration_overhead_s"):
        assert params.as_dict()[name] == TRUE.as_dict()[name]


def test_the_command_calibrates_on_another_workload_only(rates: dict, tmp_path: Path) -> None:
    policies = ["static", "atp", "esa"]
    _simulated_emu_folder(tmp_path / "seed-0", 0, policies)
    _simulated_emu_folder(tmp_path / "seed-1", 1, policies)
    (tmp_path / "rates.json").write_text(json.dumps(rates))
    argv = ["--emu-out", str(tmp_path / "seed-0"), "--rates", str(tmp_path / "rates.json")]
    out = tmp_path / "calibrated"
    assert cli.main([*argv, "--calibrate", str(tmp_path / "seed-1"), "--out", str(out)]) == 0
    result = json.loads((out / "validation.json").read_text())
    assert result["passed"] and result["max_abs_gap_pct"] < 3.0
    assert result["calibration"]["folders"] == [str(tmp_path / "seed-1")]
    assert "Calibrated" in (out / "validation.md").read_text()
    with pytest.raises(SystemExit, match="validated workload itself"):
        cli.main([*argv, "--calibrate", str(tmp_path / "seed-0"), "--out", str(out)])


def test_compare_counts_the_runs_ranked_wholly_as_the_simulator_ranks() -> None:
    emu = {"policies": {k: {"avg_jct": sum(x) / 3, "runs": x, "spread_pct": 0.0} for k, x in
                        {"static": [9.0, 9.0, 9.0], "atp": [6.0, 7.0, 6.0],
                         "esa": [5.0, 7.5, 6.5]}.items()}}  # fmt: skip
    sim = {"policies": {"static": {"avg_jct": 9.0}, "atp": {"avg_jct": 6.5},
                        "esa": {"avg_jct": 6.0}}}  # fmt: skip
    # Run 1 orders esa, atp, static as the simulator does; runs 2 and 3 put atp first.
    assert report.compare(emu, sim)["runs_ranked_as_sim"] == {"agreeing": 1, "runs": 3}


def test_the_command_validates_a_fabric_run_with_the_fabric_simulator(
    rates: dict, tmp_path: Path
) -> None:
    # An "emulation" that is the fabric simulator with the true parameters: the fitted --sim
    # run on the same topology must agree with it, and one run of one ranks as it does.
    from bench.jct.cli import run_bench
    from bench.jct.fabric import FabricRunner, FabricSetting

    topology = "scheduler/data/topology-loopback-spine.json"
    setting = FabricSetting(topology, "spread")
    jobs = emu_workload("synthetic-10", 0)
    write_workload(jobs, tmp_path / "workload.csv")
    run_bench(
        list(jobs), ["static", "atp", "esa"], TRUE, FabricRunner(setting), out=tmp_path,
        workload=str(tmp_path / "workload.csv"), backend="sim", command="test", fabric=setting,
    )  # fmt: skip
    (tmp_path / "rates.json").write_text(json.dumps(rates))
    argv = ["--emu-out", str(tmp_path), "--rates", str(tmp_path / "rates.json")]
    code = cli.main([*argv, "--topology", topology])
    result = json.loads((tmp_path / "validation.json").read_text())
    assert "--topology " + topology + " --placement spread" in result["sim_command"]
    assert result["max_abs_gap_pct"] < 3.0
    assert result["runs_ranked_as_sim"] == {"agreeing": 1, "runs": 1}
    assert result["ranking_runs_target"] == "at least 1 of 1"
    assert result["passed"] and code == 0
    with pytest.raises(SystemExit, match="--skew reruns the one-switch"):
        cli.main([*argv, "--topology", topology, "--skew"])


def test_a_calibration_on_a_fabric_fits_the_fabric_simulators_jcts() -> None:
    # As above, with the fabric simulator for the runner: the JCTs it made with the true
    # static rate are found again from a rate off by 2x.
    from bench.jct.fabric import FabricRunner, FabricSetting

    runner = FabricRunner(FabricSetting("scheduler/data/topology-loopback-spine.json", "spread"))
    jobs = emu_workload("synthetic-10", 1)
    want = {"static": calibration.sim_avg_jct(jobs, "static", TRUE, runner)}
    off = TRUE.with_value("switch_pps", repr(TRUE.sim.switch_pps * 2))
    params, cal = calibration.calibrate(off, jobs, want, runner)
    assert cal["sim_avg_jct"]["static"] == pytest.approx(want["static"], rel=0.01)
    assert want["static"] != pytest.approx(calibration.sim_avg_jct(jobs, "static", TRUE), rel=0.01)
