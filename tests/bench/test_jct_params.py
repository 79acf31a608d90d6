"""`BenchParams`: each parameter held once, in the nested `SimConfig` where the simulator has
it, named as the command line and ``summary.json`` name it."""

from __future__ import annotations

from dataclasses import fields, replace

import pytest

from bench.jct.params import SOURCES, BenchParams
from bench.jct.sim import sim_config
from scheduler.config import SimConfig
from scheduler.memory import Pool
from scheduler.spec import PolicySpec


def test_a_run_simulates_the_nested_config_with_the_command_lines_units_written_in() -> None:
    params = BenchParams().with_settings(
        ["memory=2048", "link_gbps=10", "ps_gbps=5", "ps_processes=3", "window=64", "seed=7"]
    )
    cfg = sim_config("atp", params)
    assert cfg == replace(params.sim, spec=replace(params.sim.spec, policy="atp"))
    assert (cfg.pool, cfg.link_bps, cfg.ps_bps, cfg.ps_processes) == (Pool(2048, 64), 10e9, 5e9, 3)
    assert (cfg.window, cfg.seed) == (64, 7)


def test_the_units_win_over_a_sim_given_with_other_values() -> None:
    params = BenchParams(link_gbps=40.0, sim=SimConfig(link_bps=1e9, pool=Pool(8), window=32))
    assert (params.sim.link_bps, params.sim.pool, params.sim.window) == (
        40e9,
        Pool(BenchParams().aggregators, 64),
        32,
    )


def test_the_simulators_parameters_keep_its_defaults() -> None:
    held = BenchParams().as_dict()
    for name in ("seed", "window", "job_setup_s", "iteration_overhead_s", "switch_pps"):
        assert held[name] == getattr(SimConfig(), name)
    for name in ("priority", "levels", "aging_s"):
        assert held[name] == getattr(PolicySpec(), name)


def test_as_dict_names_every_parameter_in_sources_order_and_round_trips() -> None:
    params = BenchParams().with_settings(["aging=30", "switch_pps=1e5", "load=2", "ps_processes=1"])
    values = params.as_dict()
    assert list(values) == list(SOURCES)
    assert (values["aging_s"], values["switch_pps"], values["ps_processes"]) == (30.0, 1e5, "1")
    assert BenchParams.from_dict({**values, "workload": "philly", "sim.loss_rate": 0.0}) == params


def test_the_report_lists_as_the_simulators_own_only_what_no_parameter_states() -> None:
    unstated = BenchParams().unstated_sim_fields()
    assert set(unstated) == {
        "link_latency_s",
        "switch_latency_s",
        "loss_rate",
        "worker_skew_s",
        "resend_timeout_s",
        "progress_step",
    }
    assert {f.name for f in fields(SimConfig)} - set(unstated) >= {"pool", "link_bps", "seed"}


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ("window=0", "window=0: window must be >= 1, got 0"),
        ("job_setup_s=inf", "job_setup_s=inf: job_setup_s must be a number >= 0, got inf"),
        (
            "ps_processes=0",
            "ps_processes=0: ps_processes must be 'per-job' or a count >= 1, got '0'",
        ),
        ("levels=0", "levels=0: levels must be in 1..256, got 0"),
    ],
)
def test_a_bad_nested_value_names_the_parameter(setting: str, message: str) -> None:
    with pytest.raises(ValueError, match="^" + message.replace(".", r"\.")):
        BenchParams().with_settings([setting])
