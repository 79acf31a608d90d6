"""``inasched bench jct`` (``python -m bench.jct``): the memory policies' JCT on one workload.

    inasched bench jct --workload philly --policies static,atp,esa --out results/philly --sim
    inasched bench jct --workload philly --topology scheduler/data/topology-2tors.json \
        --placement spread --policies esa,tiered --out results/fabric --sweep racks=2,4

Every policy runs on the same jobs with the same `BenchParams` (`bench.jct.params`, each value with
its source), into ``summary.json``, ``jobs.csv``, the plots and ``report.md``; esa's gain over atp
is decomposed when atp, esa-nopreempt and esa run (`bench.jct.ablation`). ``--sweep`` adds a
folder per value, ``sweep.csv``, ``cpu.csv`` and, for two, heatmaps (`bench.jct.grid`), its points
in ``--jobs N`` processes or on a ``--dask ADDRESS`` cluster (`bench.jct.cluster`). ``--sim``
(default) drives ``scheduler.simulator``, ``--emu`` real processes on loopback (`bench.jct.emu`);
``--topology FILE`` the fabric simulator (`bench.jct.fabric`), or with ``--emu`` the service on that
fabric (`bench.jct.emufabric`). ``--service URL --token T`` also stores the run. A bad argument is
one line on stderr and exit status 2; ``--out`` must be new or empty unless ``--force`` is given.
"""

from __future__ import annotations

import argparse
import logging
import shlex
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, NoReturn

from tqdm import tqdm

from bench.jct import ablation, cluster, grid
from bench.jct.cluster import ClusterError
from bench.jct.fabric import (
    FABRIC_HEATMAPS,
    FABRIC_KEYS,
    FabricRunner,
    FabricSetting,
    fabric_columns,
    fabric_document,
    read_setting,
    render_fabric,
)
from bench.jct.output import (
    format_table,
    summary_document,
    write_jobs_csv,
    write_plots,
    write_summary,
)
from bench.jct.params import BenchParams, parse_sweep, parse_sweeps
from bench.jct.report import render_report
from bench.jct.results import PolicyRun, PolicySummary, finite, ratios, summarise
from scheduler.config import SimConfig
from scheduler.errors import TopologyError, WorkloadError
from scheduler.placement import placement_names
from scheduler.registry import ablation_names, fabric_policy_names, policy_names
from scheduler.workload import PHILLY_PREFIX, JobSpec, load_workload, write_workload

__all__ = ["RunOutcome", "compute_bench", "main", "run_bench", "write_outcome"]

log = logging.getLogger(__name__)

PolicyRunner = Callable[[Sequence[JobSpec], str, BenchParams], PolicyRun]


def model_mapping(workload: str, seed: int) -> str:
    """How `workload`'s jobs got their models, naming the seed that drew them."""
    trace = workload.removeprefix(PHILLY_PREFIX) if workload.startswith(PHILLY_PREFIX) else None
    source = f"the Philly-format trace {trace}, mapped as the bundled week: " if trace else ""
    return (
        f"scheduler.workload: {source}each job's model drawn uniformly (random.Random({seed}), "
        "seed = --seed, in row order) from the models with both a gradient size "
        "(model_sizes.csv) and a V100 iteration time (iter_times.csv); iterations = "
        "duration_s / iteration time; workers = one per GPU. V100, not A100: the trace's "
        "durations were measured on Philly's 2017 GPUs (P100/P40 generation, Jeon et al. "
        "ATC'19), V100 is the closest generation in the table, and A100 times would double "
        "iterations and overstate communication"
    )


@dataclass(frozen=True, slots=True)
class RunOutcome:
    """What one run of every policy produced (also written to its output folder)."""

    runs: tuple[PolicyRun, ...]
    summaries: dict[str, PolicySummary]
    ratios: dict[str, float | None]
    document: dict[str, Any]
    # CPU seconds of this process per run (the ablation's baseline too): not in the
    # summary, which is the same whichever process runs it; a sweep's ``cpu.csv``.
    cpu_s: dict[str, float]
    report: str  # report.md's text


