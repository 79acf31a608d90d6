"""Request and response bodies, named by role: ``JobCreate`` in, ``JobPublic`` out, ...

The rendezvous (`WorkerJoin`) and dashboard shapes are fixed by ``docs/CONTRACTS.md``.
"""

from __future__ import annotations

from datetime import datetime
from ipaddress import IPv4Address
from typing import Annotated, Any, Literal

from p4ctl.protocol import MAX_WORKERS
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    WithJsonSchema,
    model_validator,
)
from pydantic.config import JsonDict

from scheduler.memory import JobState
from scheduler.registry import policy_names, priority_names
from scheduler.scheduler import too_wide
from scheduler.spec import MAX_LEVELS
from scheduler.workload import model_table

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
    "PriorityName",
    "PriorityPoint",
    "QueueReason",
    "StaticPlacement",
    "SwitchCountersPublic",
    "SwitchPublic",
    "TenantLimitsPublic",
    "TenantLimitsUpdate",
    "TenantName",
    "TokenCreate",
    "TokenCreated",
    "TokenPublic",
    "WorkerHeartbeat",
    "WorkerJoin",
    "WorkerJoinRequest",
    "WorkerProgress",
    "WorkerPublic",
    "WorkerState",
]

# Names come from where they are defined: job states from `JobState`, policy and priority
# names from `scheduler.registry` (validated against it, and listed in the OpenAPI schema).
JobStateName = JobState


def _registered(kind: str, names: tuple[str, ...]) -> AfterValidator:
    def check(value: str) -> str:
        if value not in names:
            raise ValueError(f"unknown {kind} {value!r}; known: {', '.join(names)}")
        return value

    return AfterValidator(check)


PolicyName = Annotated[
    str,
    _registered("policy", policy_names()),
    WithJsonSchema({"type": "string", "enum": list(policy_names())}),
]
PriorityName = Annotated[
    str,
    _registered("priority function", priority_names()),
    WithJsonSchema({"type": "string", "enum": list(priority_names())}),
]
QueueReasonKind = Literal[
    "scheduling",
    "switch_job_ids",
    "partition",
    "policy",
    "switch_refused",
    "ps_unavailable",
    "tenant_quota",
]
MAX_ITERATIONS = 10_000_000
# 16 GiB: the ceiling of the `max_gradient_bytes` setting. With it, what 32 workers of a job
# can receive over its iterations (`MAX_WORKER_BYTES` each) still fits a 64-bit counter.
MAX_GRADIENT_BYTES = 2**34
# A worker's results in one iteration are its gradient padded to whole fragments (1024 lanes
# of 4 bytes at most); a job's workers receive each result once, from the switch or the PS.
MAX_WORKER_BYTES = MAX_ITERATIONS * (MAX_GRADIENT_BYTES + 4096)
# Request bodies are strict: "2" and true are not integers (and extra fields are refused).
STRICT = ConfigDict(extra="forbid", strict=True)


def _fits_one_switch(workers: int) -> int:
    # The scheduler's own refusal (`scheduler.too_wide`), so that both say the same.
    why = too_wide(workers)
    if why is not None:
        raise ValueError(why)
    return workers


def _json_integer(value: object) -> object:
    # JSON Schema's "integer" is any number without a fraction: 4.0 is 4, 4.5 stays refused.
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


JsonInt = Annotated[int, BeforeValidator(_json_integer)]
# Bounds of an optional integer go before the validator, or the spec shows them as "ge"/"le",
# which JSON Schema does not know (and generated requests ignore).
# The job's size is given once (`JobCreate`): a model, or gradient bytes.
_ONLY_MODEL: JsonDict = {
    "required": ["model"],
    "properties": {"model": {"type": "string"}, "gradient_bytes": {"type": "null"}},
}
_ONLY_GRADIENT_BYTES: JsonDict = {
    "required": ["gradient_bytes"],
    "properties": {"gradient_bytes": {"type": "integer"}, "model": {"type": "null"}},
}
# A model of the table (`scheduler.workload`); case and punctuation are ignored when matched.
ModelName = Annotated[str, WithJsonSchema({"type": "string", "enum": sorted(model_table())})]
Name = Annotated[str, Field(min_length=1, max_length=128, pattern=r"^[\w.\- ]+$")]


