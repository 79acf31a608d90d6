"""The aggregate simulator's clock far into a run: a job's last sliver of an iteration, shorter
than the clock can resolve, still ends the job (it used to stop the loop for ever)."""

from __future__ import annotations

import pytest

from scheduler.config import SimConfig
from scheduler.fluid import FlowJob, comm_rates
from scheduler.memory import Pool
from scheduler.registry import make_policy
from scheduler.simulator import simulate
from scheduler.spec import PolicySpec
from scheduler.workload import JobSpec

# Single jobs that arrive 5e6 - 3e7 s into a run (a queued week at 1/16 of a Tofino's memory
# gets there): their iteration count, summed in floats event by event, ends 1e-9 to 1e-8 of an
# iteration short, which takes less time than one step of the clock at that hour.
LATE = [
    (10_117_918.70367106, 0.2522709791549322, 448_963),
    (5_228_792.180427665, 0.244745180557274, 254_372),
    (30_665_074.99881911, 0.47262515852686393, 279_579),
    (30_699_253.350772716, 0.35458184293248846, 171_040),
]


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("arrival_s", "iter_time_s", "iterations"), LATE)
def test_a_late_job_finishes_with_the_jct_of_its_iterations(
    arrival_s: float, iter_time_s: float, iterations: int
) -> None:
    job = JobSpec(0, arrival_s, 2, "m", 4_000_000, iter_time_s, iterations)
    cfg = SimConfig(spec=PolicySpec("static"), pool=Pool(1024))
    run = simulate([job], cfg)
    assert run.unfinished == 0
    [result] = run.jobs
    alone = comm_rates(
        cfg, make_policy(PolicySpec("static")), [FlowJob(0, 2, 4_000_000, iter_time_s)]
    )
    assert result.jct_s == pytest.approx(iterations * (iter_time_s + alone[0].t_comm_s), rel=1e-9)
