"""`Settings`: the one configuration object of the service, read from ``INASCHED_*`` variables.

Settings are grouped in sections (`SwitchSettings`, `PsSettings`, the scheduler's
`PolicySpec`, ...); a field's variable is ``INASCHED_<SECTION>_<FIELD>`` (``switch.data_port``
is ``INASCHED_SWITCH_DATA_PORT``), a top-level field's ``INASCHED_<FIELD>``. Nothing else reads
an ``INASCHED_*`` setting from the environment. Nothing here is a module-level instance: the
CLI builds a `Settings` and hands it to ``api.http.app.create_app(settings)``; tests build
their own. ``python -m api.settings --markdown`` prints the README's settings table
(`markdown_table`).
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Iterator
from ipaddress import IPv4Network
from pathlib import Path
from typing import Any

from p4ctl.backend import parse_wiring
from p4ctl.p4info import MAX_AGGREGATORS
from p4ctl.protocol import MAX_JOBS
from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from api.schemas import MAX_GRADIENT_BYTES
from scheduler.registry import policy_names
from scheduler.spec import PolicySpec

__all__ = [
    "DatabaseSettings",
    "HttpSettings",
    "MetricsSettings",
    "PsSettings",
    "Settings",
    "StandbySettings",
    "SwitchSettings",
    "TenantSettings",
    "markdown_table",
    "parse_hostport",
    "settings_rows",
]

ENV_PREFIX = "INASCHED_"
# Lanes per packet the switch and the PS are built for.
LANES = (64, 128, 256, 512, 1024)


def parse_hostport(value: str) -> tuple[str, int]:
    """``"HOST:PORT"`` -> ``(host, port)``; raises ValueError with what was wrong."""
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{value!r} is not HOST:PORT with a port in 1..65535")
    return host, int(port)


def _hostport(value: str | None) -> str | None:
    if value is not None:
        parse_hostport(value)
    return value


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class DatabaseSettings(_Section):
    url: str | None = Field(
        default=None,
        description="SQLAlchemy URL, e.g. `postgresql+psycopg://user@host/db`; unset: SQLite "
        "in the data dir",
    )


class SwitchSettings(_Section):
    target: str = Field(
        default="embedded",
        description="`embedded` (soft switch in the service), `memory` (no data plane), or "
        "`HOST:PORT` of a P4Runtime switch",
    )
    data: str | None = Field(
        default=None, description="`HOST:PORT` of that switch's UDP data plane"
    )
    # Workers of running jobs keep sending to the data port they were given: a restarted
    # service binds its embedded switch to the same one.
    data_port: int = Field(
        default=0,
        ge=0,
        lt=65536,
        description="UDP port of the embedded switch's data plane; `0`: the port it had before "
        "(kept in the store, so the workers of running jobs reach a restarted service), a free "
        "one the first time",
    )
    device_id: int = Field(
        default=0,
        ge=0,
        lt=2**64,
        description="that switch's P4Runtime device id (`inasched switch --device-id`)",
    )
    # PI, the P4Runtime server of BMv2's simple_switch_grpc, refuses register reads and writes;
    # BMv2's own Thrift runtime serves them (p4ctl.register_access).
    thrift: str | None = Field(
        default=None,
        description="`HOST:PORT` of BMv2's Thrift runtime (`simple_switch_grpc --thrift-port`), "
        "for the register reads and writes its P4Runtime server refuses: occupancy and reclaim "
        "(`p4/README.md`, Running on BMv2)",
    )
    # BMv2 with a veth pair per endpoint: the program binds a sender to its ingress port, so the
    # control plane must give each endpoint the port its packets enter on.
    ports: str | None = Field(
        default=None,
        description="`HOST=PORT,...`: the switch port each worker and PS host sits behind (a "
        "veth pair per endpoint, `p4/README.md`); unlisted hosts get the lowest unwired port",
    )
    p4_config: Path | None = Field(
        default=None,
        description="path of that switch's device config, pushed with the P4Info: for BMv2 "
        "the JSON `p4c-bm2-ss` writes",
    )
    # The embedded soft switch's pool is smaller than the P4 program's 20,480: enough for the
    # demo and a laptop's dashboard, and the occupancy read every tick costs less. An external
    # switch keeps the pool of the pipeline it runs, or gets the P4 program's when it has none.
    aggregators: int = Field(
        default=4096,
        ge=1,
        le=MAX_AGGREGATORS,
        description="pool size of the embedded switch, 1..131,072; an external switch keeps "
        "its pipeline's (a new one gets the P4 program's 20,480)",
    )
    # An int checked against LANES, not a Literal: a variable's value arrives as a string, which
    # pydantic turns into an int but never into a Literal's member.
    lanes: int = Field(
        default=64,
        description="lanes per packet: 64, 128 or 256; 512 or 1,024 for loopback and jumbo frames",
    )
    gso: bool = Field(
        default=True,
        description="the embedded switch and PS send bursts as UDP GSO super-datagrams; "
        "`false`: one datagram at a time",
    )
    topology: Path | None = Field(
        default=None,
        description="a topology file (`docs/topology.md`): the service runs a fabric of "
        "switches, a P4Runtime connection to each; it connects to a switch at the file's "
        "`p4runtime` address, and starts one without as a soft switch process on loopback",
    )

    @field_validator("lanes")
    @classmethod
    def _lanes(cls, value: int) -> int:
        if value not in LANES:
            raise ValueError(f"lanes must be one of {', '.join(map(str, LANES))}, got {value}")
        return value

    @field_validator("target")
    @classmethod
    def _target_form(cls, value: str) -> str:
        if value not in ("embedded", "memory"):
            parse_hostport(value)
        return value

    @model_validator(mode="after")
    def _fabric_of_its_own(self) -> SwitchSettings:
        if self.topology is not None and self.target != "embedded":
            raise ValueError(
                f"a topology names its own switches: switch.target {self.target!r} is not used "
                "with it; a switch with a p4runtime address in the file is connected to, one "
                "without is started here"
            )
        return self

    @field_validator("ports")
    @classmethod
    def _wiring(cls, value: str | None) -> str | None:
        if value is not None:
            parse_wiring(value)
        return value

    @field_validator("data", "thrift")
    @classmethod
    def _hostports(cls, value: str | None) -> str | None:
        return _hostport(value)


class PsSettings(_Section):
    address: str | None = Field(
        default=None,
        description="`HOST:PORT` of an external parameter server; unset: one embedded in the "
        "service",
    )
    # A PS serves only jobs the service registers (workers.ps_control), never one a packet names.
    control: str | None = Field(
        default=None,
        description="`HOST:PORT` of that PS's control channel (`inasched ps --control-port`), "
        "where the service registers each job: a PS serves no job a packet names",
    )
    secret: SecretStr | None = Field(
        default=None,
        description="the secret shared with that PS (it reads the same variable, or "
        "`--secret-file`); at least 16 characters",
    )

    @field_validator("address", "control")
    @classmethod
    def _hostports(cls, value: str | None) -> str | None:
        return _hostport(value)


class HttpSettings(_Section):
    host: str = Field(default="127.0.0.1", description="the address the service listens on")
    port: int = Field(default=8000, ge=0, lt=65536, description="the port it listens on")
    threads: int = Field(default=16, ge=2, le=256, description="request handler threads")
    max_body_bytes: int = Field(
        default=64 * 1024,
        ge=1024,
        description="largest request body (benchmark uploads excepted); a larger one gets 413, "
        "chunked or not",
    )


class MetricsSettings(_Section):
    token: SecretStr | None = Field(
        default=None,
        description="a scraper sending `Authorization: Bearer <it>` to `/metrics` also gets "
        "`inasched_tenant_jobs{tenant, state}`; without it `/metrics` is open and has no "
        "tenant labels",
    )


class TenantSettings(_Section):
    # One tenant's jobs that never start workers must not hold every switch job id (1,024).
    max_jobs: int = Field(
        default=256,
        ge=1,
        le=MAX_JOBS,
        description="jobs one tenant may have admitted or running at once (1..1,024, the "
        "switch's job ids); more wait with the queue reason `tenant_quota`; an admin sets a "
        "tenant's own over REST",
    )
    aggregator_share: float = Field(
        default=1.0,
        gt=0,
        le=1,
        description="share of the switch's aggregators one tenant's jobs may use (0..1]: its "
        "static partitions together, and the pool its hashed jobs hash into",
    )
    # Classes above it are an admin's to grant (PUT /tenants/{name}/limits): under the static
    # priority function a class-15 job of any tenant would hold every aggregator.
    max_priority_class: int = Field(
        default=7,
        ge=0,
        le=15,
        description="highest `priority_class` a tenant's jobs may have (0..15) unless an admin "
        "grants more (`PUT /tenants/{name}/limits`); above it a submission gets 403; admin "
        "tokens are held to none",
    )
    submit_rate: float = Field(
        default=20.0,
        gt=0,
        le=1e6,
        allow_inf_nan=False,
        description="jobs per second one tenant may submit on average (a token bucket per "
        "tenant; an admin sets a tenant's own); beyond it 429 with `Retry-After`",
    )
    submit_burst: int = Field(
        default=200,
        ge=1,
        le=1_000_000,
        description="jobs one tenant may submit at once before its rate holds it",
    )
    # Each stream costs the service memory and a share of every event's fan-out, never a store
    # connection; a tenant's browser tabs and scripts together stay under this.
    max_streams: int = Field(
        default=8,
        ge=1,
        le=1024,
        description="event streams (`/events`) one tenant may hold open at once; beyond it 429 "
        "with `Retry-After`; a revoked token's stream ends within about a second",
    )


class StandbySettings(_Section):
    # Two services on one store: the one holding the store's lock leads (schedules, is the
    # switch's P4Runtime primary); a standby serves reads and takes over when the lock frees.
    enabled: bool = Field(
        default=False,
        description="`true`: while another service holds the store, serve reads (writes answer "
        "503 naming the leader) and take over when it stops (`docs/OPERATIONS.md`)",
    )
    poll_s: float = Field(
        default=0.5,
        gt=0,
        le=60,
        description="how often a standby tries the store's lock, and a leader checks it still "
        "holds it",
    )


#: `PolicySpec`'s fields as the settings table explains them.
POLICY_MEANINGS = {
    "policy": "memory policy: " + ", ".join(f"`{n}`" for n in policy_names()),
    "priority": "priority function: `srtf`, `las`, `fifo` or `static`",
    "levels": "priority levels written to the switch, 1..256",
    "aging_s": "seconds a job spends bypassed or evicted that raise it one level (0: no aging)",
}


class Settings(BaseSettings):
    """Service configuration: top-level fields and sections, each from its ``INASCHED_*``
    variable (module doc)."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        env_nested_delimiter="_",
        env_nested_max_split=1,
        extra="ignore",
        frozen=True,
    )

    data_dir: Path = Field(default=Path("data"), description="the SQLite store and run outputs")
    database: DatabaseSettings = DatabaseSettings()
    switch: SwitchSettings = SwitchSettings()
    ps: PsSettings = PsSettings()
    policy: PolicySpec = PolicySpec()
    window: int = Field(
        default=32, ge=1, le=4096, description="fragments in flight of a job that sets none"
    )
    seed: int = Field(default=12345, description="seed of the scheduler's randomness")
    http: HttpSettings = HttpSettings()
    heartbeat_interval_s: float = Field(
        default=1.0, gt=0, description="how often workers send heartbeats"
    )
    heartbeat_timeout_s: float = Field(
        default=10.0, gt=0, description="silence after which a worker's job fails"
    )
    join_timeout_s: float = Field(
        default=120.0,
        gt=0,
        description="an admitted job whose workers have not all joined by then fails, and "
        "frees its memory and switch job id",
    )
    tick_s: float = Field(
        default=0.5, gt=0, description="period of the reaper and of the switch reads"
    )
    # 2 GiB holds every model of the table (BERT-large, 1.34 GB); each worker allocates it.
    max_gradient_bytes: int = Field(
        default=2**31,
        ge=4,
        le=MAX_GRADIENT_BYTES,
        description="largest gradient of a job (every worker allocates it whole), at most "
        "2**34; a job over it gets 422",
    )
    worker_networks: list[IPv4Network] = Field(
        default=[],  # pydantic copies it per instance
        description="JSON list of CIDR networks, e.g. `'[\"10.0.0.0/24\"]'`, whose addresses a "
        "worker may give as its `data_host` from any host; without them a worker joins with "
        "its own source address only (loopback deployments need nothing)",
    )
    tenant: TenantSettings = TenantSettings()
    metrics: MetricsSettings = MetricsSettings()
    standby: StandbySettings = StandbySettings()

    @field_validator("policy")
    @classmethod
    def _service_policy(cls, value: PolicySpec) -> PolicySpec:
        # The ablations are the simulators'; the switch program runs the policies only.
        if value.policy not in policy_names():
            known = ", ".join(policy_names())
            raise ValueError(f"the service runs no policy {value.policy!r}; known: {known}")
        return value

    @property
    def resolved_database_url(self) -> str:
        """The database URL in use: the configured one, or the SQLite file in `data_dir`."""
        if self.database.url:
            return self.database.url
        return f"sqlite:///{(self.data_dir / 'inasched.db').resolve()}"