class _Parser(argparse.ArgumentParser):
    """argparse with every error on one line: what was wrong and what to give instead."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")


def _parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="inasched bench jct",
        description="Job completion time of INA memory policies on one workload.",
    )
    p.add_argument(
        "--workload",
        required=True,
        help="philly, philly:FILE (a CSV in the public Philly trace's format), synthetic-N "
        "or a workload CSV",
    )
    p.add_argument(
        "--policies",
        default=",".join(policy_names()),
        help=f"comma-separated, of {', '.join(policy_names())} and the ablations "
        f"{', '.join(ablation_names())} (--sim only)",
    )
    p.add_argument("--out", required=True, type=Path, help="output folder (created)")
    p.add_argument("--force", action="store_true", help="write into a non-empty --out")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--sim", action="store_true", help="the simulator (default)")
    mode.add_argument("--emu", action="store_true", help="real processes on loopback")
    p.add_argument(
        "--emu-config",
        default="default",
        metavar="NAME",
        help="--emu only: default (jobs contend for the CPU) or memory (jobs contend for "
        "aggregator memory); bench.jct.emu documents both",
    )
    p.add_argument(
        "--emu-hosts",
        default="",
        metavar="HOST,...",
        help="--emu only: the workers' data addresses, one each (a switch with real ports, "
        "such as BMv2: p4/README.md); its switch and PS come from INASCHED_SWITCH_*, "
        "INASCHED_PS_*",
    )
    p.add_argument(
        "--sweep",
        action="append",
        default=[],
        metavar="PARAM=V1,V2,...",
        help="PARAM=V1,V2,... with PARAM one of memory, load, priority, levels, aging, "
        "ps_gbps, link_gbps, ps_processes, window; twice for a grid with heatmaps",
    )
    p.add_argument("--seed", type=int, default=0, help="workload and placement seed")
    p.add_argument(
        "--topology",
        metavar="FILE",
        help="run on this fabric (docs/topology.md) with the fabric simulator (with --emu: the "
        "service on its soft switches, bench.jct.emufabric); adds the fabric policies (--sim) "
        f"{', '.join(fabric_policy_names())}, and the --sweep/--set keys "
        f"{', '.join(FABRIC_KEYS)} (memory: every switch)",
    )
    p.add_argument(
        "--placement",
        choices=placement_names(),
        default=None,
        help="--topology only: how a job's servers are placed onto racks (default packed)",
    )
    p.add_argument(
        "--jobs",
        type=int,
        default=None,
        metavar="N",
        help="run a sweep's points in N processes at once (--sim only; default 1)",
    )
    p.add_argument(
        "--dask",
        metavar="tcp://HOST:PORT",
        help="run a sweep's points on the workers of this Dask scheduler instead (--sim only; "
        "the 'dask' extra; every worker with the same checkout): docs/evaluation.md",
    )
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="PARAM=VALUE",
        help="override one parameter (e.g. link_gbps=1 to match a loopback run); "
        "the report lists every value used",
    )
    p.add_argument("--service", help="service URL to store the run in (POST /bench/runs)")
    p.add_argument("--token", help="bearer token for --service")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    return p


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``inasched bench jct``; returns the process exit code."""
    args_list = sys.argv[1:] if argv is None else list(argv)
    parser = _parser()
    args = parser.parse_args(args_list)
    policies = _checked_policies(parser, args)
    command = "inasched bench jct " + shlex.join(args_list)
    try:
        setting, sets = _fabric_setting(args)
        params = BenchParams(sim=SimConfig(seed=args.seed)).with_settings(sets)
        sweeps = _sweeps(args.sweep, setting)
    except (ValueError, TopologyError) as exc:
        parser.error(str(exc))
    runner, base_jobs = _runner_and_jobs(parser, args)
    client = _dask_client(parser, args.dask) if args.dask else None
    try:
        return _run(
            parser, args, command, policies, params, sweeps, runner, base_jobs, client, setting
        )
    finally:
        if client is not None:
            client.close()


