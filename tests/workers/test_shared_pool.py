"""Two jobs on a deliberately tiny pool: fragments collide and bypass to the PS, and under esa
the higher-priority job preempts the other's partial sums; every sum stays within the bound."""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import pytest
from p4ctl.protocol import Policy

from workers.quant import DEFAULT_EXPONENT, error_bound, next_exponents

SIZE = 3000
LANES = 64
ROUNDS = 3
MAX_BATCHES = 10


@pytest.mark.parametrize("policy", [Policy.ATP, Policy.ESA], ids=["atp", "esa"])
def test_two_jobs_on_eight_aggregators_stay_exact(make_rig: Any, policy: Policy) -> None:
    rig = make_rig(aggregators=8)
    jobs = {1: 5, 2: 1}  # job -> priority: job 1 outranks job 2
    clients = {}
    for job, priority in jobs.items():
        rig.install(job, 2, policy, priority=priority)
        clients[job] = rig.clients(job, 2, policy, seed=job * 101)
    rng = np.random.default_rng(0)
    # Whether a fragment of job 1 lands on a partial sum of job 2 depends on how the four
    # worker threads interleave: keep allreducing (every result checked) until it has, up to
    # MAX_BATCHES batches of ROUNDS.
    exps = {key: np.full(-(-SIZE // LANES), DEFAULT_EXPONENT, np.int8) for key in _workers(jobs)}
    try:
        for _ in range(MAX_BATCHES):
            _batch(rng, clients, jobs, exps)
            counters = rig.control.counters().jobs
            if policy != Policy.ESA or counters[1]["job_preempted"] > 0:
                break
    finally:
        for pair in clients.values():
            for c in pair:
                c.close()
    assert counters[1]["job_bypassed"] + counters[2]["job_bypassed"] > 0
    if policy == Policy.ESA:
        assert counters[1]["job_preempted"] > 0
        assert counters[2]["job_evicted"] > 0
    outcomes = rig.ps.counters().outcomes
    assert outcomes["completed"] > 0


def _workers(jobs: dict[int, int]) -> list[tuple[int, int]]:
    return [(job, w) for job in jobs for w in range(2)]


def _batch(
    rng: np.random.Generator,
    clients: dict[int, Any],
    jobs: dict[int, int],
    exps: dict[tuple[int, int], Any],
) -> None:
    """ROUNDS allreduces of fresh tensors by every worker of every job at once, each result
    within the quantisation bound of the exact sum (`exps`: each worker's exponents)."""
    xs = {
        job: [
            [rng.uniform(-1, 1, SIZE).astype(np.float32) for _ in range(2)] for _ in range(ROUNDS)
        ]
        for job in jobs
    }
    got: dict[tuple[int, int], list[Any]] = {}

    def run(job: int, w: int) -> None:
        try:
            got[job, w] = [clients[job][w].allreduce(xs[job][r][w]) for r in range(ROUNDS)]
        except Exception as exc:  # asserted on below
            got[job, w] = [exc]

    threads = [threading.Thread(target=run, args=(j, w)) for j in jobs for w in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for (job, w), results in got.items():
        assert not isinstance(results[0], BaseException), f"job {job} worker {w}: {results[0]!r}"
        for r, result in enumerate(results):
            a, b = (x.astype(np.float64) for x in xs[job][r])
            per_element = np.repeat(exps[job, w].astype(np.int64), LANES)[:SIZE]
            bound = error_bound(a + b, np.abs(a) + np.abs(b), 2, per_element)
            exps[job, w] = next_exponents(
                np.pad(result, (0, -SIZE % LANES)).reshape(-1, LANES), exps[job, w]
            )
            assert np.all(np.abs(result - (a + b)) <= bound), (job, w, r)
