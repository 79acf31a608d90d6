"""Request and response bodies, named by role: ``JobCreate`` in, ``JobPublic`` out, ...

The rendezvous (`WorkerJoin`) and dashboard shapes are fixed by ``docs/CONTRACTS.md``.
"""

from __future__ import annotations

from datetime import datetime
from ipaddress import IPv4Address
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = [
    "BenchRunCreate",
    "BenchRunDetail",
    "BenchRunPublic",
    "EndpointPublic",
    "HashedPlacement",
    "JobCreate",
    "JobCreated",
    "JobDetail",
    "JobList",
    "JobPublic",
    "JobStateName",
    "PolicyName",
    "PolicyPublic",
    "PolicyUpdate",
    "PriorityPoint",
    "StaticPlacement",
    "SwitchPublic",
    "WorkerHeartbeat",
    "WorkerJoin",
    "WorkerJoinRequest",
    "WorkerProgress",
    "WorkerPublic",
    "WorkerState",
]

JobStateName = Literal["queued", "admitted", "running", "finished", "failed", "cancelled"]
PolicyName = Literal["static", "atp", "esa"]
# The switch's contributor bitmap is 32 bits wide (p4ctl.protocol.MAX_WORKERS).
MAX_WORKERS = 32
Name = Annotated[str, Field(min_length=1, max_length=128, pattern=r"^[\w.\- ]+$")]


class JobCreate(BaseModel):
    """A job submission. Give `model` (gradient size from the model table) or `gradient_bytes`."""

    model_config = ConfigDict(extra="forbid")

    name: Name
    n_workers: int = Field(ge=1, le=MAX_WORKERS, description="data-parallel workers (fan-in)")
    iterations: int = Field(ge=1, le=10_000_000)
    model: str | None = Field(default=None, min_length=1, max_length=64)
    gradient_bytes: int | None = Field(default=None, ge=4, le=2**40)
    priority_class: int = Field(default=0, ge=0, le=15, description="user class, higher first")
    window: int | None = Field(default=None, ge=1, le=4096, description="fragments in flight")

    @model_validator(mode="after")
    def _size_known(self) -> JobCreate:
        if self.model is None and self.gradient_bytes is None:
            raise ValueError("give model or gradient_bytes")
        return self


class JobPublic(BaseModel):
    """A job as the dashboard and the CLI show it."""

    model_config = ConfigDict(from_attributes=True)

    id: int
    name: str
    state: JobStateName
    reason: str | None = None
    policy: str | None
    priority_level: int
    n_workers: int
    iterations: int
    iterations_done: int
    gradient_bytes: int
    model: str | None
    submitted_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    jct_s: float | None
    bytes_switch: int
    bytes_ps: int
    preemptions_caused: int
    preemptions_suffered: int


class JobCreated(JobPublic):
    """The submitted job with its join token; the token is shown this once only (a retried
    submission with the same Idempotency-Key gets null)."""

    join_token: str | None


class WorkerPublic(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    worker_id: int
    host: str
    port: int
    last_heartbeat: datetime


class PriorityPoint(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    t: float = Field(description="seconds since the epoch")
    level: int


class JobDetail(JobPublic):
    workers: list[WorkerPublic]
    priority_history: list[PriorityPoint]


class JobList(BaseModel):
    items: list[JobPublic]
    total: int


class EndpointPublic(BaseModel):
    host: str
    port: int


class HashedPlacement(BaseModel):
    kind: Literal["hashed"] = "hashed"
    seed: int
    pool: int


class StaticPlacement(BaseModel):
    kind: Literal["static"] = "static"
    part_base: int
    part_size: int


class WorkerJoinRequest(BaseModel):
    """A worker's bound UDP socket, which the switch will accept packets from. The switch's
    worker table matches IPv4 source addresses, so the host is an IPv4 address."""

    model_config = ConfigDict(extra="forbid")

    data_host: IPv4Address
    data_port: int = Field(ge=1, le=65535)


class WorkerJoin(BaseModel):
    """Everything a worker needs to aggregate (``docs/CONTRACTS.md``, worker rendezvous)."""

    job_id: int
    switch_job_id: int
    worker_id: int
    fan_in: int
    policy: PolicyName
    switch: EndpointPublic
    ps: EndpointPublic
    lanes: int
    window: int
    placement: HashedPlacement | StaticPlacement = Field(discriminator="kind")
    iterations: int
    gradient_bytes: int
    model: str | None
    heartbeat_interval_s: float


class WorkerHeartbeat(BaseModel):
    model_config = ConfigDict(extra="forbid")


class WorkerProgress(BaseModel):
    model_config = ConfigDict(extra="forbid")

    iterations_done: int = Field(ge=0, le=10_000_000)
    bytes_switch: int = Field(default=0, ge=0, le=2**62)
    bytes_ps: int = Field(default=0, ge=0, le=2**62)


class WorkerState(BaseModel):
    state: JobStateName


class PolicyPublic(BaseModel):
    policy: PolicyName
    priority: str
    levels: int
    aging_s: float
    applies_to: str = Field(description="which jobs the policy governs")


class PolicyUpdate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    policy: PolicyName
    priority: Literal["srtf", "las", "fifo", "static"] | None = None
    levels: int | None = Field(default=None, ge=1, le=256)
    aging_s: float | None = Field(default=None, gt=0, le=1e6)


class SwitchPublic(BaseModel):
    aggregators: int
    lanes: int
    runs: list[tuple[int, int, int, int]] = Field(
        description="[start, length, job_id, state] over non-free aggregators"
    )
    counters: dict[str, dict[str, Any]]


class BenchRunCreate(BaseModel):
    """A finished JCT benchmark run: its summary.json and the rows of its jobs.csv."""

    model_config = ConfigDict(extra="forbid")

    workload: str = Field(min_length=1, max_length=256)
    backend: str = Field(min_length=1, max_length=32)
    summary: dict[str, Any]
    jobs: list[dict[str, Any]] = Field(default_factory=list, max_length=100_000)


class BenchRunPublic(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: int
    created_at: datetime
    workload: str
    backend: str
    summary: dict[str, Any]


class BenchRunDetail(BenchRunPublic):
    jobs: list[dict[str, Any]]