def _run(
    parser: argparse.ArgumentParser,
    args: argparse.Namespace,
    command: str,
    policies: list[str],
    params: BenchParams,
    sweeps: list[tuple[str, list[str]]],
    runner: PolicyRunner,
    base_jobs: Sequence[JobSpec],
    client: Any,
    setting: FabricSetting | None,
) -> int:
    """`main` once its arguments are checked (`client`: ``--dask``'s, or None; `setting`:
    ``--topology``'s fabric, or None): every point, then the sweep's files."""
    backend = "emu" if args.emu else "sim"
    out: Path = args.out
    _check_out(parser, out, force=args.force)
    print(f"{args.workload}: {len(base_jobs)} jobs, models mapped with seed {args.seed} (--seed)")
    if args.emu:
        # The same jobs for --sim: the validation of sim against emu runs this file.
        write_workload(base_jobs, out / "workload.csv")
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    points = grid.grid_points(sweeps)
    bar = tqdm(total=len(points) * len(policies), desc="jct", unit="run", disable=args.quiet)
    emu_config = args.emu_config if args.emu else None
    tasks = [
        _Point(base_jobs, tuple(policies), _point_params(params, point),
               out / grid.point_folder(point), args.workload, backend, command, emu_config,
               _point_setting(setting, point))
        for point in points
    ]  # fmt: skip
    if client is not None:
        try:
            outcomes = _run_points_on_dask(client, tasks, bar)
        except ClusterError as exc:
            parser.error(str(exc))
    elif args.jobs > 1 and len(tasks) > 1:
        outcomes = _run_points_in_parallel(tasks, args.jobs, bar)
    else:
        outcomes = [_run_point(task, runner, bar) for task in tasks]
    sweep_rows, cpu_rows, stored = [], [], []
    for point, task, outcome in zip(points, tasks, outcomes, strict=True):
        if args.service:
            from bench.jct.store import store_run

            run = store_run(args.service, args.token, task.folder, args.workload, backend)
            stored.append(run.get("id"))
        if point:
            gains = outcome.document.get("decomposition", {})
            row = grid.grid_row(point, outcome.summaries, outcome.ratios, gains)
            if setting is not None:
                row.update(fabric_columns(outcome.runs))
            sweep_rows.append(row)
            cpu_rows.append(grid.cpu_row(point, outcome.cpu_s))
        else:
            _print_summary(outcome)
    bar.close()
    if sweeps:
        _write_sweep(out, sweep_rows, cpu_rows)
    if len(sweeps) == 2:
        title = f"{args.workload} ({backend})"
        if setting is None:
            written, skipped = grid.write_heatmaps(out, sweeps, policies, title)
        else:
            title += f", placement {setting.placement}"
            maps = (*grid.HEATMAPS, *FABRIC_HEATMAPS)
            written, skipped = grid.write_heatmaps(out, sweeps, policies, title, maps)
        print("\n".join([*(f"heatmap: {path}" for path in written), *skipped]))
    from bench.jct.store import where_stored

    print(where_stored(out, args.service, stored))
    return 0


def _fabric_setting(args: argparse.Namespace) -> tuple[FabricSetting | None, list[str]]:
    """The ``--topology`` run's fabric with its ``--set`` keys (`FABRIC_KEYS`), and the
    ``--set`` items for `BenchParams` (``memory`` goes to both)."""
    if args.topology is None:
        return None, list(args.set)
    keys = {}
    rest = []
    for item in args.set:
        name, _, value = item.partition("=")
        if name.strip() in FABRIC_KEYS:
            keys[name.strip()] = value.strip()
        if name.strip() not in FABRIC_KEYS or name.strip() == "memory":
            rest.append(item)
    return read_setting(args.topology, args.placement or "packed", keys), rest


