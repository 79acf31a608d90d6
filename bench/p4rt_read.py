"""A full read of the switch's occupancy and counters over P4Runtime, per protobuf runtime.

    python -m bench.p4rt_read                   # 20,480 aggregators, 7 reads, both runtimes
    python -m bench.p4rt_read --repeats 15 --json

The protobuf runtime is fixed when protobuf is first imported, so each runs in a child process
of its own, chosen by ``PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION``: ``python`` encodes every
message in pure Python; ``upb`` is the C runtime of protobuf 4.21 and later. A child starts the
soft switch as the service does, programs it with `SwitchClient`, marks every aggregator held
and every counter cell non-zero, checks that the P4Runtime read equals the pipeline's, then
times `repeats` full reads over P4Runtime and as many straight from the pipeline. Prints
seconds per read (median, min, max) and the ratios python/upb and upb/in-process; ``--json``
prints the same as one JSON object. Figures: ``docs/performance.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

from p4ctl.backend import Endpoint, JobInstall, Occupancy, SwitchCounters
from p4ctl.protocol import MAX_JOBS, AggState, Policy

AGGREGATORS = 20_480
LANES = 64
# Jobs installed (each one's table entries and multicast group are real); every job id's
# counter cells are filled whether installed or not, as a long-running switch would have them.
JOBS = 16
RUNTIMES = ("python", "upb")
DISCARD = Endpoint("127.0.0.1", 9)


def _timed(read: Callable[[], object], repeats: int) -> list[float]:
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        read()
        seconds.append(time.perf_counter() - start)
    return seconds


def child(aggregators: int, repeats: int) -> dict[str, Any]:
    """One runtime's figures (this process's protobuf runtime)."""
    import google.protobuf
    from google.protobuf.internal import api_implementation
    from p4ctl.backend import counters_from, occupancy_from
    from p4ctl.client import SwitchClient
    from p4ctl.rule import JOB_COUNTERS
    from p4ctl.softswitch import SoftSwitch

    switch = SoftSwitch(aggregators=aggregators, lanes=LANES).start()
    try:
        with SwitchClient(switch.p4runtime_address, aggregators=aggregators, lanes=LANES) as c:
            for job in range(JOBS):
                c.install_job(JobInstall(job, Policy.ESA, 4, ps=DISCARD))
            pipe = switch.pipeline
            regs = pipe.registers
            for i in range(aggregators):
                regs.agg_job[i] = i % JOBS
                regs.agg_state[i] = AggState.PARTIAL if i % 3 else AggState.COMPLETE
            for n, name in enumerate(JOB_COUNTERS):
                for job in range(MAX_JOBS):
                    pipe.job_packets[name][job] = 1 + n + job
            for reason in range(len(pipe.drop_packets)):
                pipe.drop_packets[reason] = 1 + reason

            def over_p4runtime() -> tuple[Occupancy, SwitchCounters]:
                return c.occupancy(), c.counters()

            def in_process() -> tuple[Occupancy, SwitchCounters]:
                return occupancy_from(regs), counters_from(pipe.job_packets, pipe.drop_packets)

            if over_p4runtime() != in_process():
                raise SystemExit("the P4Runtime read differs from the pipeline's state")
            return {
                "protobuf": google.protobuf.__version__,
                "implementation": api_implementation.Type(),
                "p4runtime_s": _timed(over_p4runtime, repeats),
                "in_process_s": _timed(in_process, repeats),
            }
    finally:
        switch.stop()


def run_child(runtime: str, aggregators: int, repeats: int) -> dict[str, Any]:
    """`child` in a new interpreter whose protobuf runtime is `runtime`."""
    env = {**os.environ, "PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION": runtime}
    argv = [sys.executable, "-m", "bench.p4rt_read", "--child", "--aggregators", str(aggregators)]
    done = subprocess.run(
        [*argv, "--repeats", str(repeats)], env=env, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        return {"error": (done.stderr.strip().splitlines() or ["no output"])[-1]}
    result: dict[str, Any] = json.loads(done.stdout)
    if result["implementation"] != runtime:
        # protobuf 3.20 knows no "upb" and falls back to another runtime; that is not upb.
        return {"error": f"protobuf {result['protobuf']} has no {runtime!r} runtime"}
    return result


def _spread(seconds: list[float]) -> dict[str, float]:
    return {
        "median": statistics.median(seconds),
        "min": min(seconds),
        "max": max(seconds),
    }


def summary(runs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Medians, spreads and ratios of the runtimes' figures."""
    out: dict[str, Any] = {"runtimes": {}, "ratios": {}}
    for runtime, run in runs.items():
        if "error" in run:
            out["runtimes"][runtime] = run
            continue
        out["runtimes"][runtime] = {
            "protobuf": run["protobuf"],
            "p4runtime_s": _spread(run["p4runtime_s"]),
            "in_process_s": _spread(run["in_process_s"]),
        }
    ok = {r: v for r, v in out["runtimes"].items() if "error" not in v}
    if "python" in ok and "upb" in ok:
        out["ratios"]["python_over_upb"] = (
            ok["python"]["p4runtime_s"]["median"] / ok["upb"]["p4runtime_s"]["median"]
        )
    if "upb" in ok:
        out["ratios"]["upb_over_in_process"] = (
            ok["upb"]["p4runtime_s"]["median"] / ok["upb"]["in_process_s"]["median"]
        )
    return out


def print_table(aggregators: int, repeats: int, result: dict[str, Any]) -> None:
    print(
        f"full read of occupancy ({aggregators} aggregators: agg_job, agg_state) and counters "
        f"({MAX_JOBS} jobs), {repeats} reads each; seconds per read, median [min, max]"
    )
    print(f"{'runtime':8} {'protobuf':>9} {'over P4Runtime':>28} {'in process':>28}")
    for runtime, figures in result["runtimes"].items():
        if "error" in figures:
            print(f"{runtime:8} unavailable: {figures['error']}")
            continue
        cells = [
            f"{s['median']:.4f} [{s['min']:.4f}, {s['max']:.4f}]"
            for s in (figures["p4runtime_s"], figures["in_process_s"])
        ]
        print(f"{runtime:8} {figures['protobuf']:>9} {cells[0]:>28} {cells[1]:>28}")
    for name, ratio in result["ratios"].items():
        print(f"{name.replace('_', ' ')}: {ratio:.1f}x")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--aggregators", type=int, default=AGGREGATORS)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--runtimes", default=",".join(RUNTIMES), help="comma-separated")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.aggregators, args.repeats)))
        return
    runs = {r: run_child(r, args.aggregators, args.repeats) for r in args.runtimes.split(",")}
    result = summary(runs)
    if args.json:
        raw = {r: run for r, run in runs.items() if "error" not in run}
        print(
            json.dumps(
                {"aggregators": args.aggregators, "repeats": args.repeats, **result, "raw": raw}
            )
        )
    else:
        print_table(args.aggregators, args.repeats, result)


if __name__ == "__main__":
    main()
