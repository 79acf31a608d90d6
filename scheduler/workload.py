"""Workloads: the Philly week, a synthetic generator, and the one workload file format.

A workload is a tuple of `JobSpec`, sorted by arrival. The simulator and the emulation
harness both read it from one CSV format (a header line, then one job per line)::

    job_id,arrival_s,workers,model,grad_bytes,iter_time_s,iterations,priority_class
    0,289.0,4,ResNet-50,102228128,0.3232,172591,0

`load_workload` accepts a path to such a file, ``philly``, ``synthetic-N`` (N jobs), or
``philly:FILE`` (any CSV in the public Philly trace's format, mapped as the bundled week).
`philly_jobs` maps each trace row to one job (workers = GPUs, a model drawn with a seeded
generator, iterations from the duration); `synthetic_jobs` draws Poisson arrivals at a given
offered load on switch memory. Both are seeded: the same seed gives the same file.
``docs/scheduler.md`` gives the columns and both mappings.
"""

from __future__ import annotations

import csv
import io
import random
import re
from collections.abc import Iterable, Sequence
from dataclasses import astuple, dataclass, fields
from functools import cache
from importlib import resources
from pathlib import Path

from scheduler.errors import WorkloadError
from scheduler.memory import COPIES_PER_SLOT, DEFAULT_AGGREGATORS, DEFAULT_WINDOW, partition_slots

__all__ = [
    "PHILLY_COLUMNS",
    "PHILLY_PREFIX",
    "JobSpec",
    "UnknownModel",
    "find_model",
    "load_workload",
    "model_table",
    "philly_jobs",
    "read_workload",
    "synthetic_jobs",
    "write_workload",
]

V100 = "V100"


@dataclass(frozen=True, slots=True)
class JobSpec:
    """One training job of a workload (one line of the workload file)."""

    job_id: int
    arrival_s: float
    workers: int
    model: str
    grad_bytes: int
    iter_time_s: float
    iterations: int
    priority_class: int = 0

    def __post_init__(self) -> None:
        if self.workers < 1 or self.iterations < 1 or self.grad_bytes < 1:
            raise WorkloadError(f"job {self.job_id}: workers, iterations, grad_bytes must be >= 1")
        if self.arrival_s < 0 or self.iter_time_s < 0:
            raise WorkloadError(f"job {self.job_id}: arrival_s and iter_time_s must be >= 0")


def _data_text(name: str) -> str:
    return resources.files("scheduler").joinpath("data", name).read_text(encoding="utf-8")


def model_table() -> dict[str, tuple[int, float]]:
    """``{model: (gradient bytes, V100 iteration seconds)}`` for models present in both tables."""
    sizes = {
        row["model"]: int(float(row["grad_MB_fp32"]) * 1e6)
        for row in csv.DictReader(io.StringIO(_data_text("model_sizes.csv")))
        if row["grad_MB_fp32"]
    }
    table: dict[str, tuple[int, float]] = {}
    for row in csv.DictReader(io.StringIO(_data_text("iter_times.csv"))):
        if row["gpu"] == V100 and row["model"] in sizes:
            table[row["model"]] = (sizes[row["model"]], float(row["t_iter_ms"]) / 1e3)
    return dict(sorted(table.items()))


class UnknownModel(WorkloadError):
    """A model name that names no model of the table, or more than one; the message lists
    the known names."""


def _plain(name: str) -> str:
    return "".join(c for c in name.lower() if c.isalnum())


@cache
def _model_names() -> dict[str, str]:
    return {_plain(known): known for known in model_table()}


def find_model(name: str) -> str:
    """The model table's name for `name`: matched ignoring case and punctuation ("resnet50"
    is "ResNet-50"), or by the start of exactly one name ("bert" is "BERT-large").

    The one matcher of model names: job submission (REST and ``inasched jobs submit``) and
    ``inasched worker --model`` both use it. Raises `UnknownModel`.
    """
    names = _model_names()
    key = _plain(name)
    if key in names:
        return names[key]
    starts = sorted(known for plain, known in names.items() if key and plain.startswith(key))
    if len(starts) == 1:
        return starts[0]
    what = f"is ambiguous ({', '.join(starts)})" if starts else "is not a known model"
    raise UnknownModel(f"model {name!r} {what}; known models: {', '.join(sorted(names.values()))}")


#: The columns of a Philly-format trace that the mapping reads.
PHILLY_COLUMNS = ("job_id", "arrival_s", "num_workers", "duration_s")


def philly_jobs(
    seed: int = 0,
    *,
    time_scale: float = 1.0,
    max_iterations: int = 10**9,
    path: Path | str | None = None,
) -> tuple[JobSpec, ...]:
    """The Philly jobs mapped to `JobSpec` as the module docstring describes: the bundled
    week's 671, or those of the Philly-format CSV at `path`. Raises `WorkloadError` naming
    the file (and line) of a trace it cannot read."""
    where = "data/jobs_philly.csv" if path is None else str(path)
    if path is None:
        text = _data_text("jobs_philly.csv")
    else:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise WorkloadError(f"cannot read the Philly trace {where}: {exc}") from exc
    reader = csv.DictReader(io.StringIO(text))
    missing = [c for c in PHILLY_COLUMNS if c not in (reader.fieldnames or ())]
    if missing:
        raise WorkloadError(
            f"{where}: not in the Philly trace's format, no column {', '.join(missing)} "
            f"(needs {', '.join(PHILLY_COLUMNS)}, as scheduler/data/jobs_philly.csv has)"
        )
    rng = random.Random(seed)
    models = model_table()
    names = list(models)
    jobs = []
    for line, row in enumerate(reader, start=2):
        model = rng.choice(names)
        grad, t_iter = models[model]
        try:
            duration = float(row["duration_s"]) * time_scale
            if not duration >= 0:
                raise ValueError(f"duration_s must be a number >= 0, got {row['duration_s']!r}")
            iterations = min(max_iterations, max(1, round(duration / t_iter)))
            jobs.append(
                JobSpec(
                    job_id=int(row["job_id"]),
                    arrival_s=float(row["arrival_s"]) * time_scale,
                    workers=int(row["num_workers"]),
                    model=model,
                    grad_bytes=grad,
                    iter_time_s=t_iter,
                    iterations=iterations,
                )
            )
        except (TypeError, ValueError, OverflowError, WorkloadError) as exc:
            raise WorkloadError(f"{where}:{line}: {exc}") from exc
    if not jobs:
        raise WorkloadError(f"{where}: no jobs (a header line, then one job per line)")
    seen: set[int] = set()
    for line, job in enumerate(jobs, start=2):
        if job.job_id in seen:
            raise WorkloadError(f"{where}:{line}: job id {job.job_id} again; ids must be unique")
        seen.add(job.job_id)
    return tuple(jobs)