class JobCreate(BaseModel):
    """A job submission. Its size is one fact: give `model` (its gradient size in the model
    table) or `gradient_bytes` (any other model), never both. The size is at most the
    service's ``max_gradient_bytes``."""

    model_config = ConfigDict(
        **STRICT,
        json_schema_extra={"anyOf": [_ONLY_MODEL, _ONLY_GRADIENT_BYTES]},
    )

    name: Name
    n_workers: Annotated[JsonInt, AfterValidator(_fits_one_switch)] = Field(
        ge=1,
        description="data-parallel workers (fan-in); at most the switch's bitmap width",
        json_schema_extra={"maximum": MAX_WORKERS},
    )
    iterations: JsonInt = Field(ge=1, le=MAX_ITERATIONS)
    model: ModelName | None = Field(default=None, min_length=1, max_length=64)
    gradient_bytes: (
        Annotated[
            int,
            Field(ge=4, le=MAX_GRADIENT_BYTES, multiple_of=4),
            BeforeValidator(_json_integer),
        ]
        | None
    ) = None
    priority_class: JsonInt = Field(default=0, ge=0, le=15, description="user class, higher first")
    window: Annotated[int, Field(ge=1, le=4096), BeforeValidator(_json_integer)] | None = Field(
        default=None, description="fragments in flight"
    )

    @model_validator(mode="after")
    def _size_known(self) -> JobCreate:
        if self.model is None and self.gradient_bytes is None:
            raise ValueError("give model or gradient_bytes")
        return self


class QueueReason(BaseModel):
    """Why a queued job waits, as the scheduler's last decision round about it found."""

    kind: QueueReasonKind = Field(
        description="scheduling: no decision round has seen it yet; switch_job_ids: every "
        "entry of the switch's job table is taken; partition: no free range holds its "
        "private partition (static); policy: another rule of the policy; switch_refused: "
        "the switch rejected its configuration; ps_unavailable: its parameter server could "
        "not be reached or refused it (tried again while it waits); tenant_quota: its tenant "
        "has as many jobs admitted, or as many aggregators, as its quota allows"
    )
    message: str
    slots: int | None = Field(default=None, description="partition: the slots it waits for")


class JobPublic(BaseModel):
    """A job as the dashboard and the CLI show it."""

    model_config = ConfigDict(from_attributes=True)

    id: int
    name: str
    state: JobStateName
    reason: str | None = None
    queue_reason: QueueReason | None = Field(default=None, description="set while queued")
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
    overran_declaration: bool = Field(
        default=False,
        description="the switch counted more of the job's packets than its declared iterations "
        "account for: srtf ranks it by attained service, behind every job whose declaration holds",
    )


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


class QueueGroup(BaseModel):
    """Queued jobs that wait for the same reason."""

    kind: QueueReasonKind
    message: str
    jobs: int = Field(description="how many of the queued jobs wait for this reason")


class QueueSummary(BaseModel):
    """Why the queued jobs wait, every one of them counted, most common reason first."""

    total: int
    reasons: list[QueueGroup]


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
    worker table matches IPv4 source addresses, so the host is an IPv4 address: a unicast
    one, the request's source address or in the service's ``worker_networks``."""

    model_config = STRICT

    # JSON has no address type: the address comes as its text, even in a strict model.
    data_host: IPv4Address = Field(strict=False)
    data_port: JsonInt = Field(ge=1, le=65535)


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
    model_config = STRICT


class WorkerProgress(BaseModel):
    """Cumulative progress of one worker. The byte counters together are at most what the
    worker can receive: the job's iterations times its gradient padded to whole fragments."""

    model_config = STRICT

    iterations_done: JsonInt = Field(ge=0, le=MAX_ITERATIONS)
    bytes_switch: JsonInt = Field(default=0, ge=0, le=MAX_WORKER_BYTES)
    bytes_ps: JsonInt = Field(default=0, ge=0, le=MAX_WORKER_BYTES)


class WorkerState(BaseModel):
    state: JobStateName


class PolicyPublic(BaseModel):
    policy: PolicyName
    priority: PriorityName
    levels: int
    aging_s: float
    applies_to: str = Field(description="which jobs the policy governs")


class PolicyUpdate(BaseModel):
    model_config = STRICT

    policy: PolicyName
    priority: PriorityName | None = None
    levels: Annotated[int, Field(ge=1, le=MAX_LEVELS), BeforeValidator(_json_integer)] | None = None
    aging_s: float | None = Field(default=None, gt=0, le=1e6)


