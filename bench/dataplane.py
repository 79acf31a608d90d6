"""Data-plane throughput of the soft switch against UDP echo servers on the same loopback.

    python -m bench.dataplane [--quick] [--repeats 3] [--json FILE] [--profile]
                              [--lanes 64,256] [--senders 2,4,8]

For k in (64, 256) and 2, 4, 8 sending processes, the soft switch (bursts in with
``recvmmsg`` and UDP GRO, the packet pass, bursts out with ``sendmmsg`` and UDP GSO) against
an echo with the same I/O and no packet pass (the loopback's limit for a burst server). The
workload is SwitchML's flow: one static job of fan-in n, each sender keeping W fragments
outstanding, one result multicast per slot, so every fragment in gets one datagram out on
average, as with an echo. A figure is all senders' fragments over the wall time; beside it the
server's CPU microseconds per fragment (``/proc``), since the senders take a core too. Every
case runs `--repeats` times, interleaved; the table shows the median and the spread. Also the
packet pass alone on one core, no sockets (`Pipeline.handle_burst`). ``--json`` writes
``{"records": [...], "pipeline_fps": [...]}``. Figures: ``docs/performance.md``.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import io
import json
import logging
import math
import os
import pstats
import statistics
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass

import numpy as np
import numpy.typing as npt
from p4ctl.backend import Endpoint, InMemorySwitch, JobInstall
from p4ctl.dataplane import BURST_SLOTS
from p4ctl.engine import DATAPATH_ENV, pack_address
from p4ctl.protocol import Policy

from bench.dataplane_peers import (
    AGGREGATORS,
    JOB,
    PEERS,
    Peer,
    Senders,
    Served,
    fragment_rows,
    servers,
    stamp,
)

__all__ = ["Record", "datapath_env", "main", "measure_case", "pass_fps"]

log = logging.getLogger(__name__)

# The PS address of the benchmark's job: a static job with no loss never sends to it.
NO_PS = Endpoint("127.0.0.1", 9)
SENDER_COUNTS = (2, 4, 8)
LANES = (64, 256, 1024)  # k=1,024: the widest the soft switch takes (loopback)
QUICK_DIVISOR = 8
# The pass alone: a burst of BURST_SLOTS rows is 256 seqs of 4 workers, one seq per slot.
PASS_WINDOW = 256
_TICK = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Load:
    """What the senders send to one data path's peers in one run."""

    fragments: int  # all senders together
    window: int  # in flight per sender; the switch holds a static partition of 2 x window


# The compiled peers do hundreds of thousands of fragments per second, the Python ones tens of
# thousands: each run lasts about a second either way. Windows: a burst server needs bursts to
# take (window 256 held the engine switch to ~450,000 fragments/s at k=256, 512 gives ~600,000),
# and every window must fit the receive buffers (8 MiB): 8 x 512 x 1 KiB GRO-merged reaches
# the engine switch, but a Python peer's socket holds segmented datagrams at ~2 KiB each, and
# 4 x 1,024 of them overflowed it.
LOADS = {"engine": Load(400_000, 512), "python": Load(32_000, 128)}


@dataclass(frozen=True)
class Record:
    lanes: int
    senders: int
    datapath: str
    agg_fps: float  # median over repetitions
    echo_fps: float
    agg_runs: list[float]
    echo_runs: list[float]
    agg_mbps: float  # gradient payload, 4 bytes per lane
    echo_mbps: float
    ratio: float  # echo_fps / agg_fps: how many times faster the echo of the same I/O is
    # The server process's CPU per fragment (median): 1e6 / it is what one core of its own
    # would carry, whatever the senders and other work took of the two cores.
    agg_cpu_us: float
    echo_cpu_us: float
    fragments: int  # per run, all senders
    window: int  # per sender


# ------------------------------------------------------------------ one case


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds process `pid` has used (``/proc``, 10 ms ticks)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICK


def _run_peer(
    peer: Peer, served: Served, senders: Senders, n: int, lanes: int, window: int, count: int
) -> tuple[float, float]:
    """One run against `peer`: ``(fragments/s, the peer's CPU microseconds per fragment)``
    (its whole process: a switch's gRPC threads are idle meanwhile); NaNs (logged) when
    datagrams were lost and senders stalled."""
    control = served.control
    if control is not None:
        control.install_job(JobInstall(JOB, Policy.STATIC, n, 0, window, ps=NO_PS))
        for worker, (host, port) in enumerate(senders.addresses[:n]):
            control.add_worker(JOB, worker, Endpoint(host, port))
    try:
        cpu = process_cpu_s(served.pid)
        fps = senders.run(n, lanes, window, count, served.data)
        return fps, 1e6 * (process_cpu_s(served.pid) - cpu) / (n * count)
    except RuntimeError as exc:
        counters = control.counters() if control else None
        log.warning("%s, k=%d, %d senders: %s (switch: %s)", peer.label, lanes, n, exc, counters)
        return float("nan"), float("nan")
    finally:
        if control is not None:
            control.remove_job(JOB)


def measure_case(
    lanes: int,
    n: int,
    servers: dict[Peer, Served],
    senders: Senders,
    *,
    loads: dict[str, Load],
    repeats: int,
) -> list[Record]:
    """Both data paths' records for `n` senders at `lanes` lanes, `loads` by data path, the
    peers interleaved in every repetition."""
    per_sender = {dp: max(load.window, load.fragments // n) for dp, load in loads.items()}
    runs: dict[Peer, list[float]] = {peer: [] for peer in PEERS}
    cpu: dict[Peer, list[float]] = {peer: [] for peer in PEERS}
    for _ in range(repeats):
        for peer in PEERS:
            count, window = per_sender[peer.datapath], loads[peer.datapath].window
            fps, us = _run_peer(peer, servers[peer], senders, n, lanes, window, count)
            runs[peer].append(fps)
            cpu[peer].append(us)
    records = []
    mb = 4 * lanes / 1e6
    for datapath in ("engine", "python"):
        agg_peer, echo_peer = (p for p in PEERS if p.datapath == datapath)
        agg, echo = runs[agg_peer], runs[echo_peer]
        agg_fps, echo_fps = _median(agg), _median(echo)
        records.append(
            Record(
                lanes=lanes,
                senders=n,
                datapath=datapath,
                agg_fps=agg_fps,
                echo_fps=echo_fps,
                agg_runs=agg,
                echo_runs=echo,
                agg_mbps=agg_fps * mb,
                echo_mbps=echo_fps * mb,
                ratio=echo_fps / agg_fps,
                agg_cpu_us=_median(cpu[agg_peer]),
                echo_cpu_us=_median(cpu[echo_peer]),
                fragments=per_sender[datapath] * n,
                window=loads[datapath].window,
            )
        )
    return records


def _median(values: list[float]) -> float:
    kept = [v for v in values if not math.isnan(v)]
    return float(statistics.median(kept)) if kept else math.nan


# ------------------------------------------------------------------ the pass alone


@contextlib.contextmanager
def datapath_env(datapath: str) -> Iterator[None]:
    """``INASCHED_DATAPATH=datapath`` inside the block: a `Pipeline` built there and every
    process started there (``bench.allreduce``, ``bench.emu_cpu``) take that data path."""
    before = os.environ.get(DATAPATH_ENV)
    os.environ[DATAPATH_ENV] = datapath
    try:
        yield
    finally:
        if before is None:
            del os.environ[DATAPATH_ENV]
        else:
            os.environ[DATAPATH_ENV] = before


def pass_fps(lanes: int, datapath: str, count: int, profile: bool = False) -> tuple[float, str]:
    """Fragments per second of the packet pass alone (one core, no sockets), and the cProfile
    text of the Python pass when `profile`. A static job of fan-in 4; the engine takes bursts
    of `BURST_SLOTS` rows (W seqs x 4 workers), the Python pass one datagram at a time."""
    senders = 4
    with datapath_env(datapath):
        switch = InMemorySwitch(aggregators=AGGREGATORS, lanes=lanes)
    switch.install_job(JobInstall(JOB, Policy.STATIC, senders, 0, PASS_WINDOW, ps=NO_PS))
    sources = [("127.0.0.1", 20000 + w) for w in range(senders)]
    for worker, (host, port) in enumerate(sources):
        switch.add_worker(JOB, worker, Endpoint(host, port))
    templates = [fragment_rows(w, senders, lanes, PASS_WINDOW) for w in range(senders)]
    seqs_per_burst = BURST_SLOTS // senders
    bursts = -(-count // BURST_SLOTS)
    if datapath == "engine":
        return _engine_pass_fps(switch, templates, sources, seqs_per_burst, bursts), ""
    order = []
    for seq in range(bursts * seqs_per_burst):
        for worker, rows in enumerate(templates):
            stamp(rows, seq, 1)
            order.append((rows[seq % len(rows)].tobytes(), sources[worker]))
    handle = switch.pipeline.handle
    profiler = cProfile.Profile() if profile else None
    began = time.perf_counter()
    if profiler:
        profiler.enable()
    for data, source in order:
        handle(data, source)
    if profiler:
        profiler.disable()
    fps = len(order) / (time.perf_counter() - began)
    text = ""
    if profiler:
        out = io.StringIO()
        pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(12)
        text = out.getvalue()
    return fps, text


def _engine_pass_fps(
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
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="write the records here")
    parser.add_argument("--quick", action="store_true", help="a short run, one repetition")
    parser.add_argument("--repeats", type=int, default=3, help="runs per case (median, spread)")
    parser.add_argument("--profile", action="store_true", help="cProfile of the Python pass")
    parser.add_argument("--lanes", default=",".join(map(str, LANES)), help="e.g. 64,256")
    parser.add_argument("--senders", default=",".join(map(str, SENDER_COUNTS)), help="e.g. 2,4,8")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    divisor = QUICK_DIVISOR if args.quick else 1
    repeats = 1 if args.quick else args.repeats
    lanes_list = [int(x) for x in args.lanes.split(",") if x]
    sender_counts = [int(x) for x in args.senders.split(",") if x]
    loads = {dp: Load(load.fragments // divisor, load.window) for dp, load in LOADS.items()}
    for datapath, load in loads.items():
        print(
            f"{datapath} peers: {load.fragments:,} fragments per run, window {load.window} per "
            f"sender; {repeats} repetition(s), median [min-max]"
        )
    print(_header())
    records: list[Record] = []
    senders = Senders(max(sender_counts))
    try:
        for lanes in lanes_list:
            with servers(lanes) as served:
                for n in sender_counts:
                    case = measure_case(
                        lanes,
                        n,
                        served,
                        senders,
                        loads=loads,
                        repeats=repeats,
                    )
                    records += case
                    print(_row(*case), flush=True)
    finally:
        senders.close()
    passes = []
    for lanes in lanes_list:
        for datapath, count in (("engine", 400_000), ("python", 40_000)):
            fps, text = pass_fps(lanes, datapath, count // divisor, args.profile)
            passes.append({"lanes": lanes, "datapath": datapath, "fps": fps})
            print(f"packet pass alone, k={lanes}, {datapath}: {fps:,.0f} fragments/s on one core")
            if text:
                print(text)
    if args.json:
        with open(args.json, "w") as out:
            json.dump(
                {"records": [asdict(r) for r in records], "pipeline_fps": passes}, out, indent=1
            )
    return 0


def _header() -> str:
    return (
        f"{'k':>4} {'snd':>3} | {'engine switch fps [min-max]':>31} {'us/fr':>5} "
        f"{'GSO/GRO echo fps [min-max]':>31} {'us/fr':>5} {'echo/sw':>7} {'MB/s':>5} | "
        f"{'py switch':>9} {'py echo':>8} | {'eng/py':>6}"
    )


def _row(engine: Record, python: Record) -> str:
    def spread(median: float, runs: list[float]) -> str:
        kept = [r for r in runs if not math.isnan(r)] or [math.nan]
        return f"{median:>9,.0f} [{min(kept):>9,.0f}-{max(kept):>9,.0f}]"

    return (
        f"{engine.lanes:>4} {engine.senders:>3} | {spread(engine.agg_fps, engine.agg_runs)} "
        f"{engine.agg_cpu_us:>5.2f} {spread(engine.echo_fps, engine.echo_runs)} "
        f"{engine.echo_cpu_us:>5.2f} {engine.ratio:>7.2f} {engine.agg_mbps:>5.0f} | "
        f"{python.agg_fps:>9,.0f} {python.echo_fps:>8,.0f} | "
        f"{engine.agg_fps / python.agg_fps:>6.1f}"
    )


if __name__ == "__main__":
    raise SystemExit(main())
