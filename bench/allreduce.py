"""Allreduce goodput: inasched through the soft switch vs torch.distributed gloo, same run.

    python -m bench.allreduce [--json FILE] [--quick | --full] [--policies esa,static]
                              [--sizes 4,64] [--workers 2,4] [--lanes 256,1024] [--reps 3]

For each tensor size (float32), worker count, policy and k: inasched through an in-process
soft switch with a PS beside it, and gloo over loopback TCP; every worker is a process.
Goodput is tensor MB / seconds per allreduce per worker (the slowest worker, the median over
repetitions); each case prints its ratio to gloo's. Every result is checked against
``workers.quant.error_bound`` and for being the same on every worker; a case outside the
bound is flagged and the command exits 1. The default grid (`DEFAULT_GRID`) finishes in a
minute or two on two cores; ``--full`` runs `FULL_GRID`. ``--json`` writes ``{"cases",
"cpus"}``. ``--topology FILE``: two levels of switches beside one level and gloo
(``bench.allreduce_fabric``). Figures: ``docs/performance.md``.
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
from p4ctl.protocol import MAX_WORKERS, SUPPORTED_LANES, Policy

__all__ = [
    "GlooWorkers",
    "InaWorkers",
    "Timing",
    "check_result",
    "main",
    "run_gloo",
    "run_inasched",
]

log = logging.getLogger(__name__)

MB = 1_000_000
POOL = 4096
# Fragments in flight per worker: larger windows (256-1,024) moved little more, within the
# run-to-run noise.
WINDOW = 64


@dataclass(frozen=True)
class Grid:
    """The cases a run measures: every size (MB) x worker count x k."""

    sizes_mb: tuple[float, ...]
    workers: tuple[int, ...]
    lanes: tuple[int, ...]


# k: the most a hardware pass has of the soft switch's usual sizes, and the widest it takes.
FULL_GRID = Grid(sizes_mb=(4, 64), workers=(2, 4), lanes=(256, 1024))
# Each case spawns a PS and its workers, and 4 workers on a loaded 2-core machine move a
# 64 MB tensor at a few MB/s each: the full grid took 7 minutes there at k=1,024 alone.
DEFAULT_GRID = Grid(sizes_mb=(4, 64), workers=(2,), lanes=(1024,))


@dataclass(frozen=True)
class Timing:
    """Seconds per allreduce (the slowest worker per repetition) and what the checks found."""

    runs_s: list[float]
    within_bound: bool
    worst_error: float  # largest |result - exact| / bound over every element and repetition
    identical: bool
    digests: tuple[str, ...] = ()  # worker 0's sum, per repetition

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
        go.wait()  # the switch knows every worker
        client.allreduce(x[:4096], key="warmup")
        go.wait()  # every worker is warm and idle
        for _ in range(reps):
            go.wait()
            start = time.perf_counter()
            results.append(client.allreduce(x, key="tensor"))
            spent.append(time.perf_counter() - start)
            go.wait()  # every worker is done: another path may be timed next
        # Checked once the caller has timed everything: on 2 cores a check beside an
        # allreduce, this job's or another path's, would slow that one down.
        go.wait()
    worst, digests = 0.0, []
    exponents = np.full(-(-size // lanes), DEFAULT_EXPONENT, np.int8)
    for got in results:
        worst = max(worst, check_result(got, exact, abs_total, n, exponents, lanes))
        digests.append(hashlib.blake2b(got.tobytes(), digest_size=16).hexdigest())
        # The client's next allreduce of this tensor took its exponents from this sum.
        exponents = next_exponents(np.pad(got, (0, -size % lanes)).reshape(-1, lanes), exponents)
    times.put((spent, worst, digests))


def _gloo_worker(
    rank: int, world: int, port: int, size: int, reps: int, times: Queue[Any], go: Barrier
) -> None:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world
    )
    x = torch.from_numpy(_inputs(rank, size))
    dist.all_reduce(x[:4096].clone())
    go.wait()  # every rank is warm and idle
    spent = []
    for _ in range(reps):
        go.wait()
        y = x.clone()
        start = time.perf_counter()
        dist.all_reduce(y)
        spent.append(time.perf_counter() - start)
        go.wait()
    go.wait()  # the caller has timed everything
    times.put(spent)
    dist.destroy_process_group()


def _slowest(per_worker: list[list[float]], procs: list[Any]) -> list[float]:
    for p in procs:
        p.join(timeout=60)
    return [max(rep) for rep in zip(*per_worker, strict=True)]


def run_inasched(
    n: int, size: int, reps: int, policy: str, lanes: int, window: int = WINDOW
) -> Timing:
    """Allreduces of `size` floats over `n` worker processes through the soft switch, `window`
    fragments in flight per worker."""
    from p4ctl.client import SwitchClient
    from p4ctl.softswitch import SoftSwitch

    ctx = mp.get_context("spawn")
    with SoftSwitch(aggregators=POOL, lanes=lanes) as switch:
        control = SwitchClient(switch.p4runtime_address, aggregators=POOL, lanes=lanes)
        # The PS in its own process, as `inasched ps` runs: in the switch's process it would
        # share the switch's interpreter lock.
        ps_address = ("127.0.0.1", _free_udp_port())
        ps = _start_ps(ctx, ps_address, switch.data_address, n, policy, window)
        try:
            _wait_bound(ps_address)
            placement = _install_job(control, n, policy, ps_address)
            bodies = [
                _join_body(w, n, policy, switch.data_address, ps_address, lanes, window, placement)
                for w in range(n)
            ]
            return _time_workers(ctx, control, bodies, size, reps)
        finally:
            control.close()
            ps.terminate()
            ps.join(timeout=30)


def _start_ps(
    ctx: Any, address: tuple[str, int], switch: tuple[str, int], n: int, policy: str, window: int
) -> Any:
    """The PS of job 1 (`n` workers) in a process of its own, serving UDP `address`."""
    from cli.ps import main as ps_main

    args = ["--port", str(address[1]), "--job", f"1:{n}:{policy}:{window}"]
    args += ["--switch", f"{switch[0]}:{switch[1]}", "--log-level", "WARNING"]
    ps = ctx.Process(target=ps_main, args=(args,))
    ps.start()
    return ps


def _install_job(control: Any, n: int, policy: str, ps_address: tuple[str, int]) -> dict[str, Any]:
    """Install job 1 on the switch: half the pool as a static partition, or the shared pool;
    returns the placement its workers are told."""
    from p4ctl.backend import Endpoint, JobInstall
    from p4ctl.protocol import Policy

    part = POOL // 2 if Policy.parse(policy) == Policy.STATIC else 0
    control.install_job(JobInstall(1, Policy.parse(policy), n, 0, part, ps=Endpoint(*ps_address)))
    if part:
        return {"kind": "static", "part_base": 0, "part_size": part}
    return {"kind": "hashed", "seed": 17, "pool": POOL}


def _join_body(
    worker: int,
    n: int,
    policy: str,
    switch: tuple[str, int],
    ps: tuple[str, int],
    lanes: int,
    window: int,
    placement: dict[str, Any],
) -> dict[str, Any]:
    """What the service's join answer would tell worker `worker` of job 1."""
    return {
        "job_id": 1,
        "worker_id": worker,
        "fan_in": n,
        "policy": policy,
        "switch": {"host": switch[0], "port": switch[1]},
        "ps": {"host": ps[0], "port": ps[1]},
        "lanes": lanes,
        "window": window,
        "placement": placement,
    }


