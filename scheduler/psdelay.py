"""The PS-delay solver of the aggregate model (`scheduler.fluid`): the queueing delay of
critical packets at each PS process, the root of ``x = R / (1 - rho_crit)`` (Cobham's M/G/1
non-preemptive-priority delay, ``R = min(1, rho_all) x ps_fragment_s / 2``) at the fragment
rates that delay leaves each job (`scheduler.fluid` says why that is the delay).

Where processes are shared, the answer is a plain bisection's, bit for bit; where every job
has a process of its own, it is the closed-form root, checked to lie within the bisection's
tolerance (`tests/scheduler/test_fluid_solver` holds the plain bisection both must match).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import overload

import numpy as np
import numpy.typing as npt

__all__ = ["PsLoad", "Vec", "solve_wait", "sum_by"]

Vec = npt.NDArray[np.float64]

_BISECTIONS = 60
# Relative tolerance of a PS delay; well below the aggregate model's own, so that its outer
# iteration can settle.
_XTOL = 1e-6


@dataclass(frozen=True, slots=True)
class PsLoad:
    """What each job puts on its PS process, per job (arrays aligned with the jobs).

    `q`: share of its fragments that wait for the PS; `a`: slot time without queueing; `c`,
    `g`: critical and copy packets per fragment; `frags`: fragments per iteration; `t_fixed`:
    compute + fixed allreduce time; `cap`: a worker's fragment rate at its share of the
    switch (inf: unlimited); `server`: its PS process, numbered 0 .. servers-1, or
    None when every job has a process of its own (process i serves job i); `paced`: its
    critical packets are its complete sums, one per fragment, paced by its window (atp).
    """

    q: Vec
    a: Vec
    c: Vec
    g: Vec
    frags: Vec
    t_fixed: Vec
    cap: Vec
    server: npt.NDArray[np.intp] | None
    servers: int
    win: int
    paced: bool


class _Cobham:
    """The right side of ``x = R / (1 - rho_crit)`` for one `PsLoad`, at many trial delays.

    What does not depend on the trial delay is worked out once, when it is built; a call
    takes trial delays of shape ``(points, servers)`` (one row per trial) and answers in
    the same shape. Each job streams at `fluid._rates`, so it communicates a share d of the time;
    a communicating job sees its own load in full and the others' duty-weighted.

    Every element is the same sequence of float operations as one trial alone (the same
    `fluid._rates` and `fluid._stream_time` arithmetic, in the same order), so a row's answer
    does not depend on what else is evaluated with it: `solve_wait` relies on that.
    """

    def __init__(self, s: float, fs: float, w: int, load: PsLoad) -> None:
        self.s, self.fs, self.w, self.load = s, fs, w, load
        # atp on a process of its own: the job's window paces its complete sums a slot
        # apart each, deterministic service, so they do not queue behind one another below
        # capacity (`PsLoad.cap` holds it to capacity): no delay at any trial.
        self.zero = load.server is None and load.paced
        # min(min(1/fs, windowed), cap) == min(windowed, min(1/fs, cap)): a min is exact.
        self.cap = np.minimum(1 / fs, load.cap)
        # `fluid._stream_time`'s terms that depend on the fragment count alone.
        frags, win = load.frags, load.win
        rounds = np.ceil(frags / win - 1e-9)
        short = np.where(frags > win, rounds * win - frags, 0.0)
        self.first = np.minimum(frags, win) - short
        # Rows of trials -> the bincount index of each (row, server), made on first use.
        self.flat: dict[int, npt.NDArray[np.intp]] = {}
        # Per process, its jobs' terms as Python floats (for `at`), made on first use.
        self.rows: list[list[tuple[float, ...]]] | None = None

    def __call__(self, x: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        if self.zero:
            return np.zeros_like(x)
        load = self.load
        srv = load.server
        xj = x if srv is None else x[:, srv]
        terms = _job_terms(
            xj, load.a, load.q, self.cap, load.frags, self.first, load.t_fixed, load.c, load.g,
            w=self.w, win=load.win, fs=self.fs,
        )  # fmt: skip
        if srv is None:
            return _queued(self.s, *terms)
        crit, copies, self_crit, self_all, d = (self._by_server(v) for v in terms)
        return _queued(self.s, crit, copies, self_crit, self_all, d)

    def root(self) -> Vec:
        """Where each job's process settles, from the closed form of ``x = R / (1 -
        rho_crit)`` for a process of its own, in exact arithmetic: `_solve_alone` takes it
        where one array call confirms it, never unchecked.

        Alone on its process, a job's own duty cycle cancels out: ``rho_crit = s c r`` and
        ``rho_all = s (c + g) r`` at its fragment rate ``r = min(w / (a + q x), cap)``. Where
        the cap binds, r does not depend on x; where the window binds, x solves a quadratic
        (one for ``rho_all`` below 1, one above)."""
        load, s, w = self.load, self.s, self.w
        if self.zero:
            return np.zeros(load.servers)
        a, q, c, g, cap = load.a, load.q, load.c, load.g, self.cap
        # A prediction only: where it divides by zero or overflows, the check corrects it.
        with np.errstate(all="ignore"):
            at_cap = _delay_at(s, c, g, cap)
            knee = (w / cap - a) / q  # below this delay the cap binds
            below_one = _positive_root(q, a - s * c * w, s * s * (c + g) * w / 2)
            above_one = _positive_root(q, a - s * c * w - s * q / 2, s * a / 2)
            windowed = np.where(s * (c + g) * w <= a + q * below_one, below_one, above_one)
            out: Vec = np.where(
                q > 0,
                np.where(at_cap <= knee, at_cap, windowed),
                _delay_at(s, c, g, np.minimum(w / a, cap)),
            )
        return out

    def _by_server(self, per_job: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        """Row by row, each server's sum over its jobs, added in job order (as `sum_by`)."""
        points, servers = per_job.shape[0], self.load.servers
        index = self.flat.get(points)
        if index is None:
            assert self.load.server is not None
            rows = np.arange(points, dtype=np.intp)[:, None] * servers
            index = self.flat[points] = (rows + self.load.server[None, :]).ravel()
        sums = sum_by(index, per_job.ravel(), points * servers)
        return sums.reshape(points, servers)

    def at(self, process: int, x: float) -> float:
        """``self`` at trial delay `x` for `process` alone, in Python floats: the same
        operations in the same order, so the same answer, without an array call's overhead
        (`solve_wait` uses it once few processes are left to bisect)."""
        if self.zero:
            return 0.0
        s, fs, w, win = self.s, self.fs, self.w, self.load.win
        crit = copies = self_crit = self_all = total_d = 0.0
        for a, q, cap, frags, first, t_fixed, c, g in self._jobs_of(process):
            slot = a + q * x
            r = min(w / slot, cap)
            unit = max(0.0, 2 * slot / win - 1 / r - fs)
            t = frags / r + slot - first * unit
            d = t / (t + t_fixed)
            avg = frags / (t + t_fixed)
            crit_j = avg * c
            copies_j = avg * g
            extra = d * (r - avg)
            self_crit_j = extra * c
            # Summed in job order from 0.0, as `sum_by` sums them.
            crit += crit_j
            copies += copies_j
            self_crit += self_crit_j
            self_all += self_crit_j + extra * g
            total_d += d
        rho_c = s * (crit + self_crit / total_d)
        rho_all = s * (crit + copies + self_all / total_d)
        queued = min(1.0, rho_all) * (s / 2) / max(1 - rho_c, 1e-300)
        return math.inf if rho_c >= 1 else queued

    def _jobs_of(self, process: int) -> list[tuple[float, ...]]:
        """The terms `at` reads, one tuple per job of `process`, in job order."""
        if self.rows is None:
            load = self.load
            columns = (load.a, load.q, self.cap, load.frags, self.first, load.t_fixed, load.c)
            per_job = list(zip(*(v.tolist() for v in (*columns, load.g)), strict=True))
            owner = range(len(per_job)) if load.server is None else load.server.tolist()
            self.rows = [[] for _ in range(load.servers)]
            for job, proc in enumerate(owner):
                self.rows[proc].append(per_job[job])
        return self.rows[process]


