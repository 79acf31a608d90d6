"""Two levels over real UDP (p4/PROTOCOL.md section 7): two soft switches as ToRs under a
third as spine, each programmed over its own P4Runtime server, 2 x 2 workers of a cross-rack
job, and the PS; and the same job spilled (7.8: the spine holds no entry for it, each ToR
sends its rack's sum to the PS, which sends the result to both ToRs). Every switch drops 1%
of what it receives (worker -> ToR, ToR -> spine, spine -> ToR, PS -> spine); every sum stays
within the quantisation bound of the exact sum.

Each ToR is started with its parent; `p4ctl.tree_install` writes 7.2's tables through each
switch's `SwitchClient`, and the ToRs derive their two-level fields from them (7.7).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
from p4ctl.backend import Endpoint, JobInstall
from p4ctl.client import SwitchClient
from p4ctl.protocol import DropReason, Policy
from p4ctl.softswitch import SoftSwitch
from p4ctl.tree_install import TreeSwitch, install_job_tree

from workers.client import AllreduceClient, ClientOptions
from workers.ps import ParameterServer
from workers.quant import DEFAULT_EXPONENT, error_bound, next_exponents
from workers.rendezvous import parse_join

LANES = 64
WINDOW = 16
PART = 16  # a static job's slots per switch: its window
SIZE = 3000
ROUNDS = 6  # about 1,700 fragments per switch: a dozen or more losses on each
LOSS = 0.01


@dataclass
class Fabric:
    spine: SoftSwitch
    tors: dict[str, SoftSwitch]
    ps: ParameterServer
    control: dict[str, TreeSwitch]  # by "spine" and each ToR's name
    clients: list[AllreduceClient] = field(default_factory=list)

    def install(
        self,
        job: int,
        policy: Policy,
        racks: dict[str, int],
        priority: int = 0,
        *,
        spill: bool = False,
    ) -> dict[int, AllreduceClient]:
        """Install `job` as 7.2 says (on the spine only when it spans racks; `spill`: never,
        its ToRs' parent is the PS, 7.8), register it with the PS and start its workers;
        `racks` gives each ToR's worker count. Workers are numbered across racks in order."""
        fan_in = sum(racks.values())
        base = 2 * PART * (job - 1)
        ps = Endpoint(*self.ps.address)
        install = JobInstall(job, policy, fan_in, base, PART, ps=ps, priority=priority)
        workers: dict[int, AllreduceClient] = {}
        placed = []
        for name, count in racks.items():
            tor = self.tors[name]
            ids = range(len(workers), len(workers) + count)
            for w in ids:
                workers[w] = self._client(tor, job, w, fan_in, policy, base)
            placed.append((self.control[name], {w: Endpoint(*workers[w].endpoint) for w in ids}))
        tree = install_job_tree(install, placed, None if spill else self.control["spine"])
        assert tree.spill == (spill and len(racks) > 1)
        self.ps.register_job(
            job,
            fan_in,
            switch=tree.root,
            window=WINDOW,
            policy=policy,
            children=tree.children,
            spill=tree.spill,
        )
        return workers

    def _client(
        self, tor: SoftSwitch, job: int, worker: int, fan_in: int, policy: Policy, base: int
    ) -> AllreduceClient:
        if policy == Policy.STATIC:
            placement: dict[str, Any] = {"kind": "static", "part_base": base, "part_size": PART}
        else:
            placement = {"kind": "hashed", "seed": 101 * job, "pool": tor.aggregators}
        host, port = tor.data_address
        body = {
            "job_id": job,
            "switch_job_id": job,
            "worker_id": worker,
            "fan_in": fan_in,
            "policy": policy.name.lower(),
            "switch": {"host": host, "port": port},
            "ps": {"host": self.ps.address[0], "port": self.ps.address[1]},
            "lanes": LANES,
            "window": WINDOW,
            "placement": placement,
        }
        client = AllreduceClient(parse_join(body), options=ClientOptions(timeout_s=30.0))
        self.clients.append(client)
        return client

    def counter(self, switch: SoftSwitch, name: str, job: int) -> int:
        return int(switch.pipeline.job_packets[name][job])


def _control(switch: SoftSwitch) -> TreeSwitch:
    client = SwitchClient(
        switch.p4runtime_address, aggregators=switch.aggregators, lanes=switch.lanes
    )
    return TreeSwitch(client, switch.data_address)


@pytest.fixture
def make_fabric() -> Iterator[Any]:
    """A factory: ToRs A and B under a spine, `aggregators` each (one P4 program: one pool
    size), each dropping `LOSS` of what it receives, and a PS; all closed at teardown."""
    made: list[Any] = []
    fabrics: list[Fabric] = []

    def make(aggregators: int) -> Fabric:
        spine = SoftSwitch(aggregators=aggregators, lanes=LANES, drop_rate=LOSS, seed=1).start()
        made.append(spine)
        tors = {}
        for n, name in enumerate("AB"):
            tor = SoftSwitch(
                aggregators=aggregators, lanes=LANES, drop_rate=LOSS, seed=2 + n,
                parent=spine.data_address,
            ).start()  # fmt: skip
            made.append(tor)
            tors[name] = tor
        control = {name: _control(s) for name, s in (("spine", spine), *tors.items())}
        ps = ParameterServer().start()
        made.append(ps)
        fabrics.append(Fabric(spine, tors, ps, control))
        return fabrics[-1]

    yield make
    for fab in fabrics:
        for client in fab.clients:
            client.close()
        for wired in fab.control.values():
            wired.client.close()
    for thing in reversed(made):
        thing.stop()


def _allreduce_exactly(jobs: dict[int, dict[int, AllreduceClient]], rounds: int) -> None:
    """`rounds` allreduces by every worker of every job at once; each result within the
    quantisation bound of the exact float64 sum."""
    rng = np.random.default_rng(0)
    xs = {
        (job, w): [rng.uniform(-1, 1, SIZE).astype(np.float32) for _ in range(rounds)]
        for job, workers in jobs.items()
        for w in workers
    }
    got: dict[tuple[int, int], Any] = {}

    def run(job: int, w: int) -> None:
        try:
            got[job, w] = [jobs[job][w].allreduce(x) for x in xs[job, w]]
        except Exception as exc:  # asserted on below
            got[job, w] = exc

    threads = [threading.Thread(target=run, args=key) for key in xs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for (job, w), results in got.items():
        assert not isinstance(results, BaseException), f"job {job} worker {w}: {results!r}"
        exps = np.full(-(-SIZE // LANES), DEFAULT_EXPONENT, np.int8)
        peers = [k for k in xs if k[0] == job]
        for r, result in enumerate(results):
            parts = [xs[k][r].astype(np.float64) for k in peers]
            per_element = np.repeat(exps.astype(np.int64), LANES)[:SIZE]
            bound = error_bound(sum(parts), sum(np.abs(p) for p in parts), len(peers), per_element)
            assert np.all(np.abs(result - sum(parts)) <= bound), (job, w, r)
            exps = next_exponents(np.pad(result, (0, -SIZE % LANES)).reshape(-1, LANES), exps)


@pytest.mark.parametrize("policy", list(Policy), ids=lambda p: p.name.lower())
def test_a_cross_rack_job_is_exact_under_loss_and_an_in_rack_job_never_touches_the_spine(
    make_fabric: Any, policy: Policy
) -> None:
    fabric = make_fabric(128)
    cross = fabric.install(1, policy, {"A": 2, "B": 2})
    inside = fabric.install(2, policy, {"A": 2})
    _allreduce_exactly({1: cross, 2: inside}, ROUNDS)
    spine = fabric.spine
    assert fabric.counter(spine, "job_aggregated", 1) > 0  # the ToRs' sums met at the spine
    assert all(int(cells[2]) == 0 for cells in spine.pipeline.job_packets.values()), (
        "the in-rack job reached the spine"
    )
    lost = sum(
        int(p.pipeline.drop_packets[DropReason.INJECTED_LOSS])
        for p in (spine, *fabric.tors.values())
    )
    assert lost > 0, "no loss was injected"


def test_an_esa_job_preempted_at_the_spine_stays_exact(make_fabric: Any) -> None:
    # Two cross-rack esa jobs on a pool of 8, as tests/workers/test_shared_pool.py: the higher
    # priority job evicts the other's partial sums at the ToRs and at the spine; the evicted
    # sums reach the PS counted once.
    fabric = make_fabric(8)
    low = fabric.install(1, Policy.ESA, {"A": 2, "B": 2}, priority=1)
    high = fabric.install(3, Policy.ESA, {"A": 2, "B": 2}, priority=5)
    for _ in range(10):
        _allreduce_exactly({1: low, 3: high}, ROUNDS)
        if fabric.counter(fabric.spine, "job_evicted", 1) > 0:
            break
    assert fabric.counter(fabric.spine, "job_preempted", 3) > 0
    assert fabric.counter(fabric.spine, "job_evicted", 1) > 0


@pytest.mark.parametrize("policy", list(Policy), ids=lambda p: p.name.lower())
def test_a_spilled_job_aggregates_in_each_rack_and_is_exact_under_loss(
    make_fabric: Any, policy: Policy
) -> None:
    # The spine has no entry for job 1: each ToR sums its rack and sends it to the PS (7.8).
    fabric = make_fabric(128)
    spilled = fabric.install(1, policy, {"A": 2, "B": 2}, spill=True)
    inside = fabric.install(2, policy, {"A": 2})
    _allreduce_exactly({1: spilled, 2: inside}, ROUNDS)
    assert all(int(cells[1]) == 0 for cells in fabric.spine.pipeline.job_packets.values())
    for tor, mask in zip(fabric.tors.values(), (0b0011, 0b1100), strict=True):
        cfg = tor.pipeline.jobs[1]  # as 7.7 derives it: the PS is the parent
        assert (cfg.up_port, cfg.local_mask) == (cfg.ps_port, mask), cfg
        assert fabric.counter(tor, "job_aggregated", 1) > 0, "a rack's sum was not built"
    outcomes = fabric.ps.counters().outcomes
    assert outcomes.get("completed", 0) > 0 and outcomes.get("added", 0) > 0, outcomes
    lost = sum(int(p.pipeline.drop_packets[DropReason.INJECTED_LOSS]) for p in fabric.tors.values())
    assert lost > 0, "no loss was injected"