# A barrier that waits longer than this means a process died or hung: the run stops.
STEP_TIMEOUT_S = 600.0


class InaWorkers:
    """Worker processes of job 1, one per join body, stepped by the caller: `endpoints` (once
    each has its socket), `ready` (once the switch knows them all: the warm-up runs), `step`
    (one timed allreduce by every worker) `reps` times, then `finish`."""

    def __init__(self, ctx: Any, bodies: list[dict[str, Any]], size: int, reps: int) -> None:
        self.n = len(bodies)
        self._ports, self._times = ctx.Queue(), ctx.Queue()
        self._go = ctx.Barrier(self.n + 1)
        self._procs = [
            ctx.Process(
                target=_ina_worker, args=(b, size, reps, self._ports, self._go, self._times)
            )
            for b in bodies
        ]
        for proc in self._procs:
            proc.start()

    def endpoints(self) -> dict[int, tuple[str, int]]:
        """Each worker's data address, by worker id."""
        return dict(self._ports.get(timeout=120) for _ in range(self.n))

    def ready(self) -> None:
        self._go.wait(STEP_TIMEOUT_S)
        self._go.wait(STEP_TIMEOUT_S)

    def step(self) -> None:
        self._go.wait(STEP_TIMEOUT_S)
        self._go.wait(STEP_TIMEOUT_S)

    def finish(self) -> Timing:
        """Let the workers check their sums; their times and checks."""
        self._go.wait(STEP_TIMEOUT_S)
        results = [self._times.get(timeout=STEP_TIMEOUT_S) for _ in range(self.n)]
        worst = max(r[1] for r in results)
        return Timing(
            runs_s=_slowest([r[0] for r in results], self._procs),
            within_bound=worst <= 1.0,
            worst_error=worst,
            identical=all(r[2] == results[0][2] for r in results),
            digests=tuple(results[0][2]),
        )

    def stop(self) -> None:
        """End any worker still running (after a failure elsewhere); safe after `finish`."""
        for proc in self._procs:
            if proc.is_alive():
                proc.terminate()
            proc.join(timeout=30)


