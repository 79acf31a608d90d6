"""The fragment-level fabric simulator: every packet through every switch of a `Fabric`, each
an `InMemorySwitch` running `p4ctl.rule`, in virtual time.

Placement, trees, per-switch schedulers, admission and levels are `scheduler.fabricsim`'s own
state (`FabricState`: its `Placer`, one `JobTable` per switch whose applier programs that switch).
On admission each entry gets PROTOCOL.md 7.2's fields: the job's fan-in (its servers; worker
ids global, rack by rack) everywhere, `local_mask` and `up_port` below the root; a fabric
policy's one level per job is written at every switch of its tree after each round. Packets go
worker -> ToR -> ... -> root -> PS and back: a link latency per hop, a switch latency per
switch (with ``switch_pps``, a turn of its FIFO server), each ToR-parent link direction a FIFO
server at `Fabric.uplink_gbps` (oversubscribed). The PS is as far from a switch as the servers
below it (`switch_config`'s latency, the fluid model's). Workers, resends and the PS process
are `scheduler.fragsim`'s. A fabric policy's spill (``tiered``: a job aggregates below its
root, each top switch sending its partial to the PS) is PROTOCOL.md 7.8: those switches'
parent becomes the PS (`up_port` = `ps_port`) and the PS's result goes to each of them.
"""

from __future__ import annotations

import math
import random
from collections import Counter, deque
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import cast

from p4ctl.backend import InMemorySwitch
from p4ctl.protocol import PS_WORKER_ID, Flag, Kind, Packet, Policy
from p4ctl.rule import JobConfig, Outcome, ToGroup, check, hashed_index, process, static_index

from scheduler.config import REORDER, SimConfig
from scheduler.fabric import Fabric
from scheduler.fabricflow import switch_config
from scheduler.fabricsim import FabricJobState, FabricRun, FabricState, fabric_result
from scheduler.fragsim import _Events, _Worker
from scheduler.memory import JobState
from scheduler.tiered import PerSwitch
from scheduler.workload import JobSpec

__all__ = ["simulate_fabric_fragments"]

# Switch ports in this simulation (the PS's is the one the applier's install gave it).
_UP_PORT = 400
_WORKER_PORT = 100  # + global worker id (< 32)
_CHILD_PORT = 200  # + the child's position among the switch's children


@dataclass(slots=True)
class _Run:
    """A running fabric job: its ids and entries per switch, its workers and this
    iteration's bookkeeping (as `scheduler.fragsim`'s)."""

    job: FabricJobState
    frags: int
    root: str
    sids: dict[str, int]
    tor_of: list[str]  # by global worker id
    below: dict[str, tuple[str, ...]]  # switch -> its children in the job's tree
    tops: tuple[str, ...] = ()  # where the PS's results go: the root, or a spill's tops
    iteration: int = 0
    comm_start: float = 0.0
    workers: list[_Worker] = field(default_factory=list)
    in_switch: set[int] = field(default_factory=set)
    lost: set[int] = field(default_factory=set)
    ps_bitmap: dict[int, int] = field(default_factory=dict)
    ps_sent: set[int] = field(default_factory=set)

    @property
    def fan_in(self) -> int:
        return len(self.tor_of)


@dataclass(slots=True)
class _PsProcess:
    """One PS process (`scheduler.fragsim`'s): one packet at a time, critical ones first."""

    critical: deque[tuple[_Run, Packet]] = field(default_factory=deque)
    copies: deque[tuple[_Run, Packet]] = field(default_factory=deque)
    busy: bool = False


