"""The per-fragment switch rule: what one packet does to the registers, and what leaves.

Contract 2 of ``ARCHITECTURE.md``, stated once, readably: the simulator runs it; the compiled
engine (``csrc/switch_pass.c``) mirrors it, held byte for byte by differential tests; the P4
program is held to it by ``p4/vectors/*.json``. No I/O, no clock: registers in, a `Verdict` out.

- ``static`` (SwitchML): the slot is fixed by the sequence; the n-th contribution multicasts
  the result; a retransmission after completion gets it unicast back.
- ``atp`` (ATP): the first fragment claims a free aggregator, others bypass to their PS; the
  complete sum goes to the PS, and the aggregator frees when the PS result passes.
- ``esa`` (ESA): as ``atp``, plus a higher priority takes over a partial aggregator (the evicted
  sum leaves for its PS in the same pass); a complete aggregator is reusable at once.
- Two levels (``p4/PROTOCOL.md`` 7): an entry with a parent (`JobConfig.up_port`; a spill's,
  7.8, is the PS) sends a sum complete here (bitmap = `JobConfig.local_mask`) and the first
  sends it cannot aggregate up as kind UP; resends go to the PS; a parent's RESULT goes down.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from p4ctl.protocol import (
    PS_WORKER_ID,
    AggState,
    DropReason,
    Flag,
    Kind,
    Packet,
    Policy,
    flag_of,
)

__all__ = [
    "COUNTERS",
    "Cells",
    "JOB_COUNTERS",
    "JobConfig",
    "Outcome",
    "Registers",
    "ToGroup",
    "ToPort",
    "Verdict",
    "check",
    "hashed_index",
    "is_power_of_two",
    "own_index",
    "process",
    "source_check",
    "static_index",
]


@dataclass(frozen=True, slots=True)
class JobConfig:
    """One entry of the switch's job table.

    `part_base`/`part_size` describe a static job's partition: `part_size` slots of two copies
    each, so aggregators ``part_base .. part_base + 2 * part_size - 1``. `part_size` is a power
    of two (`static_index`); the other policies ignore both. `priority` is the job's level,
    set by the scheduler only (a MODIFY of the entry): esa preempts a partial sum claimed at a
    lower level; higher wins. Two levels (``p4/PROTOCOL.md`` section 7): `up_port` is the switch
    port toward the parent (None: complete sums go down, one level); `local_mask` the workers
    below this switch (0: all the job's), whose sum is complete here.
    """

    job_id: int
    policy: Policy
    fan_in: int
    part_base: int = 0
    part_size: int = 0
    mcast_group: int = 0
    ps_port: int = 0
    priority: int = 0
    up_port: int | None = None
    local_mask: int = 0

    @property
    def complete_mask(self) -> int:
        """The bitmap of a sum complete at this switch."""
        return self.local_mask or (1 << self.fan_in) - 1


# One register or counter array: a list where the rule runs in Python (the simulator's switch),
# int64 numpy where the compiled engine runs it.
Cells = list[int] | npt.NDArray[np.int64]


class Registers:
    """The switch's register arrays, named as in the P4 program.

    Scalar arrays are Python lists by default (the rule in Python touches single cells, and list
    cells are an order of magnitude cheaper than numpy scalars); with `arrays` they are int64
    numpy arrays, which the compiled packet pass (``p4ctl.switch_engine``) reads and writes in
    place. Lanes are one ``(aggregators, k)`` int32 array either way, which the P4 program
    splits into k arrays ``agg_lane_0 .. agg_lane_{k-1}``. A job's priority is no register:
    it is data of the job's table entry (`JobConfig.priority`), which every P4Runtime target
    can write.
    """

    SCALAR_ARRAYS = (
        "agg_job",
        "agg_seq",
        "agg_state",
        "agg_bitmap",
        "agg_count",
        "agg_exponent",
        "agg_priority",
    )

    agg_job: Cells
    agg_seq: Cells
    agg_state: Cells
    agg_bitmap: Cells
    agg_count: Cells
    agg_exponent: Cells
    agg_priority: Cells

    def __init__(self, aggregators: int, lanes: int, *, arrays: bool = False) -> None:
        if aggregators <= 0:
            raise ValueError(f"aggregators must be positive, got {aggregators}")
        self.aggregators = aggregators
        self.k = lanes
        self.arrays = arrays
        for name in self.SCALAR_ARRAYS:
            setattr(self, name, np.zeros(aggregators, np.int64) if arrays else [0] * aggregators)
        self.agg_lanes = np.zeros((aggregators, lanes), dtype=np.int32)

    def free(self, index: int) -> None:
        """Return aggregator `index` to the pool (lanes are overwritten on the next claim)."""
        self.agg_state[index] = AggState.FREE
        self.agg_bitmap[index] = 0
        self.agg_count[index] = 0

    def reclaim_job(self, job: int) -> int:
        """Free every aggregator `job` holds; returns how many. Idempotent."""
        held = [i for i in self.owned_by(job) if self.agg_state[i] != AggState.FREE]
        for i in held:
            self.free(i)
        return len(held)

    def owned_by(self, job: int) -> list[int]:
        """The aggregators whose owner cell holds `job` (free ones too), in index order.

        The scan runs in C (`list.index`, or numpy on arrays): a finished job's reclaim
        scans every aggregator, and a simulated week finishes thousands of jobs."""
        owners = self.agg_job
        if not isinstance(owners, list):
            found: list[int] = np.flatnonzero(owners == job).tolist()
            return found
        out: list[int] = []
        at = -1
        while True:
            try:
                at = owners.index(job, at + 1)
            except ValueError:
                return out
            out.append(at)


@dataclass(frozen=True, slots=True)
class ToGroup:
    """Replicate `packet` to every port of multicast group `group` (the job's workers)."""

    group: int
    packet: Packet


@dataclass(frozen=True, slots=True)
class ToPort:
    """Send `packet` out of switch port `port` (a worker or a PS)."""

    port: int
    packet: Packet


Output = ToGroup | ToPort


class Outcome(enum.Enum):
    """Which case of the rule a packet hit."""

    CLAIMED = "claimed"
    AGGREGATED = "aggregated"
    COMPLETED = "completed"
    DUPLICATE = "duplicate"
    COLLISION = "collision"
    RAW_BYPASS = "raw_bypass"
    PREEMPTED = "preempted"
    RESULT_RESENT = "result_resent"
    RESEND_TO_PS = "resend_to_ps"
    FLUSHED = "flushed"
    PS_RESULT = "ps_result"
    STALE = "stale"
    PARENT_RESULT = "parent_result"
    RESEND_UP = "resend_up"


JOB_COUNTERS = (
    "job_aggregated",
    "job_bypassed",
    "job_preempted",
    "job_evicted",
    "job_resent",
    "job_dropped",
)

# Per-job counters each outcome bumps for the packet's own job. `job_preempted` counts
# preemptions a job caused; `job_evicted` (bumped for the holder) counts those it suffered.
COUNTERS: dict[Outcome, tuple[str, ...]] = {
    Outcome.CLAIMED: ("job_aggregated",),
    Outcome.AGGREGATED: ("job_aggregated",),
    Outcome.COMPLETED: ("job_aggregated",),
    Outcome.DUPLICATE: ("job_resent",),
    Outcome.COLLISION: ("job_bypassed",),
    Outcome.RAW_BYPASS: ("job_bypassed",),
    Outcome.PREEMPTED: ("job_aggregated", "job_preempted"),
    Outcome.RESULT_RESENT: ("job_resent",),
    Outcome.RESEND_TO_PS: ("job_resent",),
    Outcome.FLUSHED: ("job_resent",),
    Outcome.PS_RESULT: (),
    Outcome.STALE: ("job_dropped",),
    Outcome.PARENT_RESULT: (),
    Outcome.RESEND_UP: ("job_resent",),
}


@dataclass(frozen=True, slots=True)
class Verdict:
    """What one packet did: the case it hit, the packets that leave, whose partial was evicted."""

    outcome: Outcome
    outputs: tuple[Output, ...] = ()
    evicted_job: int | None = None
    drop: DropReason | None = None


# The rule runs once per packet: enum members are read from module constants, flags are
# tested as plain ints (``Flag & Flag`` builds a new enum member through Python code, ~1.5 us),
# and the verdicts without outputs are shared (they are frozen).
_GRADIENT = Kind.GRADIENT
_PS_RESULT = Kind.PS_RESULT
_TO_PS = Kind.TO_PS
_RESULT = Kind.RESULT
_UP = Kind.UP
_STATIC = Policy.STATIC
_ESA = Policy.ESA
_FREE = AggState.FREE
_PARTIAL = AggState.PARTIAL
_COMPLETE = AggState.COMPLETE
_FLUSHED = AggState.FLUSHED
_RESEND = int(Flag.RESEND)
_RAW_FLOAT = int(Flag.RAW_FLOAT)
_BYPASSED = int(Flag.BYPASSED)
_BYPASSED_COLLISION = int(Flag.BYPASSED | Flag.COLLISION)
_HELD_FLUSHED = Flag.FLUSHED
_HELD_COMPLETE = Flag.COMPLETE
_HELD_EVICTED = Flag.EVICTED
_CLAIMED = Verdict(Outcome.CLAIMED)
_AGGREGATED = Verdict(Outcome.AGGREGATED)
_COMPLETED = Verdict(Outcome.COMPLETED)
_DUPLICATE = Verdict(Outcome.DUPLICATE)
_STALE = Verdict(Outcome.STALE, drop=DropReason.STALE)


# ---------------------------------------------------------------------------- placement


def is_power_of_two(n: int) -> bool:
    """Whether `n` is 1, 2, 4, ...: the only static partition sizes the switch can check."""
    return n > 0 and n & (n - 1) == 0


def static_index(cfg: JobConfig, seq: int) -> tuple[int, int]:
    """``(aggregator index, shadow bit)`` of fragment `seq` in a static job's partition.

    Slot ``seq mod size``; the copy alternates with every reuse of the slot, so the previous
    result stays readable while the next sequence aggregates in the other copy. A switch ALU
    cannot divide by a table value, so the P4 program (``fragment_check.p4``) computes both
    with masks, and so does this function: `part_size` must be a power of two, else
    ValueError (the scheduler only hands out such partitions, ``scheduler.memory``).
    """
    size = cfg.part_size
    if not is_power_of_two(size):
        raise ValueError(
            f"job {cfg.job_id}: static part_size {size} is not a power of two; the switch "
            "checks seq mod part_size with a mask (p4/PROTOCOL.md section 3)"
        )
    slot = seq & (size - 1)
    shadow = 1 if seq & size else 0
    return cfg.part_base + shadow * size + slot, shadow


def _mix32(x: int) -> int:
    """A 32-bit multiply-xorshift mix (the finaliser of MurmurHash3's family)."""
    x &= 0xFFFFFFFF
    x ^= x >> 16
    x = (x * 0x85EBCA6B) & 0xFFFFFFFF
    x ^= x >> 13
    x = (x * 0xC2B2AE35) & 0xFFFFFFFF
    return x ^ (x >> 16)


def hashed_index(seed: int, seq: int, pool: int) -> int:
    """Aggregator index of fragment `seq` of a job with hash `seed` in a shared pool (atp/esa).

    A seeded affine bijection of ``seq mod pool``: ``(a * seq + b) mod pool`` with `a` coprime
    to `pool`. Any `pool` consecutive fragments of one job therefore use distinct aggregators,
    so a job never collides with itself inside its window (a plain hash put two of a W=32
    window on one aggregator in about 1 of 9 windows over 256 aggregators, which stalls the
    window until a resend). Two jobs with different seeds collide as with a random hash. The
    switch only checks ``index < pool``; workers and the simulators call this function.
    """
    a = _mix32(seed * 0x9E3779B1 + 1) % pool | 1
    while math.gcd(a, pool) != 1:
        a += 2
    b = _mix32(seed ^ 0x5BD1E995) % pool
    return (a * seq + b) % pool


# ---------------------------------------------------------------------------- checks


def source_check(entry_port: int | None, ingress_port: int) -> DropReason | None:
    """The worker table's verdict on a packet of a known job, or None when it may go on.

    `entry_port` is the port of the sender's entry (keyed by job, worker and source address;
    None: no entry), `ingress_port` the port the packet entered on. A sender is bound to its
    entry's port, as SwitchML's port table binds a worker: a copy that enters anywhere else (an
    L2 segment in front of the switch flooding it) is dropped, so each packet counts once. On
    the soft switch a datagram enters on the port whose endpoint is its source address.
    """
    if entry_port is None:
        return DropReason.UNREGISTERED_SOURCE
    if ingress_port != entry_port:
        return DropReason.WRONG_PORT
    return None


def check(pkt: Packet, cfg: JobConfig | None, aggregators: int) -> DropReason | None:
    """The drop reason for a decoded packet, or None when `process` may take it.

    The source check (worker table, `source_check`) happens before this, in the switch itself.
    """
    if cfg is None:
        return DropReason.UNKNOWN_JOB
    kind = pkt.kind
    if kind == _PS_RESULT:
        if pkt.worker != PS_WORKER_ID:
            return DropReason.BAD_WORKER
        return None if pkt.agg_index < aggregators else DropReason.BAD_AGG_INDEX
    if kind == _UP:
        if pkt.worker != PS_WORKER_ID or pkt.fan_in != cfg.fan_in:
            return DropReason.BAD_WORKER
        if pkt.bitmap == 0 or pkt.bitmap & ~cfg.complete_mask:
            return DropReason.BAD_BITMAP
        return _own_index_check(pkt, cfg, aggregators)
    if kind == _RESULT and cfg.up_port is not None:
        return _own_index_check(pkt, cfg, aggregators)
    if kind != _GRADIENT:
        return DropReason.BAD_KIND
    worker = pkt.worker
    if worker >= cfg.fan_in or pkt.fan_in != cfg.fan_in:
        return DropReason.BAD_WORKER
    if pkt.bitmap != 1 << worker:
        return DropReason.BAD_BITMAP
    if cfg.policy == _STATIC:
        # A partition that is not a power of two (or empty) has no slot the switch can check.
        if not is_power_of_two(cfg.part_size):
            return DropReason.BAD_AGG_INDEX
        if (pkt.agg_index, pkt.shadow) != static_index(cfg, pkt.seq):
            return DropReason.BAD_AGG_INDEX
        if pkt.agg_index >= aggregators:
            return DropReason.BAD_AGG_INDEX
    elif pkt.agg_index >= aggregators:
        return DropReason.BAD_AGG_INDEX
    return None


def _own_index_check(pkt: Packet, cfg: JobConfig, aggregators: int) -> DropReason | None:
    """A packet from another switch (UP, or a RESULT from the parent): a static switch uses
    its own slot for the sequence (`own_index`), a shared pool the packet's index."""
    if cfg.policy == _STATIC and not is_power_of_two(cfg.part_size):
        return DropReason.BAD_AGG_INDEX
    return None if own_index(cfg, pkt) < aggregators else DropReason.BAD_AGG_INDEX


def own_index(cfg: JobConfig, pkt: Packet) -> int:
    """The aggregator a checked packet works on at this switch: a static job's slot of the
    sequence in this switch's partition (an UP or a RESULT from the parent carries another
    switch's), else the packet's index (the same hashed index at every level)."""
    if cfg.policy == _STATIC and pkt.kind != _GRADIENT:
        return static_index(cfg, pkt.seq)[0]
    return pkt.agg_index


# ---------------------------------------------------------------------------- the rule


def process(
    regs: Registers, pkt: Packet, configs: Mapping[int, JobConfig], sender_port: int = 0
) -> Verdict:
    """Apply one checked packet to `regs`; returns the case it hit and the packets that leave.

    `configs` is the job table (the evicted job's PS is looked up in it); `sender_port` is the
    switch port of the sender, where a static retransmission gets its result back.
    """
    cfg = configs[pkt.job]
    kind = pkt.kind
    if kind == _PS_RESULT:
        return _ps_result(regs, cfg, pkt)
    if kind == _RESULT:
        return _parent_result(regs, cfg, pkt)
    if cfg.policy == _STATIC:
        return _static(regs, cfg, pkt, sender_port)
    return _shared(regs, cfg, pkt, configs)


def _to_ps(cfg: JobConfig, pkt: Packet, flags: int) -> ToPort:
    """`pkt` on its way to the job's PS, with `flags` (int bits) added to its own."""
    out = pkt.replace(kind=_TO_PS, flags=flag_of(int(pkt.flags) | flags))
    return ToPort(cfg.ps_port, out)


def _up(cfg: JobConfig, pkt: Packet, flags: int) -> ToPort:
    """`pkt` on its way to the parent switch as kind UP, with `flags` (int bits) added."""
    out = pkt.replace(kind=_UP, worker=PS_WORKER_ID, flags=flag_of(int(pkt.flags) | flags))
    assert cfg.up_port is not None
    return ToPort(cfg.up_port, out)


def _bypass(cfg: JobConfig, pkt: Packet, flags: int) -> ToPort:
    """A first send this switch cannot aggregate: up to the parent, where the other racks'
    sums wait (PROTOCOL.md 7.4), or to the PS at a switch without one."""
    return _to_ps(cfg, pkt, flags) if cfg.up_port is None else _up(cfg, pkt, flags)


def _held(
    regs: Registers, i: int, job: int, seq: int, flags: Flag, fan_in: int, kind: Kind = _TO_PS
) -> Packet:
    """The packet carrying aggregator `i`'s sum (partial or complete); an UP's sender is a
    switch (worker 255)."""
    return Packet(
        kind=kind,
        job=job,
        worker=PS_WORKER_ID if kind == _UP else 0,
        fan_in=fan_in,
        agg_index=i,
        seq=seq,
        flags=flags,
        exponent=regs.agg_exponent[i],
        bitmap=regs.agg_bitmap[i],
        lanes=regs.agg_lanes[i].copy(),
    )


def _claim(regs: Registers, i: int, pkt: Packet, priority: int) -> None:
    regs.agg_job[i] = pkt.job
    regs.agg_seq[i] = pkt.seq
    regs.agg_state[i] = _PARTIAL
    regs.agg_bitmap[i] = pkt.bitmap
    regs.agg_count[i] = 1
    regs.agg_exponent[i] = pkt.exponent
    regs.agg_priority[i] = priority
    if regs.k:
        regs.agg_lanes[i] = pkt.lanes


def _add(regs: Registers, i: int, pkt: Packet) -> int:
    """Add a contribution; returns the new count."""
    regs.agg_bitmap[i] |= pkt.bitmap
    count = regs.agg_count[i] + 1
    regs.agg_count[i] = count
    if pkt.exponent > regs.agg_exponent[i]:
        regs.agg_exponent[i] = pkt.exponent
    if regs.k:
        regs.agg_lanes[i] += pkt.lanes
    return count


def _is_side(regs: Registers, i: int, pkt: Packet) -> bool:
    """A contribution the switch cannot add: raw floats, or fixed point at another exponent."""
    return bool(int(pkt.flags) & _RAW_FLOAT) or pkt.exponent != regs.agg_exponent[i]


def _on_partial(
    regs: Registers,
    cfg: JobConfig,
    pkt: Packet,
    i: int,
    completed: Verdict,
    flushed_state: AggState,
) -> Verdict:
    """A contribution to aggregator `i`, which holds a partial sum of its own (job, seq).

    Shared by all policies; `completed` is what completion emits, `flushed_state` what a
    flushed aggregator becomes (FREE in atp/esa, FLUSHED for a static slot). An UP may carry
    several workers: any of them already held makes it a duplicate (PROTOCOL.md 7.6).
    """
    resend = bool(int(pkt.flags) & _RESEND)
    if regs.agg_bitmap[i] & pkt.bitmap:
        if not resend:
            return _DUPLICATE
        # The sender is in the sum and still has no result: someone is missing; let the PS
        # finish this sequence.
        out = ToPort(cfg.ps_port, _held(regs, i, pkt.job, pkt.seq, _HELD_FLUSHED, cfg.fan_in))
        _set_flushed(regs, i, flushed_state)
        return Verdict(Outcome.FLUSHED, (out,))
    # atp/esa: a RESEND must not join a sum either, for the same reason it never claims: its
    # first send may already be at the PS inside an evicted or flushed sum.
    if _is_side(regs, i, pkt) or (resend and flushed_state == _FREE):
        if not resend:
            return Verdict(Outcome.RAW_BYPASS, (_bypass(cfg, pkt, _BYPASSED),))
        side = _to_ps(cfg, pkt, _BYPASSED)
        held = ToPort(cfg.ps_port, _held(regs, i, pkt.job, pkt.seq, _HELD_FLUSHED, cfg.fan_in))
        _set_flushed(regs, i, flushed_state)
        return Verdict(Outcome.FLUSHED, (side, held))
    _add(regs, i, pkt)
    if regs.agg_bitmap[i] != cfg.complete_mask:
        return _AGGREGATED
    regs.agg_state[i] = _COMPLETE
    return completed


def _set_flushed(regs: Registers, i: int, state: AggState) -> None:
    if state == _FREE:
        regs.free(i)
    else:
        regs.agg_state[i] = state


def _result(regs: Registers, i: int, pkt: Packet, cfg: JobConfig) -> Packet:
    return _held(regs, i, pkt.job, pkt.seq, _HELD_COMPLETE, cfg.fan_in, _RESULT)


def _static_complete(regs: Registers, i: int, pkt: Packet, cfg: JobConfig) -> Verdict:
    """A static slot just completed: the result to the workers, or the local sum up."""
    if cfg.up_port is not None:
        up = _held(regs, i, pkt.job, pkt.seq, _HELD_COMPLETE, cfg.fan_in, _UP)
        return Verdict(Outcome.COMPLETED, (ToPort(cfg.up_port, up),))
    return Verdict(Outcome.COMPLETED, (ToGroup(cfg.mcast_group, _result(regs, i, pkt, cfg)),))


def _static(regs: Registers, cfg: JobConfig, pkt: Packet, sender_port: int) -> Verdict:
    i = own_index(cfg, pkt)
    state = regs.agg_state[i]
    held_seq = regs.agg_seq[i]
    if state != _FREE and pkt.seq < held_seq:
        return _STALE
    if state == _FREE or pkt.seq > held_seq:
        if int(pkt.flags) & _RAW_FLOAT:
            return Verdict(Outcome.RAW_BYPASS, (_bypass(cfg, pkt, _BYPASSED),))
        _claim(regs, i, pkt, 0)
        if pkt.bitmap != cfg.complete_mask:
            return _CLAIMED
        regs.agg_state[i] = _COMPLETE
        return _static_complete(regs, i, pkt, cfg)
    if state == _PARTIAL:
        # Build the result lazily: only the packet that completes the slot pays for it.
        verdict = _on_partial(regs, cfg, pkt, i, _COMPLETED, _FLUSHED)
        if verdict is _COMPLETED:
            return _static_complete(regs, i, pkt, cfg)
        return verdict
    if state == _COMPLETE:
        if cfg.up_port is not None and regs.agg_bitmap[i] != (1 << cfg.fan_in) - 1:
            # The local sum went up and the result has not come down: ask the parent, which
            # holds it (SwitchML's switch-held result, one level up).
            return Verdict(Outcome.RESEND_UP, (_up(cfg, pkt, 0),))
        return Verdict(Outcome.RESULT_RESENT, (ToPort(sender_port, _result(regs, i, pkt, cfg)),))
    # FLUSHED: the PS is finishing this sequence; it also answers retransmissions.
    return Verdict(Outcome.RESEND_TO_PS, (_to_ps(cfg, pkt, _BYPASSED),))


def _shared(
    regs: Registers, cfg: JobConfig, pkt: Packet, configs: Mapping[int, JobConfig]
) -> Verdict:
    i = pkt.agg_index
    state = regs.agg_state[i]
    mine = state != _FREE and regs.agg_job[i] == pkt.job and regs.agg_seq[i] == pkt.seq
    esa = cfg.policy == _ESA
    if mine and state == _PARTIAL:
        verdict = _on_partial(regs, cfg, pkt, i, _COMPLETED, _FREE)
        if verdict is _COMPLETED:
            return _complete_shared(regs, cfg, pkt, esa)
        return verdict
    if mine:
        # Complete and waiting for the PS round trip (atp): the PS holds the sum and re-sends.
        return Verdict(Outcome.RESEND_TO_PS, (_to_ps(cfg, pkt, _BYPASSED),))
    flags = int(pkt.flags)
    if flags & _RESEND:
        # A retransmission never claims: its sequence may already be (partly) at the PS.
        return Verdict(Outcome.RESEND_TO_PS, (_to_ps(cfg, pkt, _BYPASSED),))
    if flags & _RAW_FLOAT:
        return Verdict(Outcome.RAW_BYPASS, (_bypass(cfg, pkt, _BYPASSED),))
    priority = cfg.priority
    if state == _FREE or (esa and state == _COMPLETE):
        _claim(regs, i, pkt, priority)
        if pkt.bitmap == cfg.complete_mask:
            regs.agg_state[i] = _COMPLETE
            return _complete_shared(regs, cfg, pkt, esa)
        return _CLAIMED
    if esa and state == _PARTIAL and priority > regs.agg_priority[i]:
        holder = configs.get(regs.agg_job[i])
        evicted_job = regs.agg_job[i]
        outputs: tuple[Output, ...] = ()
        if holder is not None:
            # The evicted partial goes where the holder's first sends go when they cannot be
            # aggregated here: up to its parent, else to its PS.
            up = holder.up_port
            evicted = _held(
                regs,
                i,
                evicted_job,
                regs.agg_seq[i],
                _HELD_EVICTED,
                holder.fan_in,
                _TO_PS if up is None else _UP,
            )
            outputs = (ToPort(holder.ps_port if up is None else up, evicted),)
        _claim(regs, i, pkt, priority)
        if pkt.bitmap == cfg.complete_mask:
            regs.agg_state[i] = _COMPLETE
            done = _complete_shared(regs, cfg, pkt, esa)
            return Verdict(Outcome.PREEMPTED, outputs + done.outputs, evicted_job)
        return Verdict(Outcome.PREEMPTED, outputs, evicted_job)
    return Verdict(Outcome.COLLISION, (_bypass(cfg, pkt, _BYPASSED_COLLISION),))


def _complete_shared(regs: Registers, cfg: JobConfig, pkt: Packet, esa: bool) -> Verdict:
    i = pkt.agg_index
    if cfg.up_port is not None:
        # Complete at this switch only: the sum goes up (atp: the aggregator waits for the
        # PS_RESULT; esa: reusable at once, a lost UP is recovered by the workers' resends).
        up = _held(regs, i, pkt.job, pkt.seq, _HELD_COMPLETE, cfg.fan_in, _UP)
        return Verdict(Outcome.COMPLETED, (ToPort(cfg.up_port, up),))
    to_ps = ToPort(cfg.ps_port, _held(regs, i, pkt.job, pkt.seq, _HELD_COMPLETE, cfg.fan_in))
    if not esa:
        return Verdict(Outcome.COMPLETED, (to_ps,))
    # ESA: the PS already has the sum, so the aggregator is reusable the moment it completes.
    result = ToGroup(cfg.mcast_group, to_ps.packet.replace(kind=_RESULT))
    return Verdict(Outcome.COMPLETED, (result, to_ps))


def _ps_result(regs: Registers, cfg: JobConfig, pkt: Packet) -> Verdict:
    i = pkt.agg_index
    if (
        cfg.policy != _STATIC
        and regs.agg_state[i] != _FREE
        and regs.agg_job[i] == pkt.job
        and regs.agg_seq[i] == pkt.seq
    ):
        # Every contribution of this sequence is at the PS: whatever the aggregator still
        # holds for it (the complete copy, or a partial of late first sends) is garbage.
        regs.free(i)
    return Verdict(Outcome.PS_RESULT, (ToGroup(cfg.mcast_group, pkt),))


def _parent_result(regs: Registers, cfg: JobConfig, pkt: Packet) -> Verdict:
    """A RESULT the parent sent down (checked: the job has a parent): atp/esa free the
    aggregator if it still holds (job, seq); a static slot of (job, seq) keeps the result, so
    that it answers its workers' resends itself; then down to the workers."""
    i = own_index(cfg, pkt)
    if regs.agg_state[i] != _FREE and regs.agg_job[i] == pkt.job and regs.agg_seq[i] == pkt.seq:
        if cfg.policy != _STATIC:
            regs.free(i)
        else:
            regs.agg_state[i] = _COMPLETE
            regs.agg_bitmap[i] = pkt.bitmap
            regs.agg_exponent[i] = pkt.exponent
            if regs.k:
                regs.agg_lanes[i] = pkt.lanes
    return Verdict(Outcome.PARENT_RESULT, (ToGroup(cfg.mcast_group, pkt),))
