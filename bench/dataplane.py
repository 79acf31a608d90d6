"""Data-plane throughput of the soft switch, against a compiled GSO/GRO echo of the same I/O.

    python -m bench.dataplane [--quick] [--repeats 3] [--json FILE]
                              [--lanes 64,256,1024] [--senders 2,4,8]

For each k and count of sending processes on loopback: the soft switch (bursts in and out, the
C packet pass) and `p4ctl.engine.Burst` echoing every datagram (the loopback's limit for a
burst server). The workload is one static job of fan-in n, W fragments in flight per sender,
one result multicast per slot. A figure is all senders' fragments over the wall time; ``us/fr``
is the server's CPU per fragment (``/proc``). Each case runs `--repeats` times, peers
interleaved: median and [min-max]. A run that lost datagrams counts in the ``lost`` columns
and not in the median; the table goes on. The packet pass alone (`Pipeline.handle_burst`)
closes the run. ``--json`` writes ``{"records", "pipeline_fps"}``.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import statistics
import time
from dataclasses import asdict, dataclass

import numpy as np
import numpy.typing as npt
from p4ctl.backend import Endpoint, InMemorySwitch, JobInstall
from p4ctl.dataplane import BURST_SLOTS
from p4ctl.engine import pack_address
from p4ctl.protocol import Policy

from bench.dataplane_peers import (
    AGGREGATORS,
    JOB,
    Delivery,
    Peer,
    Senders,
    Served,
    fragment_rows,
    servers,
    stamp,
)

__all__ = ["Load", "Record", "main", "measure_case", "pass_fps"]

log = logging.getLogger(__name__)

# The PS address of the benchmark's job: a static job with no loss never sends to it.
NO_PS = Endpoint("127.0.0.1", 9)
SENDER_COUNTS = (2, 4, 8)
LANES = (64, 256, 1024)  # k=1,024: the widest the soft switch takes (loopback)
QUICK_DIVISOR = 8
# The pass alone: a burst of BURST_SLOTS rows is 256 seqs of 4 workers, one seq per slot.
PASS_WINDOW = 256
PASS_FRAGMENTS = 400_000
_TICK = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Load:
    """What the senders send to each peer in one run."""

    fragments: int  # all senders together
    window: int  # in flight per sender; the switch holds a static partition of 2 x window


# Hundreds of thousands of fragments per second: a run lasts about a second. A burst server
# needs bursts to take (window 256 held the switch to ~450,000 fragments/s at k=256, 512 gives
# ~600,000), and every window must fit the receive buffers (8 MiB): 8 x 512 x 1 KiB
# GRO-merged reaches the switch.
LOAD = Load(400_000, 512)


@dataclass(frozen=True)
class Record:
    lanes: int
    senders: int
    agg_fps: float  # median over the repetitions that lost nothing
    echo_fps: float
    agg_runs: list[float]  # NaN: a repetition that lost datagrams
    echo_runs: list[float]
    agg_mbps: float  # gradient payload, 4 bytes per lane
    echo_mbps: float
    ratio: float  # echo_fps / agg_fps: how many times faster the echo of the same I/O is
    # The server process's CPU per fragment (median): 1e6 / it is what one core of its own
    # would carry, whatever the senders and other work took of the two cores.
    agg_cpu_us: float
    echo_cpu_us: float
    # Datagrams sent, and sent but not back when the run ended, over every repetition.
    agg_sent: int
    agg_lost: int
    echo_sent: int
    echo_lost: int
    fragments: int  # per run, all senders
    window: int  # per sender


# ------------------------------------------------------------------ one case


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds process `pid` has used (``/proc``, 10 ms ticks)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICK


def _run_peer(
    peer: Peer, served: Served, senders: Senders, n: int, lanes: int, load: Load
) -> tuple[Delivery, float]:
    """One run against `peer`: what the senders got through, and the peer's CPU microseconds
    per fragment (its whole process: a switch's gRPC threads are idle meanwhile)."""
    control = served.control
    count = max(load.window, load.fragments // n)
    if control is not None:
        control.install_job(JobInstall(JOB, Policy.STATIC, n, 0, load.window, ps=NO_PS))
        for worker, (host, port) in enumerate(senders.addresses[:n]):
            control.add_worker(JOB, worker, Endpoint(host, port))
    try:
        cpu = process_cpu_s(served.pid)
        delivery = senders.run(n, lanes, load.window, count, served.data)
        spent = process_cpu_s(served.pid) - cpu
        # Per fragment sent: a sender that stopped on a loss sent fewer than `count`.
        us = 1e6 * spent / delivery.sent if delivery.sent else math.nan
        if delivery.errors:
            counters = control.counters() if control else None
            log.warning(
                "%s, k=%d, %d senders: %d of %d datagrams lost: %s (switch: %s)",
                peer.label, lanes, n, delivery.lost, delivery.sent,
                "; ".join(delivery.errors), counters,
            )  # fmt: skip
        return delivery, us
    finally:
        if control is not None:
            control.remove_job(JOB)


def measure_case(
    lanes: int,
    n: int,
    servers: dict[Peer, Served],
    senders: Senders,
    *,
    load: Load,
    repeats: int,
) -> Record:
    """The record of `n` senders at `lanes` lanes against the switch and the echo in
    `servers`, the peers interleaved in every repetition."""
    runs: dict[Peer, list[Delivery]] = {peer: [] for peer in servers}
    cpu: dict[Peer, list[float]] = {peer: [] for peer in servers}
    for _ in range(repeats):
        for peer, served in servers.items():
            delivery, us = _run_peer(peer, served, senders, n, lanes, load)
            runs[peer].append(delivery)
            cpu[peer].append(us)
    agg_peer, echo_peer = (next(p for p in servers if p.role == role) for role in ("agg", "echo"))
    agg, echo = runs[agg_peer], runs[echo_peer]
    agg_fps, echo_fps = _median([d.fps for d in agg]), _median([d.fps for d in echo])
    mb = 4 * lanes / 1e6
    return Record(
        lanes=lanes,
        senders=n,
        agg_fps=agg_fps,
        echo_fps=echo_fps,
        agg_runs=[d.fps for d in agg],
        echo_runs=[d.fps for d in echo],
        agg_mbps=agg_fps * mb,
        echo_mbps=echo_fps * mb,
        ratio=echo_fps / agg_fps,
        agg_cpu_us=_median(cpu[agg_peer]),
        echo_cpu_us=_median(cpu[echo_peer]),
        agg_sent=sum(d.sent for d in agg),
        agg_lost=sum(d.lost for d in agg),
        echo_sent=sum(d.sent for d in echo),
        echo_lost=sum(d.lost for d in echo),
        fragments=max(load.window, load.fragments // n) * n,
        window=load.window,
    )


def _median(values: list[float]) -> float:
    kept = [v for v in values if not math.isnan(v)]
    return float(statistics.median(kept)) if kept else math.nan


# ------------------------------------------------------------------ the pass alone


def pass_fps(lanes: int, count: int) -> float:
    """Fragments per second of the packet pass alone (one core, no sockets): a static job of
    fan-in 4, bursts of `BURST_SLOTS` rows (W seqs x 4 workers) stamped outside the timed
    part, through `Pipeline.handle_burst`."""
    senders = 4
    switch = InMemorySwitch(aggregators=AGGREGATORS, lanes=lanes)
    switch.install_job(JobInstall(JOB, Policy.STATIC, senders, 0, PASS_WINDOW, ps=NO_PS))
    sources = [("127.0.0.1", 20000 + w) for w in range(senders)]
    for worker, (host, port) in enumerate(sources):
        switch.add_worker(JOB, worker, Endpoint(host, port))
    templates = [fragment_rows(w, senders, lanes, PASS_WINDOW) for w in range(senders)]
    seqs_per_burst = BURST_SLOTS // senders
    return _timed_bursts(switch, templates, sources, seqs_per_burst, -(-count // BURST_SLOTS))


def _timed_bursts(
    switch: InMemorySwitch,
    templates: list[npt.NDArray[np.uint8]],
    sources: list[tuple[str, int]],
    seqs_per_burst: int,
    bursts: int,
) -> float:
    """`Pipeline.handle_burst` over bursts stamped outside the timed part."""
    senders = len(templates)
    stride = templates[0].shape[1]
    rows = np.zeros((seqs_per_burst * senders, stride), np.uint8)
    sizes = np.full(len(rows), stride, np.int64)
    addrs = np.tile(np.array([pack_address(s) for s in sources], np.int64), seqs_per_burst)
    handle_burst = switch.pipeline.handle_burst
    spent = 0.0
    for b in range(bursts):
        for worker, template in enumerate(templates):
            order = stamp(template, b * seqs_per_burst, seqs_per_burst)
            rows[worker::senders] = template[order]
        began = time.perf_counter()
        for _ in handle_burst(rows, sizes, addrs, len(rows)):
            pass
        spent += time.perf_counter() - began
    return bursts * len(rows) / spent


# ------------------------------------------------------------------ the command


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--json", help="write the records here")
    parser.add_argument("--quick", action="store_true", help="a short run, one repetition")
    parser.add_argument("--repeats", type=int, default=3, help="runs per case (median, spread)")
    parser.add_argument("--lanes", default=",".join(map(str, LANES)), help="e.g. 64,256")
    parser.add_argument("--senders", default=",".join(map(str, SENDER_COUNTS)), help="e.g. 2,4,8")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    divisor = QUICK_DIVISOR if args.quick else 1
    repeats = 1 if args.quick else args.repeats
    lanes_list = [int(x) for x in args.lanes.split(",") if x]
    sender_counts = [int(x) for x in args.senders.split(",") if x]
    load = Load(LOAD.fragments // divisor, LOAD.window)
    print(
        f"{load.fragments:,} fragments per run, window {load.window} per sender; "
        f"{repeats} repetition(s), median [min-max]"
    )
    print(_header())
    records: list[Record] = []
    senders = Senders(max(sender_counts))
    try:
        for lanes in lanes_list:
            with servers(lanes) as served:
                for n in sender_counts:
                    records.append(
                        measure_case(lanes, n, served, senders, load=load, repeats=repeats)
                    )
                    print(_row(records[-1]), flush=True)
    finally:
        senders.close()
    passes = []
    for lanes in lanes_list:
        fps = pass_fps(lanes, PASS_FRAGMENTS // divisor)
        passes.append({"lanes": lanes, "fps": fps})
        print(f"packet pass alone, k={lanes}: {fps:,.0f} fragments/s on one core")
    if args.json:
        with open(args.json, "w") as out:
            json.dump(
                {"records": [asdict(r) for r in records], "pipeline_fps": passes}, out, indent=1
            )
    return 0


def _header() -> str:
    return (
        f"{'k':>4} {'snd':>3} | {'switch fps [min-max]':>31} {'us/fr':>5} "
        f"{'GSO/GRO echo fps [min-max]':>31} {'us/fr':>5} {'echo/sw':>7} {'MB/s':>5} | "
        f"{'lost (switch, echo)':>23}"
    )


def _row(r: Record) -> str:
    def spread(median: float, runs: list[float]) -> str:
        kept = [x for x in runs if not math.isnan(x)] or [math.nan]
        return f"{median:>9,.0f} [{min(kept):>9,.0f}-{max(kept):>9,.0f}]"

    def lost(count: int, sent: int) -> str:
        return f"{count:,}/{sent:,}" if count else "0"

    return (
        f"{r.lanes:>4} {r.senders:>3} | {spread(r.agg_fps, r.agg_runs)} "
        f"{r.agg_cpu_us:>5.2f} {spread(r.echo_fps, r.echo_runs)} "
        f"{r.echo_cpu_us:>5.2f} {r.ratio:>7.2f} {r.agg_mbps:>5.0f} | "
        f"{lost(r.agg_lost, r.agg_sent):>11}, {lost(r.echo_lost, r.echo_sent):>11}"
    )


if __name__ == "__main__":
    raise SystemExit(main())