def _sweeps(specs: Sequence[str], setting: FabricSetting | None) -> list[tuple[str, list[str]]]:
    """`parse_sweeps`, with the fabric's keys (`FABRIC_KEYS`) on a ``--topology`` run."""
    if setting is None:
        return parse_sweeps(specs)
    names = [spec.partition("=")[0].strip() for spec in specs]
    plain = [spec for spec, name in zip(specs, names, strict=True) if name not in FABRIC_KEYS]
    parse_sweeps(plain)
    if len(specs) > 2:
        raise ValueError(f"--sweep is given at most 2 times (a grid of two); got {len(specs)}")
    if len(set(names)) < len(names):
        raise ValueError(f"--sweep gives one parameter twice: {', '.join(names)}")
    out = []
    for spec, name in zip(specs, names, strict=True):
        values = [v.strip() for v in spec.partition("=")[2].split(",") if v.strip()]
        if name not in FABRIC_KEYS:
            out.append(parse_sweep(spec))
            continue
        if not values or len(set(values)) < len(values):
            raise ValueError(f"--sweep {spec!r}: give distinct values, PARAM=V1,V2,...")
        for value in values:
            setting.with_value(name, value)
            if name == "memory":
                BenchParams().with_value(name, value)
        out.append((name, values))
    return out


def _point_params(params: BenchParams, point: grid.Point) -> BenchParams:
    """`grid.point_params` without the fabric's own keys (``memory`` is both)."""
    own = tuple((k, v) for k, v in point if k not in FABRIC_KEYS or k == "memory")
    return grid.point_params(params, own)


def _point_setting(setting: FabricSetting | None, point: grid.Point) -> FabricSetting | None:
    if setting is None:
        return None
    for name, value in point:
        if name in FABRIC_KEYS:
            setting = setting.with_value(name, value)
    return setting


def _checked_policies(parser: argparse.ArgumentParser, args: argparse.Namespace) -> list[str]:
    """`--policies` as a list, once it and the flags that go with it make sense together
    (else a usage error naming what is wrong)."""
    policies = [p.strip() for p in args.policies.split(",") if p.strip()]
    known = (*policy_names(), *ablation_names())
    if args.topology is not None:
        known += fabric_policy_names()
    unknown = [p for p in policies if p not in known]
    if unknown or not policies:
        hint = "" if args.topology else f" ({', '.join(fabric_policy_names())} with --topology)"
        parser.error(f"unknown policies {unknown}; choose from {','.join(known)}{hint}")
    if args.topology is not None and args.emu:
        fabric_only = [p for p in policies if p in fabric_policy_names()]
        if fabric_only:
            parser.error(
                f"{','.join(fabric_only)} run in --sim only: the service installs one placement "
                "on every switch of a job's tree and runs the switch policies "
                f"({','.join(policy_names())}) there (bench.jct.emufabric)"
            )
        if args.emu_hosts:
            parser.error("--emu-hosts and --topology: the topology's racks give the addresses")
    if args.placement is not None and args.topology is None:
        parser.error("--placement places jobs onto a fabric's racks; add --topology FILE")
    if args.emu and set(policies) & set(ablation_names()):
        parser.error(
            f"the ablations {','.join(ablation_names())} run in --sim only: the switch "
            "program has no rule for esa-norelease, and the service offers neither"
        )
    if args.jobs is not None and args.jobs < 1:
        parser.error(f"--jobs must be >= 1, got {args.jobs}")
    if args.jobs is not None and args.dask:
        parser.error(
            "give --jobs N (N processes on this machine) or --dask ADDRESS (the cluster's "
            "workers), not both"
        )
    args.jobs = 1 if args.jobs is None else args.jobs
    if (args.jobs > 1 or args.dask) and args.emu:
        parser.error(
            f"{'--dask' if args.dask else '--jobs'} runs --sim only: --emu points share the "
            "loopback switch and the CPU it is measured on, so they run one at a time"
        )
    if args.emu_config != "default" and not args.emu:
        parser.error(f"--emu-config {args.emu_config} configures --emu; add --emu")
    if args.emu_hosts and not args.emu:
        parser.error("--emu-hosts configures --emu; add --emu")
    if args.service and not args.token:
        parser.error("--service needs --token")
    return policies


