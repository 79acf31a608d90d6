"""Where the loopback emulation's CPU goes, per policy: the service's threads.

    python -m bench.emu_cpu [--policies static,esa,atp] [--grad-bytes 65536]
                            [--iterations 40] [--json FILE]

The `--emu` back-end runs the service, its soft switch (thread ``p4ctl-dataplane``) and its PS
(thread ``inasched-ps``) in one Python process, so they share one interpreter lock; workers are
processes of their own. For each policy this runs `CPU_PROBE_JOBS` (2) probe jobs of two
workers with no compute (`bench.jct.validate.probe.probe_jobs`), for 2 and for 2 + `--iterations`
iterations, reads each thread's CPU time from ``/proc/self/task/TID/stat`` and the workers'
from ``getrusage(RUSAGE_CHILDREN)``, and prints the difference per fragment (one worker's
fragment of one iteration: the fixed cost of a job, its join and set-up, cancels out), with
the ratio of its switch + PS time to static's. ``--json`` writes ``{"rows": [{"policy",
"switch", "ps", "service", "workers"}]}`` (microseconds per fragment). Linux only
(``/proc``); a short run can read 0 (10 ms clock ticks) or less than 0 for a role.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import threading
import time
from collections import defaultdict
from pathlib import Path

from bench.jct.emu import emu_runner
from bench.jct.params import BenchParams
from bench.jct.validate.probe import FRAGMENT_BYTES, PROBE_WORKERS, probe_jobs

# Two jobs that only communicate: the fewest that share the switch and the PS, so the CPU per
# fragment is the path's own, with few collisions (docs/validation.md quotes this setting).
CPU_PROBE_JOBS = 2

__all__ = ["main", "measure", "thread_cpu"]

ROLES = ("switch", "ps", "service", "workers")

_TICK = os.sysconf("SC_CLK_TCK")
# Threads reported by name; the rest (uvicorn, REST handlers, the scheduler's loops, gRPC) are
# summed as "service". A thread's CPU is read every 50 ms until it ends, so up to 50 ms of a
# thread that ends with its run is missed: "service", many short threads, is the roughest.
_NAMED = {"p4ctl-dataplane": "switch", "inasched-ps": "ps"}


def thread_cpu() -> dict[int, tuple[str, float]]:
    """``{native thread id: (name, user + system CPU seconds)}`` for this process's threads."""
    out = {}
    for t in threading.enumerate():
        try:
            with open(f"/proc/self/task/{t.native_id}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue  # the thread ended between enumerate() and the read
        out[t.native_id or 0] = (t.name, (int(fields[11]) + int(fields[12])) / _TICK)
    return out


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _run(policy: str, grad_bytes: int, iterations: int) -> dict[str, float]:
    """CPU seconds by role over one probe run (threads sampled every 50 ms until they end)."""
    last: dict[int, tuple[str, float]] = {}
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            last.update(thread_cpu())
            time.sleep(0.05)

    sampler = threading.Thread(target=sample, name="emu-cpu-sampler", daemon=True)
    before = thread_cpu()
    children = _children_cpu()
    sampler.start()
    run = emu_runner()(probe_jobs(grad_bytes, iterations, CPU_PROBE_JOBS), policy, BenchParams())
    done.set()
    sampler.join()
    if len(run.jobs) != CPU_PROBE_JOBS:
        raise RuntimeError(f"the {policy} probe did not finish")
    roles: defaultdict[str, float] = defaultdict(float)
    for tid, (name, cpu) in last.items():
        if name in ("emu-cpu-sampler", "MainThread"):
            continue  # this harness: it starts the workers and polls the service
        start = before.get(tid, (name, 0.0))[1]
        roles[_NAMED.get(name, "service")] += cpu - start
    roles["workers"] = _children_cpu() - children
    return dict(roles)


def measure(policy: str, grad_bytes: int, iterations: int) -> dict[str, float]:
    """Microseconds of CPU per worker fragment, by role, for `policy`'s probe."""
    short = _run(policy, grad_bytes, 2)
    long = _run(policy, grad_bytes, 2 + iterations)
    frags = CPU_PROBE_JOBS * PROBE_WORKERS * iterations * math.ceil(grad_bytes / FRAGMENT_BYTES)
    return {r: 1e6 * (long.get(r, 0.0) - short.get(r, 0.0)) / frags for r in ROLES}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench.emu_cpu", description=__doc__)
    p.add_argument("--policies", default="static,esa,atp")
    p.add_argument("--grad-bytes", type=int, default=65536)
    p.add_argument("--iterations", type=int, default=40)
    p.add_argument("--json", type=Path, help="write the rows here")
    args = p.parse_args(argv)
    policies = [x for x in args.policies.split(",") if x]
    rows = {pol: measure(pol, args.grad_bytes, args.iterations) for pol in policies}
    print(_table(rows))
    if args.json:
        document = [{"policy": pol, **r} for pol, r in rows.items()]
        args.json.write_text(json.dumps({"rows": document}, indent=2))


def _table(rows: dict[str, dict[str, float]]) -> str:
    """Per policy, and its switch + PS time over static's where static ran."""
    lines = [
        "CPU per worker fragment (us)",
        f"{'policy':>7} {'switch':>8} {'ps':>8} {'service':>8} {'workers':>8} {'sw+ps/static':>13}",
    ]
    base = rows.get("static")
    # CPU is read in 10 ms clock ticks: a short run may show none at all.
    denominator = base["switch"] + base["ps"] if base else 0.0
    for pol, r in rows.items():
        ratio = (r["switch"] + r["ps"]) / denominator if denominator > 0 else math.nan
        lines.append(
            f"{pol:>7} {r['switch']:8.1f} {r['ps']:8.1f} {r['service']:8.1f} "
            f"{r['workers']:8.1f} {ratio:13.2f}"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