def _job_terms(
    x: Vec,
    a: Vec,
    q: Vec,
    cap: Vec,
    frags: Vec,
    first: Vec,
    t_fixed: Vec,
    c: Vec,
    g: Vec,
    *,
    w: int,
    win: int,
    fs: float,
) -> tuple[Vec, Vec, Vec, Vec, Vec]:
    """Each job's part of its process's load at trial delay `x` (see `_Cobham`): its critical
    and copy packets per second as the others see them, its own extra while it communicates
    (critical, all), and its duty cycle; `_Cobham.at` is the same in Python floats."""
    slot = a + q * x
    r = np.minimum(w / slot, cap)
    unit = np.maximum(0.0, 2 * slot / win - 1 / r - fs)
    t = frags / r + slot - first * unit
    d = t / (t + t_fixed)  # > 0: every process serves at least one job
    # A job's packets over its whole iteration, the others' view of it: one iteration's
    # fragments, not its streaming rate times its duty (which counts the wait for its last
    # results as streaming). While it communicates it sees its own at its streaming rate.
    avg = frags / (t + t_fixed)
    extra = d * (r - avg)
    self_crit = extra * c
    return avg * c, avg * g, self_crit, self_crit + extra * g, d


def _queued(s: float, crit: Vec, copies: Vec, self_crit: Vec, self_all: Vec, d: Vec) -> Vec:
    """Cobham's delay of a critical packet at a process whose jobs' terms (`_job_terms`,
    summed over its jobs) are these."""
    rho_c = s * (crit + self_crit / d)
    rho_all = s * (crit + copies + self_all / d)
    queued = np.minimum(1.0, rho_all) * (s / 2) / np.maximum(1 - rho_c, 1e-300)
    out: Vec = np.where(rho_c >= 1, np.inf, queued)
    return out


