"""Allreduce goodput: inasched through the soft switch vs torch.distributed gloo, same run.

    python -m bench.allreduce [--json FILE] [--quick] [--policy esa] [--lanes 256]

For 4 MB and 64 MB float32 tensors with 2 and 4 workers (``--quick``: 4 MB, 2 workers, one
repetition), each worker is a process: inasched workers allreduce through an in-process soft
switch (esa by default, so sums return straight from the switch) with a PS beside it; gloo
workers allreduce over loopback TCP. Goodput is tensor MB / seconds per allreduce, per worker
(the slowest worker's time; the median over repetitions). The JSON holds, per case,
``size_mb``, ``workers``, ``inasched_MBps``, ``gloo_MBps`` and ``ratio`` (inasched / gloo).

Where the time went before (2-core machine shared with other jobs, load average 5-7; 256
lanes, so one packet carries 1 KiB of gradient): switch ~22 us per packet pass (enum
arithmetic ~20% of it), worker quantize ~10 us + build/encode ~14 us + decode/dequantize ~33 us
per fragment. But sampling every thread's CPU time (``/proc/<pid>/task``) showed the switch
thread busy only ~35% and each worker ~30% of the wall time, with the machine far from
saturated: the allreduce was stalling, not computing. Two stalls, both in the client:

- A whole first window resent on timeout. `Transfer.activate` quantized the entire tensor in
  the I/O thread before the first send, with the send timestamp taken *before* it; a worker
  whose peer was still quantizing (or descheduled) saw no result within the 200 ms minimum
  timeout and resent all W fragments, flushing every partial sum to the PS (static: 33-64
  timeout resends per 16 MB allreduce, all in the first window, with no datagram lost).
- A fast retransmit that never fired when the window was stuck behind the lost fragment: it
  was only checked when a result arrived, and none arrives once the window is blocked, so
  esa's collision bypasses (hashed placement: a fragment meets its own job's in-flight
  fragment) waited out the timeout (8-52 timeout resends per 16 MB).

Now: datagrams are built a chunk of 256 fragments at a time just before they are sent (one
`quantize` call, headers stamped through ``protocol.HEADER_DTYPE``, lanes written in wire
order), so the first leaves within a millisecond; they are sent from that buffer as
memoryviews; results are ``recv_into`` one buffer, their header checked with one
``unpack_from`` and their lanes copied (no `Packet`, no byte swap) into an array that
`Transfer.finish` dequantizes in one pass; the send time is stamped after the send; fast
retransmit runs on every turn of the I/O loop with the ``select`` timeout bounded by its next
deadline; and, as in TCP, while nothing at all has come back since a fragment was sent only
the oldest fragment is resent on timeout (fragments that saw later results come back are
resent at once, so heavy loss recovers faster than before: the 10%/20% loss variants of
``tests/workers/test_allreduce.py`` take 62 s instead of 106 s). Static runs now have no
resends at all; esa keeps ~50-60 fast resends per 16 MB (the collisions themselves are the
placement's). The switch side is described in ``bench.dataplane``; the PS no longer builds an
enum per flag test.

Figures, same command back to back, before -> after (``python -m bench.allreduce --quick``:
esa, 4 MB, 2 workers, k=256): at load average 6-7.6, 2.73-2.87 -> 4.53-5.89 MB/s per worker;
with another job holding one core at 100% (load ~2.5), 2.04-2.05 -> 3.29-3.38 (gloo 230-470
MB/s in the same runs). 16 MB, 2 workers, 2 repetitions (scratch harness around
`run_inasched`, load ~3): esa 2.4 -> 3.3-4.6 MB/s, static 3.4 -> 4.9-5.4 MB/s. Full run
(``python -m bench.allreduce``, load 5.7-7.4), MB/s per worker (gloo): 4 MB x 2 workers 4.00
(439), 4 MB x 4 2.31 (195), 64 MB x 2 5.34 (602), 64 MB x 4 2.53 (239): ratio 0.9-1.2%
(0.5% before).

Where the time goes now (16 MB esa, per-thread CPU): the switch thread ~45% busy, each
worker's I/O thread ~30%, the PS ~15%, and other jobs the rest of the two cores. The Python
work per fragment is small (worker ~10 us, switch ~10 us per pass); what dominates is the
kernel: per fragment of an n-worker esa job the switch makes n ``recvfrom`` and n+1
``sendto`` (the PS copy is the protocol's), each worker one ``sendto``, one receive and a
``select`` per 1-2 results, and on loopback every ``sendto`` also runs the receiver's side of
the stack and wakes a sleeping process (5-50 us each on this VM). Python has no
``sendmmsg``/``recvmmsg``, so batching would need a C extension; gloo moves the same bytes with
a C++ ring over TCP at memory speed, so the ratio measures one-datagram-per-syscall Python
processes, not the protocol (a hardware pipeline pass is well under 1 us).
"""

