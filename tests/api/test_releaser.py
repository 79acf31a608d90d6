"""`Releaser`: an ended job leaves the switch with one removal, which also frees its memory."""

from __future__ import annotations

import threading

from p4ctl.backend import Endpoint, InMemorySwitch, JobInstall
from p4ctl.protocol import Policy

from api.coordinator.releaser import Releaser

JOB = JobInstall(7, Policy.ESA, 2, ps=Endpoint("127.0.0.1", 9))


class CountingSwitch(InMemorySwitch):
    """The in-memory switch, counting the calls that read the whole pool on a real target."""

    def __init__(self) -> None:
        super().__init__(64, 64)
        self.calls: list[tuple[str, int]] = []

    def reclaim(self, job_id: int) -> int:
        self.calls.append(("reclaim", job_id))
        return super().reclaim(job_id)

    def remove_job(self, job_id: int) -> None:
        self.calls.append(("remove_job", job_id))
        super().remove_job(job_id)


def test_an_ended_job_is_removed_with_its_aggregators_in_one_call() -> None:
    switch = CountingSwitch()
    switch.install_job(JOB)
    held = switch.pipeline.registers
    held.agg_job[5], held.agg_state[5] = JOB.job_id, 1  # a partial sum the job left behind
    released = threading.Event()
    releaser = Releaser(backend=switch, ps=None, on_released=lambda _: released.set())
    releaser.start()
    releaser.submit(JOB.job_id)
    assert released.wait(10)
    releaser.stop()
    assert switch.calls == [("remove_job", JOB.job_id)]
    assert switch.installed_jobs() == set() and switch.occupancy().held_by(JOB.job_id) == 0