def _delay_at(s: float, c: Vec, g: Vec, r: Vec) -> Vec:
    """Cobham's delay at a process of its own for a job sending `r` fragments per second."""
    rho_c = s * c * r
    out: Vec = np.where(
        rho_c >= 1, np.inf, np.minimum(1.0, s * (c + g) * r) * (s / 2) / (1 - rho_c)
    )
    return out


def _positive_root(q: Vec, b: Vec, k: Vec) -> Vec:
    """The root >= 0 of ``q x^2 + b x - k = 0`` (q > 0, k >= 0), without cancellation."""
    disc = np.sqrt(b * b + 4 * q * k)
    out: Vec = np.where(b >= 0, 2 * k / (b + disc), (disc - b) / (2 * q))
    return out


# Bisection steps `solve_wait` takes per evaluation of `_Cobham`: it evaluates the whole
# tree of the next midpoints (2^depth - 1 of them) at once, which costs little more than one
# midpoint on arrays this small, then walks down it.
_TREE_DEPTH = 4
# With this many processes or fewer left to bisect, `_Cobham.at` (Python floats, one process at
# a time) costs less than an array call on all of them.
_FEW = 4


def solve_wait(s: float, fs: float, w: int, load: PsLoad, guess: Vec | None = None) -> Vec:
    """The queueing delay x of critical packets at each PS process, by bisection.

    The left side of ``x = R / (1 - rho_crit)`` (Cobham, ``R = min(1, rho_all) s / 2``)
    grows with x, the right side (`_Cobham`) shrinks as jobs slow down, so each process has
    one root; windows keep rho_crit below 1. All processes are bisected at once, each to a
    relative tolerance of `_XTOL`. `guess` (an earlier root) narrows the starting bracket
    ``[0, 1]`` to within 2% of it when the root lies there, which saves most bisections.

    Each bisection step halves the bracket at its midpoint, as a plain bisection does, and
    the answer is the one a plain bisection gives, bit for bit
    (`tests/scheduler/test_fluid_solver` holds the plain bisection it must match): the
    midpoints of the next `_TREE_DEPTH` steps, both ways down, are evaluated together. Where
    each job has a process of its own (ATP's deployment, the benchmark's default), the
    closed-form root is checked instead (`_solve_alone`): within the bisection's tolerance of
    its answer, at one array call for every process, and `guess` is not needed.
    """
    f = _Cobham(s, fs, w, load)
    if load.server is None:
        return _solve_alone(f)
    lo, hi = _bracket(f, load.servers, guess)
    live = ~_narrow(lo, hi)
    steps = 0
    while steps < _BISECTIONS and live.any():
        few = np.flatnonzero(live)
        if len(few) <= _FEW:
            for i in few.tolist():
                lo[i], hi[i] = _bisect_one(f, i, float(lo[i]), float(hi[i]), steps)
            break
        depth = min(_TREE_DEPTH, _BISECTIONS - steps)
        lo, hi, settled = _tree_steps(f, lo, hi, live, depth)
        live &= ~settled
        steps += depth
    out: Vec = 0.5 * (lo + hi)
    return out


def _bracket(f: _Cobham, n: int, guess: Vec | None) -> tuple[Vec, Vec]:
    """Each process's starting bracket: ``[0, 1]``, narrowed to within 2% of `guess` where the
    root lies there."""
    lo, hi = np.zeros(n), np.ones(n)
    if guess is not None:
        below, above = 0.98 * guess, 1.02 * guess + 5e-13
        right = f(np.stack((below, above)))
        lo = np.where(right[0] > below, below, lo)
        hi = np.where(right[1] > above, hi, above)
    return lo, hi


