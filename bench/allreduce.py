"""Allreduce goodput: inasched through the soft switch vs torch.distributed gloo, same run.

    python -m bench.allreduce [--json FILE] [--quick] [--full] [--policies esa,static]
                              [--datapaths engine,python] [--sizes 4,64] [--workers 2,4]
                              [--lanes 256] [--reps 3]

For 4 MB and 64 MB float32 tensors, 2 and 4 workers, and each policy: inasched through an
in-process soft switch with a PS in a process beside it, and gloo over loopback TCP. Every
worker is a process. Goodput is tensor MB / seconds per allreduce, per worker (the slowest
worker's time, the median over repetitions). Every result is checked against
``workers.quant.error_bound`` and for being the same on every worker; a case outside the bound
is flagged and the command exits with status 1. ``--quick``: 4 MB, 2 workers, one repetition.
``--json`` writes ``{"cases": [...], "cpus", "notes"}``, one case per (size, workers, policy,
data path) with the timings, ratio to gloo, ``within_bound``, ``worst_error`` and
``identical``. Figures: ``docs/performance.md``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import multiprocessing as mp
import os
import socket
import statistics
import time
from dataclasses import dataclass
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Barrier
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
from p4ctl.protocol import SUPPORTED_LANES

from bench.dataplane import datapath_env

__all__ = ["Timing", "check_result", "main", "run_gloo", "run_inasched"]

log = logging.getLogger(__name__)

MB = 1_000_000
POOL = 4096
# Fragments in flight per worker: larger windows (256-1,024) moved little more, within the
# run-to-run noise.
WINDOW = 64
SIZES_MB = (4, 64)
WORKERS = (2, 4)
# k: the most a hardware pass has of the soft switch's usual sizes, and the widest it takes.
LANES = (256, 1024)
DATAPATHS = ("engine", "python")
# The Python data path's 3-9 MB/s: more repetitions of its 64 MB cases take minutes.
PYTHON_REPS = 1


@dataclass(frozen=True)
class Timing:
    """Seconds per allreduce (the slowest worker per repetition) and what the checks found."""

    runs_s: list[float]
    within_bound: bool
    worst_error: float  # largest |result - exact| / bound over every element and repetition
    identical: bool
    datapath: str  # the workers' data path as their clients report it

    @property
    def median_s(self) -> float:
        return float(statistics.median(self.runs_s))


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


def _inputs(worker: int, size: int) -> npt.NDArray[np.float32]:
    return np.random.default_rng(worker).uniform(-1, 1, size).astype(np.float32)


def check_result(
    result: npt.NDArray[np.float32],
    exact: npt.NDArray[np.float64],
    abs_total: npt.NDArray[np.float64],
    fan_in: int,
    exponents: npt.NDArray[np.int8],
    lanes: int,
) -> float:
    """Largest ``|result - exact| / error_bound`` (at most 1 when within the bound), with
    `exponents` one per fragment of `lanes` lanes."""
    from workers.quant import error_bound

    per_element = np.repeat(exponents.astype(np.int64), lanes)[: result.size]
    bound = error_bound(exact, abs_total, fan_in, per_element)
    return float((np.abs(result.astype(np.float64) - exact) / bound).max())


def _ina_worker(
    body: dict[str, Any], size: int, reps: int, ports: Queue[Any], go: Barrier, times: Queue[Any]
) -> None:
    from workers.client import AllreduceClient, ClientOptions
    from workers.quant import DEFAULT_EXPONENT, next_exponents
    from workers.rendezvous import parse_join

    n, lanes = body["fan_in"], body["lanes"]
    x = _inputs(body["worker_id"], size)
    everyone = [_inputs(w, size).astype(np.float64) for w in range(n)]
    exact = np.sum(everyone, axis=0)
    abs_total = np.sum(np.abs(everyone), axis=0)
    del everyone
    spent, results = [], []
    with AllreduceClient(parse_join(body), options=ClientOptions(timeout_s=60.0)) as client:
        ports.put((body["worker_id"], client.endpoint))
        go.wait()
        client.allreduce(x[:4096], key="warmup")
        for _ in range(reps):
            go.wait()
            start = time.perf_counter()
            results.append(client.allreduce(x, key="tensor"))
            spent.append(time.perf_counter() - start)
        datapath = str(getattr(client, "datapath", "python"))
        # Checked once every worker has its last result: on 2 cores a check beside another
        # worker's allreduce would slow that one down.
        go.wait()
    worst, digests = 0.0, []
    exponents = np.full(-(-size // lanes), DEFAULT_EXPONENT, np.int8)
    for got in results:
        worst = max(worst, check_result(got, exact, abs_total, n, exponents, lanes))
        digests.append(hashlib.blake2b(got.tobytes(), digest_size=16).hexdigest())
        # The client's next allreduce of this tensor took its exponents from this sum.
        exponents = next_exponents(np.pad(got, (0, -size % lanes)).reshape(-1, lanes), exponents)
    times.put((spent, worst, digests, datapath))


def _gloo_worker(rank: int, world: int, port: int, size: int, reps: int, times: Queue[Any]) -> None:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world
    )
    x = torch.from_numpy(_inputs(rank, size))
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


def _slowest(per_worker: list[list[float]], procs: list[Any]) -> list[float]:
    for p in procs:
        p.join(timeout=60)
    return [max(rep) for rep in zip(*per_worker, strict=True)]


def run_inasched(
    n: int, size: int, reps: int, policy: str, lanes: int, datapath: str, window: int = WINDOW
) -> Timing:
    """Allreduces of `size` floats over `n` worker processes through the switch on `datapath`
    (the switch's, and ``INASCHED_DATAPATH`` in the PS and the workers), `window` fragments
    in flight per worker."""
    with datapath_env(datapath):
        return _run_inasched(n, size, reps, policy, lanes, datapath, window)


def _run_inasched(
    n: int, size: int, reps: int, policy: str, lanes: int, datapath: str, window: int
) -> Timing:
    from p4ctl.backend import Endpoint, JobInstall
    from p4ctl.client import SwitchClient
    from p4ctl.protocol import Policy
    from p4ctl.softswitch import SoftSwitch

    from workers.ps import main as ps_main

    ctx = mp.get_context("spawn")
    pol = Policy.parse(policy)
    with SoftSwitch(aggregators=POOL, lanes=lanes, datapath=datapath) as switch:
        control = SwitchClient(switch.p4runtime_address, aggregators=POOL, lanes=lanes)
        host, port = switch.data_address
        # The PS in its own process, as `inasched ps` runs: in the switch's process it would
        # share the switch's interpreter lock.
        ps_address = ("127.0.0.1", _free_udp_port())
        ps_args = ["--port", str(ps_address[1]), "--job", f"1:{n}:{policy}:{window}"]
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
                    "window": window,
                    "placement": placement,
                }
                proc = ctx.Process(target=_ina_worker, args=(body, size, reps, ports, go, times))
                proc.start()
                procs.append(proc)
            for _ in range(n):
                wid, endpoint = ports.get(timeout=120)
                control.add_worker(1, wid, Endpoint(*endpoint))
            for _ in range(reps + 2):  # the warm-up, each repetition, the checks
                go.wait()
            results = [times.get(timeout=600) for _ in range(n)]
            worst = max(r[1] for r in results)
            return Timing(
                runs_s=_slowest([r[0] for r in results], procs),
                within_bound=worst <= 1.0,
                worst_error=worst,
                identical=all(r[2] == results[0][2] for r in results),
                datapath=",".join(sorted({r[3] for r in results})),
            )
        finally:
            control.close()
            ps.terminate()
            ps.join(timeout=30)


def run_gloo(n: int, size: int, reps: int) -> list[float]:
    """Seconds per gloo allreduce of `size` floats over `n` processes on loopback, per
    repetition (the slowest worker)."""
    ctx = mp.get_context("spawn")
    times = ctx.Queue()
    port = _free_tcp_port()
    procs = [
        ctx.Process(target=_gloo_worker, args=(r, n, port, size, reps, times)) for r in range(n)
    ]
    for p in procs:
        p.start()
    return _slowest([times.get(timeout=600) for _ in range(n)], procs)


def main(argv: list[str] | None = None) -> int:
    """Run the cases, print the table, write `--json`; 1 when a result broke the bound."""
    parser = argparse.ArgumentParser(
        prog="python -m bench.allreduce", description=__doc__.split("\n")[0] if __doc__ else None
    )
    parser.add_argument("--json", type=Path, help="write the results here")
    parser.add_argument("--quick", action="store_true", help="4 MB, 2 workers, 1 repetition")
    parser.add_argument("--full", action="store_true", help="--reps on the Python path too")
    parser.add_argument("--policies", default="esa,static", help="comma-separated")
    parser.add_argument("--datapaths", default=",".join(DATAPATHS), help="comma-separated")
    parser.add_argument(
        "--lanes",
        default=",".join(map(str, LANES)),
        help=f"comma-separated k, of {', '.join(map(str, SUPPORTED_LANES))}",
    )
    parser.add_argument("--reps", type=int, default=3, help="repetitions per case (engine)")
    parser.add_argument("--window", type=int, default=WINDOW, help="fragments in flight")
    parser.add_argument("--sizes", default=",".join(map(str, SIZES_MB)), help="MB, e.g. 4,64")
    parser.add_argument("--workers", default=",".join(map(str, WORKERS)), help="e.g. 2,4")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    policies = [p for p in args.policies.split(",") if p]
    datapaths = [d for d in args.datapaths.split(",") if d]
    unknown = set(datapaths) - set(DATAPATHS)
    if unknown:
        parser.error(f"unknown data path(s) {sorted(unknown)}: expected {', '.join(DATAPATHS)}")
    lanes_list = [int(x) for x in args.lanes.split(",") if x]
    if set(lanes_list) - set(SUPPORTED_LANES):
        parser.error(f"--lanes: each must be one of {', '.join(map(str, SUPPORTED_LANES))}")
    sizes = [float(x) for x in args.sizes.split(",") if x]
    workers = [int(x) for x in args.workers.split(",") if x]
    cases = [(sizes[0], workers[0])] if args.quick else [(s, n) for s in sizes for n in workers]
    reps = 1 if args.quick else args.reps
    notes = []
    python_reps = reps if args.full else min(reps, PYTHON_REPS)
    if "python" in datapaths and python_reps < reps:
        notes.append(f"python data path: {python_reps} repetition per case; --full runs {reps}")
        print(notes[-1], flush=True)
    rows: list[dict[str, Any]] = []
    print(_header(), flush=True)
    for size_mb, n in cases:
        size = int(size_mb * MB) // 4
        gloo_runs = run_gloo(n, size, reps)
        gloo = float(statistics.median(gloo_runs))
        for policy in policies:
            for datapath, lanes in [(d, k) for d in datapaths for k in lanes_list]:
                runs = python_reps if datapath == "python" else reps
                timing = run_inasched(n, size, runs, policy, lanes, datapath, args.window)
                setting = (size_mb, n, policy, datapath, lanes, args.window)
                rows.append(_case(*setting, timing, gloo))
                print(_line(rows[-1]), flush=True)
    print(_ratios(rows), flush=True)
    if args.json:
        document = {"cases": rows, "cpus": os.cpu_count(), "notes": notes}
        args.json.write_text(json.dumps(document, indent=2))
    broken = [r for r in rows if not (r["within_bound"] and r["identical"])]
    for r in broken:
        log.error("outside the error bound or not the same on every worker: %s", r)
    return 1 if broken else 0


def _case(
    size_mb: float,
    n: int,
    policy: str,
    datapath: str,
    lanes: int,
    window: int,
    timing: Timing,
    gloo_s: float,
) -> dict[str, Any]:
    ina_s = timing.median_s
    return {
        "size_mb": size_mb,
        "workers": n,
        "policy": policy,
        "datapath": datapath,
        "client_datapath": timing.datapath,
        "lanes": lanes,
        "window": window,
        "reps": len(timing.runs_s),
        "inasched_s": ina_s,
        "gloo_s": gloo_s,
        "inasched_MBps": size_mb / ina_s,
        "gloo_MBps": size_mb / gloo_s,
        "ratio": gloo_s / ina_s,
        "inasched_runs_s": timing.runs_s,
        "within_bound": timing.within_bound,
        "worst_error": timing.worst_error,
        "identical": timing.identical,
    }


def _header() -> str:
    return (
        f"{'size':>5} {'wrk':>3} {'policy':>6} {'datapath':>8} {'k':>4} {'reps':>4} "
        f"{'inasched MB/s [min-max]':>25} {'gloo MB/s':>9} {'/gloo':>6} {'err/bound':>9} "
        f"{'same':>4}"
    )


def _line(r: dict[str, Any]) -> str:
    fastest, slowest = min(r["inasched_runs_s"]), max(r["inasched_runs_s"])
    spread = f"[{r['size_mb'] / slowest:.1f}-{r['size_mb'] / fastest:.1f}]"
    return (
        f"{r['size_mb']:>3g}MB {r['workers']:>3} {r['policy']:>6} {r['datapath']:>8} "
        f"{r['lanes']:>4} {r['reps']:>4} {r['inasched_MBps']:>10.1f} {spread:>14} "
        f"{r['gloo_MBps']:>9.1f} "
        f"{r['ratio']:>6.3f} {r['worst_error']:>9.3f} {'yes' if r['identical'] else 'NO':>4}"
    )


def _ratios(rows: list[dict[str, Any]]) -> str:
    """engine / python goodput wherever both ran at one k."""
    by = {(r["size_mb"], r["workers"], r["policy"], r["datapath"], r["lanes"]): r for r in rows}
    lines = []
    for (size_mb, n, policy, datapath, k), r in by.items():
        python = by.get((size_mb, n, policy, "python", k))
        if datapath == "engine" and python is not None:
            lines.append(
                f"engine/python, {size_mb} MB, {n} workers, {policy}, k={k}: "
                f"{r['inasched_MBps'] / python['inasched_MBps']:.1f}x"
            )
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
