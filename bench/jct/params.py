"""The JCT benchmark's parameters: one frozen value, each field with its source.

Every workload (the Philly week, synthetic-N, a file) runs with the same `BenchParams`; a
``--sweep`` changes one field, two ``--sweep`` a grid of two. The defaults are chosen once,
from published hardware and system figures, and are never tuned per workload. `SOURCES` says
where each default comes from; the Markdown report prints it next to the value that was
actually used.

A parameter the simulator has as it is (the seed, the window, the loopback costs, the
`PolicySpec`'s priority, levels and aging) lives only in the nested `SimConfig`, with that
field's default; `BenchParams` holds what the command line states in units of its own
(aggregators and lanes make the `Pool`, Gbps the rates, ``ps_processes`` as typed) or the
simulator does not have (``load``), and writes the first into `sim`. `SOURCES` names every
parameter, in the order `as_dict`, the report and ``summary.json`` give them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any

from scheduler.config import PER_JOB, PsProcesses, SimConfig
from scheduler.fabric import TOFINO1_AGGREGATORS
from scheduler.memory import DEFAULT_LANES, Pool
from scheduler.spec import PolicySpec

__all__ = ["MAX_SWEEPS", "SOURCES", "SWEEPABLE", "BenchParams", "parse_sweep", "parse_sweeps"]


_GBPS = 1e9


@dataclass(frozen=True, slots=True)
class BenchParams:
    """Everything that decides a JCT run besides the workload's jobs and the policy.

    `sim` is the simulator's configuration the run uses: its `spec` holds the priority
    function, levels and aging (its ``policy`` is the one each run replaces), and its `pool`,
    `link_bps`, `ps_bps` and `ps_processes` are always those of `aggregators` and `lanes`,
    `link_gbps`, `ps_gbps` and `ps_processes` (whatever `sim` was given with). `as_dict`,
    `from_dict` and `with_value` name `sim`'s parameters as fields of their own."""

    aggregators: int = TOFINO1_AGGREGATORS
    lanes: int = DEFAULT_LANES
    link_gbps: float = SimConfig().link_bps / _GBPS
    ps_gbps: float = 25.0
    ps_processes: str = PER_JOB
    load: float = 1.0
    sim: SimConfig = field(default_factory=SimConfig)

    def __post_init__(self) -> None:
        """Refuse a value no run can have, naming the field, the value and what it takes
        (`SimConfig` refuses its own), and make `sim` the run's configuration."""
        for name in ("aggregators", "lanes"):
            if not getattr(self, name) >= 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)!r}")
        for name in ("link_gbps", "ps_gbps", "load"):
            # `not x > 0` also refuses NaN; inf is no rate either.
            if not 0 < getattr(self, name) < math.inf:
                raise ValueError(f"{name} must be a number > 0, got {getattr(self, name)!r}")
        # A frozen value's own derived field, set once here as dataclasses document it.
        object.__setattr__(self, "sim", replace(self.sim, **self._stated_in_units()))

    def _stated_in_units(self) -> dict[str, Any]:
        """The `SimConfig` fields these parameters state in the command line's own units."""
        return {
            "pool": Pool(self.aggregators, self.lanes),
            "link_bps": self.link_gbps * _GBPS,
            "ps_bps": self.ps_gbps * _GBPS,
            "ps_processes": _ps_processes(self.ps_processes),
        }

    def as_dict(self) -> dict[str, Any]:
        """Every parameter by name (`SOURCES`' names and order), `sim`'s among them."""
        return {name: getattr(_holder(self, name), name) for name in SOURCES}

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> BenchParams:
        """The `BenchParams` of an `as_dict` (names it does not know are ignored)."""
        known = {name: values[name] for name in SOURCES if name in values}
        spec = PolicySpec(**{k: v for k, v in known.items() if k in _SPEC_FIELDS})
        sim = SimConfig(spec=spec, **{k: v for k, v in known.items() if k in _SIM_FIELDS})
        return cls(**{k: v for k, v in known.items() if k in _OWN_FIELDS}, sim=sim)

    def unstated_sim_fields(self) -> dict[str, Any]:
        """``{field: value}`` of `sim`'s fields no parameter states (the simulator's own
        defaults unless a caller set them)."""
        stated = {"spec", *_SIM_FIELDS, *self._stated_in_units()}
        return {f.name: getattr(self.sim, f.name) for f in fields(self.sim) if f.name not in stated}

    def with_value(self, name: str, raw: str) -> BenchParams:
        """A copy with parameter `name` (or its sweep alias) parsed from `raw`."""
        field_name = SWEEPABLE.get(name, name)
        if field_name not in _KINDS:
            known = ", ".join(sorted(set(SWEEPABLE) | set(_KINDS)))
            raise ValueError(f"cannot sweep {name!r}; sweepable: {known}")
        kind = _KINDS[field_name]
        value: Any
        if kind in ("int", int):
            value = _number(field_name, raw, int)
        elif kind in ("float", float):
            value = _number(field_name, raw, float)
        elif kind in ("bool", bool):
            if raw.lower() not in ("0", "1", "false", "true"):
                raise ValueError(f"{field_name} is true or false, got {raw!r}")
            value = raw.lower() in ("1", "true")
        else:
            value = raw
        try:
            if field_name in _SPEC_FIELDS:
                spec = replace(self.sim.spec, **{field_name: value})
                return replace(self, sim=replace(self.sim, spec=spec))
            if field_name in _SIM_FIELDS:
                return replace(self, sim=replace(self.sim, **{field_name: value}))
            return replace(self, **{field_name: value})
        except ValueError as exc:
            raise ValueError(f"{name}={raw}: {exc}") from None

    def with_settings(self, items: Sequence[str]) -> BenchParams:
        """A copy with each ``PARAM=VALUE`` of `items` (``--set``) applied in order."""
        params = self
        for item in items:
            name, sep, value = item.partition("=")
            if not sep:
                raise ValueError(f"--set wants PARAM=VALUE, got {item!r}")
            params = params.with_value(name.strip(), value.strip())
        return params