def _tree_steps(
    f: _Cobham, lo: Vec, hi: Vec, live: npt.NDArray[np.bool_], depth: int
) -> tuple[Vec, Vec, npt.NDArray[np.bool_]]:
    """`depth` bisection steps of every `live` process from ``[lo, hi]``, in one evaluation of
    `f` on the whole tree of midpoints: the brackets after them (each process stopped at the
    first step that brought it within tolerance), and which processes that step settled."""
    n = len(lo)
    columns = np.arange(n)
    # Level k of the tree holds the 2^k brackets k steps down, node i's children being
    # i (its midpoint was above the root, so it became hi) and i + 2^k (below: lo);
    # rows 2^k - 1 .. 2^(k+1) - 2 of `tree` hold level k's midpoints.
    levels_lo, levels_hi, mids = [lo[None, :]], [hi[None, :]], []
    for _ in range(depth):
        level_lo, level_hi = levels_lo[-1], levels_hi[-1]
        mid = 0.5 * (level_lo + level_hi)
        mids.append(mid)
        levels_lo.append(np.concatenate((level_lo, mid)))
        levels_hi.append(np.concatenate((mid, level_hi)))
    tree = np.concatenate(mids).ravel()
    up_at = f(tree.reshape(-1, n)).ravel() > tree  # whether the root lies above
    # Each process's path down the tree: its node's flat index in `tree`, level by level
    # (level k + 1's rows start 2^k rows after level k's; an up step skips 2^k more).
    path = np.empty((depth + 1, n), dtype=np.intp)
    path[0] = columns
    for k in range(depth):
        path[k + 1] = path[k] + np.where(up_at.take(path[k]), (2 * n) << k, n << k)
    # The bracket each step leads to: the same node in levels 1 .. depth, one row lower.
    after = path[1:] - n
    lo_after = np.concatenate(levels_lo[1:]).ravel().take(after)
    hi_after = np.concatenate(levels_hi[1:]).ravel().take(after)
    done = _narrow(lo_after, hi_after)
    # A process stops at the first step that brings it within tolerance.
    settled: npt.NDArray[np.bool_] = np.asarray(done.any(axis=0))
    last = np.where(settled, done.argmax(axis=0), depth - 1)
    lo = np.where(live, lo_after[last, columns], lo)
    hi = np.where(live, hi_after[last, columns], hi)
    return lo, hi, settled


def _solve_alone(f: _Cobham) -> Vec:
    """`solve_wait` when every job has a process of its own: each process's closed-form root
    (`_Cobham.root`), checked in one array call.

    A root x is taken where the right side crosses the left within a quarter of `_XTOL` of
    it: above the left side at ``x - h`` (or ``x - h`` below 0: no delay is negative) and not
    above it at ``x + h``, ``h = _XTOL (x + 1e-9) / 4``. The true root then lies within h of
    x, closer than the bisection's own answer lies to it. A process whose check fails (a
    root past the bracket [0, 1], or one the closed form gets wrong at a division by zero or
    an overflow) is bisected as `solve_wait` bisects it (`_bisect_one`)."""
    # A prediction only: where it divides by zero or overflows, the check rejects it.
    with np.errstate(all="ignore"):
        x = np.maximum(f.root(), 0.0)
        half = _XTOL / 4 * (x + 1e-9)
        below, above = x - half, x + half
        right_below, right_above = f(np.stack((below, above)))
        ok = ((below <= 0) | (right_below > below)) & ~(right_above > above) & (above <= 1)
    out: Vec = x
    for i in np.flatnonzero(~ok).tolist():
        lo, hi = _bisect_one(f, i, 0.0, 1.0, 0)
        out[i] = 0.5 * (lo + hi)
    return out


@overload
def _narrow(lo: float, hi: float) -> bool: ...
@overload
def _narrow(lo: Vec, hi: Vec) -> npt.NDArray[np.bool_]: ...
def _narrow(lo: float | Vec, hi: float | Vec) -> bool | npt.NDArray[np.bool_]:
    """Whether a bisection bracket ``[lo, hi]`` is within the relative tolerance `_XTOL`."""
    return hi - lo < _XTOL * (lo + 1e-9)


def _bisect_one(f: _Cobham, process: int, lo: float, hi: float, steps: int) -> tuple[float, float]:
    """`solve_wait`'s bisection for one process in Python floats, from `steps` steps on:
    its bracket ``(lo, hi)`` once it is within tolerance or the steps run out."""
    while steps < _BISECTIONS:
        x = 0.5 * (lo + hi)
        if f.at(process, x) > x:
            lo = x
        else:
            hi = x
        steps += 1
        if _narrow(lo, hi):
            break
    return lo, hi


def sum_by(index: npt.NDArray[np.intp], weights: Vec | None, n: int) -> Vec:
    """``out[k]`` = sum of `weights` (1 each when None) where `index` is k, for k < n."""
    return np.bincount(index, weights, n).astype(np.float64, copy=False)