def _runner_and_jobs(
    parser: argparse.ArgumentParser, args: argparse.Namespace
) -> tuple[PolicyRunner, Sequence[JobSpec]]:
    """The back-end that runs one policy (the simulator, or the loopback emulation in its
    ``--emu-config``) and the workload's jobs as it takes them."""
    try:
        if args.emu:
            from bench.jct.emu import emu_config, emu_runner, emu_workload

            try:
                config = emu_config(args.emu_config)
            except ValueError as exc:
                parser.error(f"--emu-config: {exc}")
            hosts = [h.strip() for h in args.emu_hosts.split(",") if h.strip()]
            return emu_runner(config, hosts), emu_workload(args.workload, args.seed, config)
        from bench.jct.sim import run_policy

        return run_policy, load_workload(args.workload, args.seed)
    except WorkloadError as exc:
        parser.error(f"--workload {args.workload}: {exc}")


def _write_sweep(
    out: Path, sweep_rows: list[dict[str, Any]], cpu_rows: list[dict[str, Any]]
) -> None:
    """The sweep's table and CPU seconds per point, as CSV files and printed."""
    grid.write_grid_csv(out / "sweep.csv", sweep_rows)
    grid.write_grid_csv(out / "cpu.csv", cpu_rows)
    print(format_table(list(sweep_rows[0]), [list(r.values()) for r in sweep_rows]))
    slowest = max(cpu_rows, key=lambda row: row["total"])
    print(f"\nsweep table: {out / 'sweep.csv'}; CPU seconds per point: {out / 'cpu.csv'} "
          f"(the most: {slowest['total']:.1f} s)")  # fmt: skip


@dataclass(frozen=True, slots=True)
class _Point:
    """One point of a sweep (or the one run without a sweep): what `run_bench` needs."""

    jobs: Sequence[JobSpec]
    policies: tuple[str, ...]
    params: BenchParams
    folder: Path
    workload: str
    backend: str
    command: str
    emu_config: str | None = None
    fabric: FabricSetting | None = None


def _run_point(task: _Point, runner: PolicyRunner, bar: tqdm | None) -> RunOutcome:
    task.folder.mkdir(parents=True, exist_ok=True)
    if task.fabric is not None and task.backend == "emu":
        from bench.jct.emu import emu_config
        from bench.jct.emufabric import emu_fabric_runner

        runner = emu_fabric_runner(task.fabric, emu_config(task.emu_config or "default"))
    elif task.fabric is not None:
        runner = FabricRunner(task.fabric)
    return run_bench(
        task.jobs,
        task.policies,
        task.params,
        runner,
        out=task.folder,
        workload=task.workload,
        backend=task.backend,
        command=task.command,
        bar=bar,
        emu_config=task.emu_config,
        fabric=task.fabric,
    )


def _run_sim_point(task: _Point) -> RunOutcome:
    """`_run_point` in a worker process, on the simulator (module level: it is pickled)."""
    from bench.jct.sim import run_policy

    return _run_point(task, run_policy, None)


def _compute_sim_point(task: _Point) -> RunOutcome:
    """`compute_bench` of `task` on a Dask worker, on the simulator (module level: it is
    pickled by name, so the worker runs its own copy of this module)."""
    from bench.jct.sim import run_policy

    runner: PolicyRunner = run_policy if task.fabric is None else FabricRunner(task.fabric)
    return compute_bench(
        task.jobs, task.policies, task.params, runner, workload=task.workload,
        backend=task.backend, command=task.command, emu_config=task.emu_config,
        fabric=task.fabric,
    )  # fmt: skip


def _dask_client(parser: argparse.ArgumentParser, address: str) -> Any:
    try:
        return cluster.connect(address)
    except ClusterError as exc:
        parser.error(str(exc))


