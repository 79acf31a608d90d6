"""The fluid model of a fabric: each switch's contention by `scheduler.fluid`, then the slowest
bound of every job.

Each switch runs `comm_rates` with its own contenders (the jobs aggregating there, with their
fan-in there and its level for them), its pool, and a round trip stretched to the path from a
server up to it (`_up_s`: per level, 2 x link latency + 2 x switch latency + the uplink's
serialisation each way). A job's allreduce takes the longest of: each switch it aggregates
at; each ToR uplink it crosses (F fragments at the uplink rate over 1 + the other crossing
jobs' duty cycles, then the rest of its round trip and its skew); with P partial
sums per fragment for its PS, its own PS process at P packets per fragment, its window over a
slot of round trip + PS detour + P - 1 packet times. Each switch sees its contenders' duty
cycles as it alone gives them; it is solved again with a longer round trip where other
jobs' windows queue at the uplinks its contenders cross (`_queue`). `exclusive_comm_s` and
`no_ina_comm_s` are Mina's score's analytic times. ``docs/fabric.md`` states it all.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from scheduler.config import SimConfig
from scheduler.fabric import Fabric
from scheduler.fluid import CommRate, FlowJob, comm_rates
from scheduler.policy import Policy
from scheduler.registry import make_policy
from scheduler.spec import PolicySpec

__all__ = [
    "FabricFlow",
    "FabricFluid",
    "FabricRate",
    "exclusive_comm_s",
    "fan_in",
    "no_ina_comm_s",
    "switch_config",
]


@dataclass(frozen=True, slots=True)
class FabricFlow:
    """A job holding memory in a fabric, as the fabric's fluid model needs it: its servers
    per ToR (`racks`), the `switches` it aggregates at, the partial sums its PS adds per
    fragment (`ps_partials`, 0 when its top switch completes the sum), its compute seconds per
    iteration (the iteration overhead included) and its level at each switch (`levels`,
    ``(switch, level)`` pairs)."""

    job_id: int
    racks: tuple[tuple[str, int], ...]
    switches: tuple[str, ...]
    ps_partials: int
    grad_bytes: int
    iter_time_s: float
    levels: tuple[tuple[str, int], ...]

    @property
    def workers(self) -> int:
        return sum(n for _, n in self.racks)


@dataclass(frozen=True, slots=True)
class FabricRate:
    """One job's steady state in the fabric: allreduce seconds per iteration (`t_comm_s`),
    which bound set it (`bound`: ``switch NAME``, ``uplink TOR`` or ``ps``), the share of its
    fragments some switch sent to a PS (`lost`; a job whose PS adds partial sums finishes
    every fragment there, counted in `at_ps`), evictions per fragment summed over its
    switches (`evict`), evictions it causes per second (`caused`), its duty cycle, and each
    switch's `CommRate`."""

    t_comm_s: float
    bound: str
    lost: float
    at_ps: float
    evict: float
    caused: float
    duty: float
    per_switch: Mapping[str, CommRate]


def fan_in(fabric: Fabric, racks: Sequence[tuple[str, int]], switch: str) -> int:
    """The job's fan-in at `switch`: its servers under a ToR, or how many of an inner
    switch's children lead to its racks."""
    if fabric.switch(switch).rack is not None:
        return sum(n for tor, n in racks if tor == switch)
    below = set()
    for tor, _ in racks:
        path = fabric.path_up(tor)
        if switch in path[1:]:
            below.add(path[path.index(switch) - 1])
    return len(below)


def _up_s(cfg: SimConfig, fabric: Fabric, switch: str) -> float:
    """Seconds a fragment spends from a server up to `switch` and back beyond a ToR's round
    trip: per level above a ToR, the link up and down, the switch itself and the ToR below
    passed again on the way down, and one serialisation each way on the slowest uplink into
    the level (`scheduler.fragfabric` queues each direction at its rate)."""
    children = fabric.children(switch)
    if not children:
        return 0.0
    below = max(_up_s(cfg, fabric, c) + 2 * _serial_s(cfg, fabric, c) for c in children)
    return below + 2 * cfg.link_latency_s + 2 * cfg.switch_latency_s


def _serial_s(cfg: SimConfig, fabric: Fabric, switch: str) -> float:
    """One fragment's serialisation on `switch`'s uplink (0 at the root)."""
    gbps = fabric.uplink_gbps(switch)
    return 0.0 if gbps is None else cfg.fragment_s * cfg.link_bps / (gbps * 1e9)


def switch_config(cfg: SimConfig, fabric: Fabric, switch: str) -> SimConfig:
    """`cfg` for `switch`'s model: its pool, and its link latency stretched so that its round
    trip is the whole path from a server up to `switch` and back (`_up_s`; a ToR: `cfg`
    unchanged)."""
    extra = _up_s(cfg, fabric, switch)
    return replace(cfg, pool=fabric.pool(switch), link_latency_s=cfg.link_latency_s + extra / 2)


def _frags(cfg: SimConfig, grad_bytes: int) -> int:
    return math.ceil(grad_bytes / cfg.payload_bytes)


