"""`FabricSwitches`: the service's `SwitchBackend` over a fabric of switches, one each.

A job is placed once by the scheduler, on a pool the size of the fabric's smallest switch, and
that placement is its memory on every switch of its tree. Its tree is known when its workers
have joined: each worker's address names its ToR (`Fabric.tor_of`), and the tree is those
ToRs and every switch up to their lowest common ancestor (`Fabric.tree_of`). Until then
`install_job` and `add_worker` are recorded; the join that completes the job writes its entry
and contributors on every switch of the tree (`tree_entries`), a job in one rack on its ToR
alone, exactly as on a single switch.

A switch that answers no call for `LOST_AFTER_S` (`SwitchUnavailable`) is lost: `lost()`
names it and why, every job whose tree holds it is the coordinator's to fail, and removing a
job skips it (its memory went with it) while freeing the job's memory on every other switch. A
lost switch stays lost until the service restarts. Reads keep each switch's last answer.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import cast

from p4ctl.backend import Endpoint, JobInstall, Occupancy, SwitchBackend, SwitchCounters
from p4ctl.errors import SwitchError, SwitchUnavailable, UpdateError, WriteFailed
from p4ctl.protocol import AggState

from scheduler.fabric import Fabric

__all__ = [
    "LOST_AFTER_S",
    "FabricSwitches",
    "NotUnderATor",
    "SwitchRead",
    "TreeEntry",
    "tree_entries",
]

log = logging.getLogger(__name__)


class NotUnderATor(ValueError):
    """A worker's address is in no rack's networks: no ToR of the fabric serves it."""


@dataclass(frozen=True, slots=True)
class TreeEntry:
    """What one switch of a job's tree holds for it (``p4/PROTOCOL.md`` 7.2): the job's entry
    (`install`: the job's fan-in, its PS), its `workers` ``(job-wide id, endpoint)`` (a ToR's
    rack's; none above), its `children` in the tree (data addresses, in file order; results
    go down to them), and `up`, the parent's data address where the tree goes on above this
    switch (None at the tree's top, whose complete sums go back down)."""

    switch: str
    install: JobInstall
    workers: tuple[tuple[int, Endpoint], ...]
    children: tuple[Endpoint, ...]
    up: Endpoint | None


def tree_entries(
    fabric: Fabric,
    data: Mapping[str, Endpoint],
    install: JobInstall,
    workers: Mapping[int, tuple[str, Endpoint]],
) -> list[TreeEntry]:
    """The entries of a job whose workers are ``{worker id: (ToR, endpoint)}``, lowest level
    first. Worker ids and the bitmap are the job's at every switch; a job in one rack is one
    entry, its ToR's, exactly as on a single switch."""
    tree = fabric.tree_of(tor for _, (tor, _) in sorted(workers.items()))
    top = tree[-1]
    entries = []
    for name in tree:
        switch = fabric.switch(name)
        mine = tuple((w, ep) for w, (tor, ep) in sorted(workers.items()) if tor == name)
        kids = tuple(data[c] for c in fabric.children(name) if c in tree)
        up = None if name == top or switch.parent is None else data[switch.parent]
        entries.append(TreeEntry(name, install, mine, kids, up))
    return entries


@dataclass(frozen=True, slots=True)
class SwitchRead:
    """One switch's last read: its occupancy and counters, and why it is lost ("" if not)."""

    name: str
    data: Endpoint
    occupancy: Occupancy
    counters: SwitchCounters
    lost: str = ""


@dataclass
class _Job:
    install: JobInstall
    workers: dict[int, tuple[str, Endpoint]] = field(default_factory=dict)
    tree: tuple[str, ...] = ()


# Assumed: a switch that answers no call for this long is gone, not slow. The service reads
# every switch each tick, so a dead one is lost within about this; a blip shorter than it (a
# deadline passed under load) fails no job.
LOST_AFTER_S = 3.0
_UNREAD = Occupancy((), (), "not read yet")
_NO_COUNTERS = SwitchCounters({}, {}, "not read yet")


class FabricSwitches:
    """A `SwitchBackend` over `switches` (name -> backend, every switch of `fabric`), whose
    UDP data addresses are `data`. Its pool is the smallest switch's; lanes must agree."""

    def __init__(
        self,
        fabric: Fabric,
        switches: Mapping[str, SwitchBackend],
        data: Mapping[str, Endpoint],
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        names = [s.name for s in fabric.switches]
        missing = [n for n in names if n not in switches or n not in data]
        if missing:
            raise ValueError(f"no connection or data address for switch {missing[0]!r}")
        lanes = {n: switches[n].lanes for n in names}
        if len(set(lanes.values())) > 1:
            raise SwitchError(f"the fabric's switches disagree on lanes: {lanes}")
        self.fabric = fabric
        self.switches = {n: switches[n] for n in names}
        self.data = {n: data[n] for n in names}
        self.aggregators = min(b.aggregators for b in self.switches.values())
        self.lanes = lanes[names[0]]
        self._jobs: dict[int, _Job] = {}
        self._lost: dict[str, str] = {}
        self._failing: dict[str, float] = {}  # switch -> when its calls began to fail
        self.clock = clock
        self._reads: dict[str, tuple[Occupancy, SwitchCounters]] = {}
        self._lock = threading.RLock()
        # Told each job's tree once written: (switch job id, the top's data address, the
        # data addresses of the switches below it), for the job's PS (`PsLink.route`).
        self.on_tree: Callable[[int, Endpoint, tuple[Endpoint, ...]], None] | None = None

    # ------------------------------------------------------------------ the fabric

    def tor_of(self, host: str) -> tuple[str, Endpoint]:
        """``(ToR, its data address)`` for a worker at IPv4 `host`; `NotUnderATor` if none."""
        tor = self.fabric.tor_of(host)
        if tor is None:
            racks = "; ".join(
                f"{t.name}: {', '.join(t.rack.networks) or 'no networks'}"
                for t in self.fabric.tors
                if t.rack is not None
            )
            raise NotUnderATor(
                f"worker address {host} is in no rack's networks ({racks}): give the worker an "
                "address under its ToR, or add its network to the topology's rack.networks"
            )
        return tor.name, self.data[tor.name]

    def lost(self) -> dict[str, str]:
        """``{switch: why}`` of every switch that stopped answering."""
        with self._lock:
            return dict(self._lost)

    def trees(self) -> dict[int, tuple[str, ...]]:
        """``{switch job id: its tree}`` of every job whose workers have all joined."""
        with self._lock:
            return {sid: job.tree for sid, job in self._jobs.items() if job.tree}

    def touching(self, switches: Mapping[str, object]) -> dict[int, str]:
        """``{switch job id: one of `switches` it needs}``: its tree holds it, or (workers
        still joining) one of its workers' ToRs is it."""
        with self._lock:
            hit: dict[int, str] = {}
            for sid, job in self._jobs.items():
                needs = job.tree or tuple(tor for tor, _ in job.workers.values())
                name = next((n for n in needs if n in switches), None)
                if name is not None:
                    hit[sid] = name
            return hit

    def reads(self) -> list[SwitchRead]:
        """Every switch's last read, in file order."""
        with self._lock:
            return [
                SwitchRead(
                    name,
                    self.data[name],
                    *self._reads.get(name, (_UNREAD, _NO_COUNTERS)),
                    lost=self._lost.get(name, ""),
                )
                for name in self.switches
            ]

    def _call(self, name: str, what: str, *args: object, **kwargs: object) -> object:
        """`what` on switch `name`; a switch that has not answered for `LOST_AFTER_S` is lost."""
        if name in self._lost:
            raise SwitchUnavailable(name, f"lost earlier: {self._lost[name]}")
        try:
            value = getattr(self.switches[name], what)(*args, **kwargs)
        except SwitchUnavailable as exc:
            self._unanswered(name, str(exc))
            raise
        with self._lock:
            self._failing.pop(name, None)
        return value

    def _unanswered(self, name: str, why: str) -> None:
        with self._lock:
            since = self._failing.setdefault(name, self.clock())
            if name not in self._lost and self.clock() - since >= LOST_AFTER_S:
                self._lost[name] = why
                log.error("switch %s went away: %s", name, why)

    # ------------------------------------------------------------------ SwitchBackend

    def install_job(self, job: JobInstall) -> None:
        with self._lock:
            known = self._jobs.get(job.job_id)
            if known is None or known.install.fan_in != job.fan_in:
                self._jobs[job.job_id] = known = _Job(job)
            known.install = job
            if known.tree:
                self._write(known)

    def add_worker(self, job_id: int, worker_id: int, endpoint: Endpoint) -> None:
        with self._lock:
            job = self._jobs.get(job_id)
            if job is None:
                raise WriteFailed([UpdateError(0, "NOT_FOUND", f"job {job_id} is not installed")])
            if not 0 <= worker_id < job.install.fan_in:
                message = f"worker {worker_id} outside 0..{job.install.fan_in - 1}"
                raise WriteFailed([UpdateError(0, "INVALID_ARGUMENT", message)])
            try:
                tor, _ = self.tor_of(endpoint.address()[0])
            except NotUnderATor as exc:
                raise WriteFailed([UpdateError(0, "INVALID_ARGUMENT", str(exc))]) from None
            job.workers[worker_id] = (tor, endpoint)
            if len(job.workers) == job.install.fan_in:
                self._write(job)

    def _write(self, job: _Job) -> None:
        """Install `job` on every switch of its tree, and off the switches it left."""
        entries = tree_entries(self.fabric, self.data, job.install, job.workers)
        old, job.tree = job.tree, tuple(e.switch for e in entries)
        sid = job.install.job_id
        for name in old:
            if name not in job.tree and name not in self._lost:
                self._call(name, "remove_job", sid)
        for entry in entries:
            self._call(entry.switch, "install_job", entry.install)
            for worker, endpoint in entry.workers:
                self._call(entry.switch, "add_worker", sid, worker, endpoint)
            for child in entry.children:
                self._call(entry.switch, "add_link", sid, child, down=True)
        # Last, once every switch of the tree holds the job: a switch sends up only from its
        # parent's entry on (p4/PROTOCOL.md 7.7), so no sum goes up to a parent not ready for
        # it, and none completes for fewer workers than the switch holds.
        for entry in entries:
            if entry.up is not None:
                self._call(entry.switch, "add_link", sid, entry.up, down=False)
        if self.on_tree is not None:
            *below, top = (self.data[e.switch] for e in entries)
            self.on_tree(sid, top, tuple(below))

    def set_priority(self, job_id: int, level: int) -> None:
        with self._lock:
            job = self._jobs.get(job_id)
            if job is None:
                raise WriteFailed([UpdateError(0, "NOT_FOUND", f"job {job_id} is not installed")])
            job.install = replace(job.install, priority=level)
            for name in job.tree:
                self._call(name, "set_priority", job_id, level)

    def reclaim(self, job_id: int) -> int:
        with self._lock:
            job = self._jobs.get(job_id)
            tree = job.tree if job is not None else ()
            return sum(
                cast(int, self._call(name, "reclaim", job_id))
                for name in tree
                if name not in self._lost
            )

    def remove_job(self, job_id: int) -> None:
        """Off every switch still answering (any may hold leftovers of an earlier tree); a
        lost switch is skipped, its memory gone with it."""
        with self._lock:
            for name in self.switches:
                if name in self._lost:
                    continue
                try:
                    self._call(name, "remove_job", job_id)
                except SwitchUnavailable:
                    continue
            self._jobs.pop(job_id, None)

    def installed_jobs(self) -> set[int]:
        with self._lock:
            held = set(self._jobs)
            for name in self.switches:
                if name not in self._lost:
                    held |= cast(set[int], self._call(name, "installed_jobs"))
            return held

    def occupancy(self) -> Occupancy:
        """Every switch read (kept for `reads`); the fabric's: an aggregator is held where the
        first switch holding it (file order) says, as every switch has the same placements."""
        reads = {name: self._read_occupancy(name) for name in self.switches}
        job, state = [0] * self.aggregators, [int(AggState.FREE)] * self.aggregators
        read = [o for o in reads.values() if not o.unavailable]
        for occupancy in reversed(read):
            for i in range(min(self.aggregators, occupancy.aggregators)):
                if occupancy.state[i] != AggState.FREE:
                    job[i], state[i] = occupancy.job[i], occupancy.state[i]
        if not read:
            return Occupancy((), (), "no switch of the fabric served its registers")
        return Occupancy(tuple(job), tuple(state))

    def counters(self) -> SwitchCounters:
        """Every switch read (kept for `reads`); the fabric's: per job, the ToRs' counts (each
        worker's packets enter at one ToR); drops, every switch's."""
        reads = {name: self._read_counters(name) for name in self.switches}
        jobs: dict[int, dict[str, int]] = {}
        drops: dict[str, int] = {}
        tors = {t.name for t in self.fabric.tors}
        for name, counters in reads.items():
            for reason, n in counters.drops.items():
                drops[reason] = drops.get(reason, 0) + n
            if name not in tors:
                continue
            for sid, values in counters.jobs.items():
                mine = jobs.setdefault(sid, dict.fromkeys(values, 0))
                for key, n in values.items():
                    mine[key] = mine.get(key, 0) + n
        unread = [n for n, c in reads.items() if c.unavailable and n in tors]
        why = f"switch {', '.join(unread)}: no counters" if unread else ""
        return SwitchCounters(jobs, drops, why)

    def _read_occupancy(self, name: str) -> Occupancy:
        why = ""
        try:
            value = cast(Occupancy, self._call(name, "occupancy"))
        except SwitchError as exc:
            why = self._unread(name, exc)
            value = Occupancy((), (), why)
        with self._lock:
            self._reads[name] = (value, self._reads.get(name, (_UNREAD, _NO_COUNTERS))[1])
        return value

    def _read_counters(self, name: str) -> SwitchCounters:
        try:
            value = cast(SwitchCounters, self._call(name, "counters"))
        except SwitchError as exc:
            value = SwitchCounters({}, {}, self._unread(name, exc))
        with self._lock:
            self._reads[name] = (self._reads.get(name, (_UNREAD, _NO_COUNTERS))[0], value)
        return value

    def _unread(self, name: str, exc: SwitchError) -> str:
        """Why switch `name` could not be read: it went away, or it refused."""
        if isinstance(exc, SwitchUnavailable):
            return f"switch {name} went away: {self._lost.get(name, exc)}"
        return f"switch {name}: {exc}"

    def close(self) -> None:
        for backend in self.switches.values():
            backend.close()
