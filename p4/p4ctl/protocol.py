"""The inasched aggregation protocol: wire format, switch-wide constants, enums.

This module is contract 1 of ``ARCHITECTURE.md`` written once. ``p4/PROTOCOL.md`` describes it
in prose, the P4 header in ``p4/include/headers.p4`` is checked against ``HEADER_FIELDS`` by a
test, and every Python component (soft switch, workers, PS, simulator) imports it from here.

A datagram is a fixed 24-byte big-endian header followed by ``lanes`` 4-byte big-endian lanes::

    >>> pkt = Packet(kind=Kind.GRADIENT, job=7, worker=1, fan_in=4, agg_index=3, seq=42,
    ...              bitmap=1 << 1, lanes=np.arange(4, dtype=np.int32))
    >>> decode(encode(pkt), lanes=4).seq
    42
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

__all__ = [
    "FLAG_BY_VALUE",
    "HEADER",
    "HEADER_DTYPE",
    "HEADER_FIELDS",
    "HEADER_SIZE",
    "KIND_BY_VALUE",
    "LANE_DTYPE",
    "MAX_JOBS",
    "MAX_WORKERS",
    "PS_WORKER_ID",
    "SUPPORTED_LANES",
    "VERSION",
    "AggState",
    "DropReason",
    "Flag",
    "Kind",
    "MalformedPacket",
    "Packet",
    "Policy",
    "decode",
    "encode",
    "encode_header",
    "encode_lanes",
    "flag_of",
    "worker_bit",
]

VERSION = 1

# (name, struct code, width in bits). The P4 header `agg_h` declares the same fields in the same
# order with the same widths; tests/p4/test_p4_consistency.py holds both to this table.
HEADER_FIELDS: tuple[tuple[str, str, int], ...] = (
    ("version", "B", 8),
    ("kind", "B", 8),
    ("flags", "H", 16),
    ("job", "H", 16),
    ("worker", "B", 8),
    ("fan_in", "B", 8),
    ("agg_index", "I", 32),
    ("seq", "I", 32),
    ("shadow", "B", 8),
    ("exponent", "b", 8),
    ("lanes", "H", 16),
    ("bitmap", "I", 32),
)
HEADER = struct.Struct(">" + "".join(code for _, code, _ in HEADER_FIELDS))
HEADER_SIZE = HEADER.size  # 24 bytes
# The same header as a numpy structured dtype (packed, big-endian), for stamping the headers
# of many datagrams at once with array operations.
HEADER_DTYPE = np.dtype(
    [
        (name, {"B": "u1", "b": "i1", "H": ">u2", "I": ">u4"}[code])
        for name, code, _ in HEADER_FIELDS
    ]
)
assert HEADER_DTYPE.itemsize == HEADER_SIZE

# Lanes are signed 32-bit integers on the wire, as in the switch's registers (big-endian).
LANE_DTYPE = np.dtype(">i4")
RAW_DTYPE = np.dtype(">f4")

# Tofino's register ALUs give 64 lanes of 32 bits per pass (the default everywhere). A software
# switch can afford more, and more lanes carry more bytes per datagram: 512 and 1,024 lanes
# (2,072- and 4,120-byte datagrams) are for loopback and jumbo-frame links, since a datagram
# longer than a link's MTU travels as IP fragments.
SUPPORTED_LANES = (64, 128, 256, 512, 1024)

# The contributor bitmap is one 32-bit register per aggregator, so a job has at most 32 workers
# (the largest Philly job in the shipped trace has 32 GPUs).
MAX_WORKERS = 32

# The job table and the per-job registers are indexed by job id; 1024 entries cost 1 KiB of SRAM
# per 8-bit register, which fits any target we know of.
MAX_JOBS = 1024

# The parameter server sends into the switch as this worker id of each job: its address is
# registered in the worker table like a worker's, so its packets pass the same source check.
PS_WORKER_ID = 255


class Kind(enum.IntEnum):
    """What a datagram is."""

    GRADIENT = 0  # worker -> switch: one worker's contribution to fragment `seq`
    RESULT = 1  # switch -> workers: the sum, completed in the switch
    TO_PS = 2  # switch -> PS: a bypassed, evicted, flushed or completed (partial) sum
    PS_RESULT = 3  # PS -> switch -> workers: the sum, completed at the PS
    UP = 4  # switch -> parent switch: a sum (or one worker's fragment) standing for its bitmap


class Flag(enum.IntFlag):
    """Header flags. Several may be set at once."""

    NONE = 0
    RESEND = 0x01  # a worker's retransmission after a timeout
    BYPASSED = 0x02  # the switch sent this contribution on to the PS without aggregating it
    EVICTED = 0x04  # a partial sum taken off the switch by a higher-priority job (esa)
    COMPLETE = 0x08  # the lanes hold the sum of all fan_in contributions
    RAW_FLOAT = 0x10  # lanes are IEEE-754 float32, not fixed point: a value overflowed
    COLLISION = 0x20  # bypassed because another job or sequence held the aggregator
    FLUSHED = 0x40  # a partial sum sent to the PS because a worker resent (atp/esa/static)


class Policy(enum.IntEnum):
    """Memory policy of a job, as written into the switch's job table."""

    STATIC = 0
    ATP = 1
    ESA = 2

    @classmethod
    def parse(cls, name: str) -> Policy:
        try:
            return cls[name.upper()]
        except KeyError:
            known = ", ".join(p.name.lower() for p in cls)
            raise ValueError(f"unknown policy {name!r}; known: {known}") from None