def settings_rows() -> Iterator[tuple[str, str, Any, str]]:
    """``(name, variable, default, meaning)`` of every setting, in declaration order."""
    for name, info in Settings.model_fields.items():
        section = info.annotation
        if isinstance(section, type) and issubclass(section, BaseModel):
            for sub, sub_info in section.model_fields.items():
                variable = f"{ENV_PREFIX}{name}_{sub}".upper()
                yield f"{name}.{sub}", variable, sub_info.default, sub_info.description or ""
        elif isinstance(section, type) and dataclasses.is_dataclass(section):
            for spec_field in dataclasses.fields(section):
                variable = f"{ENV_PREFIX}{name}_{spec_field.name}".upper()
                meaning = POLICY_MEANINGS[spec_field.name]
                yield f"{name}.{spec_field.name}", variable, spec_field.default, meaning
        else:
            yield name, f"{ENV_PREFIX}{name}".upper(), info.default, info.description or ""


def _shown(default: Any) -> str:
    if default is None:
        return "-"
    if isinstance(default, bool):
        return f"`{str(default).lower()}`"
    return f"`{default}`"


def markdown_table() -> str:
    """The README's settings table: one row per setting with its variable, default and
    meaning (the field's description)."""
    lines = ["| setting | variable | default | what |", "|---|---|---|---|"]
    for name, variable, default, meaning in settings_rows():
        lines.append(f"| `{name}` | `{variable}` | {_shown(default)} | {meaning} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """``python -m api.settings --markdown``: print `markdown_table`."""
    args = sys.argv[1:] if argv is None else argv
    if args != ["--markdown"]:
        sys.stderr.write("usage: python -m api.settings --markdown\n")
        return 2
    sys.stdout.write(markdown_table())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