from __future__ import annotations

import argparse
import json
import logging
import multiprocessing as mp
import os
import socket
import statistics
import time
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Barrier
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["main"]

log = logging.getLogger(__name__)

MB = 1_000_000
POOL = 4096
WINDOW = 64


def _free_tcp_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_bound(address: tuple[str, int], timeout_s: float = 60.0) -> None:
    """Return once some process has bound UDP `address` (the PS starting up)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            try:
                s.bind(address)
            except OSError:
                return
        time.sleep(0.05)
    raise TimeoutError(f"nothing bound {address} within {timeout_s} s")


def _ina_worker(
    body: dict[str, Any], size: int, reps: int, ports: Queue[Any], go: Barrier, times: Queue[Any]
) -> None:
    from workers.client import AllreduceClient, ClientOptions
    from workers.rendezvous import parse_join

    x = np.random.default_rng(body["worker_id"]).uniform(-1, 1, size).astype(np.float32)
    with AllreduceClient(parse_join(body), options=ClientOptions(timeout_s=60.0)) as client:
        ports.put((body["worker_id"], client.endpoint))
        go.wait()
        client.allreduce(x[:4096], key="warmup")
        spent = []
        for _ in range(reps):
            go.wait()
            start = time.perf_counter()
            client.allreduce(x, key="tensor")
            spent.append(time.perf_counter() - start)
    times.put(spent)


def _gloo_worker(rank: int, world: int, port: int, size: int, reps: int, times: Queue[Any]) -> None:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world
    )
    x = torch.from_numpy(np.random.default_rng(rank).uniform(-1, 1, size).astype(np.float32))
    dist.all_reduce(x[:4096].clone())
    spent = []
    for _ in range(reps):
        dist.barrier()
        y = x.clone()
        start = time.perf_counter()
        dist.all_reduce(y)
        spent.append(time.perf_counter() - start)
    times.put(spent)
    dist.destroy_process_group()


def _collect(procs: list[Any], times: Queue[Any], n: int) -> float:
    per_worker = [times.get(timeout=600) for _ in range(n)]
    for p in procs:
        p.join(timeout=60)
    slowest = [max(rep) for rep in zip(*per_worker, strict=True)]
    return float(statistics.median(slowest))


def run_inasched(n: int, size: int, reps: int, policy: str, lanes: int) -> float:
    """Seconds per allreduce of `size` floats over `n` worker processes through the switch."""
    from p4ctl.backend import Endpoint, JobInstall
    from p4ctl.client import SwitchClient
    from p4ctl.protocol import Policy
    from p4ctl.softswitch import SoftSwitch

    from workers.ps import main as ps_main

    ctx = mp.get_context("spawn")
    pol = Policy.parse(policy)
    with SoftSwitch(aggregators=POOL, lanes=lanes) as switch:
        control = SwitchClient(switch.p4runtime_address, aggregators=POOL, lanes=lanes)
        host, port = switch.data_address
        # The PS in its own process, as `inasched ps` runs: in the switch's process it would
        # share the switch's interpreter lock.
        ps_address = ("127.0.0.1", _free_udp_port())
        ps_args = ["--port", str(ps_address[1]), "--job", f"1:{n}:{policy}:{WINDOW}"]
        ps_args += ["--switch", f"{host}:{port}", "--log-level", "WARNING"]
        ps = ctx.Process(target=ps_main, args=(ps_args,))
        ps.start()
        try:
            _wait_bound(ps_address)
            part = POOL // 2 if pol == Policy.STATIC else 0
            control.install_job(JobInstall(1, pol, n, 0, part, ps=Endpoint(*ps_address)))
            placement = (
                {"kind": "static", "part_base": 0, "part_size": part}
                if part
                else {"kind": "hashed", "seed": 17, "pool": POOL}
            )
            ports, times = ctx.Queue(), ctx.Queue()
            go = ctx.Barrier(n + 1)
            procs = []
            for w in range(n):
                body = {
                    "job_id": 1,
                    "worker_id": w,
                    "fan_in": n,
                    "policy": policy,
                    "switch": {"host": host, "port": port},
                    "ps": {"host": ps_address[0], "port": ps_address[1]},
                    "lanes": lanes,
                    "window": WINDOW,
                    "placement": placement,
                }
                proc = ctx.Process(target=_ina_worker, args=(body, size, reps, ports, go, times))
                proc.start()
                procs.append(proc)
            for _ in range(n):
                wid, endpoint = ports.get(timeout=120)
                control.add_worker(1, wid, Endpoint(*endpoint))
            for _ in range(reps + 1):
                go.wait()
            return _collect(procs, times, n)
        finally:
            control.close()
            ps.terminate()
            ps.join(timeout=30)


def run_gloo(n: int, size: int, reps: int) -> float:
    """Seconds per gloo allreduce of `size` floats over `n` processes on loopback."""
    ctx = mp.get_context("spawn")
    times = ctx.Queue()
    port = _free_tcp_port()
    procs = [
        ctx.Process(target=_gloo_worker, args=(r, n, port, size, reps, times)) for r in range(n)
    ]
    for p in procs:
        p.start()
    return _collect(procs, times, n)


def main(argv: list[str] | None = None) -> int:
    """Run the cases, print the table, write `--json`; returns the exit status."""
    parser = argparse.ArgumentParser(
        prog="python -m bench.allreduce", description=__doc__.split("\n")[0] if __doc__ else None
    )
    parser.add_argument("--json", type=Path, help="write the results here")
    parser.add_argument("--quick", action="store_true", help="4 MB, 2 workers, 1 repetition")
    parser.add_argument("--policy", default="esa", choices=["static", "atp", "esa"])
    parser.add_argument("--lanes", type=int, default=256, choices=[64, 128, 256])
    parser.add_argument("--reps", type=int, default=3, help="repetitions per case")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    cases = [(4, 2)] if args.quick else [(4, 2), (4, 4), (64, 2), (64, 4)]
    rows = []
    for size_mb, n in cases:
        size = size_mb * MB // 4
        reps = 1 if args.quick or size_mb >= 64 else args.reps
        ina = run_inasched(n, size, reps, args.policy, args.lanes)
        gloo = run_gloo(n, size, reps)
        rows.append(
            {
                "size_mb": size_mb,
                "workers": n,
                "policy": args.policy,
                "lanes": args.lanes,
                "inasched_s": ina,
                "gloo_s": gloo,
                "inasched_MBps": size_mb / ina,
                "gloo_MBps": size_mb / gloo,
                "ratio": (size_mb / ina) / (size_mb / gloo),
            }
        )
        print(_table(rows[-1:], header=len(rows) == 1), flush=True)  # noqa: T201 (CLI table)
    if args.json:
        args.json.write_text(json.dumps({"cases": rows, "cpus": os.cpu_count()}, indent=2))
    return 0


def _table(rows: list[dict[str, Any]], header: bool) -> str:
    lines = []
    if header:
        lines.append(
            f"{'size':>6} {'workers':>7} {'inasched MB/s':>14} {'gloo MB/s':>10} {'ratio':>7}"
        )
    for r in rows:
        lines.append(
            f"{r['size_mb']:>4}MB {r['workers']:>7} {r['inasched_MBps']:>14.2f} "
            f"{r['gloo_MBps']:>10.1f} {r['ratio']:>7.4f}"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
