"""How a worker learns its job: the service's join endpoint, or the same JSON from a file.

``POST {service}/jobs/{id}/workers`` with ``Authorization: Bearer <join token>`` and the
worker's bound UDP socket as ``{"data_host", "data_port"}`` answers 201 with a `WorkerJoin`
(``docs/CONTRACTS.md``). ``inasched worker --config FILE`` reads the same JSON; because no
service registers the worker with the switch then, the file may also carry ``data_host`` and
``data_port``, the address the worker must bind (the one the switch was told about).

    >>> join = parse_join({"job_id": 3, "switch_job_id": 3, "worker_id": 0, "fan_in": 2,
    ...     "policy": "atp", "switch": {"host": "127.0.0.1", "port": 9555},
    ...     "ps": {"host": "127.0.0.1", "port": 9556}, "lanes": 64, "window": 32,
    ...     "placement": {"kind": "hashed", "seed": 7, "pool": 4096}})
    >>> join.placement.locate(job=3, seq=0)[1], join.window_limit()
    (0, 32)
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from p4ctl.protocol import MAX_WORKERS, SUPPORTED_LANES, Policy
from p4ctl.rule import JobConfig, hashed_index, static_index

from workers.errors import JobEnded, RendezvousError

log = logging.getLogger(__name__)

# Seconds between joins of a queued job (each join is also held by the service for a few).
_QUEUED_POLL_S = 0.5
# How long a queued worker goes on asking a service that stopped answering: a restart keeps
# the queued job (it is in the store), and takes seconds.
_RESTART_WAIT_S = 60.0

__all__ = [
    "HashedPlacement",
    "Placement",
    "StaticPlacement",
    "WorkerJoin",
    "join",
    "load_config",
    "parse_join",
]


@dataclass(frozen=True, slots=True)
class StaticPlacement:
    """A static job's private partition: `part_size` slots of two copies from `part_base`."""

    part_base: int
    part_size: int

    def locate(self, job: int, seq: int) -> tuple[int, int]:
        """``(aggregator index, shadow bit)`` of fragment `seq`, as the switch checks it."""
        cfg = JobConfig(job, Policy.STATIC, 1, self.part_base, self.part_size)
        index, shadow = static_index(cfg, seq)
        return int(index), int(shadow)


@dataclass(frozen=True, slots=True)
class HashedPlacement:
    """A shared pool of `pool` aggregators; the job's fragments hash there with `seed`."""

    seed: int
    pool: int

    def locate(self, job: int, seq: int) -> tuple[int, int]:
        """``(aggregator index, 0)`` of fragment `seq`."""
        return hashed_index(self.seed, seq, self.pool), 0


Placement = StaticPlacement | HashedPlacement


@dataclass(frozen=True, slots=True)
class WorkerJoin:
    """What a worker needs to take part in its job's allreduces (the 201 body of a join)."""

    job_id: int
    switch_job_id: int
    worker_id: int
    fan_in: int
    policy: Policy
    switch: tuple[str, int]
    ps: tuple[str, int]
    lanes: int
    window: int
    placement: Placement
    iterations: int = 0
    gradient_bytes: int = 0
    model: str = ""
    heartbeat_interval_s: float = 1.0
    data_host: str | None = None
    data_port: int | None = None

    def window_limit(self) -> int:
        """Fragments in flight at most: W, and for static no more than the partition's slots.

        A static worker sends `seq` only after it holds the result of ``seq - part_size``, so
        the copy it overwrites is one every worker has already read.
        """
        if isinstance(self.placement, StaticPlacement):
            return max(1, min(self.window, self.placement.part_size))
        return max(1, self.window)


def _endpoint(value: Any, name: str) -> tuple[str, int]:
    if not isinstance(value, Mapping) or "host" not in value or "port" not in value:
        raise RendezvousError(f"join field {name!r} must be {{'host': ..., 'port': ...}}")
    return str(value["host"]), int(value["port"])


def _placement(value: Any) -> Placement:
    kind = value.get("kind") if isinstance(value, Mapping) else None
    if kind == "static":
        return StaticPlacement(int(value["part_base"]), int(value["part_size"]))
    if kind == "hashed":
        return HashedPlacement(int(value["seed"]), int(value["pool"]))
    raise RendezvousError(f"join field 'placement' has unknown kind {kind!r}")


