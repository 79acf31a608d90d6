"""Repeated ``--emu`` runs of one workload, interleaved, and how often esa beats each baseline.

    python -m bench.jct.series --workload synthetic-10 --emu-config memory --runs 10 --out DIR
        [--topology FILE --placement spread]

The loopback's run-to-run spread is as large as the differences between policies, so one run
says little. This runs the emulation `--runs` times (``DIR/run-01``, ...), every policy in every
run (on a fabric with ``--topology``), the policy order rotated by one each run so that a slow
stretch of the machine does not always fall on the same policy. It counts, per baseline, the
runs in which esa's average JCT is lower and reports the spread of each ratio and of the CPU's
busy share. A run folder that already holds a ``summary.json`` is kept, so an interrupted series
resumes; ``--summarise`` only reads the folders there are. ``DIR/series.json`` holds ``runs``,
``wins`` and ``parameters``; ``DIR/series.md`` the same as tables. The runs pair up, so
``bench.jct.validate --emu-out DIR/run-01 --repeats DIR/run-02 ...`` validates ``--sim`` against
them.
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.jct.cli import main as bench_main
from scheduler.registry import policy_names

__all__ = ["main", "rotated", "summarise"]

RATIOS = ("esa_over_atp", "esa_over_static")


def rotated(policies: Sequence[str], run: int) -> list[str]:
    """`policies` rotated left by `run` places: run 0 keeps the order."""
    k = run % len(policies)
    return [*policies[k:], *policies[:k]]


def run_folder(out: Path, run: int) -> Path:
    return out / f"run-{run + 1:02d}"


def _row(folder: Path) -> dict[str, Any]:
    doc = json.loads((folder / "summary.json").read_text())
    order = list(doc["policies"])
    return {
        "folder": folder.name,
        "order": order,
        "avg_jct": {name: p["avg_jct"] for name, p in doc["policies"].items()},
        "ratios": doc["ratios"],
        "cpu_busy_share": {n: c["busy_share"] for n, c in doc.get("emu_cpu", {}).items()},
    }


def _spread(values: Sequence[float]) -> dict[str, float]:
    return {"min": min(values), "median": statistics.median(values), "max": max(values)}


def summarise(out: Path) -> dict[str, Any]:
    """The ``series.json`` document of the run folders in `out` (module docstring)."""
    folders = sorted(p for p in out.glob("run-*") if (p / "summary.json").is_file())
    if not folders:
        raise FileNotFoundError(f"no run-*/summary.json in {out}")
    rows = [_row(f) for f in folders]
    wins = {}
    for name in RATIOS:
        values = [r["ratios"][name] for r in rows if r["ratios"].get(name) is not None]
        if values:
            wins[name] = {"wins": sum(v > 1 for v in values), "runs": len(values)}
            wins[name] |= _spread(values)
    busy: dict[str, list[float]] = {}
    for r in rows:
        for name, share in r["cpu_busy_share"].items():
            busy.setdefault(name, []).append(share)
    first = json.loads((folders[0] / "summary.json").read_text())
    return {
        "runs": rows,
        "wins": wins,
        "cpu_busy_share": {name: _spread(v) for name, v in busy.items()},
        "parameters": first["parameters"],
    }


def render(doc: dict[str, Any]) -> str:
    """``series.md``: the wins and spreads, then one row per run."""
    lines = [
        f"# Interleaved --emu runs: {doc['parameters'].get('workload')}, "
        f"--emu-config {doc['parameters'].get('emu.config', 'default')}",
        "",
        "| ratio (baseline avg JCT / esa avg JCT) | esa wins | min | median | max |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, w in doc["wins"].items():
        lines.append(
            f"| {name} | {w['wins']} of {w['runs']} | {w['min']:.3f} | {w['median']:.3f} | "
            f"{w['max']:.3f} |"
        )
    if doc["cpu_busy_share"]:
        lines += ["", "| policy | CPU busy share: min | median | max |", "|---|---:|---:|---:|"]
        for name, s in doc["cpu_busy_share"].items():
            lines.append(f"| {name} | {s['min']:.2f} | {s['median']:.2f} | {s['max']:.2f} |")
    policies = list(doc["runs"][0]["avg_jct"])
    lines += [
        "",
        "| run | order | " + " | ".join(f"{p} avg JCT (s)" for p in sorted(policies)) + " | "
        + " | ".join(RATIOS) + " |",
        "|---|---|" + "---:|" * (len(policies) + len(RATIOS)),
    ]  # fmt: skip
    for r in doc["runs"]:
        jcts = " | ".join(f"{r['avg_jct'][p]:.2f}" for p in sorted(policies))
        ratio = " | ".join(
            "-" if r["ratios"].get(n) is None else f"{r['ratios'][n]:.3f}" for n in RATIOS
        )
        lines.append(f"| {r['folder']} | {','.join(r['order'])} | {jcts} | {ratio} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.jct.series", description=__doc__)
    p.add_argument("--workload", default="synthetic-10")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--emu-config", default="default")
    p.add_argument("--policies", default=",".join(policy_names()))
    p.add_argument("--runs", type=int, default=10)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument(
        "--topology",
        metavar="FILE",
        help="run on this fabric (bench jct --emu --topology: bench.jct.emufabric)",
    )
    p.add_argument("--placement", help="--topology only: how jobs are placed onto racks")
    p.add_argument("--summarise", action="store_true", help="only read the run folders there are")
    args = p.parse_args(argv)
    policies = [x for x in args.policies.split(",") if x]
    if not args.summarise:
        for run in range(args.runs):
            folder = run_folder(args.out, run)
            if (folder / "summary.json").is_file():
                continue
            code = bench_main(
                [
                    "--workload", args.workload, "--seed", str(args.seed),
                    "--policies", ",".join(rotated(policies, run)),
                    "--emu", "--emu-config", args.emu_config,
                    "--out", str(folder), "--force", "--quiet",
                    *(["--topology", args.topology] if args.topology else []),
                    *(["--placement", args.placement] if args.placement else []),
                ]
            )  # fmt: skip
            if code != 0:
                return code
    doc = summarise(args.out)
    (args.out / "series.json").write_text(json.dumps(doc, indent=2) + "\n")
    text = render(doc)
    (args.out / "series.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