def _run_points_on_dask(client: Any, tasks: Sequence[_Point], bar: tqdm) -> list[RunOutcome]:
    """Every point on the cluster's workers; each point's folder written here as its outcome
    arrives (the workers need not see this machine's disk); outcomes in the order of `tasks`."""
    outcomes: dict[int, RunOutcome] = {}

    def write(i: int, outcome: RunOutcome) -> None:
        task = tasks[i]
        task.folder.mkdir(parents=True, exist_ok=True)
        write_outcome(task.folder, outcome, f"{task.workload} ({task.backend})")
        outcomes[i] = outcome
        bar.set_postfix_str(_short(task.params))
        bar.update(len(task.policies))

    cluster.run_in_order(client, _compute_sim_point, tasks, write)
    return [outcomes[i] for i in range(len(tasks))]


def _run_points_in_parallel(tasks: Sequence[_Point], workers: int, bar: tqdm) -> list[RunOutcome]:
    """Every point in a pool of `workers` processes; outcomes in the order of `tasks`.

    Each point is a whole `run_bench` on its own folder: the simulator is deterministic, so
    a point gives the same files whichever process runs it and whenever."""
    outcomes: list[RunOutcome | None] = [None] * len(tasks)
    with ProcessPoolExecutor(max_workers=min(workers, len(tasks))) as pool:
        running = {pool.submit(_run_sim_point, task): i for i, task in enumerate(tasks)}
        for done in as_completed(running):
            i = running[done]
            outcomes[i] = done.result()
            bar.set_postfix_str(_short(tasks[i].params))
            bar.update(len(tasks[i].policies))
    return [o for o in outcomes if o is not None]


def _check_out(parser: argparse.ArgumentParser, out: Path, *, force: bool) -> None:
    """Create `out`, or refuse it: a file, a folder that cannot be written, or one that holds
    something already (another run's results would mix with this one's) unless `force`."""
    if out.exists() and not out.is_dir():
        parser.error(f"--out {out} is a file; give a folder (new or empty)")
    if out.is_dir() and any(out.iterdir()) and not force:
        parser.error(f"--out {out} is not empty; give a new folder, or --force to write into it")
    try:
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=out):
            pass
    except OSError as exc:
        parser.error(f"--out {out} cannot be written: {exc.strerror or exc}")


def with_load(jobs: Sequence[JobSpec], load: float) -> tuple[JobSpec, ...]:
    """`jobs` with arrivals compressed by `load` (2.0 = twice the arrival rate)."""
    if load <= 0:
        raise ValueError(f"load must be > 0, got {load}")
    if load == 1.0:
        return tuple(jobs)
    return tuple(replace(j, arrival_s=j.arrival_s / load) for j in jobs)


def run_bench(
    base_jobs: Sequence[JobSpec],
    policies: Sequence[str],
    params: BenchParams,
    runner: PolicyRunner,
    *,
    out: Path,
    workload: str,
    backend: str,
    command: str,
    bar: tqdm | None = None,
    emu_config: str | None = None,
    fabric: FabricSetting | None = None,
) -> RunOutcome:
    """Run every policy on the same jobs and write the whole output folder (`emu_config`:
    the name of the ``--emu`` configuration the runner uses, for the report; `fabric`: the
    ``--topology`` run's fabric, whose runner `runner` must be)."""
    outcome = compute_bench(
        base_jobs, policies, params, runner, workload=workload, backend=backend,
        command=command, bar=bar, emu_config=emu_config, fabric=fabric,
    )  # fmt: skip
    write_outcome(out, outcome, f"{workload} ({backend})")
    return outcome