def _uplink_s(cfg: SimConfig, fabric: Fabric, tor: str, frags: int, sharing: float) -> float:
    """Seconds for `frags` fragments over `tor`'s uplink shared by `sharing` jobs."""
    gbps = fabric.uplink_gbps(tor)
    if gbps is None:
        return 0.0
    return frags * cfg.fragment_s * cfg.link_bps * sharing / (gbps * 1e9)


def _last_start_s(cfg: SimConfig, workers: int) -> float:
    """When a job's last worker starts its allreduce, on average (`scheduler.fluid`)."""
    return cfg.worker_skew_s * workers / (workers + 1)


def _ps_stream_s(cfg: SimConfig, frags: int, per_fragment: int, workers: int) -> float:
    """A job's allreduce when its PS adds `per_fragment` packets per fragment (its own
    process): line rate, window over a slot of round trip + PS detour + the packets after the
    first, or the PS's packet rate, whichever binds; plus one slot and its last worker's
    start."""
    slot = cfg.rtt_s + cfg.ps_detour_s + (per_fragment - 1) * cfg.ps_fragment_s
    rate = min(1 / cfg.fragment_s, cfg.window / slot, 1 / (per_fragment * cfg.ps_fragment_s))
    return frags / rate + slot + _last_start_s(cfg, workers)


class FabricFluid:
    """Per-switch `comm_rates` under `switch_policy`, each switch's answer kept and reused
    (and its previous one seeding the next) while its contenders stay the same."""

    def __init__(self, cfg: SimConfig, fabric: Fabric, switch_policy: Policy) -> None:
        self.cfg = cfg
        self.fabric = fabric
        self.policy = switch_policy
        self._cfgs = {s.name: switch_config(cfg, fabric, s.name) for s in fabric.switches}
        self._keys: dict[str, tuple[tuple[FlowJob, ...], float]] = {}
        self._answers: dict[str, dict[int, CommRate]] = {}

    def switch_rates(
        self, flows: Sequence[FabricFlow], queue: Mapping[str, float] | None = None
    ) -> dict[str, dict[int, CommRate]]:
        """``{switch: {job_id: CommRate}}`` of every switch some flow aggregates at, each
        switch's round trip longer by its `queue` seconds (an uplink's queue)."""
        contenders: dict[str, list[FlowJob]] = {}
        for f in flows:
            levels = dict(f.levels)
            for s in f.switches:
                n = fan_in(self.fabric, f.racks, s)
                flow = FlowJob(f.job_id, n, f.grad_bytes, f.iter_time_s, levels.get(s, 0))
                contenders.setdefault(s, []).append(flow)
        out = {}
        for s, jobs in contenders.items():
            extra = queue.get(s, 0.0) if queue else 0.0
            key = (tuple(jobs), extra)
            if self._keys.get(s) != key:
                previous = self._answers.get(s)
                c = self._cfgs[s]
                c = replace(c, link_latency_s=c.link_latency_s + extra / 2) if extra > 0 else c
                self._answers[s] = comm_rates(c, self.policy, jobs, start=previous)
                self._keys[s] = key
            out[s] = self._answers[s]
        return out

    def rates(self, flows: Sequence[FabricFlow]) -> dict[int, FabricRate]:
        """``{job_id: FabricRate}`` of `flows` (see module doc)."""
        cfg, fabric = self.cfg, self.fabric
        per_switch = self.switch_rates(flows)
        first = self._first(flows, per_switch)
        duty = {f.job_id: first[f.job_id][0] / (first[f.job_id][0] + f.iter_time_s)
                if first[f.job_id][0] + f.iter_time_s > 0 else 0.0 for f in flows}  # fmt: skip
        crossing: dict[str, list[int]] = {}
        for f in flows:
            for tor in self._crossed(f):
                crossing.setdefault(tor, []).append(f.job_id)
        load = {tor: sum(duty[j] for j in ids) for tor, ids in crossing.items()}
        queue = self._queue(flows, load, duty)
        if queue:
            per_switch = self.switch_rates(flows, queue)
            first = self._first(flows, per_switch)
        out = {}
        for f in flows:
            t, bound = first[f.job_id]
            for tor in self._crossed(f):
                up = _uplink_s(
                    cfg, fabric, tor, _frags(cfg, f.grad_bytes), 1 + load[tor] - duty[f.job_id]
                ) + self._tail_s(f, tor)
                if up > t:
                    t, bound = up, f"uplink {tor}"
            rates = {s: per_switch[s][f.job_id] for s in f.switches}
            # At one switch its own share, as `scheduler.simulator` counts it (bit for bit).
            lost = (
                sum(r.bypass + r.evict for r in rates.values())
                if len(rates) == 1
                else 1 - math.prod(1 - r.bypass - r.evict for r in rates.values())
            )
            out[f.job_id] = FabricRate(
                t_comm_s=t,
                bound=bound,
                lost=lost,
                at_ps=1.0 if f.ps_partials > 0 else lost,
                evict=sum(r.evict for r in rates.values()),
                caused=sum(r.caused for r in rates.values()),
                duty=t / (t + f.iter_time_s) if t + f.iter_time_s > 0 else 0.0,
                per_switch=rates,
            )
        return out

    def _first(
        self, flows: Sequence[FabricFlow], per_switch: Mapping[str, Mapping[int, CommRate]]
    ) -> dict[int, tuple[float, str]]:
        """Each flow's slowest switch or PS bound, and which it is."""
        cfg = self.cfg
        first = {}
        for f in flows:
            t, bound = 0.0, ""
            for s in f.switches:
                if per_switch[s][f.job_id].t_comm_s > t:
                    t, bound = per_switch[s][f.job_id].t_comm_s, f"switch {s}"
            if f.ps_partials > 0:
                ps = _ps_stream_s(cfg, _frags(cfg, f.grad_bytes), f.ps_partials, f.workers)
                if ps > t:
                    t, bound = ps, "ps"
            first[f.job_id] = (t, bound)
        return first

    def _queue(
        self, flows: Sequence[FabricFlow], load: Mapping[str, float], duty: Mapping[int, float]
    ) -> dict[str, float]:
        """Each switch's extra round trip from the uplinks its contenders cross: the other
        crossing jobs' windows (by their duty cycles) queued at an uplink ahead of a job's
        fragment, serialised at its rate, beyond the switch's own round trip; a switch takes
        its contenders' excess duty-weighted. (A job's own window queued there is its uplink
        bound already.) Not at a switch one of whose contenders crosses no uplink: one round
        trip per switch cannot lengthen some jobs' and not that one's."""
        win = self.cfg.window
        excess: dict[str, list[tuple[float, float]]] = {}
        local = {s for f in flows if not self._crossed(f) for s in f.switches}
        for f in flows:
            q = max(
                (win * _serial_s(self.cfg, self.fabric, tor) * (load[tor] - duty[f.job_id])
                 for tor in self._crossed(f)),
                default=0.0,
            )  # fmt: skip
            for s in f.switches:
                over = max(0.0, q - self._cfgs[s].rtt_s)
                excess.setdefault(s, []).append((duty[f.job_id], over))
        out = {}
        for s, pairs in excess.items():
            weight = sum(w for w, _ in pairs)
            extra = sum(w * e for w, e in pairs) / weight if weight > 0 else 0.0
            if extra > 0 and s not in local:
                out[s] = extra
        return out

    def _tail_s(self, flow: FabricFlow, tor: str) -> float:
        """What the uplink bound adds to its fragments at the uplink's rate: the round trip
        to the job's top switch (or its PS) but the one uplink serialisation counted there,
        and its last worker's start."""
        cfg = self._cfgs[flow.switches[-1]] if flow.switches else self.cfg
        slot = cfg.rtt_s + (cfg.ps_detour_s if flow.ps_partials > 0 else 0.0)
        return slot - _serial_s(self.cfg, self.fabric, tor) + _last_start_s(self.cfg, flow.workers)

    def _crossed(self, flow: FabricFlow) -> list[str]:
        """The ToRs whose uplink `flow` uses: all of its ToRs when it aggregates above them
        or sends partial sums to its PS, none otherwise."""
        above = any(self.fabric.switch(s).rack is None for s in flow.switches)
        if not above and flow.ps_partials == 0:
            return []
        return [tor for tor, _ in flow.racks]