def _ps_processes(value: str) -> PsProcesses:
    """``"per-job"`` or a process count, as `SimConfig` takes it; raises ValueError."""
    if value == PER_JOB:
        return PER_JOB
    if not (value.isdigit() and int(value) >= 1):
        raise ValueError(f"ps_processes must be {PER_JOB!r} or a count >= 1, got {value!r}")
    return int(value)


def _number(name: str, raw: str, kind: type[int] | type[float]) -> int | float:
    try:
        return kind(raw)
    except ValueError:
        what = "a whole number" if kind is int else "a number"
        raise ValueError(f"{name} must be {what}, got {raw!r}") from None


# --sweep names (the words) -> BenchParams fields.
SWEEPABLE: dict[str, str] = {
    "memory": "aggregators",
    "aggregators": "aggregators",
    "load": "load",
    "priority": "priority",
    "levels": "levels",
    "aging": "aging_s",
    "aging_s": "aging_s",
    "ps_gbps": "ps_gbps",
    "link_gbps": "link_gbps",
    "ps_processes": "ps_processes",
    "window": "window",
}

# Every parameter and where its default comes from, in the order as_dict gives them.
SOURCES: dict[str, str] = {
    "seed": "bench choice; seeds the model mapping (scheduler.workload) and the hash placement",
    "aggregators": (
        "first-generation Tofino: SwitchML (Sapio et al., NSDI'21) budgets ~4 MiB of register "
        "memory for aggregation = 16,384 x 64 lanes x 4 B; ATP (Lao et al., NSDI'21) ~20,000 "
        "aggregators x 62 lanes x 4 B = 4.96 MB"
    ),
    "lanes": "Tofino: 64 x 32-bit register ALU lanes per pass (p4ctl.protocol.SUPPORTED_LANES)",
    "link_gbps": "100 GbE worker links, as in the SwitchML, ATP and ESA testbeds",
    "ps_gbps": (
        "one PS CPU process: 10-25 Gbps; the upper end is taken, the most favourable "
        "to atp, every one of whose fragments passes through its PS"
    ),
    "ps_processes": (
        "per-job: ATP's own deployment (Lao et al., NSDI'21: a PS per job), the fair baseline; "
        "with the single shared process that `inasched up` starts (1), every atp fragment "
        "queues at one 25 Gbps server and atp becomes PS-bound, which would inflate esa's gain "
        "for a reason other than preemption: that case is reported as a sweep"
    ),
    "window": (
        "scheduler.memory.DEFAULT_WINDOW; it must cover the bandwidth-delay product: RTT = 2 x "
        "1 us link + 0.5 us switch + 27.2 ns serialization = 2.53 us, x 100 Gbps / 340 B per "
        "fragment (256 B payload + 84 B headers) = 93 fragments <= 128, so an in-switch "
        "stream runs at line rate; a PS round trip (atp: every fragment) doubles the RTT to "
        "5.1 us = 187 fragments, so atp is also window-bound, as ATP's design is"
    ),
    "load": "arrival-rate multiplier; 1.0 = the workload's own arrival times, unchanged",
    "job_setup_s": (
        "0 on a testbed model (a job's set-up is not part of what the policies decide); "
        "bench.jct.validate measures the loopback emulation's (workers' join, REST) with probe "
        "jobs and sets it for --sim"
    ),
    "iteration_overhead_s": (
        "0 on a testbed model; bench.jct.validate measures the loopback emulation's (a "
        "worker's blocking progress report after each iteration) with probe jobs"
    ),
    "switch_pps": (
        "0: a Tofino pipeline processes packets at line rate; the loopback soft switch is one "
        "CPU, whose packet rate bench.jct.validate measures with probe jobs"
    ),
    "ps_switch_cost": (
        "0: a testbed's PS is a host of its own; the loopback service's PS shares the CPU with "
        "the soft switch, and bench.jct.validate measures what a PS packet costs it with an "
        "esa probe (switch packet-times per packet the PS receives)"
    ),
    "priority": "shortest remaining work first, the scheduler's default (scheduler.priority)",
    "levels": "a job_table entry's priority: 16 levels (scheduler.priority.DEFAULT_LEVELS)",
    "aging_s": "scheduler.priority.DEFAULT_AGING_S: one level per 60 s spent bypassed/evicted",
}