def compute_bench(
    base_jobs: Sequence[JobSpec],
    policies: Sequence[str],
    params: BenchParams,
    runner: PolicyRunner,
    *,
    workload: str,
    backend: str,
    command: str,
    bar: tqdm | None = None,
    emu_config: str | None = None,
    fabric: FabricSetting | None = None,
) -> RunOutcome:
    """`run_bench` without writing a file: every figure of the output folder (the report's
    validation included), so that a machine without that folder can compute it (``--dask``)."""
    jobs = with_load(base_jobs, params.load)
    runs, cpu_s = _run_policies(jobs, policies, params, runner, bar)
    summaries = {r.policy: summarise(r) for r in runs}
    ratio = ratios(summaries)
    by_arrival = None
    if ablation.needs_baseline(tuple(policies), params.sim.spec.priority):
        baseline = params.with_value("priority", ablation.BASELINE_PRIORITY)
        started = time.process_time()
        by_arrival = summarise(runner(jobs, ablation.ESA, baseline))
        cpu_s[f"{ablation.ESA}-{ablation.BASELINE_PRIORITY}"] = time.process_time() - started
    decomposition = ablation.decompose(summaries, by_arrival)
    parameters, extra_sources, ideal_avg, notes = _context(
        jobs, params, backend, workload, emu_config
    )
    if fabric is not None:
        # One switch's bound does not hold in a fabric, whose every switch runs that model.
        ideal_avg = None
        fabric_note = (
            "Fabric: the service on the topology's soft switches (one process each), each "
            "job's workers bound to addresses of the racks the fabric simulator placed it on "
            "(bench.jct.emufabric); the service places a job once, on a pool the size of the "
            "smallest switch, at every switch of its tree (docs/fabric.md)."
            if backend == "emu"
            else "Fabric: scheduler.fabricsim runs the fluid model below at every switch of a "
            "job's tree (scheduler.fabricflow); not validated against the fragment-level "
            "model, which has one switch (docs/topology.md says what is validated)."
        )
        notes = [fabric_note, *notes]
        parameters["topology"], parameters["placement"] = fabric.describe(), fabric.placement
        extra_sources["topology"] = "--topology FILE and the --set/--sweep fabric keys"
        extra_sources["placement"] = "--placement (scheduler.placement)"
    document = _summary(summaries, ratio, parameters, decomposition, runs)
    if fabric is not None:
        document["fabric"] = fabric_document(fabric, runs)
    report = render_report(
        command=command,
        workload=workload,
        backend=backend,
        n_jobs=len(jobs),
        parameters=parameters,
        extra_sources=extra_sources,
        summaries=summaries,
        ratios=ratio,
        runs=runs,
        ideal_avg=ideal_avg,
        notes=notes,
        validate=fabric is None,
    )
    if fabric is not None:
        section = render_fabric(fabric, runs, emulated=backend == "emu")
        report = "\n".join([report.rstrip("\n"), *section]) + "\n"
    if decomposition is not None:
        section = ablation.render(decomposition, params.sim.spec.priority)
        report = "\n".join([report.rstrip("\n"), *section]) + "\n"
    return RunOutcome(tuple(runs), summaries, ratio, document, cpu_s, report)


def write_outcome(out: Path, outcome: RunOutcome, title: str) -> None:
    """`outcome`'s files in `out`: summary.json, jobs.csv, the plots (titled `title`) and
    report.md."""
    write_summary(out, outcome.document)
    write_jobs_csv(out, outcome.runs)
    write_plots(out, outcome.runs, title)
    (out / "report.md").write_text(outcome.report, encoding="utf-8")


def _run_policies(
    jobs: Sequence[JobSpec],
    policies: Sequence[str],
    params: BenchParams,
    runner: PolicyRunner,
    bar: tqdm | None,
) -> tuple[list[PolicyRun], dict[str, float]]:
    """Each policy's run on `jobs`, and the CPU seconds each took in this process."""
    runs = []
    cpu_s: dict[str, float] = {}
    for policy in policies:
        if bar is not None:
            bar.set_postfix_str(f"{policy} {_short(params)}")
        started = time.process_time()
        runs.append(runner(jobs, policy, params))
        cpu_s[policy] = time.process_time() - started
        if bar is not None:
            bar.update(1)
    return runs, cpu_s