class AggState(enum.IntEnum):
    """Value of the `agg_state` register of one aggregator."""

    FREE = 0
    PARTIAL = 1  # holds a partial sum of (owner_job, owner_seq)
    COMPLETE = 2  # holds a complete sum (static: the stored result; atp: waits for the PS)
    FLUSHED = 3  # static only: this sequence is being finished at the PS


class DropReason(enum.IntEnum):
    """Index into the switch's `drop_reason` counter array."""

    BAD_LENGTH = 0  # shorter than the header, or not header + lanes x 4 bytes
    BAD_VERSION = 1
    BAD_KIND = 2  # a kind the sender may not send (a worker sending RESULT, say)
    BAD_LANES = 3  # lane count other than the switch's
    UNKNOWN_JOB = 4  # no job table entry
    BAD_WORKER = 5  # worker id outside 0..fan_in-1 (or fan_in not the job's)
    BAD_BITMAP = 6  # bitmap is not exactly the sender's bit
    UNREGISTERED_SOURCE = 7  # source address not registered for (job, worker)
    BAD_AGG_INDEX = 8  # aggregator index outside the pool or the job's partition
    STALE = 9  # static: a sequence older than the one its slot holds
    INJECTED_LOSS = 10  # the switch's --drop-rate dropped it
    WRONG_PORT = 11  # a registered source's packet on a switch port other than its entry's


class MalformedPacket(ValueError):
    """A datagram that cannot be decoded; `reason` says which drop counter it goes to."""

    def __init__(self, reason: DropReason, detail: str) -> None:
        super().__init__(f"{reason.name.lower()}: {detail}")
        self.reason = reason


def worker_bit(worker: int) -> int:
    """The bitmap bit of a worker id (0..31)."""
    return 1 << worker


@dataclass(slots=True)
class Packet:
    """One decoded datagram. `lanes` is an int32 array, or float32 when RAW_FLOAT is set."""

    kind: Kind
    job: int
    worker: int = 0
    fan_in: int = 0
    agg_index: int = 0
    seq: int = 0
    flags: Flag = Flag.NONE
    shadow: int = 0
    exponent: int = 0
    bitmap: int = 0
    lanes: npt.NDArray[np.int32] | npt.NDArray[np.float32] = field(
        default_factory=lambda: np.zeros(0, dtype=np.int32)
    )
    version: int = VERSION

    def replace(self, **changes: object) -> Packet:
        """A copy with `changes` applied (lanes are shared, not copied)."""
        # Positional and explicit: the switch builds one of these per bypassed packet, and a
        # dict of every slot plus keyword unpacking cost several times the construction.
        copy = Packet(
            self.kind,
            self.job,
            self.worker,
            self.fan_in,
            self.agg_index,
            self.seq,
            self.flags,
            self.shadow,
            self.exponent,
            self.bitmap,
            self.lanes,
            self.version,
        )
        for name, value in changes.items():
            setattr(copy, name, value)
        return copy


