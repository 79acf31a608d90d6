"""A real soft switch, programmed over P4Runtime, a real PS, and jobs of real UDP clients."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
from p4ctl.backend import Endpoint, JobInstall
from p4ctl.client import SwitchClient
from p4ctl.protocol import Policy
from p4ctl.softswitch import SoftSwitch

from workers.client import AllreduceClient, ClientOptions
from workers.ps import ParameterServer
from workers.rendezvous import WorkerJoin, parse_join

LANES = 64
WINDOW = 16


@dataclass
class Rig:
    """One switch, its controller and one PS, as the service would set them up."""

    switch: SoftSwitch
    control: SwitchClient
    ps: ParameterServer

    def join_body(
        self,
        job: int,
        worker: int,
        fan_in: int,
        policy: Policy,
        *,
        part_base: int = 0,
        part_size: int = 0,
        seed: int = 7,
        window: int = WINDOW,
    ) -> dict[str, Any]:
        """The rendezvous JSON of ``docs/CONTRACTS.md`` for one worker."""
        if policy == Policy.STATIC:
            placement: dict[str, Any] = {
                "kind": "static",
                "part_base": part_base,
                "part_size": part_size,
            }
        else:
            placement = {"kind": "hashed", "seed": seed, "pool": self.switch.aggregators}
        host, port = self.switch.data_address
        return {
            "job_id": job,
            "switch_job_id": job,
            "worker_id": worker,
            "fan_in": fan_in,
            "policy": policy.name.lower(),
            "switch": {"host": host, "port": port},
            "ps": {"host": self.ps.address[0], "port": self.ps.address[1]},
            "lanes": self.switch.lanes,
            "window": window,
            "placement": placement,
        }

    def install(
        self,
        job: int,
        fan_in: int,
        policy: Policy,
        *,
        priority: int = 0,
        part_base: int = 0,
        part_size: int = 0,
        window: int = WINDOW,
    ) -> None:
        """Install `job` in the switch and register it with the PS."""
        self.control.install_job(
            JobInstall(
                job,
                policy,
                fan_in,
                part_base,
                part_size,
                ps=Endpoint(*self.ps.address),
                priority=priority,
            )
        )
        self.ps.register_job(
            job, fan_in, switch=self.switch.data_address, window=window, policy=policy
        )

    def clients(
        self,
        job: int,
        fan_in: int,
        policy: Policy,
        options: ClientOptions | None = None,
        *,
        gso: bool = True,
        **placement: Any,
    ) -> list[AllreduceClient]:
        """`fan_in` started clients of `job` (`gso` as `AllreduceClient` takes it), each
        registered with the switch."""
        made = []
        for w in range(fan_in):
            join: WorkerJoin = parse_join(self.join_body(job, w, fan_in, policy, **placement))
            client = AllreduceClient(
                join, options=options or ClientOptions(timeout_s=20.0), gso=gso
            )
            made.append(client)
            self.control.add_worker(job, w, Endpoint(*client.endpoint))
        return made


@pytest.fixture
def make_rig() -> Iterator[Callable[..., Rig]]:
    """A factory of rigs (`SoftSwitch` keyword arguments; `ps_gso` is the PS's `gso`);
    everything is closed at teardown."""
    made: list[tuple[SoftSwitch, SwitchClient, ParameterServer]] = []

    def make(*, ps_idle_timeout_s: float = 60.0, ps_gso: bool = True, **switch_kwargs: Any) -> Rig:
        switch_kwargs.setdefault("lanes", LANES)
        switch = SoftSwitch(**switch_kwargs).start()
        try:
            control = SwitchClient(
                switch.p4runtime_address, aggregators=switch.aggregators, lanes=switch.lanes
            )
        except BaseException:
            switch.stop()
            raise
        ps = ParameterServer(idle_timeout_s=ps_idle_timeout_s, gso=ps_gso).start()
        made.append((switch, control, ps))
        return Rig(switch, control, ps)

    yield make
    for switch, control, ps in made:
        ps.stop()
        control.close()
        switch.stop()


def at_once(work: Callable[[int], Any], n: int) -> list[Any]:
    """``work(i)`` for each i of ``range(n)``, run concurrently in threads (the workers of an
    allreduce must all take part); what each returned, or the exception it raised."""
    out: list[Any] = [None] * n

    def run(i: int) -> None:
        try:
            out[i] = work(i)
        except Exception as exc:  # returned to the test, which asserts on it
            out[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def allreduce_all(
    clients: Sequence[AllreduceClient], inputs: Sequence[np.ndarray], **kwargs: Any
) -> list[Any]:
    """Every client's allreduce of its input, run concurrently in threads (one per worker);
    an exception in a worker is returned in its slot."""
    return at_once(lambda w: clients[w].allreduce(inputs[w], **kwargs), len(clients))


@pytest.fixture
def each_at_once() -> Callable[[Callable[[int], Any], int], list[Any]]:
    """`at_once`, for test modules (importlib mode cannot import conftest)."""
    return at_once


@pytest.fixture
def run_all() -> Callable[..., list[Any]]:
    """`allreduce_all`, for test modules (importlib mode cannot import conftest)."""
    return allreduce_all