def _summary(
    summaries: dict[str, PolicySummary],
    ratio: dict[str, float | None],
    parameters: dict[str, Any],
    decomposition: ablation.Decomposition | None,
    runs: Sequence[PolicyRun],
) -> dict[str, Any]:
    """summary.json's document: the summaries, ratios and parameters, the ablation's
    decomposition when there is one, the jobs each policy refused, and the emulation's CPU
    figures when it ran."""
    document = summary_document(summaries, ratio, parameters)
    if decomposition is not None:
        document["decomposition"] = {k: finite(v) for k, v in decomposition.as_dict().items()}
    if any(r.refused for r in runs):
        document["refused"] = {
            r.policy: [{"job_id": job_id, "reason": why} for job_id, why in r.refused] for r in runs
        }
    cpu = {r.policy: r.cpu for r in runs if r.cpu is not None}
    if cpu:
        document["emu_cpu"] = {
            name: {"busy_share": c.busy_share, "service_s": c.service_s, "workers_s": c.workers_s,
                   "span_s": c.span_s, "cores": c.cores}
            for name, c in cpu.items()
        }  # fmt: skip
    return document


def _context(
    jobs: Sequence[JobSpec],
    params: BenchParams,
    backend: str,
    workload: str,
    emu_config: str | None = None,
) -> tuple[dict[str, Any], dict[str, str], float | None, list[str]]:
    """Parameters for summary.json and the report, their extra sources, the ideal average JCT
    (sim only) and notes."""
    from bench.jct.sim import ideal_jct

    parameters: dict[str, Any] = {"workload": workload, "backend": backend, "jobs": len(jobs)}
    parameters.update(params.as_dict())
    parameters["model_mapping"] = model_mapping(workload, params.sim.seed)
    extra = {
        "workload": "--workload",
        "backend": "--sim / --emu",
        "jobs": "jobs in the workload",
        "model_mapping": "scheduler/data/model_sizes.csv and iter_times.csv (sources per row)",
    }
    notes: list[str] = []
    if backend == "sim":
        for name, value in params.unstated_sim_fields().items():
            parameters[f"sim.{name}"] = value
            extra[f"sim.{name}"] = "scheduler.config.SimConfig default (simulator owner's choice)"
        notes += [
            "Simulator: scheduler.simulator (fluid model, scheduler.fluid). A job computes, "
            "then allreduces (no overlap). PS processes (ps_processes) are servers at ps_gbps "
            "with a queue: under atp every completed fragment costs its PS one packet and its "
            "window slot and aggregator wait for the PS result (queueing included); bypassed, "
            "evicted and flushed contributions cost one packet each; esa's completion copies "
            "cost PS capacity but are served after critical-path packets and delay nothing.",
            "Aging: one level per aging_s spent bypassed or evicted since the job's last "
            "progress mark (every progress_step of its iterations); a job that progresses "
            "drops back to its rank's level.",
        ]
        ideal = ideal_jct(jobs, params)
        ideal_avg: float | None = sum(ideal.values()) / len(ideal) if ideal else None
    else:
        from bench.jct.emu import emu_config as config_named
        from bench.jct.emu import emu_context

        more, more_sources, more_notes = emu_context(params, config_named(emu_config or "default"))
        parameters.update(more)
        extra.update(more_sources)
        notes += more_notes
        ideal_avg = None
    return parameters, extra, ideal_avg, notes


def _short(params: BenchParams) -> str:
    return f"mem={params.aggregators} load={params.load} prio={params.sim.spec.priority}"


def _print_summary(outcome: RunOutcome) -> None:
    header = ["policy", "avg_jct", "p50_jct", "p95_jct", "p99_jct", "mem_util", "in_switch"]
    rows = [
        [name, s.avg_jct, s.p50_jct, s.p95_jct, s.p99_jct, s.memory_utilisation, s.in_switch_share]
        for name, s in outcome.summaries.items()
    ]
    print()
    print(format_table(header, rows))
    for name, value in outcome.ratios.items():
        print(f"{name}: {'-' if value is None else f'{value:.3f}'}")
    for run in outcome.runs:
        if run.ina is not None:
            score = "-" if run.ina.score is None else f"{run.ina.score:.3f}"
            print(f"{run.policy} INA efficiency score (Mina's): {score}")
    for name, value in outcome.document.get("decomposition", {}).items():
        print(f"decomposition {name}: {'-' if value is None else f'{value:.3f}'}")
