"""Data-plane throughput of the soft switch against a plain UDP echo server.

    python -m bench.dataplane [--quick] [--json FILE]

For k in (64, 256) and 2, 4, 8 sending processes on loopback: one static job of fan-in n
(SwitchML's flow: a window of W fragments per worker, slot ``seq mod W``, each slot's result
multicast back to the n workers), so every fragment in gets on average one datagram out, as with
an echo server. The echo server (one process, ``recvfrom``/``sendto``) sees the same datagrams
from the same senders in the same run. Also the per-packet cost of `Pipeline.handle` alone on
one core (no sockets). Prints a table with ratios; ``--json`` writes one record per case:
``{"lanes", "senders", "agg_fps", "echo_fps", "agg_mbps", "echo_mbps", "ratio"}``.

Profile (``--profile``: cProfile of `Pipeline.handle` at k=256, a static job of fan-in 4, on
the 2-core development VM):

- First version, 12,500 fragments/s: `protocol.decode` was a third of the pass, most of it
  five `enum.__call__` per packet (``Kind(kind)``, ``Flag(flags)`` and the flag tests), and the
  per-outcome counter loop looked names up in two dicts per packet.
- Second version, 37,000-39,000 fragments/s on a quiet VM: the pipeline parsed the header
  itself with table lookups; ``IntFlag.__and__``/``__or__`` in the rule's flag tests (~1.5 us
  each, several per pass), ``Packet.replace`` (a dict of every slot), enum attribute lookups
  and `encode` of every output (one byte swap per replica group) remained.
- Now: the rule tests flags as plain ints and reads enum members from module constants,
  shares its output-less verdicts, builds a result packet once (no ``replace``); the pipeline
  keys counter cells by outcome value (hashing an Enum member runs Python code), forwards a
  bypassed packet's received lane bytes with a new header, and byte-swaps esa's sum once for
  the multicast and the PS copy. What remains, by own time: `handle` ~20%, header parse and
  lane byte swap ~22%, `rule._static`/`_on_partial`/`_add`/`check`/`_claim`/`_held` ~36%,
  dict lookups and dataclass construction the rest; no enum machinery at all.

Figures, same commands back to back on the same VM (load average 4-7 from other work, so
single runs vary by +-30%): ``python -m bench.dataplane --quick``, before -> after:

- `Pipeline.handle` alone, one core: k=64 33,000-34,000 -> 64,000-73,000 fragments/s;
  k=256 32,000-40,000 -> 70,000-71,000 (100,000-125,000 at load ~2).
- Through sockets, 2-8 senders: 9,400-15,900 -> 12,700-30,700 fragments/s; echo/agg
  1.5-2.7 -> 0.8-2.2 (mostly 1.2-1.6). The echo server itself does only 18,000-36,000 per
  second here: on this VM a loopback ``sendto`` costs 5-50 us (it runs the receiver's side of
  the stack and wakes it), so the switch process now spends most of its time in ``recvfrom``
  and one ``sendto`` per replica, and 50,000 fragments/s through sockets is out of reach of
  any one-datagram-per-syscall Python server on this machine; with 8 senders on 2 cores the
  senders take the CPU the switch thread needs.
- Full run (``python -m bench.dataplane``, load 6.5-7.4): 14,600-19,200 fragments/s through
  sockets, echo/agg 1.5-2.1; `Pipeline.handle` alone 70,000 (k=64) and 109,000 (k=256).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import logging
import multiprocessing as mp
import pstats
import socket
import time
from dataclasses import asdict, dataclass
from multiprocessing.connection import Connection
from multiprocessing.synchronize import Event

import numpy as np
from p4ctl.backend import Endpoint, InMemorySwitch, JobInstall
from p4ctl.client import SwitchClient
from p4ctl.protocol import HEADER_SIZE, Kind, Packet, Policy, encode
from p4ctl.rule import static_index
from p4ctl.softswitch import SoftSwitch

log = logging.getLogger(__name__)

WINDOW = 16  # fragments in flight per sender: 8 senders x 16 x 1 KiB stays under rmem_max
JOB = 1
RECV_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class Record:
    lanes: int
    senders: int
    agg_fps: float
    echo_fps: float
    agg_mbps: float
    echo_mbps: float
    ratio: float  # echo_fps / agg_fps: how many times slower aggregation is per packet


def _fragments(worker: int, senders: int, lanes: int, count: int) -> list[bytes]:
    """The datagrams worker `worker` sends: seq 0..count-1 in a partition of WINDOW slots."""
    from p4ctl.rule import JobConfig

    cfg = JobConfig(JOB, Policy.STATIC, senders, part_base=0, part_size=WINDOW)
    body = np.full(lanes, worker + 1, dtype=np.int32)
    out = []
    for seq in range(count):
        index, shadow = static_index(cfg, seq)
        out.append(
            encode(
                Packet(
                    kind=Kind.GRADIENT,
                    job=JOB,
                    worker=worker,
                    fan_in=senders,
                    agg_index=index,
                    shadow=shadow,
                    seq=seq,
                    bitmap=1 << worker,
                    lanes=body,
                )
            )
        )
    return out


def _sender(
    worker: int,
    senders: int,
    lanes: int,
    count: int,
    target: tuple[str, int],
    ready: mp.Queue,
    start: Event,
    done: mp.Queue,
) -> None:
    """Closed loop: keep WINDOW fragments outstanding; one reply frees one slot."""
    packets = _fragments(worker, senders, lanes, count)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.settimeout(RECV_TIMEOUT_S)
        ready.put((worker, sock.getsockname()))
        start.wait()
        began = time.perf_counter()
        sent = received = 0
        try:
            while received < count:
                while sent < count and sent - received < WINDOW:
                    sock.sendto(packets[sent], target)
                    sent += 1
                sock.recv(4096)
                received += 1
        except TimeoutError:
            done.put((began, time.perf_counter(), received, "timeout"))
            return
        done.put((began, time.perf_counter(), received, ""))


def _run_senders(
    senders: int, lanes: int, count: int, target: tuple[str, int], register: object = None
) -> float:
    """Fragments per second through `target` with `senders` processes (spawned)."""
    ctx = mp.get_context("spawn")
    ready, done, start = ctx.Queue(), ctx.Queue(), ctx.Event()
    procs = [
        ctx.Process(target=_sender, args=(w, senders, lanes, count, target, ready, start, done))
        for w in range(senders)
    ]
    for proc in procs:
        proc.start()
    addresses = [address for _, address in sorted(ready.get() for _ in procs)]
    if callable(register):
        register(addresses)
    start.set()
    results = [done.get() for _ in procs]
    for proc in procs:
        proc.join()
    failed = [r for r in results if r[3]]
    if failed:
        raise RuntimeError(f"{len(failed)} senders timed out (datagrams lost?)")
    elapsed = max(r[1] for r in results) - min(r[0] for r in results)
    return senders * count / elapsed


def _echo_server(conn: Connection, stop: Event) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
        sock.bind(("127.0.0.1", 0))
        sock.settimeout(0.5)
        conn.send(sock.getsockname())
        while not stop.is_set():
            try:
                data, source = sock.recvfrom(65535)
            except TimeoutError:
                continue
            sock.sendto(data, source)


def _switch_server(conn: Connection, stop: Event, lanes: int) -> None:
    with SoftSwitch(aggregators=4096, lanes=lanes) as switch:
        conn.send((switch.data_address, switch.p4runtime_address))
        stop.wait()


def measure(lanes: int, senders: int, count: int) -> Record:
    ctx = mp.get_context("spawn")
    stop = ctx.Event()
    parent, child = ctx.Pipe()
    echo = ctx.Process(target=_echo_server, args=(child, stop))
    echo.start()
    echo_address = parent.recv()
    echo_fps = _run_senders(senders, lanes, count, echo_address)
    stop.set()
    echo.join()

    stop = ctx.Event()
    parent, child = ctx.Pipe()
    server = ctx.Process(target=_switch_server, args=(child, stop, lanes))
    server.start()
    data_address, p4rt_address = parent.recv()
    client = SwitchClient(p4rt_address, aggregators=4096, lanes=lanes)

    def register(addresses: list[tuple[str, int]]) -> None:
        client.install_job(
            JobInstall(JOB, Policy.STATIC, senders, 0, WINDOW, ps=Endpoint("127.0.0.1", 9))
        )
        for worker, (host, port) in enumerate(addresses):
            client.add_worker(JOB, worker, Endpoint(host, port))

    try:
        agg_fps = _run_senders(senders, lanes, count, data_address, register)
    except RuntimeError:
        log.error("switch counters: %s", client.counters())
        raise
    finally:
        client.close()
        stop.set()
        server.join()
    mb = (HEADER_SIZE + 4 * lanes) / 1e6
    return Record(
        lanes, senders, agg_fps, echo_fps, agg_fps * mb, echo_fps * mb, echo_fps / agg_fps
    )


def pipeline_fps(lanes: int, count: int, profile: bool = False) -> tuple[float, str]:
    """Fragments per second of `Pipeline.handle` alone (one core, no sockets), and a profile."""
    switch = InMemorySwitch(aggregators=4096, lanes=lanes)
    senders = 4
    switch.install_job(
        JobInstall(JOB, Policy.STATIC, senders, 0, WINDOW, ps=Endpoint("127.0.0.1", 9))
    )
    for worker in range(senders):
        switch.add_worker(JOB, worker, Endpoint("127.0.0.1", 20000 + worker))
    streams = [_fragments(w, senders, lanes, count // senders) for w in range(senders)]
    handle = switch.pipeline.handle
    order = [
        (streams[w][s], ("127.0.0.1", 20000 + w))
        for s in range(count // senders)
        for w in range(senders)
    ]
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="write the records here")
    parser.add_argument("--quick", action="store_true", help="a short run")
    parser.add_argument("--profile", action="store_true", help="print the cProfile of handle")
    args = parser.parse_args(argv)
    count = 3000 if args.quick else 20000
    records = []
    print(
        f"{'k':>4} {'senders':>7} {'agg fps':>10} {'echo fps':>10} {'agg MB/s':>9} "
        f"{'echo MB/s':>9} {'echo/agg':>8}"
    )
    for lanes in (64, 256):
        for senders in (2, 4, 8):
            rec = measure(lanes, senders, count)
            records.append(rec)
            print(
                f"{lanes:>4} {senders:>7} {rec.agg_fps:>10,.0f} {rec.echo_fps:>10,.0f} "
                f"{rec.agg_mbps:>9.1f} {rec.echo_mbps:>9.1f} {rec.ratio:>8.2f}"
            )
    one_core = {}
    for lanes in (64, 256):
        fps, text = pipeline_fps(lanes, 40000 if not args.quick else 8000, args.profile)
        one_core[lanes] = fps
        print(f"Pipeline.handle alone, k={lanes}: {fps:,.0f} fragments/s on one core")
        if text:
            print(text)
    if args.json:
        with open(args.json, "w") as out:
            json.dump(
                {
                    "records": [asdict(r) for r in records],
                    "pipeline_fps": {str(k): v for k, v in one_core.items()},
                },
                out,
                indent=1,
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