def _time_workers(
    ctx: Any, control: Any, bodies: list[dict[str, Any]], size: int, reps: int
) -> Timing:
    """Register each worker with the switch and step them through `reps` allreduces."""
    from p4ctl.backend import Endpoint

    workers = InaWorkers(ctx, bodies, size, reps)
    try:
        for wid, endpoint in workers.endpoints().items():
            control.add_worker(1, wid, Endpoint(*endpoint))
        workers.ready()
        for _ in range(reps):
            workers.step()
        return workers.finish()
    finally:
        workers.stop()


class GlooWorkers:
    """`n` gloo processes on loopback, stepped by the caller as `InaWorkers` are; `finish`
    returns the seconds per repetition (the slowest rank)."""

    def __init__(self, ctx: Any, n: int, size: int, reps: int) -> None:
        self._times = ctx.Queue()
        self._go = ctx.Barrier(n + 1)
        port = _free_tcp_port()
        self._procs = [
            ctx.Process(target=_gloo_worker, args=(r, n, port, size, reps, self._times, self._go))
            for r in range(n)
        ]
        for proc in self._procs:
            proc.start()

    def ready(self) -> None:
        self._go.wait(STEP_TIMEOUT_S)

    def step(self) -> None:
        self._go.wait(STEP_TIMEOUT_S)
        self._go.wait(STEP_TIMEOUT_S)

    def finish(self) -> list[float]:
        self._go.wait(STEP_TIMEOUT_S)
        spent = [self._times.get(timeout=STEP_TIMEOUT_S) for _ in self._procs]
        return _slowest(spent, self._procs)

    def stop(self) -> None:
        for proc in self._procs:
            if proc.is_alive():
                proc.terminate()
            proc.join(timeout=30)


def run_gloo(n: int, size: int, reps: int) -> list[float]:
    """Seconds per gloo allreduce of `size` floats over `n` processes on loopback, per
    repetition (the slowest worker)."""
    gloo = GlooWorkers(mp.get_context("spawn"), n, size, reps)
    try:
        gloo.ready()
        for _ in range(reps):
            gloo.step()
        return gloo.finish()
    finally:
        gloo.stop()