def _names(cls: Any) -> set[str]:
    return {f.name for f in fields(cls)}


# Where each parameter lives: a field of `BenchParams` itself, of its `sim` or of `sim.spec`
# (the first that has it: ``ps_processes`` is the command line's, in its own form).
_HOME: dict[str, type] = {
    name: next(c for c in (BenchParams, SimConfig, PolicySpec) if name in _names(c))
    for name in SOURCES
}
_SPEC_FIELDS = frozenset(name for name, home in _HOME.items() if home is PolicySpec)
_SIM_FIELDS = frozenset(name for name, home in _HOME.items() if home is SimConfig)
_OWN_FIELDS = frozenset(name for name, home in _HOME.items() if home is BenchParams)
# Each parameter's type as its dataclass declares it (`with_value` parses by it).
_KINDS: dict[str, Any] = {
    name: next(f.type for f in fields(home) if f.name == name) for name, home in _HOME.items()
}


def _holder(params: BenchParams, name: str) -> Any:
    """The value that holds parameter `name` as a field: `params`, its `sim` or `sim.spec`."""
    if name in _SPEC_FIELDS:
        return params.sim.spec
    return params.sim if name in _SIM_FIELDS else params


def parse_sweep(spec: str) -> tuple[str, list[str]]:
    """``"memory=8192,16384"`` -> ``("memory", ["8192", "16384"])``; raises ValueError."""
    name, sep, values = spec.partition("=")
    name = name.strip()
    items = [v.strip() for v in values.split(",") if v.strip()]
    if not sep:
        raise ValueError(f"--sweep wants PARAM=V1,V2,...; got {spec!r}")
    if not items:
        raise ValueError(f"--sweep {spec!r} has no values; give PARAM=V1,V2,...")
    if name not in SWEEPABLE:
        known = ", ".join(sorted(SWEEPABLE))
        raise ValueError(f"cannot sweep {name!r}; sweepable: {known}")
    twice = sorted({v for v in items if items.count(v) > 1})
    if twice:
        raise ValueError(f"--sweep {name} lists {', '.join(twice)} more than once")
    for item in items:  # fail before any run on a value of the wrong type or range
        BenchParams().with_value(name, item)
    return name, items


# A grid of two parameters is a heatmap; three would be a cube no figure shows.
MAX_SWEEPS = 2


def parse_sweeps(specs: Sequence[str]) -> list[tuple[str, list[str]]]:
    """One `parse_sweep` per ``--sweep``: at most `MAX_SWEEPS`, each parameter once (an alias
    such as memory and aggregators counts as its field); raises ValueError."""
    if len(specs) > MAX_SWEEPS:
        raise ValueError(
            f"--sweep is given at most {MAX_SWEEPS} times (a grid of two parameters); "
            f"got {len(specs)}: {', '.join(specs)}"
        )
    sweeps = [parse_sweep(spec) for spec in specs]
    seen: dict[str, str] = {}
    for name, _ in sweeps:
        field_name = SWEEPABLE[name]
        if field_name in seen:
            raise ValueError(
                f"--sweep {seen[field_name]} and --sweep {name} both sweep {field_name}; "
                "give each parameter once, with all its values"
            )
        seen[field_name] = name
    return sweeps
