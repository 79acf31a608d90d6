"""Simulator speed and aggregate-model error.

    python -m bench.simspeed                    # Philly week under each policy + validation
    python -m bench.simspeed --workload philly,synthetic-10000 --speed-only --json speed.json
    python -m bench.simspeed --speed-only --set aggregators=1024 --set load=8 --set ps_gbps=100
    python -m bench.simspeed --speed-only --policies esa-nopreempt,esa --set aggregators=2048 \
        --set load=4
    python -m bench.simspeed --validate-only
    python -m bench.simspeed --speed-only --topology scheduler/data/topology-2tors.json --racks 16

The JCT benchmark's parameters (`bench.jct.params.BenchParams`, ``--set`` to change one) are
used. Prints, per policy: CPU seconds, wall time, simulated events, events per second,
mean/p99 JCT, in-switch share, and the CPU seconds over their target (`TARGETS_S`,
`POINT_TARGET_S`); then the aggregate model's error against the fragment-level model on the
validation families (`scheduler.validate`), each against `scheduler.validate.BOUND`, and the
wall time of both simulators on the light cases. Figures: ``docs/validation.md``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from dataclasses import replace
from pathlib import Path

from bench.jct.cli import with_load
from bench.jct.fabric import FabricSetting, read_setting
from bench.jct.params import BenchParams
from bench.jct.sim import sim_config
from scheduler.fabricsim import simulate_fabric
from scheduler.fragsim import simulate_fragments
from scheduler.placement import placement_names
from scheduler.registry import policy_names
from scheduler.simulator import simulate
from scheduler.validate import BOUND, FAMILIES, CaseError, small_cases, validate
from scheduler.workload import load_workload

# Targets on one core, CPU seconds: the Philly week under all three policies together, and
# synthetic-10000 under all three; one heatmap point (every policy at one memory and load).
TARGETS_S = {"philly": 30.0, "synthetic-10000": 120.0}
POINT_TARGET_S = 120.0
# On a fabric (``--topology``; issue 39): the Philly week within 2x the single-switch target,
# synthetic-10000 within 5 minutes (on 16 racks).
FABRIC_TARGETS_S = {"philly": 2 * TARGETS_S["philly"], "synthetic-10000": 300.0}


def speed(
    workload: str,
    params: BenchParams,
    policies: tuple[str, ...] | None = None,
    setting: FabricSetting | None = None,
) -> dict[str, object]:
    """Each of `policies` (default: every registered policy) on `workload` under `params`:
    CPU and wall seconds, events, JCT; and the CPU total over its target (below 1: within
    it; all three policies only). With `setting`, on its fabric (`simulate_fabric`)."""
    jobs = with_load(load_workload(workload), params.load)
    where = f" on {setting.fabric().describe()}, {setting.placement}" if setting else ""
    print(f"{workload}: {len(jobs)} jobs{where}")
    print(
        f"{'policy':8} {'cpu s':>8} {'wall s':>8} {'events':>8} {'ev/s':>8} {'mean JCT s':>12} "
        f"{'p99 JCT s':>12} {'in-switch':>9}"
    )
    rows = {}
    for policy in policies or policy_names():
        cpu, start = time.process_time(), time.perf_counter()
        if setting is None:
            run = simulate(jobs, sim_config(policy, params))
        else:
            cfg = sim_config(policy, params)
            run = simulate_fabric(jobs, cfg, setting.fabric(), placement=setting.placement).result
        cpu, wall = time.process_time() - cpu, time.perf_counter() - start
        jct = run.jct_summary()
        rows[policy] = {"cpu_s": cpu, "wall_s": wall, "events": run.events, **jct}
        print(
            f"{policy:8} {cpu:8.1f} {wall:8.1f} {run.events:8d} {run.events / cpu:8.0f} "
            f"{jct['mean']:12.1f} {jct['p99']:12.1f} {run.switch_share():9.3f}",
            flush=True,
        )
    total = sum(float(r["cpu_s"]) for r in rows.values())
    point = params != BenchParams()
    target = POINT_TARGET_S if point else (FABRIC_TARGETS_S if setting else TARGETS_S).get(workload)
    if policies is not None:
        target = None
    ratio = total / target if target else None
    line = f"all policies: {total:.1f} CPU s"
    if ratio is not None:
        line += f", {ratio:.2f}x the {target:.0f} s target (below 1: within it)"
    print(line)
    topology = setting.fabric().describe() if setting else None
    return {"workload": workload, "topology": topology, "params": params.as_dict(),
            "policies": rows, "cpu_s": total, "target_s": target, "over_target": ratio}  # fmt: skip


def error_table(by_family: dict[str, list[CaseError]]) -> list[str]:
    """One row per family and policy: mean |JCT error|, the signed error furthest from 0,
    mean |share error|, and whether every case is within `BOUND`; families side by side."""
    lines = [
        f"{'family':14} {'policy':7} {'|JCT err| mean':>14} {'JCT err worst':>13} "
        f"{'|share err| mean':>16} {'within ' + format(BOUND, '.0%'):>10}"
    ]
    for family, errs in by_family.items():
        for policy in policy_names():
            mine = [c for c in errs if c.policy == policy]
            if not mine:
                continue
            worst = max((c.jct_signed_error for c in mine), key=abs)
            ok = all(c.jct_rel_error <= BOUND for c in mine)
            lines.append(
                f"{family:14} {policy:7} {statistics.fmean(c.jct_rel_error for c in mine):14.3f} "
                f"{worst:+13.3f} {statistics.fmean(c.share_abs_error for c in mine):16.3f} "
                f"{'yes' if ok else 'NO':>10}"
            )
    return lines


def errors(count: int, families: list[str], seed: int = 0) -> None:
    print(f"aggregate vs fragment-level model, {count} cases of seed {seed} per family and policy")
    for family in families:
        about = "2-6 jobs, pools of 64-256, window 16" if family == "light" else FAMILIES[family][0]
        print(f"  {family}: {about}")
    by_family = {family: validate(count=count, seed=seed, family=family) for family in families}
    print("\n".join(error_table(by_family)))


def peer(count: int) -> None:
    """Wall time of the fragment-level and the aggregate simulator on the same small cases."""
    print(f"fragment-level vs aggregate simulator, wall time on the same {count} small cases")
    print(f"{'policy':8} {'fragment s':>10} {'aggregate s':>11} {'ratio':>7}")
    for policy in policy_names():
        walls = []
        for sim in (simulate_fragments, simulate):
            start = time.perf_counter()
            for jobs, base in small_cases(count):
                sim(jobs, replace(base, spec=replace(base.spec, policy=policy)))
            walls.append(time.perf_counter() - start)
        print(f"{policy:8} {walls[0]:10.2f} {walls[1]:11.2f} {walls[0] / walls[1]:6.1f}x")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", default="philly")
    parser.add_argument("--cases", type=int, default=8)
    parser.add_argument(
        "--families",
        default=",".join(["light", *FAMILIES]),
        help="comma-separated validation families (default: all)",
    )
    parser.add_argument(
        "--seed", type=int, default=0, help="the validation cases' seed (default: 0)"
    )
    parser.add_argument(
        "--policies",
        help=f"comma-separated, for the speed figures (default: {','.join(policy_names())}; "
        "ablations too)",
    )
    parser.add_argument("--validate-only", action="store_true")
    parser.add_argument("--speed-only", action="store_true", help="no validation tables")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="PARAM=VALUE",
        help="a bench.jct parameter, e.g. aggregators=1024 load=8 ps_gbps=100 (a heatmap point)",
    )
    parser.add_argument("--json", type=Path, help="also write the speed figures to this file")
    parser.add_argument(
        "--topology", type=Path, help="speed figures of the fabric simulator on this fabric"
    )
    parser.add_argument("--racks", type=int, help="--topology only: this many racks")
    parser.add_argument(
        "--placement",
        choices=placement_names(),
        default="packed",
        help="--topology only: placement (default packed)",
    )
    args = parser.parse_args(argv)
    try:
        params = BenchParams().with_settings(args.set)
    except ValueError as exc:
        parser.error(str(exc))
    if not args.validate_only:
        chosen = tuple(p.strip() for p in args.policies.split(",")) if args.policies else None
        setting = None
        if args.topology is not None:
            keys = {} if args.racks is None else {"racks": str(args.racks)}
            try:
                setting = read_setting(args.topology, args.placement, keys)
            except (OSError, ValueError) as exc:
                parser.error(str(exc))
        elif args.racks is not None:
            parser.error("--racks sets a fabric's racks; add --topology FILE")
        figures = [
            speed(w.strip(), params, chosen, setting) for w in args.workload.split(",") if w.strip()
        ]
        if args.json:
            args.json.write_text(json.dumps(figures, indent=2) + "\n", encoding="utf-8")
    if not args.speed_only:
        errors(args.cases, [f.strip() for f in args.families.split(",") if f.strip()], args.seed)
        peer(args.cases)


if __name__ == "__main__":
    main()