def exclusive_comm_s(
    cfg: SimConfig, fabric: Fabric, racks: Sequence[tuple[str, int]], grad_bytes: int,
    iter_time_s: float,
) -> float:  # fmt: skip
    """Allreduce seconds per iteration with exclusive INA at every switch of the job's tree:
    at each switch the job alone in a private partition of its window (``static`` alone,
    `comm_rates`, with that switch's fan-in and stretched round trip), each ToR uplink its
    own; the slowest of them."""
    static = make_policy(PolicySpec("static"))
    tree = fabric.tree_of(tor for tor, _ in racks)
    t = 0.0
    for s in tree:
        flow = FlowJob(0, fan_in(fabric, racks, s), grad_bytes, iter_time_s)
        t = max(t, comm_rates(switch_config(cfg, fabric, s), static, [flow])[0].t_comm_s)
    if len(tree) > 1:
        for tor, _ in racks:
            t = max(t, _uplink_s(cfg, fabric, tor, _frags(cfg, grad_bytes), 1.0))
    return t


def no_ina_comm_s(
    cfg: SimConfig, fabric: Fabric, racks: Sequence[tuple[str, int]], grad_bytes: int
) -> float:
    """Allreduce seconds per iteration with no INA: every worker's fragment goes to the job's
    own PS process, which adds all n (`_ps_stream_s` with n packets per fragment), each rack's
    n_r workers sending over their ToR's uplink (the PS is outside the rack)."""
    frags = _frags(cfg, grad_bytes)
    n = sum(k for _, k in racks)
    t = _ps_stream_s(cfg, frags, n, n)
    for tor, k in racks:
        t = max(t, _uplink_s(cfg, fabric, tor, frags * k, 1.0))
    return t
