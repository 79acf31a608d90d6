"""`SwitchClient` reads the whole switch over P4Runtime: every aggregator's owner and state and
every counter cell, equal to what the pipeline holds (what the service used to read in-process
for its embedded switch)."""

from __future__ import annotations

from p4ctl.backend import Endpoint, JobInstall, counters_from, occupancy_from
from p4ctl.client import SwitchClient
from p4ctl.protocol import MAX_JOBS, AggState, DropReason, Policy
from p4ctl.rule import JOB_COUNTERS
from p4ctl.softswitch import SoftSwitch

PS = Endpoint("127.0.0.1", 40999)


def test_full_read_equals_the_pipeline_cell_for_cell(soft_switch: SoftSwitch) -> None:
    with SwitchClient(soft_switch.p4runtime_address, aggregators=256, lanes=64) as client:
        client.install_job(JobInstall(3, Policy.ESA, 2, ps=PS))
        pipe = soft_switch.pipeline
        states = [AggState.FREE, AggState.PARTIAL, AggState.COMPLETE]
        for i in range(soft_switch.aggregators):
            pipe.registers.agg_job[i] = i % 7
            pipe.registers.agg_state[i] = states[i % 3]
        for n, name in enumerate(JOB_COUNTERS):
            for job in range(0, MAX_JOBS, 5):
                pipe.job_packets[name][job] = 1000 * n + job + 1
        for reason in DropReason:
            pipe.drop_packets[reason] = 10 + reason

        occupancy, counters = client.occupancy(), client.counters()

        assert occupancy == occupancy_from(pipe.registers)
        assert counters == counters_from(pipe.job_packets, pipe.drop_packets)
        assert occupancy.held_by(1) == len([i for i in range(256) if i % 7 == 1 and i % 3])


def test_counters_of_a_removed_job_stay_readable(soft_switch: SoftSwitch) -> None:
    with SwitchClient(soft_switch.p4runtime_address, aggregators=256, lanes=64) as client:
        client.install_job(JobInstall(9, Policy.ATP, 1, ps=PS))
        soft_switch.pipeline.job_packets["job_aggregated"][9] = 42
        client.remove_job(9)
        assert client.installed_jobs() == set()
        assert client.counters().jobs[9]["job_aggregated"] == 42
