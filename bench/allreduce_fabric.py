"""Allreduce goodput through two levels of soft switches, beside one level and gloo, one run.

    python -m bench.allreduce --topology FILE [--workers 4] [--sizes 4] [--reps 5]
                              [--policies esa] [--window 64] [--json OUT]

The topology file (``docs/topology.md``) gives the ToRs under one spine, the pool size and k.
Per size and policy, three paths carry the same tensors of the same `n` workers, set up side
by side and timed in turn, each repetition starting with the next path: (a) two levels, the
workers split evenly over the file's ToRs (2 + 2 for 4 over two), each ToR a soft switch under
a spine switch (``p4ctl.tree_install``, ``p4/PROTOCOL.md`` 7.2); (b) one level, every worker
on one soft switch; (c) gloo over loopback TCP. Each switch path has its PS in a process of its
own; the switches run in this process, as ``bench.allreduce``'s does. Goodput, the checks
(``workers.quant.error_bound``, the same sum on every worker) and the spread over repetitions
are as in ``bench.allreduce``; the ratios are two levels over one level and over gloo. Exit 2
for a topology it cannot wire, 1 when a sum broke the bound. Figures: ``docs/performance.md``.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import statistics
import sys
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import Any

from p4ctl.p4info import MAX_AGGREGATORS, MAX_LANE_CELLS
from p4ctl.protocol import Policy

from bench.allreduce import (
    MB,
    GlooWorkers,
    InaWorkers,
    Timing,
    _free_udp_port,
    _join_body,
    _wait_bound,
)
from scheduler.errors import TopologyError
from scheduler.fabric import Fabric, load_fabric

__all__ = ["Plan", "plan", "run"]

PATHS = ("two-level", "one-level", "gloo")
DEFAULT_WORKERS = 4
# 4 MB at the file's k = 64 is 16,000 fragments per worker, about half a second per
# allreduce through the switches on a loaded 2-core machine: long enough that one scheduling
# hiccup is not the whole figure, short enough that a run takes under a minute.
DEFAULT_SIZES_MB = (4.0,)
DEFAULT_REPS = 5
DEFAULT_POLICIES = ("esa",)
JOB = 1


@dataclass(frozen=True)
class Plan:
    """What a run wires: `racks[i]`, the worker ids under ToR `tors[i]`; one pool size and k."""

    tors: tuple[str, ...]
    racks: tuple[tuple[int, ...], ...]
    aggregators: int
    lanes: int

    @property
    def workers(self) -> int:
        return sum(len(r) for r in self.racks)


def plan(fabric: Fabric, n: int, where: str) -> Plan:
    """`n` workers split evenly over the ToRs of `fabric` (the first `n` ToRs if fewer);
    raises `TopologyError` for a fabric the soft switches cannot wire."""
    if fabric.levels != 2:
        raise TopologyError(
            f"{where}: the benchmark wires ToRs under one spine (two levels); this fabric has "
            f"{fabric.levels}"
        )
    tors = fabric.tors[: min(n, len(fabric.tors))]
    if len(tors) < 2:
        raise TopologyError(f"{where}: two levels need at least two ToRs with workers")
    # One P4 program, one register size: a hashed index is the same at every level (7.2).
    pools = {fabric.root.aggregators, *(t.aggregators for t in tors)}
    if len(pools) != 1:
        raise TopologyError(
            f"{where}: the spine and the ToRs must have the same aggregators (one P4 program); "
            f"got {sorted(pools)}"
        )
    (aggregators,) = pools
    if aggregators < 2:
        raise TopologyError(f"{where}: a static job's slot of two copies needs 2 aggregators")
    if aggregators > MAX_AGGREGATORS or aggregators * fabric.lanes > MAX_LANE_CELLS:
        raise TopologyError(
            f"{where}: {aggregators} aggregators of {fabric.lanes} lanes are more than a soft "
            f"switch holds (at most {min(MAX_AGGREGATORS, MAX_LANE_CELLS // fabric.lanes)})"
        )
    counts = [n // len(tors) + (i < n % len(tors)) for i in range(len(tors))]
    starts = [sum(counts[:i]) for i in range(len(tors))]
    racks = tuple(tuple(range(s, s + c)) for s, c in zip(starts, counts, strict=True))
    return Plan(tuple(t.name for t in tors), racks, aggregators, fabric.lanes)


def _ps_process(
    address: tuple[str, int],
    fan_in: int,
    policy: str,
    window: int,
    root: tuple[str, int],
    children: tuple[tuple[str, int], ...],
    stop: Any,
) -> None:
    """The job's PS, answering `root` and hearing `children` too, until `stop` is set."""
    from workers.ps import ParameterServer

    with ParameterServer(*address) as ps:
        ps.register_job(JOB, fan_in, switch=root, window=window, policy=policy, children=children)
        stop.wait()