class SwitchCountersPublic(BaseModel):
    """Packet counters of the switch: per job (the service's job ids) and per drop reason."""

    jobs: dict[str, dict[str, int]] = Field(
        description="job id -> counter name (job_aggregated, job_bypassed, ...) -> packets"
    )
    drops: dict[str, int] = Field(description="drop reason (lower case) -> packets")


class FabricSwitchPublic(BaseModel):
    """One switch of a fabric: its memory map and counters as last read, where its data
    plane is, and why it is lost (it stopped answering; empty while it answers)."""

    name: str
    data: str = Field(description="`HOST:PORT` of its UDP data plane")
    lost: str = Field("", description="why the service lost the switch; empty while it answers")
    aggregators: int
    lanes: int
    runs: list[tuple[int, int, int, int]] = Field(
        description="[start, length, job_id, state] over non-free aggregators"
    )
    counters: SwitchCountersPublic
    unavailable: str = ""
    counters_unavailable: str = ""


class SwitchPublic(BaseModel):
    """The switch's memory map and counters, as last read; on a fabric, the fabric's (an
    aggregator is a job's on every switch of its tree; counters are the ToRs') and, in
    `switches`, every switch's own."""

    aggregators: int
    lanes: int
    runs: list[tuple[int, int, int, int]] = Field(
        description="[start, length, job_id, state] over non-free aggregators"
    )
    counters: SwitchCountersPublic
    unavailable: str = Field(
        "",
        description="why the switch's occupancy is unknown (it serves no register reads: "
        "runs is empty, which does not mean free); empty when it was read",
    )
    counters_unavailable: str = Field(
        "",
        description="why the switch's counters are unknown (it serves no counter reads: "
        "counters are empty, which does not mean none counted, and workers' reported progress "
        "is not verified); empty when they were read",
    )
    switches: list[FabricSwitchPublic] = Field(
        default_factory=list,
        description="on a fabric (`INASCHED_SWITCH_TOPOLOGY`), every switch, in the topology "
        "file's order; empty on a single switch",
    )


class BenchRunCreate(BaseModel):
    """A finished JCT benchmark run: its summary.json and the rows of its jobs.csv."""

    model_config = STRICT

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


TenantName = Annotated[
    str,
    Field(
        min_length=1,
        max_length=64,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._@-]*$",
        description="letters, digits, '.', '_', '@', '-'; starts with a letter or digit",
    ),
]


class TokenCreate(BaseModel):
    """A new API token for `tenant` (created if new); an admin token with ``admin``."""

    model_config = ConfigDict(extra="forbid")

    tenant: TenantName
    admin: bool = Field(default=False, strict=True)


class TokenPublic(BaseModel):
    """A stored API token: who it is for, its role, whether it was revoked (never the token)."""

    model_config = ConfigDict(from_attributes=True)

    id: int
    tenant: str
    admin: bool
    created_at: datetime
    revoked_at: datetime | None


class TokenCreated(TokenPublic):
    token: str = Field(description="the token itself, shown only in this answer")


class TenantLimitsUpdate(BaseModel):
    """A tenant's own quota; a field left null (or out) means the service's default."""

    model_config = STRICT

    max_jobs: Annotated[int, Field(ge=1, le=1024), BeforeValidator(_json_integer)] | None = Field(
        default=None, description="jobs admitted or running at once"
    )
    aggregator_share: float | None = Field(
        default=None,
        gt=0,
        le=1,
        allow_inf_nan=False,
        description="share of the switch's aggregators its jobs use",
    )
    max_priority_class: (
        Annotated[int, Field(ge=0, le=15), BeforeValidator(_json_integer)] | None
    ) = Field(default=None, description="highest priority_class its jobs may have")
    submit_rate: float | None = Field(
        default=None,
        gt=0,
        le=1e6,
        allow_inf_nan=False,
        description="jobs per second it may submit, on average",
    )
    submit_burst: (
        Annotated[int, Field(ge=1, le=1_000_000), BeforeValidator(_json_integer)] | None
    ) = Field(default=None, description="jobs it may submit at once before its rate holds it")


class TenantLimitsPublic(BaseModel):
    """The quota a tenant's jobs are held to now (its own where set, else the default)."""

    tenant: str
    max_jobs: int
    aggregator_share: float
    max_priority_class: int
    submit_rate: float
    submit_burst: int
    own: TenantLimitsUpdate = Field(description="what an admin set for it (null: the default)")