_WORKER_SIZES = (2, 4, 8, 16)
_WORKER_WEIGHTS = (0.06, 0.42, 0.48, 0.04)


def synthetic_jobs(
    n: int,
    seed: int = 0,
    *,
    load: float = 0.8,
    aggregators: int = DEFAULT_AGGREGATORS,
    window: int = DEFAULT_WINDOW,
    classes: int = 4,
) -> tuple[JobSpec, ...]:
    """`n` jobs with Poisson arrivals at offered memory load `load` (see module docstring)."""
    if n < 1 or load <= 0:
        raise WorkloadError(f"synthetic workload needs n >= 1 and load > 0, got {n}, {load}")
    rng = random.Random(seed)
    models = model_table()
    names = list(models)
    drafts = []
    for _ in range(n):
        model = rng.choice(names)
        iterations = min(100_000, int(50 * rng.paretovariate(1.5)))
        drafts.append(
            (
                model,
                rng.choices(_WORKER_SIZES, _WORKER_WEIGHTS)[0],
                iterations,
                rng.randrange(classes),
            )
        )
    # A static partition holds both copies of its slots for the job's whole run.
    held = COPIES_PER_SLOT * partition_slots(window)
    mean_work = sum(held * models[m][1] * it for m, _, it, _ in drafts) / n
    rate = load * aggregators / mean_work
    t = 0.0
    jobs = []
    for job_id, (model, workers, iterations, klass) in enumerate(drafts):
        t += rng.expovariate(rate)
        grad, t_iter = models[model]
        jobs.append(JobSpec(job_id, round(t, 6), workers, model, grad, t_iter, iterations, klass))
    return tuple(jobs)


_COLUMNS = tuple(f.name for f in fields(JobSpec))


def write_workload(jobs: Iterable[JobSpec], path: Path | str) -> None:
    """Write `jobs` in the workload file format."""
    with open(path, "w", newline="", encoding="utf-8") as out:
        writer = csv.writer(out)
        writer.writerow(_COLUMNS)
        writer.writerows(astuple(job) for job in jobs)


def read_workload(path: Path | str) -> tuple[JobSpec, ...]:
    """Parse a workload file; raises `WorkloadError` naming the bad line."""
    with open(path, newline="", encoding="utf-8") as src:
        reader = csv.DictReader(src)
        if tuple(reader.fieldnames or ()) != _COLUMNS:
            raise WorkloadError(f"{path}: header must be {','.join(_COLUMNS)}")
        jobs = []
        for line, row in enumerate(reader, start=2):
            try:
                jobs.append(
                    JobSpec(
                        job_id=int(row["job_id"]),
                        arrival_s=float(row["arrival_s"]),
                        workers=int(row["workers"]),
                        model=row["model"],
                        grad_bytes=int(row["grad_bytes"]),
                        iter_time_s=float(row["iter_time_s"]),
                        iterations=int(row["iterations"]),
                        priority_class=int(row["priority_class"]),
                    )
                )
            except (TypeError, ValueError) as exc:
                raise WorkloadError(f"{path}:{line}: {exc}") from exc
    return _sorted(jobs)


def _sorted(jobs: Sequence[JobSpec]) -> tuple[JobSpec, ...]:
    ids = [j.job_id for j in jobs]
    if len(set(ids)) != len(ids):
        raise WorkloadError("job ids in a workload must be unique")
    return tuple(sorted(jobs, key=lambda j: (j.arrival_s, j.job_id)))


_SYNTHETIC = re.compile(r"synthetic-(\d+)")
PHILLY_PREFIX = "philly:"


def load_workload(name_or_path: str | Path, seed: int = 0) -> tuple[JobSpec, ...]:
    """Jobs of ``philly``, ``philly:FILE``, ``synthetic-N``, or a workload file, sorted by
    arrival; raises `WorkloadError` with one line a user can act on."""
    name = str(name_or_path)
    if name == "philly":
        return _sorted(philly_jobs(seed))
    if name.startswith(PHILLY_PREFIX):
        return _sorted(philly_jobs(seed, path=name.removeprefix(PHILLY_PREFIX)))
    match = _SYNTHETIC.fullmatch(name)
    if match:
        if int(match.group(1)) < 1:
            raise WorkloadError(f"{name!r} has no jobs: synthetic-N needs N >= 1")
        return _sorted(synthetic_jobs(int(match.group(1)), seed))
    path = Path(name)
    if not path.is_file():
        raise WorkloadError(
            f"no workload {name!r}: give 'philly', 'philly:FILE' (a CSV in the Philly "
            "trace's format), 'synthetic-N' or a path to a workload CSV"
        )
    return read_workload(path)