def parse_join(body: Mapping[str, Any]) -> WorkerJoin:
    """A `WorkerJoin` from the JSON object of ``docs/CONTRACTS.md``; raises `RendezvousError`."""
    try:
        join = WorkerJoin(
            job_id=int(body["job_id"]),
            switch_job_id=int(body.get("switch_job_id", body["job_id"])),
            worker_id=int(body["worker_id"]),
            fan_in=int(body["fan_in"]),
            policy=Policy.parse(str(body["policy"])),
            switch=_endpoint(body["switch"], "switch"),
            ps=_endpoint(body["ps"], "ps"),
            lanes=int(body["lanes"]),
            window=int(body["window"]),
            placement=_placement(body["placement"]),
            iterations=int(body.get("iterations", 0)),
            gradient_bytes=int(body.get("gradient_bytes", 0)),
            model=str(body.get("model") or ""),  # null for a job without a model
            heartbeat_interval_s=float(body.get("heartbeat_interval_s", 1.0)),
            data_host=body.get("data_host"),
            data_port=int(body["data_port"]) if body.get("data_port") is not None else None,
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise RendezvousError(f"malformed join: {exc!r}") from exc
    if not 0 <= join.worker_id < join.fan_in <= MAX_WORKERS:
        raise RendezvousError(f"worker {join.worker_id} of fan_in {join.fan_in} is out of range")
    if join.lanes not in SUPPORTED_LANES:
        raise RendezvousError(f"lanes {join.lanes} not one of {SUPPORTED_LANES}")
    if (join.policy == Policy.STATIC) != isinstance(join.placement, StaticPlacement):
        raise RendezvousError(f"policy {join.policy.name.lower()} with the wrong placement kind")
    return join


def load_config(path: str | Path) -> WorkerJoin:
    """The `WorkerJoin` stored as JSON in `path` (``inasched worker --config``)."""
    try:
        body = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise RendezvousError(f"cannot read worker config {path}: {exc}") from exc
    return parse_join(body)


def join(
    service: str,
    job_id: int,
    token: str,
    data: tuple[str, int],
    *,
    client: httpx.Client | None = None,
    timeout_s: float = 10.0,
    queue_wait_s: float | None = None,
) -> WorkerJoin:
    """Join job `job_id` through the service at `service` with the worker's bound socket `data`.

    A job still queued for switch memory answers 409 ``queued`` (after the service has held
    the request a few seconds); the join is then asked again until the job is admitted, or
    for at most `queue_wait_s` seconds (None: as long as the job stays queued), because a
    queued job has not ended: it starts when memory frees. A service that stops answering
    meanwhile is asked again for up to a minute: it is restarting, and keeps the queued job.

    Raises `JobEnded` when the job has ended (409), and `RendezvousError` for anything
    else the worker cannot recover from (still queued after `queue_wait_s`, unreachable
    service, bad token, malformed answer).
    """
    own = client is None
    http = client if client is not None else httpx.Client(base_url=service, timeout=timeout_s)
    deadline = None if queue_wait_s is None else time.monotonic() + queue_wait_s
    queued: httpx.Response | None = None  # the last "queued" answer
    answered = 0.0  # when the service last answered
    try:
        while True:
            try:
                response = _post_join(http, service, job_id, token, data)
            except RendezvousError:
                if queued is None or time.monotonic() - answered > _RESTART_WAIT_S:
                    raise
                log.warning("the service does not answer (restarting?); asking again")
            else:
                if response.status_code != 409 or _state(response) != "queued":
                    break
                queued, answered = response, time.monotonic()
                log.info("job %d is queued for switch memory; asking again", job_id)
            if deadline is not None and time.monotonic() >= deadline:
                detail = _detail(queued) if queued is not None else "no answer"
                raise RendezvousError(
                    f"job {job_id} is still queued after {queue_wait_s:g} s: {detail}"
                )
            time.sleep(_QUEUED_POLL_S)
    finally:
        if own:
            http.close()
    if response.status_code == 409:
        raise JobEnded(job_id, _state(response) or "ended", _detail(response))
    if response.status_code != 201:
        raise RendezvousError(
            f"join of job {job_id} refused ({response.status_code}): {_detail(response)}"
        )
    return parse_join(response.json())


def _post_join(
    http: httpx.Client, service: str, job_id: int, token: str, data: tuple[str, int]
) -> httpx.Response:
    try:
        return http.post(
            f"/jobs/{job_id}/workers",
            headers={"Authorization": f"Bearer {token}"},
            json={"data_host": data[0], "data_port": data[1]},
        )
    except httpx.HTTPError as exc:
        raise RendezvousError(f"cannot reach the service at {service}: {exc}") from exc


def _state(response: httpx.Response) -> str | None:
    try:
        state = response.json().get("state")
    except (ValueError, AttributeError):
        return None
    return state if isinstance(state, str) else None


def _detail(response: httpx.Response) -> str:
    try:
        return str(response.json().get("detail", response.text))
    except (ValueError, AttributeError):
        return response.text