@contextmanager
def _switch_path(
    ctx: Any, p: Plan, levels: int, policy: str, size: int, reps: int, window: int
) -> Iterator[InaWorkers]:
    """The job on a spine over `p`'s ToRs (`levels` 2) or on one switch (1), its PS and its
    workers, warm and idle; everything stopped on the way out."""
    from p4ctl.backend import Endpoint, JobInstall
    from p4ctl.client import SwitchClient
    from p4ctl.softswitch import SoftSwitch
    from p4ctl.tree_install import TreeSwitch, install_job_tree

    racks = p.racks if levels == 2 else (tuple(range(p.workers)),)
    static = Policy.parse(policy) == Policy.STATIC
    # Half the pool, as bench.allreduce's: the same partition at either level (7.2).
    part = 1 << ((p.aggregators // 2).bit_length() - 1) if static else 0
    with ExitStack() as stack:

        def started(parent: tuple[str, int] | None) -> TreeSwitch:
            switch = SoftSwitch(aggregators=p.aggregators, lanes=p.lanes, parent=parent)
            stack.enter_context(switch.start())
            client = SwitchClient(
                switch.p4runtime_address, aggregators=p.aggregators, lanes=p.lanes
            )
            stack.callback(client.close)
            return TreeSwitch(client, switch.data_address)

        spine = started(None) if levels == 2 else None
        up = spine.data if spine is not None else None
        tors = [started(up) for _ in racks]
        ps_address = ("127.0.0.1", _free_udp_port())
        if static:
            placement: dict[str, Any] = {"kind": "static", "part_base": 0, "part_size": part}
        else:
            placement = {"kind": "hashed", "seed": 17, "pool": p.aggregators}
        bodies = [
            _join_body(
                w, p.workers, policy, tor.data, ps_address, p.lanes, window,
                placement,
            )
            for tor, ids in zip(tors, racks, strict=True)
            for w in ids
        ]  # fmt: skip
        workers = InaWorkers(ctx, bodies, size, reps)
        stack.callback(workers.stop)
        endpoints = workers.endpoints()
        job = JobInstall(JOB, Policy.parse(policy), p.workers, 0, part, ps=Endpoint(*ps_address))
        placed = [
            (tor, {w: Endpoint(*endpoints[w]) for w in ids})
            for tor, ids in zip(tors, racks, strict=True)
        ]
        tree = install_job_tree(job, placed, spine)
        stop = ctx.Event()
        ps = ctx.Process(
            target=_ps_process,
            args=(ps_address, p.workers, policy, window, tree.root, tree.children, stop),
        )
        ps.start()
        stack.callback(ps.join, 30)
        stack.callback(stop.set)
        _wait_bound(ps_address)
        workers.ready()
        yield workers


@contextmanager
def _gloo_path(ctx: Any, n: int, size: int, reps: int) -> Iterator[GlooWorkers]:
    gloo = GlooWorkers(ctx, n, size, reps)
    try:
        gloo.ready()
        yield gloo
    finally:
        gloo.stop()


def measure(
    p: Plan, size_mb: float, policy: str, reps: int, window: int
) -> dict[str, Timing | list[float]]:
    """Every path set up, then `reps` rounds of one timed allreduce per path, each round
    starting one path later than the last; returns each path's `Timing` (gloo: seconds)."""
    ctx = mp.get_context("spawn")
    size = int(size_mb * MB) // 4
    with ExitStack() as stack:
        paths: dict[str, Any] = {
            "two-level": stack.enter_context(_switch_path(ctx, p, 2, policy, size, reps, window)),
            "one-level": stack.enter_context(_switch_path(ctx, p, 1, policy, size, reps, window)),
            "gloo": stack.enter_context(_gloo_path(ctx, p.workers, size, reps)),
        }
        for rep in range(reps):
            for i in range(len(PATHS)):
                paths[PATHS[(rep + i) % len(PATHS)]].step()
        return {name: path.finish() for name, path in paths.items()}


def _path_row(size_mb: float, result: Timing | list[float]) -> dict[str, Any]:
    runs = result.runs_s if isinstance(result, Timing) else result
    row: dict[str, Any] = {
        "runs_s": runs,
        "MBps": size_mb / statistics.median(runs),
        "MBps_min": size_mb / max(runs),
        "MBps_max": size_mb / min(runs),
    }
    if isinstance(result, Timing):
        row |= {
            "within_bound": result.within_bound,
            "worst_error": result.worst_error,
            "identical": result.identical,
        }
    return row


def _ratio(num: dict[str, Any], den: dict[str, Any]) -> dict[str, Any]:
    """Goodput `num` over `den`: of the medians, and per repetition (the same round)."""
    per_rep = [d / n for n, d in zip(num["runs_s"], den["runs_s"], strict=True)]
    return {"median": num["MBps"] / den["MBps"], "min": min(per_rep), "max": max(per_rep)}


def case(size_mb: float, p: Plan, policy: str, reps: int, window: int) -> dict[str, Any]:
    """One size and policy: ``paths`` (each with ``runs_s``, ``MBps`` and its min and max,
    and for the switch paths the checks), ``two_over_one`` and ``two_over_gloo`` (each
    ``median``, ``min``, ``max``), ``same_sum_as_one_level``."""
    got = measure(p, size_mb, policy, reps, window)
    paths = {name: _path_row(size_mb, got[name]) for name in PATHS}
    two, one = got["two-level"], got["one-level"]
    assert isinstance(two, Timing) and isinstance(one, Timing)
    return {
        "size_mb": size_mb,
        "workers": p.workers,
        "policy": policy,
        "reps": reps,
        "paths": paths,
        "two_over_one": _ratio(paths["two-level"], paths["one-level"]),
        "two_over_gloo": _ratio(paths["two-level"], paths["gloo"]),
        "same_sum_as_one_level": two.digests == one.digests,
    }


def _lines(c: dict[str, Any]) -> list[str]:
    out = []
    for name in PATHS:
        r = c["paths"][name]
        spread = f"[{r['MBps_min']:.2f}-{r['MBps_max']:.2f}]"
        checks = ""
        if "worst_error" in r:
            checks = f" {r['worst_error']:>9.3f} {'yes' if r['identical'] else 'NO':>4}"
        out.append(
            f"{c['size_mb']:>4g}MB {c['workers']:>3} {c['policy']:>6} {name:>9} "
            f"{r['MBps']:>7.2f} {spread:>15}{checks}"
        )
    for key, label in (("two_over_one", "one level"), ("two_over_gloo", "gloo")):
        q = c[key]
        out.append(
            f"  two levels / {label}: {q['median']:.3f} "
            f"(per repetition {q['min']:.3f}-{q['max']:.3f})"
        )
    same = "yes" if c["same_sum_as_one_level"] else "no"
    out.append(f"  two-level sums bit-identical to one level's: {same}")
    return out


def run(args: argparse.Namespace) -> int:
    """``python -m bench.allreduce --topology FILE``: 0, 1 (a sum broke the bound), 2 (a
    topology it cannot wire, said in one line on stderr)."""
    try:
        fabric = load_fabric(args.topology)
        plans = [plan(fabric, int(n), str(args.topology)) for n in args.workers_list]
    except TopologyError as exc:
        print(f"python -m bench.allreduce: {exc}", file=sys.stderr)
        return 2
    load_before = os.getloadavg()
    cases: list[dict[str, Any]] = []
    for p in plans:
        print(
            f"{fabric.root.name} over {', '.join(p.tors)}: {p.workers} workers "
            f"({'+'.join(str(len(r)) for r in p.racks)}), {p.aggregators} aggregators, "
            f"k={p.lanes}, window {args.window}; load {load_before[0]:.2f}",
            flush=True,
        )
        print(
            f"{'size':>6} {'wrk':>3} {'policy':>6} {'path':>9} {'MB/s':>7} {'[min-max]':>15} "
            f"{'err/bound':>9} {'same':>4}",
            flush=True,
        )
        for size_mb in args.sizes_list:
            for policy in args.policies_list:
                cases.append(case(size_mb, p, policy, args.reps, args.window))
                print("\n".join(_lines(cases[-1])), flush=True)
    load_after = os.getloadavg()
    if args.json:
        doc = {
            "topology": str(args.topology),
            "cases": cases,
            "cpus": os.cpu_count(),
            "loadavg_1min": {"before": load_before[0], "after": load_after[0]},
        }
        args.json.write_text(json.dumps(doc, indent=2))
    broken = [
        c
        for c in cases
        for name in ("two-level", "one-level")
        if not (c["paths"][name]["within_bound"] and c["paths"][name]["identical"])
    ]
    for c in broken:
        print(f"outside the error bound or not the same on every worker: {c}", file=sys.stderr)
    return 1 if broken else 0
