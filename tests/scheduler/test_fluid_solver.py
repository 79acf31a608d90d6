"""The PS-delay solver of the aggregate model gives a plain bisection's answer.

`scheduler.psdelay.solve_wait` evaluates several bisection steps' midpoints per array call and
finishes the last few processes in Python floats: bit for bit the plain bisection below (one
midpoint per step, the right side computed as `_rates` and `_stream_time` compute it). With a
process per job it takes the closed-form root where one call confirms it: within the
bisection's tolerance of the plain answer.
"""

from __future__ import annotations

import numpy as np
import pytest

from scheduler.fluid import _rates, _stream_time
from scheduler.psdelay import (
    _BISECTIONS,
    _XTOL,
    PsLoad,
    Vec,
    _Cobham,
    _solve_alone,
    solve_wait,
    sum_by,
)

FS = 340 * 8 / 100e9  # a 340-byte fragment at 100 Gbps


def _plain_cobham(s: float, fs: float, w: int, load: PsLoad, x: Vec) -> Vec:
    srv = load.server
    xj = x if srv is None else x[srv]
    r = _rates(xj, load.q, load.a, w, fs, load.cap)
    t = _stream_time(load.frags, r, load.a + load.q * xj, fs, load.win)
    d = t / (t + load.t_fixed)
    avg = load.frags / (t + load.t_fixed)
    crit_j, copies_j = avg * load.c, avg * load.g
    extra = d * (r - avg)
    self_crit_j = extra * load.c
    self_all_j = self_crit_j + extra * load.g
    if srv is None:
        crit, copies, self_crit, self_all, total_d = crit_j, copies_j, self_crit_j, self_all_j, d
    else:
        n = load.servers
        crit, copies = sum_by(srv, crit_j, n), sum_by(srv, copies_j, n)
        self_crit, self_all = sum_by(srv, self_crit_j, n), sum_by(srv, self_all_j, n)
        total_d = sum_by(srv, d, n)
    if srv is None and load.paced:
        rho_c = np.zeros_like(crit)
        rho_all = rho_c
    else:
        rho_c = s * (crit + self_crit / total_d)
        rho_all = s * (crit + copies + self_all / total_d)
    queued = np.minimum(1.0, rho_all) * (s / 2) / np.maximum(1 - rho_c, 1e-300)
    out: Vec = np.where(rho_c >= 1, np.inf, queued)
    return out


def _plain_bisection(s: float, fs: float, w: int, load: PsLoad, guess: Vec | None) -> Vec:
    n = load.servers
    lo, hi = np.zeros(n), np.ones(n)
    if guess is not None:
        below, above = 0.98 * guess, 1.02 * guess + 5e-13
        lo = np.where(_plain_cobham(s, fs, w, load, below) > below, below, lo)
        hi = np.where(_plain_cobham(s, fs, w, load, above) > above, hi, above)
    live = ~(hi - lo < _XTOL * (lo + 1e-9))
    for _ in range(_BISECTIONS):
        if not live.any():
            break
        x = 0.5 * (lo + hi)
        up = _plain_cobham(s, fs, w, load, x) > x
        lo = np.where(live & up, x, lo)
        hi = np.where(live & ~up, x, hi)
        live &= ~(hi - lo < _XTOL * (lo + 1e-9))
    out: Vec = 0.5 * (lo + hi)
    return out


def _load(rng: np.random.Generator, jobs: int, servers: int | None, paced: bool) -> PsLoad:
    """Random loads from idle to saturated: some jobs never visit the PS (q = 0), some are
    capped by their switch share, windows of 16 or 128."""
    server = None
    if servers is not None:
        server = np.concatenate((np.arange(servers), rng.integers(0, servers, jobs - servers)))
    return PsLoad(
        q=rng.uniform(0, 1.5, jobs) * (rng.uniform(size=jobs) < 0.8),
        a=rng.uniform(2e-6, 2e-5, jobs),
        c=rng.uniform(0, 5, jobs),
        g=rng.uniform(0, 1, jobs),
        frags=np.ceil(rng.uniform(1, 1e6, jobs)),
        t_fixed=rng.uniform(0, 0.3, jobs),
        cap=np.where(rng.uniform(size=jobs) < 0.5, np.inf, rng.uniform(1e5, 1e8, jobs)),
        server=None if server is None else server.astype(np.intp),
        servers=jobs if servers is None else servers,
        win=int(rng.choice([16, 128])),
        paced=paced,
    )


