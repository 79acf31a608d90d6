"""The fragment-level reference simulator: every packet of every iteration, through the
switch rule (`p4ctl.rule.process`, the code the soft switch runs) in virtual time. The switch
is an `InMemorySwitch`, programmed only by the `DecisionApplier` the service uses too.

Per job: n workers, each streaming its fragments with at most ``window`` in flight, paced by
its link, starting ``U(0, worker_skew_s)`` after compute ends. Whatever `process` emits goes
to the job's workers (multicast) or to its PS process (``SimConfig.ps_of``), a server of
``ps_fragment_s`` per packet that serves critical-path packets before esa's completion copies.
Workers resend on timeout (doubling) and on fast retransmit, as the worker client does; with
``switch_pps`` the switch is one FIFO server taking a turn for every packet in and out.
Admission and priorities come from the same `Scheduler` as `scheduler.simulator`. Cost is
linear in packets: meant for small cases. ``esa-norelease`` (`scheduler.ablations`) runs on
the ``atp`` rule except for a fragment that lands on another job's partial sum, which takes
the ``esa`` rule. ``docs/scheduler.md`` describes the model.
"""

from __future__ import annotations

import heapq
import math
import random
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial

from p4ctl.backend import InMemorySwitch
from p4ctl.protocol import PS_WORKER_ID, AggState, Flag, Kind, Packet, Policy
from p4ctl.rule import (
    JobConfig,
    Outcome,
    ToGroup,
    Verdict,
    check,
    hashed_index,
    process,
    static_index,
)

from scheduler.clock import VirtualClock
from scheduler.config import REORDER, RunResult, SimConfig, UtilSample
from scheduler.jobs import JobRecord, JobTable
from scheduler.memory import JobState
from scheduler.scheduler import Scheduler
from scheduler.workload import JobSpec

__all__ = ["simulate_fragments"]


@dataclass(slots=True)
class _Worker:
    next_frag: int = 0
    in_flight: int = 0
    sending: bool = False
    got: set[int] = field(default_factory=set)
    sent_at: dict[int, float] = field(default_factory=dict)  # first sends awaiting a result
    resent: set[int] = field(default_factory=set)
    srtt: float | None = None

    def take(self, frag: int, seq: int, now: float) -> bool:
        """The result of `frag` (sequence `seq`) arrived at `now`: False if the worker had it;
        else its window frees a place and a first send's round trip updates `srtt` (Karn)."""
        if frag in self.got:
            return False
        self.got.add(frag)
        self.in_flight -= 1
        sent = self.sent_at.pop(seq, None)
        if sent is not None and seq not in self.resent:
            rtt = now - sent
            self.srtt = rtt if self.srtt is None else 0.875 * self.srtt + 0.125 * rtt
        return True


@dataclass(slots=True)
class _Run:
    rec: JobRecord
    sid: int
    cfg: JobConfig
    frags: int
    iteration: int = 0
    comm_start: float = 0.0
    workers: list[_Worker] = field(default_factory=list)
    in_switch: set[int] = field(default_factory=set)
    lost: set[int] = field(default_factory=set)
    done_seqs: set[int] = field(default_factory=set)
    ps_bitmap: dict[int, int] = field(default_factory=dict)
    ps_sent: set[int] = field(default_factory=set)


@dataclass(slots=True)
class _PsServer:
    """One PS process: one packet at a time; critical-path packets before esa's copies."""

    critical: deque[Packet] = field(default_factory=deque)
    copies: deque[Packet] = field(default_factory=deque)
    busy: bool = False
    served_critical: int = 0
    served_copies: int = 0


class _Events:
    """Virtual time: actions in order of time, then of scheduling (the fragment-level
    simulators of one switch and of a fabric share it)."""

    def __init__(self) -> None:
        self.clock = VirtualClock()
        self.heap: list[tuple[float, int, Callable[[], None]]] = []
        self.counter = 0
        self.events = 0

    def at(self, t: float, action: Callable[[], None]) -> None:
        self.counter += 1
        heapq.heappush(self.heap, (t, self.counter, action))

    def play(self) -> None:
        """Every action, the ones they schedule included, until none is left."""
        while self.heap:
            t, _, action = heapq.heappop(self.heap)
            self.clock.advance_to(t)
            self.events += 1
            action()