def main(argv: list[str] | None = None) -> int:
    """Run the cases, print the table, write `--json`; 1 when a result broke the bound."""
    parser = _parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    if args.topology is not None:
        from bench.allreduce_fabric import run

        return run(_topology_args(parser, args))
    grid = _grid(parser, args)
    policies = [p for p in (args.policies or "esa,static").split(",") if p]
    cases = [(s, n) for s in grid.sizes_mb for n in grid.workers]
    cases, reps = (cases[:1], 1) if args.quick else (cases, 3 if args.reps is None else args.reps)
    rows: list[dict[str, Any]] = []
    print(_header(), flush=True)
    for size_mb, n in cases:
        size = int(size_mb * MB) // 4
        gloo = float(statistics.median(run_gloo(n, size, reps)))
        for policy, lanes in [(p, k) for p in policies for k in grid.lanes]:
            timing = run_inasched(n, size, reps, policy, lanes, args.window)
            rows.append(_case(size_mb, n, policy, lanes, args.window, timing, gloo))
            print(_line(rows[-1]), flush=True)
    print(_ratios(rows), flush=True)
    if args.json:
        args.json.write_text(json.dumps({"cases": rows, "cpus": os.cpu_count()}, indent=2))
    broken = [r for r in rows if not (r["within_bound"] and r["identical"])]
    for r in broken:
        log.error("outside the error bound or not the same on every worker: %s", r)
    return 1 if broken else 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m bench.allreduce", description=__doc__.split("\n")[0] if __doc__ else None
    )
    parser.add_argument("--json", type=Path, help="write the results here")
    grid = parser.add_mutually_exclusive_group()
    grid.add_argument("--quick", action="store_true", help="first size and workers, 1 repetition")
    grid.add_argument("--full", action="store_true", help="every size, worker count and k")
    parser.add_argument(
        "--topology",
        type=Path,
        metavar="FILE",
        help="two levels (the file's ToRs under its spine) beside one level and gloo "
        "(bench.allreduce_fabric); k and the pool size come from the file",
    )
    parser.add_argument(
        "--policies", help="comma-separated (default esa,static; esa with a topology)"
    )
    parser.add_argument(
        "--lanes", help=f"comma-separated k, of {', '.join(map(str, SUPPORTED_LANES))}"
    )
    parser.add_argument(
        "--reps", type=int, help="repetitions per case (default 3; 5 with a topology)"
    )
    parser.add_argument("--window", type=int, default=WINDOW, help="fragments in flight")
    parser.add_argument("--sizes", help="MB, e.g. 4,64")
    parser.add_argument("--workers", help="e.g. 2,4")
    return parser


def _numbers(parser: argparse.ArgumentParser, flag: str, text: str, kind: type) -> list[Any]:
    """`text`, a comma-separated list of positive numbers; a usage error otherwise."""
    try:
        values = [kind(x) for x in text.split(",") if x]
    except ValueError:
        parser.error(f"{flag}: {text!r} is not a comma-separated list of numbers")
    if not values or any(v <= 0 for v in values):
        parser.error(f"{flag}: {text!r}: each must be > 0")
    return values


