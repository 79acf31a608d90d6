"""``inasched bench jct --topology FILE``: the JCT benchmark on a fabric (`scheduler.fabricsim`).

Every policy (the switch policies on every switch, the fabric policies of
`scheduler.registry.FABRIC_POLICIES`) runs on the same jobs, placed by ``--placement``. The
fabric is the file's, changed by the keys of `FABRIC_KEYS` (``--sweep``/``--set``): ``racks``
(that many ToRs of the file's first rack under one spine), ``memory`` (every switch's pool),
``spine_memory`` (the switches above the ToRs), ``oversubscription`` (every ToR uplink).
Besides average and p99 JCT, each policy gets Mina's INA efficiency score (`ina_score`);
the report states the topology, the placement and the score's definition (`render_fabric`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from bench.jct.grid import Heatmap
from bench.jct.params import BenchParams
from bench.jct.results import InaScore, PolicyRun, summarise
from bench.jct.sim import sim_config, to_policy_run
from scheduler.errors import SchedulerError, TopologyError
from scheduler.fabric import Fabric, Switch, load_fabric, two_level_fabric
from scheduler.fabricsim import FabricRun, simulate_fabric
from scheduler.placement import make_placement
from scheduler.registry import FABRIC_POLICIES
from scheduler.workload import JobSpec

__all__ = [
    "FABRIC_HEATMAPS",
    "FABRIC_KEYS",
    "SCORE_DEFINITION",
    "FabricRunner",
    "FabricSetting",
    "fabric_columns",
    "fabric_document",
    "ina_score",
    "read_setting",
    "render_fabric",
]

#: Sweep/--set keys that change the fabric (``memory`` changes `BenchParams.aggregators` too).
FABRIC_KEYS = ("racks", "memory", "spine_memory", "oversubscription")

SCORE_DEFINITION = (
    "Mina's INA efficiency score (Mina, INFOCOM'25/ToN'25, as its public simulator computes "
    "it): (sum T_none - sum T) / (sum T_none - sum T_ina) over the finished jobs, each job's "
    "times weighted by its host count (servers, one INA worker each). T: the job's run time "
    "from admission to finish (queueing excluded); T_ina: its analytic run time with "
    "exclusive INA at every switch of its tree (alone in a private partition of its window at "
    "each switch, every uplink its own; scheduler.fabricflow.exclusive_comm_s); T_none: its "
    "analytic run time with no INA, every worker's fragment summed at the job's own PS "
    "(no_ina_comm_s). 1: every job ran as if it had exclusive INA; 0: INA gave nothing. Unlike "
    "Mina's model, aggregators, windows, link rates and the PS are modelled; Mina's one "
    "aggregation per switch at a time is not adopted"
)


@dataclass(frozen=True, slots=True)
class FabricSetting:
    """The fabric a run uses: the topology file's (`path`), with the `FABRIC_KEYS` set so far
    (None: the file's), and the `placement` policy."""

    path: str
    placement: str = "packed"
    racks: int | None = None
    memory: int | None = None
    spine_memory: int | None = None
    oversubscription: float | None = None

    def __post_init__(self) -> None:
        try:
            make_placement(self.placement)
        except SchedulerError as exc:
            raise ValueError(f"--placement {self.placement}: {exc}") from None

    def with_value(self, name: str, raw: str) -> FabricSetting:
        """A copy with key `name` (of `FABRIC_KEYS`) parsed from `raw`; raises ValueError."""
        kind: type[int] | type[float] = float if name == "oversubscription" else int
        try:
            value = kind(raw)
        except ValueError:
            what = "a number" if kind is float else "a whole number"
            raise ValueError(f"{name} must be {what}, got {raw!r}") from None
        if not value > 0:
            raise ValueError(f"{name} must be > 0, got {raw!r}")
        changes: dict[str, Any] = {name: value}
        out = replace(self, **changes)
        out.fabric()  # refuse now what no run could build
        return out

    def fabric(self) -> Fabric:
        """The fabric of the file with this setting's changes; raises `TopologyError`."""
        base = load_fabric(self.path)
        if self.racks is not None:
            base = self._racks(base, self.racks)
        switches = []
        for s in base.switches:
            aggregators = self.memory or s.aggregators
            if s.rack is None and self.spine_memory is not None:
                aggregators = self.spine_memory
            over = s.oversubscription
            if s.rack is not None and s.parent is not None and self.oversubscription:
                over = self.oversubscription
            switches.append(replace(s, aggregators=aggregators, oversubscription=over))
        return Fabric(tuple(switches), base.lanes, base.gpus_per_server)

    @staticmethod
    def _racks(base: Fabric, racks: int) -> Fabric:
        if base.levels > 2:
            raise TopologyError(
                f"racks={racks}: the topology has {base.levels} levels; the racks key builds "
                "two (ToRs under one spine): sweep a file of two levels, or give files"
            )
        tor: Switch = base.tors[0]
        assert tor.rack is not None
        return two_level_fabric(
            racks,
            servers_per_rack=tor.rack.servers,
            gpus_per_server=base.gpus_per_server,
            tor_aggregators=tor.aggregators,
            spine_aggregators=base.root.aggregators,
            server_gbps=tor.rack.server_gbps,
            oversubscription=tor.oversubscription,
            lanes=base.lanes,
        )

    def describe(self) -> str:
        """The fabric's line and where it came from."""
        keys = [f"{k}={getattr(self, k)}" for k in FABRIC_KEYS if getattr(self, k) is not None]
        changed = f" with {', '.join(keys)}" if keys else ""
        return f"{self.fabric().describe()} (topology {self.path}{changed})"


def ina_score(run: FabricRun) -> InaScore:
    """Mina's score of `run` (`SCORE_DEFINITION`), with the sums it is made of."""
    times = {r.job_id: r.finished_s - r.admitted_s for r in run.result.jobs}
    t = sum(j.hosts * times[j.job_id] for j in run.jobs)
    t_ina = sum(j.hosts * j.t_ina_s for j in run.jobs)
    t_none = sum(j.hosts * j.t_none_s for j in run.jobs)
    headroom = t_none - t_ina
    cross = [j for j in run.jobs if len(j.racks) > 1]
    at_tors = sum(1 for j in cross if j.below_top_s > 0)
    score = (t_none - t) / headroom if headroom > 0 else None
    return InaScore(score, t, t_ina, t_none, len(cross), at_tors)


@dataclass(frozen=True, slots=True)
class FabricRunner:
    """The ``--topology`` back-end: one policy's run on the setting's fabric (picklable, so
    that ``--jobs`` processes can run it)."""

    setting: FabricSetting

    def __call__(self, jobs: Sequence[JobSpec], policy: str, params: BenchParams) -> PolicyRun:
        switch_policy = (
            FABRIC_POLICIES[policy].switch_policy if policy in FABRIC_POLICIES else policy
        )
        cfg = sim_config(switch_policy, params)
        run = simulate_fabric(
            jobs, cfg, self.setting.fabric(), policy=policy, placement=self.setting.placement
        )
        return replace(to_policy_run(policy, jobs, run.result), ina=ina_score(run))


def fabric_columns(runs: Sequence[PolicyRun]) -> dict[str, Any]:
    """A sweep row's fabric columns: each policy's score, and esa's average JCT over each
    fabric policy's (above 1: the fabric policy is faster)."""
    row: dict[str, Any] = {f"{r.policy}_ina_score": r.ina.score for r in runs if r.ina}
    avg = {r.policy: sum(j.jct_s for j in r.jobs) / len(r.jobs) for r in runs if r.jobs}
    for name in FABRIC_POLICIES:
        if name in avg and "esa" in avg:
            row[f"esa_over_{name}"] = avg["esa"] / avg[name]
    return row


FABRIC_HEATMAPS = (
    Heatmap(
        "heatmap_esa_over_tiered.png",
        "esa_over_tiered",
        ("esa", "tiered"),
        "esa avg JCT / tiered avg JCT (above 1: tiered faster)",
        esa_wins_above=True,
    ),
    Heatmap(
        "heatmap_tiered_ina_score.png",
        "tiered_ina_score",
        ("tiered",),
        "tiered's INA efficiency score (1: as with exclusive INA)",
        esa_wins_above=True,
    ),
)


def fabric_document(setting: FabricSetting, runs: Sequence[PolicyRun]) -> dict[str, Any]:
    """summary.json's ``fabric``: topology, placement, the score's definition, and per
    policy its score and sums, cross-rack jobs and those last aggregated at their ToRs."""
    return {
        "topology": setting.describe(),
        "placement": setting.placement,
        "score_definition": SCORE_DEFINITION,
        "policies": {
            r.policy: {
                "ina_score": r.ina.score, "t_s": r.ina.t_s, "t_ina_s": r.ina.t_ina_s,
                "t_none_s": r.ina.t_none_s, "cross_rack_jobs": r.ina.cross_rack,
                "cross_rack_at_tors": r.ina.at_tors,
            }
            for r in runs
            if r.ina is not None
        },
    }  # fmt: skip


def render_fabric(
    setting: FabricSetting, runs: Sequence[PolicyRun], emulated: bool = False
) -> list[str]:
    """The report's fabric section: where the run was, and each policy's JCT and score (the
    score is the simulator's alone: `emulated` runs show "-")."""
    where = (
        "Emulation: the service on one soft switch process per switch, the workers where "
        "scheduler.fabricsim placed them (bench.jct.emufabric)."
        if emulated
        else "Simulator: scheduler.fabricsim (per-switch fluid model, scheduler.fabricflow; "
        "each job's allreduce takes its slowest switch, ToR uplink or PS bound)."
    )
    lines = [
        "",
        "## Fabric",
        "",
        f"Topology: {setting.describe()}.",
        f"Placement: {setting.placement} (scheduler.placement; one INA worker per server).",
        where,
        "",
        "| policy | avg JCT | p99 | INA score | cross-rack jobs | of them ever at ToRs only |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for r in runs:
        if not r.jobs or (r.ina is None and not emulated):
            continue
        s = summarise(r)
        score = "-" if r.ina is None or r.ina.score is None else f"{r.ina.score:.3f}"
        cross = ("-", "-") if r.ina is None else (r.ina.cross_rack, r.ina.at_tors)
        lines.append(
            f"| {r.policy} | {s.avg_jct:,.1f} | {s.p99_jct:,.1f} | {score} | "
            f"{cross[0]} | {cross[1]} |"
        )
    lines += ["", f"Score: {SCORE_DEFINITION}."]
    return lines


def read_setting(path: Path | str, placement: str, keys: Mapping[str, str]) -> FabricSetting:
    """The setting of topology `path` with `keys` (``--set`` values of `FABRIC_KEYS`)."""
    setting = FabricSetting(str(path), placement)
    setting.fabric()
    for name, raw in keys.items():
        setting = setting.with_value(name, raw)
    return setting