class _FragmentFabric(_Events):
    def __init__(
        self,
        jobs: Sequence[JobSpec],
        cfg: SimConfig,
        fabric: Fabric,
        policy: str,
        placement: str,
        timeout_s: float,
    ) -> None:
        super().__init__()
        self.cfg, self.fabric, self.timeout_s = cfg, fabric, timeout_s
        self.fab = FabricState(cfg, fabric, policy, placement)
        fpolicy = self.fab.fpolicy
        self.one_rank = not isinstance(fpolicy, PerSwitch)
        if self.fab.policy.preempts and self.fab.policy.switch_rule() == "atp":
            raise ValueError(f"policy {policy!r} preempts on atp's rule; not modelled here")
        self.rng = random.Random(cfg.seed)
        self.switches = {s: cast(InMemorySwitch, t.switch) for s, t in self.fab.tables.items()}
        self.by_sid: dict[str, dict[int, _Run]] = {s: {} for s in self.switches}
        self.switch_free = dict.fromkeys(self.switches, 0.0)
        # The PS is as far from a switch as the servers are (`switch_config`'s link latency).
        self.ps_hop = {s: switch_config(cfg, fabric, s).link_latency_s for s in self.switches}
        self.link_free: dict[tuple[str, str], float] = {}
        self.ps: dict[int, _PsProcess] = {}
        self.outcomes: Counter[tuple[str, Outcome]] = Counter()  # per switch, as the rule says
        self.spilled: Counter[str] = Counter()  # per switch: UP packets to the PS (7.8)
        self.order = self.dropped = 0
        for spec in jobs:
            self.at(spec.arrival_s, partial(self.arrive, spec))

    def run(self) -> FabricRun:
        self.play()
        return fabric_result(self.fab, self.cfg, [], self.events)

    # ------------------------------------------------------------------ job level
    def arrive(self, spec: JobSpec) -> None:
        job = FabricJobState(
            spec, self.order, math.ceil(spec.workers / self.fabric.gpus_per_server)
        )
        self.order += 1
        self.fab.live[spec.job_id] = job
        self.fab.waiting.append(job)
        self.admit()

    def admit(self) -> None:
        now = self.clock.now()
        for job in self.fab.admit(now):
            for s, rec in job.records.items():
                self.fab.tables[s].start(now, rec)
            job.state = JobState.RUNNING
            self.start(job)
        self.relevel()

    def start(self, job: FabricJobState) -> None:
        """Write PROTOCOL.md 7.2's fields into each entry the applier installed, then start
        the job's first iteration after its set-up and compute."""
        tor_of = [tor for tor, n in job.racks for _ in range(n)]
        root = job.tree[-1]
        below = {s: tuple(c for c in self.fabric.children(s) if c in job.tree) for s in job.tree}
        sids = {}
        for s, rec in job.records.items():
            sid = rec.switch_job_id
            assert sid is not None
            sids[s] = sid
            jobs = self.switches[s].pipeline.jobs
            mask = sum(1 << w for w, tor in enumerate(tor_of) if s in self.fabric.path_up(tor))
            up = None if s == root else _UP_PORT
            jobs[sid] = replace(
                jobs[sid], fan_in=len(tor_of), up_port=up, local_mask=0 if s == root else mask
            )
        frags = math.ceil(job.spec.grad_bytes / self.cfg.payload_bytes)
        run = _Run(job, frags, root, sids, tor_of, below, (root,))
        for s, sid in sids.items():
            self.by_sid[s][sid] = run
        first = self.clock.now() + self.cfg.job_setup_s + job.spec.iter_time_s
        self.at(first, partial(self.start_comm, run))

    def start_comm(self, run: _Run) -> None:
        now = self.clock.now()
        run.comm_start = now
        srtt = [w.srtt for w in run.workers] or [None] * run.fan_in
        run.workers = [_Worker(srtt=t) for t in srtt]
        run.in_switch.clear()
        run.lost.clear()
        for w in range(run.fan_in):
            delay = self.rng.uniform(0.0, self.cfg.worker_skew_s)
            run.workers[w].sending = True
            self.at(now + delay, partial(self.send, run, w))

    def end_iteration(self, run: _Run) -> None:
        """As `scheduler.fragsim`'s, on the fabric job: progress marks and aging crossings
        start a decision round at the switches of its tree only."""
        now, job, cfg = self.clock.now(), run.job, self.cfg
        per_frag = job.spec.grad_bytes / run.frags
        job.bytes_switch += per_frag * len(run.in_switch)
        job.bytes_ps += per_frag * (run.frags - len(run.in_switch))
        aging = cfg.spec.aging_s
        before = int(job.starved_s // aging) if aging > 0 else 0
        job.starved_s += (now - run.comm_start) * len(run.lost) / run.frags
        after = int(job.starved_s // aging) if aging > 0 else 0
        job.iterations_done += 1
        run.iteration += 1
        overhead = cfg.iteration_overhead_s
        if run.iteration >= job.spec.iterations:
            if overhead > 0:
                self.at(now + overhead, partial(self.finish, run))
            else:
                self.finish(run)
            return
        step = max(1, int(cfg.progress_step * job.spec.iterations))
        mark = run.iteration % step == 0
        if mark:
            job.starved_s = 0.0
        if mark or after != before:
            self.fab.decide(now, set(job.records))
            self.relevel()
        self.at(now + overhead + job.spec.iter_time_s, partial(self.start_comm, run))

    def finish(self, run: _Run) -> None:
        for s, sid in run.sids.items():
            self.by_sid[s].pop(sid, None)
        self.fab.finish(self.clock.now(), run.job)
        if self.fab.waiting:
            self.admit()
        else:
            self.relevel()

    def relevel(self) -> None:
        """A fabric policy's one level per job, written into each entry of its tree over the
        level the switch's own round just wrote (a switch policy: nothing to do)."""
        if not self.one_rank:
            return
        running = [j for j in self.fab.live.values() if j.state == JobState.RUNNING]
        self.fab.aggregate(running)
        for job in running:
            at = job.aggregate
            assert at is not None
            if not set(at.switches) <= set(job.tree):
                raise AssertionError(f"job {job.spec.job_id} moved off its tree: {at}")
            self._spill(job, tuple(at.switches))
            if at.level is None:
                continue
            for s, rec in job.records.items():
                jobs = self.switches[s].pipeline.jobs
                sid = rec.switch_job_id
                assert sid is not None
                jobs[sid] = replace(jobs[sid], priority=at.level)

    def _spill(self, job: FabricJobState, at: tuple[str, ...]) -> None:
        """Aggregate `job` at `at`: a top of `at` below the root has the PS as its parent
        (PROTOCOL.md 7.8), the others keep 7.2's. A switch off `at` gives back what the job
        holds there (its partials could no longer complete: the control plane reclaims
        them); it gets only packets already on their way, and sends what it completes as its
        entry says."""
        run = next((r for r in self.by_sid[job.tree[0]].values() if r.job is job), None)
        if run is None:
            return
        tops = tuple(s for s in at if self.fabric.switch(s).parent not in at)
        if tops == run.tops:
            return
        run.tops = tops
        for s in set(job.tree) - set(at):
            self.switches[s].registers.reclaim_job(run.sids[s])
        for s in at:
            jobs = self.switches[s].pipeline.jobs
            sid = run.sids[s]
            up = None if s == run.root else jobs[sid].ps_port if s in tops else _UP_PORT
            jobs[sid] = replace(jobs[sid], up_port=up)

    # ------------------------------------------------------------------ packets
    def index_at(self, run: _Run, switch: str, seq: int) -> tuple[int, int]:
        """The aggregator (and static shadow bit) of `seq` at `switch`."""
        # Assumed: PROTOCOL.md 7.2 gives an atp/esa job one pool size and the worker's index
        # at every level; each switch's own seed and pool here, which is that index when they
        # agree and lets a spine hold less memory than its ToRs, as the fluid model does.
        # Switch job ids are per switch too: `reach` restamps a packet with the next one's.
        cfg = self.switches[switch].pipeline.jobs[run.sids[switch]]
        if cfg.policy == Policy.STATIC:
            index, shadow = static_index(cfg, seq)
            return int(index), int(shadow)
        rec = run.job.records[switch]
        pool = rec.shared_pool or self.switches[switch].registers.aggregators
        return hashed_index(rec.hash_seed or 0, seq, pool), 0

    def send(self, run: _Run, w: int, seq: int | None = None) -> None:
        """Worker `w` sends its next fragment (or resends `seq`) to its ToR."""
        now = self.clock.now()
        worker = run.workers[w]
        if seq is None:
            if (
                worker.in_flight >= self.cfg.window
                or worker.next_frag >= run.frags
                or not self.slot_free(run, w)
            ):
                worker.sending = False
                return
            seq = run.iteration * run.frags + worker.next_frag
            worker.next_frag += 1
            worker.in_flight += 1
            worker.sent_at[seq] = now
            flags = Flag.NONE
            self.at(now + self.timeout_s, partial(self.timeout, run, w, seq, self.timeout_s))
            self.at(now + self.cfg.fragment_s, partial(self.send, run, w))
        else:
            worker.resent.add(seq)
            flags = Flag.RESEND
        tor = run.tor_of[w]
        pkt = Packet(Kind.GRADIENT, run.sids[tor], w, run.fan_in, 0, seq, flags, bitmap=1 << w)
        if self.cfg.loss_rate and self.rng.random() < self.cfg.loss_rate:
            return
        later = now + self.cfg.fragment_s + self.cfg.link_latency_s
        self.at(later, partial(self.reach, tor, run, pkt, _WORKER_PORT + w))

    def slot_free(self, run: _Run, w: int) -> bool:
        """Whether worker `w` may send its next fragment under static: only once it has the
        result of ``seq - part_size``, whose slot it takes (``fragsim._FragmentSim.slot_free``;
        every switch of the tree gives the job the same ``part_size``, PROTOCOL.md 7.2)."""
        tor = run.tor_of[w]
        cfg = self.switches[tor].pipeline.jobs[run.sids[tor]]
        earlier = run.workers[w].next_frag - cfg.part_size
        return cfg.policy != Policy.STATIC or earlier < 0 or earlier in run.workers[w].got

    def fast_retransmit(self, run: _Run, w: int, answered: int) -> None:
        worker = run.workers[w]
        now = self.clock.now()
        patience = 2 * worker.srtt if worker.srtt is not None else self.timeout_s
        for seq, sent in worker.sent_at.items():
            if seq >= answered - REORDER:
                return
            if seq not in worker.resent and now - sent > patience:
                self.send(run, w, seq)

    def timeout(self, run: _Run, w: int, seq: int, after: float) -> None:
        if run.job.state != JobState.RUNNING or seq // run.frags != run.iteration:
            return
        if seq % run.frags in run.workers[w].got:
            return
        self.send(run, w, seq)
        self.at(self.clock.now() + 2 * after, partial(self.timeout, run, w, seq, 2 * after))

    def reach(self, switch: str, run: _Run, pkt: Packet, sender_port: int) -> None:
        """`pkt` of `run` arrives at `switch` from `sender_port`: stamped with the switch's
        job id and index, then processed (after the packets ahead, with ``switch_pps``)."""
        if run.job.state != JobState.RUNNING:
            return
        index, shadow = self.index_at(run, switch, pkt.seq)
        pkt = pkt.replace(job=run.sids[switch], agg_index=index, shadow=shadow)
        pps = self.cfg.switch_pps
        if pps <= 0:
            self.handle(switch, run, pkt, sender_port)
            return
        self.switch_free[switch] = max(self.clock.now(), self.switch_free[switch]) + 1 / pps
        self.at(self.switch_free[switch], partial(self.handle, switch, run, pkt, sender_port))

    def handle(self, s: str, run: _Run, pkt: Packet, sender_port: int) -> None:
        if run.job.state != JobState.RUNNING:
            return  # a straggler of a job that already left
        sw = self.switches[s]
        configs: dict[int, JobConfig] = sw.pipeline.jobs
        regs = sw.registers
        if check(pkt, configs.get(pkt.job), regs.aggregators) is not None:
            self.dropped += 1
            return
        verdict = process(regs, pkt, configs, sender_port)
        self.outcomes[(s, verdict.outcome)] += 1
        frag = pkt.seq % run.frags
        if verdict.outcome == Outcome.COMPLETED and s == run.root and s in run.tops:
            run.in_switch.add(frag)
        elif verdict.outcome in (Outcome.COLLISION, Outcome.FLUSHED):
            run.lost.add(frag)
        if verdict.evicted_job is not None:
            victim = self.by_sid[s][verdict.evicted_job]
            victim.job.preemptions_suffered += 1
            run.job.preemptions_caused += 1
            for out in verdict.outputs:
                if out.packet.flags & Flag.EVICTED:
                    victim.lost.add(out.packet.seq % victim.frags)
        leave = self.clock.now()
        if self.cfg.switch_pps > 0 and verdict.outputs:
            sent = sum(
                self._copies(s, self.by_sid[s][o.packet.job]) if isinstance(o, ToGroup) else 1
                for o in verdict.outputs
            )
            free = max(leave, self.switch_free[s]) + sent / self.cfg.switch_pps
            self.switch_free[s] = leave = free
        leave += self.cfg.switch_latency_s
        for out in verdict.outputs:
            owner = self.by_sid[s][out.packet.job]
            if isinstance(out, ToGroup):
                self._down(s, owner, out.packet, leave)
            elif out.port == _UP_PORT:
                self._link(s, self.fabric.switch(s).parent or "", owner, out.packet, leave, "up")
            elif out.port == configs[out.packet.job].ps_port:
                if out.packet.kind == Kind.UP:
                    self.spilled[s] += 1
                self.at(leave + self.ps_hop[s], partial(self.ps_in, owner, out.packet))
            else:
                self._unicast(s, owner, out.packet, out.port, leave)

    def _copies(self, s: str, run: _Run) -> int:
        children = run.below[s]
        return len(children) if children else sum(1 for t in run.tor_of if t == s)

    def _down(self, s: str, run: _Run, pkt: Packet, leave: float) -> None:
        """A multicast from `s`: to each child of the job's tree, or the ToR's workers."""
        if run.below[s]:
            for child in run.below[s]:
                self._link(s, child, run, pkt, leave, "down")
            return
        workers = [w for w, tor in enumerate(run.tor_of) if tor == s]
        self.at(leave + self.cfg.link_latency_s, partial(self.deliver, run, pkt, workers))

    def _unicast(self, s: str, run: _Run, pkt: Packet, port: int, leave: float) -> None:
        """A static RESULT_RESENT back to its sender: a worker, or a child switch."""
        if port >= _CHILD_PORT:
            child = self.fabric.children(s)[port - _CHILD_PORT]
            self._link(s, child, run, pkt, leave, "down")
        else:
            at = leave + self.cfg.link_latency_s
            self.at(at, partial(self.deliver, run, pkt, [port - _WORKER_PORT]))

    def _link(self, s: str, to: str, run: _Run, pkt: Packet, leave: float, way: str) -> None:
        """Over the link between `s` and `to` (the lower one's uplink, each direction one
        FIFO server at its rate), then a link latency."""
        lower = s if way == "up" else to
        gbps = self.fabric.uplink_gbps(lower)
        t = leave
        if gbps is not None:
            serial = self.cfg.fragment_s * self.cfg.link_bps / (gbps * 1e9)
            t = max(leave, self.link_free.get((lower, way), 0.0)) + serial
            self.link_free[(lower, way)] = t
        port = _CHILD_PORT + self.fabric.children(to).index(s) if way == "up" else _UP_PORT
        self.at(t + self.cfg.link_latency_s, partial(self.reach, to, run, pkt, port))

    def deliver(self, run: _Run, pkt: Packet, workers: Sequence[int]) -> None:
        if run.job.state != JobState.RUNNING or pkt.seq // run.frags != run.iteration:
            return
        frag = pkt.seq % run.frags
        now = self.clock.now()
        for w in workers:
            worker = run.workers[w]
            if not worker.take(frag, pkt.seq, now):
                continue
            self.fast_retransmit(run, w, pkt.seq)
            if not worker.sending:
                worker.sending = True
                self.send(run, w)
        if all(len(worker.got) == run.frags for worker in run.workers):
            self.end_iteration(run)

    # ------------------------------------------------------------------ the PS
    def ps_in(self, run: _Run, pkt: Packet) -> None:
        server = self.ps.setdefault(self.cfg.ps_of(run.job.spec.job_id), _PsProcess())
        copy = self._copy(run, pkt)
        (server.copies if copy else server.critical).append((run, pkt))
        if not server.busy:
            self.ps_serve(server)

    def _copy(self, run: _Run, pkt: Packet) -> bool:
        """esa's completion copy: the whole job's sum, complete at the root. A ToR's complete
        local sum that the spine bypassed is COMPLETE too, but a part the PS needs."""
        return (
            self.fab.policy.switch_rule() == "esa"
            and pkt.flags & (Flag.COMPLETE | Flag.BYPASSED) == Flag.COMPLETE
            and pkt.bitmap == (1 << run.fan_in) - 1
        )

    def ps_serve(self, server: _PsProcess) -> None:
        """As `scheduler.fragsim`'s: one packet at a time, critical ones first."""
        queue = server.critical or server.copies
        if not queue:
            server.busy = False
            return
        run, pkt = queue.popleft()
        server.busy = True

        def done() -> None:
            self.ps_done(run, pkt)
            self.ps_serve(server)

        self.at(self.clock.now() + self.cfg.ps_fragment_s, done)

    def ps_done(self, run: _Run, pkt: Packet) -> None:
        """The PS's share of a sequence: parts by bitmap until all the job's bits; its
        PS_RESULT goes to the job's root, and down the tree, or to each top of a spill."""
        if run.job.state != JobState.RUNNING or pkt.seq in run.ps_sent:
            return
        if self._copy(run, pkt):
            return  # the switch multicast this sum already; the PS only keeps a copy
        full = (1 << run.fan_in) - 1
        bitmap = run.ps_bitmap.get(pkt.seq, 0) | pkt.bitmap
        run.ps_bitmap[pkt.seq] = bitmap
        if bitmap != full:
            return
        run.ps_sent.add(pkt.seq)
        del run.ps_bitmap[pkt.seq]
        result = Packet(Kind.PS_RESULT, 0, PS_WORKER_ID, run.fan_in, 0, pkt.seq, Flag.COMPLETE,
                        bitmap=full)  # fmt: skip
        for top in run.tops:
            entry = self.switches[top].pipeline.jobs[run.sids[top]]
            at = self.clock.now() + self.ps_hop[top]
            self.at(at, partial(self.reach, top, run, result, entry.ps_port))


def simulate_fabric_fragments(
    jobs: Sequence[JobSpec],
    cfg: SimConfig,
    fabric: Fabric,
    *,
    policy: str | None = None,
    placement: str = "packed",
    timeout_s: float | None = None,
) -> FabricRun:
    """Run `jobs` packet by packet on `fabric`; the same `FabricRun` as `simulate_fabric`.

    `policy` is a switch policy run on every switch (default ``cfg.spec.policy``), or a
    fabric policy (``tiered``: its one level per job at every switch, and its spill as
    PROTOCOL.md 7.8); preemption on atp's rule (``esa-norelease``) raises ValueError.
    `timeout_s`: a worker's first resend timeout (default ``cfg.rto_s``).
    """
    timeout = timeout_s if timeout_s is not None else cfg.rto_s
    name = policy or cfg.spec.policy
    return _FragmentFabric(jobs, cfg, fabric, name, placement, timeout).run()