def _topology_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.Namespace:
    """`args` with the topology run's lists and defaults (``bench.allreduce_fabric``); k and the
    pool size are the file's, so `--lanes` and `--full` are usage errors."""
    from bench import allreduce_fabric as fab

    if args.lanes or args.full:
        parser.error("--topology: k comes from the topology file; drop --lanes and --full")
    policies = (args.policies or ",".join(fab.DEFAULT_POLICIES)).split(",")
    for policy in policies:
        try:
            Policy.parse(policy)
        except ValueError as exc:
            parser.error(f"--policies: {exc}")
    sizes = _numbers(parser, "--sizes", args.sizes, float) if args.sizes else fab.DEFAULT_SIZES_MB
    workers = (
        _numbers(parser, "--workers", args.workers, int) if args.workers else [fab.DEFAULT_WORKERS]
    )
    if any(not 2 <= n <= MAX_WORKERS for n in workers):
        parser.error(f"--workers: each must be 2..{MAX_WORKERS} (the contributor bitmap)")
    reps = 1 if args.quick else (fab.DEFAULT_REPS if args.reps is None else args.reps)
    if reps < 1 or args.window < 1:
        parser.error("--reps and --window must be >= 1")
    return argparse.Namespace(
        topology=args.topology,
        json=args.json,
        window=args.window,
        reps=reps,
        policies_list=policies,
        sizes_list=list(sizes)[:1] if args.quick else list(sizes),
        workers_list=workers,
    )


def _grid(parser: argparse.ArgumentParser, args: argparse.Namespace) -> Grid:
    """The default or full grid, with what `--sizes`, `--workers` and `--lanes` replace."""
    base = FULL_GRID if args.full else DEFAULT_GRID
    grid = Grid(
        sizes_mb=tuple(float(x) for x in args.sizes.split(",") if x)
        if args.sizes
        else base.sizes_mb,
        workers=tuple(int(x) for x in args.workers.split(",") if x)
        if args.workers
        else base.workers,
        lanes=tuple(int(x) for x in args.lanes.split(",") if x) if args.lanes else base.lanes,
    )
    if set(grid.lanes) - set(SUPPORTED_LANES):
        parser.error(f"--lanes: each must be one of {', '.join(map(str, SUPPORTED_LANES))}")
    return grid


def _case(
    size_mb: float,
    n: int,
    policy: str,
    lanes: int,
    window: int,
    timing: Timing,
    gloo_s: float,
) -> dict[str, Any]:
    """One case: ``size_mb``, ``workers``, ``policy``, ``lanes``, ``window``, ``reps``,
    ``inasched_s``, ``gloo_s``, ``inasched_MBps``, ``gloo_MBps``, ``ratio`` (inasched /
    gloo), ``inasched_runs_s`` (every repetition), ``within_bound``, ``worst_error`` (largest
    ``|error| / bound`` over the tensor) and ``identical`` (every worker saw the same sum)."""
    ina_s = timing.median_s
    return {
        "size_mb": size_mb,
        "workers": n,
        "policy": policy,
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
        f"{'size':>5} {'wrk':>3} {'policy':>6} {'k':>4} {'reps':>4} "
        f"{'inasched MB/s [min-max]':>25} {'gloo MB/s':>9} {'/gloo':>6} {'err/bound':>9} "
        f"{'same':>4}"
    )


def _line(r: dict[str, Any]) -> str:
    fastest, slowest = min(r["inasched_runs_s"]), max(r["inasched_runs_s"])
    spread = f"[{r['size_mb'] / slowest:.1f}-{r['size_mb'] / fastest:.1f}]"
    return (
        f"{r['size_mb']:>3g}MB {r['workers']:>3} {r['policy']:>6} "
        f"{r['lanes']:>4} {r['reps']:>4} {r['inasched_MBps']:>10.1f} {spread:>14} "
        f"{r['gloo_MBps']:>9.1f} "
        f"{r['ratio']:>6.3f} {r['worst_error']:>9.3f} {'yes' if r['identical'] else 'NO':>4}"
    )


def _ratios(rows: list[dict[str, Any]]) -> str:
    """inasched's goodput over gloo's, side by side per policy and k: the range over the
    sizes and worker counts measured."""
    lines = []
    for policy, lanes in dict.fromkeys((r["policy"], r["lanes"]) for r in rows):
        ratios = [r["ratio"] for r in rows if (r["policy"], r["lanes"]) == (policy, lanes)]
        lines.append(f"inasched / gloo, {policy}, k={lanes}: {min(ratios):.3f}-{max(ratios):.3f}")
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