# Enum members by wire value, looked up instead of calling ``Kind(v)``/``Flag(v)`` (an
# ``enum.__call__`` costs about 1 us, several times a whole header unpack). Every combination
# of the defined flag bits is here; a value with other bits set falls back to ``Flag(v)``.
KIND_BY_VALUE: dict[int, Kind] = {int(k): k for k in Kind}
FLAG_BY_VALUE: dict[int, Flag] = {v: Flag(v) for v in range(1 << max(Flag).bit_length())}
_RAW_FLOAT_BIT = int(Flag.RAW_FLOAT)
_NATIVE_LANE = LANE_DTYPE.newbyteorder("=")
_NATIVE_RAW = RAW_DTYPE.newbyteorder("=")


def flag_of(value: int) -> Flag:
    """The `Flag` of a header's flags field (a table lookup for the defined bits)."""
    flag = FLAG_BY_VALUE.get(value)
    return flag if flag is not None else Flag(value)


def encode_header(pkt: Packet, lanes: int) -> bytes:
    """The 24 header bytes of `pkt`, announcing `lanes` lanes."""
    return HEADER.pack(
        pkt.version,
        pkt.kind,
        pkt.flags,
        pkt.job,
        pkt.worker,
        pkt.fan_in,
        pkt.agg_index,
        pkt.seq,
        pkt.shadow,
        pkt.exponent,
        lanes,
        pkt.bitmap,
    )


def encode_lanes(pkt: Packet) -> bytes:
    """The lane bytes of `pkt`: big-endian int32, or float32 when RAW_FLOAT is set."""
    dtype = RAW_DTYPE if int(pkt.flags) & _RAW_FLOAT_BIT else LANE_DTYPE
    return np.asarray(pkt.lanes).astype(dtype, copy=False).tobytes()


def encode(pkt: Packet) -> bytes:
    """The datagram bytes of `pkt` (header, then lanes big-endian)."""
    return encode_header(pkt, len(pkt.lanes)) + encode_lanes(pkt)


def decode(data: bytes | memoryview, lanes: int | None = None) -> Packet:
    """Parse a datagram; `lanes` is the switch's k (None accepts any count).

    Raises `MalformedPacket` naming the drop reason. Lanes come back in native byte order.
    """
    if len(data) < HEADER_SIZE:
        raise MalformedPacket(DropReason.BAD_LENGTH, f"{len(data)} bytes, header is {HEADER_SIZE}")
    (version, kind, flags, job, worker, fan_in, agg_index, seq, shadow, exponent, count, bitmap) = (
        HEADER.unpack_from(data)
    )
    if version != VERSION:
        raise MalformedPacket(DropReason.BAD_VERSION, f"version {version}, expected {VERSION}")
    if lanes is not None and count != lanes:
        raise MalformedPacket(DropReason.BAD_LANES, f"{count} lanes, this switch has {lanes}")
    if len(data) != HEADER_SIZE + 4 * count:
        raise MalformedPacket(DropReason.BAD_LENGTH, f"{len(data)} bytes for {count} lanes")
    kind_member = KIND_BY_VALUE.get(kind)
    if kind_member is None:
        raise MalformedPacket(DropReason.BAD_KIND, f"kind {kind}")
    raw = flags & _RAW_FLOAT_BIT
    body = np.frombuffer(data, RAW_DTYPE if raw else LANE_DTYPE, count, HEADER_SIZE)
    return Packet(
        kind_member,
        job,
        worker,
        fan_in,
        agg_index,
        seq,
        flag_of(flags),
        shadow,
        exponent,
        bitmap,
        body.astype(_NATIVE_RAW if raw else _NATIVE_LANE),  # type: ignore[arg-type]
        version,
    )