def _within_tolerance(got: Vec, want: Vec) -> None:
    """`got` within `_XTOL` of the plain bisection's answer, relatively (as its bracket)."""
    assert np.all(np.abs(got - want) <= _XTOL * (want + 1e-9)), (got, want)


@pytest.mark.parametrize("jobs", [1, 3, 5, 12, 60])
@pytest.mark.parametrize("shared", [False, True])
@pytest.mark.parametrize("paced", [False, True])
def test_solver_gives_the_plain_bisection_answer(jobs: int, shared: bool, paced: bool) -> None:
    rng = np.random.default_rng([jobs, shared, paced])
    for _ in range(6):
        servers = int(rng.integers(1, jobs + 1)) if shared else None
        load = _load(rng, jobs, servers, paced)
        s = float(rng.uniform(2e-8, 2e-7))
        n = load.servers
        # No guess (the bracket [0, 1]), a guess near the root, and a guess far from it.
        root = _plain_bisection(s, FS, load.win, load, None)
        for guess in (None, root * rng.uniform(0.99, 1.01, n), rng.uniform(0, 1e-6, n)):
            with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
                want = _plain_bisection(s, FS, load.win, load, guess)
                got = solve_wait(s, FS, load.win, load, guess)
            if shared:
                assert got.tobytes() == want.tobytes()
            else:
                _within_tolerance(got, want)


@pytest.mark.parametrize("shared", [False, True])
def test_one_process_in_python_floats_matches_the_array_call(shared: bool) -> None:
    rng = np.random.default_rng(11)
    load = _load(rng, 20, 6 if shared else None, paced=False)
    right = _Cobham(2e-7, FS, load.win, load)
    trials = rng.uniform(0, 1e-6, (5, load.servers))
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        array = right(trials)
    for row, x in enumerate(trials):
        for process in range(load.servers):
            assert right.at(process, float(x[process])) == array[row, process]


class _Mispredicting(_Cobham):
    """The right side as it is, with its predicted roots off by up to a factor of 3 either
    way (zero for some processes), so that paths go the other way at every kind of step."""

    def __init__(self, *args: object, rng: np.random.Generator) -> None:
        super().__init__(*args)  # type: ignore[arg-type]
        self.rng = rng

    def root(self) -> Vec:
        exact = super().root()
        off = exact * self.rng.uniform(1 / 3, 3, len(exact))
        out: Vec = np.where(self.rng.uniform(size=len(exact)) < 0.2, 0.0, off)
        return out


@pytest.mark.parametrize("jobs", [1, 5, 60])
def test_a_process_per_job_gives_the_plain_answer_where_its_root_is_mispredicted(
    jobs: int,
) -> None:
    rng = np.random.default_rng([jobs, 7])
    for _ in range(6):
        load = _load(rng, jobs, None, paced=False)
        s = float(rng.uniform(2e-8, 2e-7))
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            want = _plain_bisection(s, FS, load.win, load, None)
            right = _Mispredicting(s, FS, load.win, load, rng=rng)
            got = _solve_alone(right)
        _within_tolerance(got, want)


def test_a_process_per_job_takes_the_closed_form_root_where_it_holds() -> None:
    """The check confirms the closed form wherever a process does not saturate (it is what
    makes the solver cheap); only saturated processes (no finite root) are bisected."""
    rng = np.random.default_rng(3)
    finite = total = 0
    for _ in range(20):
        load = _load(rng, 60, None, paced=False)
        right = _Cobham(float(rng.uniform(2e-8, 2e-7)), FS, load.win, load)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            got, root = _solve_alone(right), right.root()
        holds = np.isfinite(root) & (root <= 1)
        assert np.array_equal(got[holds], np.maximum(root[holds], 0.0))
        finite += int(np.count_nonzero(holds))
        total += len(got)
    assert finite >= 0.85 * total