class _FragmentSim(_Events):
    def __init__(self, jobs: Sequence[JobSpec], cfg: SimConfig, timeout_s: float) -> None:
        super().__init__()
        self.cfg = cfg
        self.timeout_s = timeout_s
        self.rng = random.Random(cfg.seed)
        sched = Scheduler(cfg.spec, cfg.pool, seed=cfg.seed)
        # Lanes carry no values here: the simulation follows packets, not sums.
        self.backend = InMemorySwitch(cfg.pool.aggregators, 0, rule=True)
        self.table = JobTable(sched, cfg.window, self.backend)
        # Preemption on a switch rule that has none (module doc).
        self.preempt_on_atp = sched.policy.preempts and sched.policy.switch_rule() == "atp"
        self.regs = self.backend.registers
        self.configs = self.backend.pipeline.jobs  # the job table, by switch job id
        self.runs: dict[int, _Run] = {}  # by switch job id
        self.ps: dict[int, _PsServer] = {}  # by SimConfig.ps_of
        self.util: list[UtilSample] = []
        self.util_at = 0.0
        self.switch_free = 0.0  # when the switch finishes the packets it has (switch_pps)
        for spec in jobs:
            self.at(spec.arrival_s, partial(self.arrive, spec))

    def run(self) -> RunResult:
        self.play()
        left = sum(1 for r in self.table.records.values() if r.state != JobState.FINISHED)
        results, util, refused = self.table.results(), tuple(self.util), self.table.refused()
        return RunResult(self.cfg, results, util, self.events, left, refused)

    # ------------------------------------------------------------------ job level
    def arrive(self, spec: JobSpec) -> None:
        self.table.add(spec)
        self.decide()

    def decide(self, finished: JobRecord | None = None) -> None:
        """A decision round; the applier installs admitted jobs, writes priorities and
        releases the memory of jobs that left. Admitted jobs start their first iteration."""
        now = self.clock.now()
        if finished is not None:
            self.table.finish(now, finished)
        else:
            self.table.decide(now)
        for rec in self.table.active():
            if rec.state == JobState.ADMITTED:
                self.table.start(now, rec)
                self.start(rec)

    def start(self, rec: JobRecord) -> None:
        sid = rec.switch_job_id
        assert sid is not None
        frags = math.ceil(rec.spec.grad_bytes / self.cfg.payload_bytes)
        run = _Run(rec, sid, self.configs[sid], frags)
        self.runs[sid] = run
        first = self.clock.now() + self.cfg.job_setup_s + rec.spec.iter_time_s
        self.at(first, lambda: self.start_comm(run))

    def start_comm(self, run: _Run) -> None:
        now = self.clock.now()
        run.comm_start = now
        srtt = [w.srtt for w in run.workers] or [None] * run.rec.spec.workers
        run.workers = [_Worker(srtt=t) for t in srtt]  # the RTT estimate outlives an iteration
        run.in_switch.clear()
        run.lost.clear()
        run.done_seqs.clear()
        for w in range(run.rec.spec.workers):
            delay = self.rng.uniform(0.0, self.cfg.worker_skew_s)
            run.workers[w].sending = True
            self.at(now + delay, partial(self.send, run, w))

    def end_iteration(self, run: _Run) -> None:
        now = self.clock.now()
        rec = run.rec
        per_frag = rec.spec.grad_bytes / run.frags
        rec.bytes_switch += per_frag * len(run.in_switch)
        rec.bytes_ps += per_frag * (run.frags - len(run.in_switch))
        before = int(rec.starved_s // self.cfg.spec.aging_s) if self.cfg.spec.aging_s > 0 else 0
        rec.starved_s += (now - run.comm_start) * len(run.lost) / run.frags
        after = int(rec.starved_s // self.cfg.spec.aging_s) if self.cfg.spec.aging_s > 0 else 0
        self.sample_memory()
        rec.iterations_done += 1
        run.iteration += 1
        overhead = self.cfg.iteration_overhead_s
        if run.iteration >= rec.spec.iterations:
            if overhead > 0:
                self.at(now + overhead, lambda: self.decide(finished=rec))
            else:
                self.decide(finished=rec)
            return
        step = max(1, int(self.cfg.progress_step * rec.spec.iterations))
        mark = run.iteration % step == 0
        if mark:
            self.table.progress_mark(rec)
        # A job already at the top level has no level to gain from aging: no decision point.
        if mark or (after != before and rec.priority < self.cfg.spec.levels - 1):
            self.decide()
        self.at(now + overhead + rec.spec.iter_time_s, lambda: self.start_comm(run))

    def sample_memory(self) -> None:
        now = self.clock.now()
        n = self.regs.aggregators
        live = sum(1 for s in self.regs.agg_state if s == AggState.PARTIAL) / n
        complete = (
            sum(1 for s in self.regs.agg_state if s in (AggState.COMPLETE, AggState.FLUSHED)) / n
        )
        self.util.append(UtilSample(self.util_at, now, live, complete, 1.0 - live - complete))
        self.util_at = now

    # ------------------------------------------------------------------ packets
    def send(self, run: _Run, w: int, seq: int | None = None) -> None:
        """Worker `w` sends its next fragment (or resends `seq`)."""
        now = self.clock.now()
        worker = run.workers[w]
        cfg = run.cfg
        if seq is None:
            if (
                worker.in_flight >= self.cfg.window
                or worker.next_frag >= run.frags
                or not self.slot_free(run, worker)
            ):
                worker.sending = False
                return
            seq = run.iteration * run.frags + worker.next_frag
            worker.next_frag += 1
            worker.in_flight += 1
            worker.sent_at[seq] = now
            flags = Flag.NONE
            self.at(now + self.timeout_s, lambda: self.timeout(run, w, seq, self.timeout_s))
            self.at(now + self.cfg.fragment_s, lambda: self.send(run, w))
        else:
            worker.resent.add(seq)
            flags = Flag.RESEND
        if cfg.policy == Policy.STATIC:
            index, shadow = static_index(cfg, seq)
        else:
            pool = run.rec.shared_pool or self.regs.aggregators
            index, shadow = hashed_index(run.rec.hash_seed or 0, seq, pool), 0
        pkt = Packet(
            Kind.GRADIENT, run.sid, w, cfg.fan_in, index, seq, flags, shadow, bitmap=1 << w
        )
        if self.cfg.loss_rate and self.rng.random() < self.cfg.loss_rate:
            return
        self.at(now + self.cfg.fragment_s + self.cfg.link_latency_s, lambda: self.switch(pkt))

    @staticmethod
    def slot_free(run: _Run, worker: _Worker) -> bool:
        """Whether `worker` may send its next fragment under static: only once it has the
        result of ``seq - part_size`` (p4/PROTOCOL.md section 3), whose slot and copy the
        fragment takes. Counting fragments in flight is not enough: past a lost fragment the
        window slides on, and fragment + part_size would overwrite the lost one's copy, whose
        resend the switch would then drop as stale forever."""
        earlier = worker.next_frag - run.cfg.part_size
        return run.cfg.policy != Policy.STATIC or earlier < 0 or earlier in worker.got

    def fast_retransmit(self, run: _Run, w: int, answered: int) -> None:
        """As the worker client does: resend, once, fragments overtaken by `answered`."""
        worker = run.workers[w]
        now = self.clock.now()
        patience = 2 * worker.srtt if worker.srtt is not None else self.timeout_s
        for seq, sent in worker.sent_at.items():  # insertion order: first-send order
            if seq >= answered - REORDER:
                return
            if seq not in worker.resent and now - sent > patience:
                self.send(run, w, seq)

    def timeout(self, run: _Run, w: int, seq: int, after: float) -> None:
        if run.rec.state != JobState.RUNNING or seq // run.frags != run.iteration:
            return
        if seq % run.frags in run.workers[w].got:
            return
        self.send(run, w, seq)
        self.at(self.clock.now() + 2 * after, lambda: self.timeout(run, w, seq, 2 * after))

    def switch(self, pkt: Packet) -> None:
        """A packet reaches the switch: processed at once, or, when the switch has a packet
        rate (`SimConfig.switch_pps`), after the packets ahead of it (one FIFO server)."""
        pps = self.cfg.switch_pps
        if pps <= 0:
            self.handle(pkt)
            return
        self.switch_free = max(self.clock.now(), self.switch_free) + 1 / pps
        self.at(self.switch_free, partial(self.handle, pkt))

    def handle(self, pkt: Packet) -> None:
        run = self.runs[pkt.job]
        if run.rec.state != JobState.RUNNING:
            return  # a straggler packet of a job that already left
        if check(pkt, self.configs[pkt.job], self.regs.aggregators) is not None:
            return
        verdict = (
            self.process_preempting(pkt)
            if self.preempt_on_atp
            else process(self.regs, pkt, self.configs)
        )
        frag = pkt.seq % run.frags
        if verdict.outcome == Outcome.COMPLETED:
            run.in_switch.add(frag)
        elif verdict.outcome in (Outcome.COLLISION, Outcome.FLUSHED):
            run.lost.add(frag)
        if verdict.evicted_job is not None:
            victim = self.runs[verdict.evicted_job]
            victim.rec.preemptions_suffered += 1
            run.rec.preemptions_caused += 1
            for out in verdict.outputs:
                if out.packet.flags & Flag.EVICTED:
                    victim.lost.add(out.packet.seq % victim.frags)
        leave = self.clock.now()
        if self.cfg.switch_pps > 0 and verdict.outputs:
            # Each packet that leaves (each replica of a multicast) takes a turn too.
            sent = sum(
                len(self.runs[out.packet.job].workers) if isinstance(out, ToGroup) else 1
                for out in verdict.outputs
            )
            self.switch_free = max(leave, self.switch_free) + sent / self.cfg.switch_pps
            leave = self.switch_free
        later = leave + self.cfg.switch_latency_s + self.cfg.link_latency_s
        for out in verdict.outputs:
            if isinstance(out, ToGroup):
                self.at(later, partial(self.deliver, out.packet))
            else:
                self.at(later, partial(self.ps_in, out.packet))

    def process_preempting(self, pkt: Packet) -> Verdict:
        """`process` on the ``atp`` rule, with preemption (module doc)."""
        i = pkt.agg_index
        theirs = self.regs.agg_job[i] != pkt.job or self.regs.agg_seq[i] != pkt.seq
        if not (
            pkt.kind == Kind.GRADIENT and self.regs.agg_state[i] == AggState.PARTIAL and theirs
        ):
            return process(self.regs, pkt, self.configs)
        esa: Mapping[int, JobConfig] = {
            **self.configs,
            pkt.job: replace(self.configs[pkt.job], policy=Policy.ESA),
        }
        verdict = process(self.regs, pkt, esa)
        # The esa rule multicasts a sum that completes at once; on atp's it waits for the PS.
        kept = tuple(o for o in verdict.outputs if not isinstance(o, ToGroup))
        return replace(verdict, outputs=kept)

    def deliver(self, pkt: Packet) -> None:
        run = self.runs[pkt.job]
        if run.rec.state != JobState.RUNNING or pkt.seq // run.frags != run.iteration:
            return
        frag = pkt.seq % run.frags
        now = self.clock.now()
        for w, worker in enumerate(run.workers):
            if not worker.take(frag, pkt.seq, now):
                continue
            self.fast_retransmit(run, w, pkt.seq)
            if not worker.sending:
                worker.sending = True
                self.send(run, w)
        if all(len(worker.got) == run.frags for worker in run.workers):
            self.end_iteration(run)

    def ps_in(self, pkt: Packet) -> None:
        run = self.runs[pkt.job]
        if self.cfg.ps_switch_cost > 0 and self.cfg.switch_pps > 0:
            # The PS's receive runs on the switch's CPU: the switch's next packets wait for it.
            busy = self.cfg.ps_switch_cost / self.cfg.switch_pps
            self.switch_free = max(self.clock.now(), self.switch_free) + busy
        server = self.ps.setdefault(self.cfg.ps_of(run.rec.spec.job_id), _PsServer())
        copy = bool(pkt.flags & Flag.COMPLETE) and run.cfg.policy == Policy.ESA
        (server.copies if copy else server.critical).append(pkt)
        if not server.busy:
            self.ps_serve(server)

    def ps_serve(self, server: _PsServer) -> None:
        """Start the next packet on `server`, critical ones first; idle when both are empty."""
        if server.critical:
            pkt = server.critical.popleft()
            server.served_critical += 1
        elif server.copies:
            pkt = server.copies.popleft()
            server.served_copies += 1
        else:
            server.busy = False
            return
        server.busy = True
        run = self.runs[pkt.job]

        def done() -> None:
            self.ps_done(run, pkt)
            self.ps_serve(server)

        self.at(self.clock.now() + self.cfg.ps_fragment_s, done)

    def ps_done(self, run: _Run, pkt: Packet) -> None:
        if run.rec.state != JobState.RUNNING or pkt.seq in run.ps_sent:
            return
        cfg = run.cfg
        full = (1 << cfg.fan_in) - 1
        if pkt.flags & Flag.COMPLETE and cfg.policy == Policy.ESA:
            return  # the switch multicast this sum already; the PS only keeps a copy
        bitmap = run.ps_bitmap.get(pkt.seq, 0) | pkt.bitmap
        run.ps_bitmap[pkt.seq] = bitmap
        if bitmap != full:
            return
        run.ps_sent.add(pkt.seq)
        del run.ps_bitmap[pkt.seq]
        result = Packet(
            Kind.PS_RESULT,
            run.sid,
            PS_WORKER_ID,
            cfg.fan_in,
            pkt.agg_index,
            pkt.seq,
            Flag.COMPLETE,
            bitmap=full,
        )
        self.at(self.clock.now() + self.cfg.link_latency_s, lambda: self.switch(result))


def simulate_fragments(
    jobs: Sequence[JobSpec], cfg: SimConfig, *, timeout_s: float | None = None
) -> RunResult:
    """Run `jobs` packet by packet under `cfg`; the same `RunResult` as `simulate`.

    `timeout_s` is a worker's first resend timeout (default: ``cfg.rto_s``).
    """
    timeout = timeout_s if timeout_s is not None else cfg.rto_s
    return _FragmentSim(jobs, cfg, timeout).run()
