"""Simulator speed and aggregate-model error.

    python -m bench.simspeed                    # Philly week under each policy + validation
    python -m bench.simspeed --workload synthetic-10000
    python -m bench.simspeed --validate-only

The JCT benchmark's parameters (`bench.jct_params.BenchParams`) are used. Prints, per policy:
wall time, simulated events, events per second, mean/p99 JCT, in-switch
share; then the aggregate model's error against the fragment-level model on small cases
(relative mean-JCT error and absolute in-switch-share error, mean and max per policy), and the
wall time of both simulators on those same cases, side by side, with their ratio.
"""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import replace

from bench.jct_params import BenchParams
from bench.jct_sim import sim_config
from scheduler.fragsim import simulate_fragments
from scheduler.simulator import simulate
from scheduler.validate import small_cases, validate
from scheduler.workload import load_workload

POLICIES = ("static", "atp", "esa")


def speed(workload: str) -> None:
    jobs = load_workload(workload)
    print(f"{workload}: {len(jobs)} jobs")
    print(
        f"{'policy':8} {'wall s':>8} {'events':>8} {'ev/s':>8} {'mean JCT s':>12} "
        f"{'p99 JCT s':>12} {'in-switch':>9}"
    )
    for policy in POLICIES:
        start = time.perf_counter()
        run = simulate(jobs, sim_config(policy, BenchParams()))
        wall = time.perf_counter() - start
        jct = run.jct_summary()
        print(
            f"{policy:8} {wall:8.1f} {run.events:8d} {run.events / wall:8.0f} "
            f"{jct['mean']:12.1f} {jct['p99']:12.1f} {run.switch_share():9.3f}"
        )


def errors(count: int) -> None:
    print(f"aggregate vs fragment-level model, {count} small cases per policy")
    print(
        f"{'policy':8} {'JCT err mean':>12} {'JCT err max':>12} {'share err mean':>15} "
        f"{'share err max':>14}"
    )
    cases = validate(count=count)
    for policy in POLICIES:
        mine = [c for c in cases if c.policy == policy]
        jct = [c.jct_rel_error for c in mine]
        share = [c.share_abs_error for c in mine]
        print(
            f"{policy:8} {statistics.fmean(jct):12.3f} {max(jct):12.3f} "
            f"{statistics.fmean(share):15.3f} {max(share):14.3f}"
        )


def peer(count: int) -> None:
    """Wall time of the fragment-level and the aggregate simulator on the same small cases."""
    print(f"fragment-level vs aggregate simulator, wall time on the same {count} small cases")
    print(f"{'policy':8} {'fragment s':>10} {'aggregate s':>11} {'ratio':>7}")
    for policy in POLICIES:
        walls = []
        for sim in (simulate_fragments, simulate):
            start = time.perf_counter()
            for jobs, base in small_cases(count):
                sim(jobs, replace(base, policy=policy))
            walls.append(time.perf_counter() - start)
        print(f"{policy:8} {walls[0]:10.2f} {walls[1]:11.2f} {walls[0] / walls[1]:6.1f}x")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", default="philly")
    parser.add_argument("--cases", type=int, default=8)
    parser.add_argument("--validate-only", action="store_true")
    args = parser.parse_args(argv)
    if not args.validate_only:
        speed(args.workload)
    errors(args.cases)
    peer(args.cases)


if __name__ == "__main__":
    main()
