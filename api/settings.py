"""`Settings`: the one configuration object of the service, read from ``INASCHED_*`` variables.

Nothing here is a module-level instance: the CLI builds a `Settings` and hands it to
``api.http.app.create_app(settings)``; tests build their own.
"""

from __future__ import annotations

from ipaddress import IPv4Network
from pathlib import Path
from typing import Literal

from p4ctl.p4info import MAX_AGGREGATORS
from p4ctl.protocol import MAX_JOBS
from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from api.schemas import MAX_GRADIENT_BYTES, PolicyName, PriorityName

__all__ = ["Settings", "parse_hostport"]


def parse_hostport(value: str) -> tuple[str, int]:
    """``"HOST:PORT"`` -> ``(host, port)``; raises ValueError with what was wrong."""
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{value!r} is not HOST:PORT with a port in 1..65535")
    return host, int(port)


class Settings(BaseSettings):
    """Service configuration. Every field can be set as ``INASCHED_<FIELD>``."""

    model_config = SettingsConfigDict(env_prefix="INASCHED_", extra="ignore")

    data_dir: Path = Field(default=Path("data"), description="SQLite file and run outputs")
    database_url: str | None = Field(
        default=None,
        description="SQLAlchemy URL; None means SQLite at DATA_DIR/inasched.db",
    )
    # "embedded" runs the soft switch inside the service; "memory" is the in-memory backend
    # (no data plane, for benchmarks of the service alone); anything else is HOST:PORT of a
    # P4Runtime target.
    switch: str = "embedded"
    switch_data: str | None = Field(
        default=None, description="HOST:PORT of the switch's UDP data plane (external switch)"
    )
    # Workers of running jobs keep sending to the data port they were given: a restarted
    # service binds its embedded switch to the same one.
    switch_data_port: int = Field(
        default=0,
        ge=0,
        lt=65536,
        description="UDP port of the embedded switch's data plane; 0: the port it had before "
        "(kept in the store), a free one the first time",
    )
    switch_device_id: int = Field(
        default=0, ge=0, lt=2**64, description="P4Runtime device id of an external switch"
    )
    # PI, the P4Runtime server of BMv2's simple_switch_grpc, refuses register reads and writes;
    # BMv2's own Thrift runtime serves them (p4ctl.register_access).
    switch_thrift: str | None = Field(
        default=None,
        description="HOST:PORT of BMv2's Thrift runtime, for the register reads and writes its "
        "P4Runtime server refuses (occupancy, reclaim)",
    )
    p4_config: Path | None = Field(
        default=None,
        description="the external switch's device config (for BMv2 the JSON p4c-bm2-ss writes), "
        "pushed with the P4Info",
    )
    ps: str | None = Field(default=None, description="HOST:PORT of an external PS; else embedded")
    # A switch behind a veth, a TAP or BMv2 takes a GSO run as one long datagram and drops it.
    gso: bool = Field(
        default=True,
        description="the embedded switch and PS send runs of datagrams as UDP GSO messages; "
        "off: one datagram per message",
    )
    # A PS serves only jobs the service registers (workers.ps_control), never one a packet names.
    ps_control: str | None = Field(
        default=None,
        description="HOST:PORT of the external PS's control channel (inasched ps --control-port)",
    )
    ps_secret: SecretStr | None = Field(
        default=None,
        description="the secret the external PS was started with (its INASCHED_PS_SECRET)",
    )
    # The embedded soft switch's pool is smaller than the P4 program's 20,480: enough for the
    # demo and a laptop's dashboard, and the occupancy read every tick costs less. An external
    # switch keeps the pool of the pipeline it runs, or gets the P4 program's when it has none.
    aggregators: int = Field(
        default=4096,
        ge=1,
        le=MAX_AGGREGATORS,
        description="embedded switch pool size; for an external switch with no pipeline yet, "
        "the pool its pipeline is built for",
    )
    lanes: Literal[64, 128, 256, 512, 1024] = 64
    policy: PolicyName = "esa"
    priority: PriorityName = "srtf"
    priority_levels: int = Field(default=16, ge=1, le=256)
    aging_s: float = Field(default=60.0, gt=0)
    window: int = Field(default=32, ge=1, le=4096, description="default fragments in flight")
    seed: int = 12345
    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=0, lt=65536)
    heartbeat_interval_s: float = Field(default=1.0, gt=0)
    heartbeat_timeout_s: float = Field(default=10.0, gt=0)
    tick_s: float = Field(default=0.5, gt=0, description="reaper / switch-event period")
    threads: int = Field(default=16, ge=2, le=256, description="request handler threads")
    max_body_bytes: int = Field(default=64 * 1024, ge=1024)
    # 2 GiB holds every model of the table (BERT-large, 1.34 GB); each worker allocates it.
    max_gradient_bytes: int = Field(
        default=2**31, ge=4, le=MAX_GRADIENT_BYTES, description="largest gradient of a job"
    )
    worker_networks: list[IPv4Network] = Field(
        default=[],  # pydantic copies it per instance
        description="networks (CIDR, a JSON list) whose addresses a worker may give as its "
        "data_host from any host; without them only the joining request's source address",
    )
    # One tenant's jobs that never start workers must not hold every switch job id (1,024).
    tenant_max_jobs: int = Field(
        default=256,
        ge=1,
        le=MAX_JOBS,
        description="jobs one tenant may have admitted or running at once (an admin sets a "
        "tenant's own over REST)",
    )
    tenant_aggregator_share: float = Field(
        default=1.0,
        gt=0,
        le=1,
        description="share of the switch's aggregators one tenant's jobs may use (an admin "
        "sets a tenant's own over REST)",
    )
    # Classes above it are an admin's to grant (PUT /tenants/{name}/limits): under the static
    # priority function a class-15 job of any tenant would hold every aggregator.
    tenant_max_priority_class: int = Field(
        default=7,
        ge=0,
        le=15,
        description="highest priority_class a tenant's jobs may have unless an admin grants "
        "it more; above it a submission gets 403",
    )
    tenant_submit_rate: float = Field(
        default=20.0,
        gt=0,
        le=1e6,
        allow_inf_nan=False,
        description="jobs per second one tenant may submit, on average (a token bucket); "
        "beyond it 429 with Retry-After",
    )
    tenant_submit_burst: int = Field(
        default=200,
        ge=1,
        le=1_000_000,
        description="jobs one tenant may submit at once before its rate holds it",
    )
    # Each stream costs the service memory and a share of every event's fan-out, never a store
    # connection; a tenant's browser tabs and scripts together stay under this.
    tenant_max_streams: int = Field(
        default=8,
        ge=1,
        le=1024,
        description="event streams (/events) one tenant may hold open at once; beyond it 429",
    )
    join_timeout_s: float = Field(
        default=120.0,
        gt=0,
        description="an admitted job whose workers have not all joined by then fails and "
        "frees its switch memory",
    )
    metrics_token: SecretStr | None = Field(
        default=None,
        description="a scraper that sends it as 'Authorization: Bearer <token>' to /metrics "
        "also gets per-tenant series; without it /metrics has aggregates only",
    )
    # Two services on one store: the one holding the store's lock leads (schedules, is the
    # switch's P4Runtime primary); a standby serves reads and takes over when the lock frees.
    standby: bool = Field(
        default=False,
        description="wait for the store's lock instead of exiting while another service holds "
        "it, serving reads (writes answer 503 naming the leader) until it takes over",
    )
    standby_poll_s: float = Field(
        default=0.5,
        gt=0,
        le=60,
        description="how often a standby tries the store's lock, and a leader checks it holds it",
    )

    @field_validator("switch")
    @classmethod
    def _switch_form(cls, value: str) -> str:
        if value not in ("embedded", "memory"):
            parse_hostport(value)
        return value

    @field_validator("switch_data", "switch_thrift", "ps", "ps_control")
    @classmethod
    def _hostport(cls, value: str | None) -> str | None:
        if value is not None:
            parse_hostport(value)
        return value

    @property
    def resolved_database_url(self) -> str:
        """The database URL in use: the configured one, or the SQLite file in `data_dir`."""
        if self.database_url:
            return self.database_url
        return f"sqlite:///{(self.data_dir / 'inasched.db').resolve()}"
