"""The fluid fabric simulator against the fragment-level one, where a fabric binds.

    python -m bench.fabricvalidate                       # every family, 4 cases each
    python -m bench.fabricvalidate --cases 8 --families spine-memory --json fabric.json
    python -m bench.fabricvalidate --policies esa,tiered-nospill,tiered

Runs `scheduler.fabricvalidate.validate_fabric` on each family of `FABRIC_FAMILIES` and
prints, per family and policy side by side: the mean JCT of both models over the cases, the
mean |JCT error| and the signed error furthest from 0 (fluid over fragment-level, minus 1),
the mean in-switch share of both, whether every case is within the goal
(`scheduler.validate.BOUND`) and within the family's stated bound (`FABRIC_BOUNDS`, which
says what the fluid model misses where the two differ).
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from scheduler.errors import UnknownName
from scheduler.fabricvalidate import FABRIC_BOUNDS, FABRIC_FAMILIES, validate_fabric
from scheduler.validate import BOUND, CaseError


def table(by_family: dict[str, list[CaseError]]) -> tuple[list[str], list[dict[str, object]]]:
    """The printed rows and the same figures as records, one per family and policy."""
    lines = [
        f"{'family':15} {'policy':14} {'fragment us':>11} {'fluid us':>9} {'|err| mean':>10} "
        f"{'err worst':>9} {'share frag':>10} {'share fluid':>11} "
        f"{'goal ' + format(BOUND, '.0%'):>7} {'bound':>6} {'within':>6}"
    ]
    records: list[dict[str, object]] = []
    for family, errs in by_family.items():
        bound = FABRIC_BOUNDS[family]
        for policy in dict.fromkeys(c.policy for c in errs):
            mine = [c for c in errs if c.policy == policy]
            worst = max((c.jct_signed_error for c in mine), key=abs)
            frag = statistics.fmean(c.jct_fragment_s for c in mine)
            fluid = statistics.fmean(c.jct_aggregate_s for c in mine)
            err = statistics.fmean(c.jct_rel_error for c in mine)
            share_frag = statistics.fmean(c.share_fragment for c in mine)
            share_fluid = statistics.fmean(c.share_aggregate for c in mine)
            within = all(c.jct_rel_error <= bound for c in mine)
            goal = all(c.jct_rel_error <= BOUND for c in mine)
            records.append({"family": family, "policy": policy, "cases": len(mine),
                            "jct_fragment_s": frag, "jct_fluid_s": fluid,
                            "jct_abs_error_mean": err, "jct_error_worst": worst,
                            "share_fragment": share_frag, "share_fluid": share_fluid,
                            "goal": goal, "bound": bound, "within": within})  # fmt: skip
            lines.append(
                f"{family:15} {policy:14} {frag * 1e6:11.1f} {fluid * 1e6:9.1f} {err:10.3f} "
                f"{worst:+9.3f} {share_frag:10.3f} {share_fluid:11.3f} "
                f"{'yes' if goal else 'NO':>7} {bound:6.2f} {'yes' if within else 'NO':>6}"
            )
    return lines, records


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=4, help="cases per family (default: 4)")
    parser.add_argument("--seed", type=int, default=0, help="the cases' seed (default: 0)")
    parser.add_argument(
        "--families",
        default=",".join(FABRIC_FAMILIES),
        help="comma-separated fabric validation families (default: all)",
    )
    parser.add_argument(
        "--policies",
        help="comma-separated switch or fabric policies (default: the switch policies)",
    )
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args(argv)
    families = [f.strip() for f in args.families.split(",") if f.strip()]
    unknown = [f for f in families if f not in FABRIC_FAMILIES]
    if unknown:
        parser.error(f"unknown families {', '.join(unknown)}; known: {', '.join(FABRIC_FAMILIES)}")
    if args.cases < 1:
        parser.error("--cases must be at least 1")
    print(f"fluid vs fragment-level fabric model, {args.cases} cases of seed {args.seed} each")
    for family in families:
        print(f"  {family}: {FABRIC_FAMILIES[family][0]}")
    policies = tuple(p.strip() for p in args.policies.split(",")) if args.policies else None
    try:
        by_family = {
            f: validate_fabric(policies, count=args.cases, seed=args.seed, family=f)
            for f in families
        }
    except (ValueError, UnknownName) as exc:
        parser.error(str(exc))
    lines, records = table(by_family)
    print("\n".join(lines))
    if args.json:
        args.json.write_text(json.dumps(records, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
